//! The call stack of one thread rebuilt from its `FuncEnter` / `FuncExit` events:
//! the one rule that naming (stack locals), the viewer's flame chart and the
//! exports share, so they nest calls alike after a `longjmp` or a missing exit.
//!
//! - An entry first closes the frames left without an exit (`longjmp`, unwinding
//!   without cleanups): those whose frame pointer lies strictly below the new one's
//!   (the stack grows down, so they are inside it). Frames without a frame pointer
//!   (`--dbi` traces) are never closed this way. The runtime closes such frames
//!   itself (synthesised exits); this covers traces where it could not.
//! - An exit of an unknown function (synthesised by the runtime, or a pc no symbol
//!   covers) closes the innermost frame.
//! - An exit of a known function closes that function's innermost open frame and
//!   every frame inside it (tail calls share one `ret`).
//! - An exit that matches no open frame (instrumentation reporting exits of
//!   functions whose entries it did not, or tracing that began inside a function)
//!   is ignored, so the callers' frames stay known.

/// What [`CallStack`] needs to know of a frame.
pub trait StackFrame {
    /// Frame pointer after the prologue, 0 if unknown.
    fn frame_pointer(&self) -> u64;
    /// Identity of the function (its start address), 0 if unknown.
    fn function(&self) -> u64;
}

/// Open frames of one thread, outermost first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallStack<F> {
    frames: Vec<F>,
}

impl<F> Default for CallStack<F> {
    fn default() -> Self {
        CallStack { frames: Vec::new() }
    }
}

impl<F: StackFrame> CallStack<F> {
    /// An empty stack.
    pub fn new() -> Self {
        Self::default()
    }

    /// The open frames, outermost first.
    #[inline]
    pub fn frames(&self) -> &[F] {
        &self.frames
    }

    /// Number of open frames (the depth the next entry gets).
    #[inline]
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// No frame is open.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// The innermost open frame.
    #[inline]
    pub fn last(&self) -> Option<&F> {
        self.frames.last()
    }

    /// A function entry: closes the frames it shows were left (each passed to
    /// `closed` with its depth, innermost first), then opens `f`.
    #[inline]
    pub fn enter(&mut self, f: F, closed: impl FnMut(F, usize)) {
        self.unwind_below(f.frame_pointer(), closed);
        self.frames.push(f);
    }

    /// Closes the frames whose frame pointer lies below `fp` (left by a longjmp to
    /// a frame at `fp`); none when `fp` is 0.
    #[inline]
    pub fn unwind_below(&mut self, fp: u64, mut closed: impl FnMut(F, usize)) {
        if fp == 0 {
            return;
        }
        while self.frames.last().is_some_and(|o| o.frame_pointer() != 0 && o.frame_pointer() < fp) {
            let o = self.frames.pop().expect("checked");
            closed(o, self.frames.len());
        }
    }

    /// A function exit of the function starting at `func` (0: unknown). Returns
    /// whether it closed anything.
    #[inline]
    pub fn exit(&mut self, func: u64, mut closed: impl FnMut(F, usize)) -> bool {
        let keep = if func == 0 {
            match self.frames.len() {
                0 => return false,
                n => n - 1,
            }
        } else {
            match self.frames.iter().rposition(|o| o.function() == func) {
                Some(i) => i,
                None => return false,
            }
        };
        while self.frames.len() > keep {
            let o = self.frames.pop().expect("checked");
            closed(o, self.frames.len());
        }
        true
    }

    /// Whether an exit of `func` would close a frame.
    #[inline]
    pub fn matches(&self, func: u64) -> bool {
        if func == 0 {
            !self.frames.is_empty()
        } else {
            self.frames.iter().any(|o| o.function() == func)
        }
    }

    /// Closes every open frame (thread or trace end), innermost first.
    pub fn close_all(&mut self, mut closed: impl FnMut(F, usize)) {
        while let Some(o) = self.frames.pop() {
            closed(o, self.frames.len());
        }
    }

    /// Opens frames known to nest inside the open ones (a summary computed apart,
    /// already following this rule), outermost first.
    pub fn extend(&mut self, frames: impl IntoIterator<Item = F>) {
        self.frames.extend(frames);
    }
}

/// Ignores closed frames.
pub fn discard<F>(_: F, _: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Fr(u64, u64);

    impl StackFrame for Fr {
        fn frame_pointer(&self) -> u64 {
            self.0
        }
        fn function(&self) -> u64 {
            self.1
        }
    }

    fn funcs(s: &CallStack<Fr>) -> Vec<u64> {
        s.frames().iter().map(|f| f.1).collect()
    }

    #[test]
    fn an_entry_after_a_longjmp_closes_the_frames_inside_it() {
        let mut s = CallStack::new();
        let mut closed = Vec::new();
        // main at fp 1000 → a 900 → b 800 → c 700, then longjmp to main, which calls
        // d at 950: a, b and c were left
        for f in [Fr(1000, 1), Fr(900, 2), Fr(800, 3), Fr(700, 4)] {
            s.enter(f, |f, d| closed.push((f.1, d)));
        }
        s.enter(Fr(950, 5), |f, d| closed.push((f.1, d)));
        assert_eq!(closed, [(4, 3), (3, 2), (2, 1)]);
        assert_eq!(funcs(&s), [1, 5]);
        // a frame at the new one's own frame pointer stays (names' rule: strictly below)
        s.enter(Fr(950, 8), discard);
        assert_eq!(funcs(&s), [1, 5, 8]);
        s.exit(8, discard);
        // frames without a frame pointer are never closed by an entry
        s.enter(Fr(0, 6), discard);
        s.enter(Fr(960, 7), discard);
        assert_eq!(funcs(&s), [1, 5, 6, 7]);
    }

    #[test]
    fn exits_close_their_function_and_ignore_unmatched_ones() {
        let mut s = CallStack::new();
        for f in [Fr(0, 1), Fr(0, 2), Fr(0, 3)] {
            s.enter(f, discard);
        }
        let mut closed = Vec::new();
        // an exit of a function never entered: nothing closes
        assert!(!s.exit(9, |f, d| closed.push((f.1, d))));
        assert_eq!(funcs(&s), [1, 2, 3]);
        // an exit of 2 closes 3 (a tail call sharing its ret) and 2
        assert!(s.exit(2, |f, d| closed.push((f.1, d))));
        assert_eq!(closed, [(3, 2), (2, 1)]);
        // an unknown function's exit closes the innermost frame
        assert!(s.exit(0, |f, d| closed.push((f.1, d))));
        assert!(s.is_empty() && !s.exit(0, discard) && !s.matches(0));
        s.enter(Fr(0, 1), discard);
        s.close_all(|f, d| closed.push((f.1, d)));
        assert_eq!(closed, [(3, 2), (2, 1), (1, 0), (1, 0)]);
    }
}
