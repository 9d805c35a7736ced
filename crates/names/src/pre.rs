//! Pass 1 of the parallel attribution: every chunk's allocations and frees and a
//! summary of what it does to the frames open before it.

use crate::{function_start, Error, OpenFrame, ThreadState};
use memlens_format::callstack::discard;
use memlens_format::{Addr, CallStack, ChunkDecoder, Event, Pc, StreamChunk, TraceReader};
use memlens_symbols::Symbolizer;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// An allocation or free, with its index in the stream.
pub(crate) enum HeapEv {
    Alloc { index: u64, addr: Addr, size: u64, pc: Pc, stack: Vec<Pc> },
    Realloc { index: u64, old: Addr, new: Addr, size: u64, pc: Pc, stack: Vec<Pc> },
    Free { index: u64, addr: Addr },
}

/// What a chunk does to the frames open before it, while none of its own is open.
#[derive(Clone, Copy)]
enum PrefixOp {
    /// An entry with this frame pointer: pops frames below it.
    PopBelow(u64),
    /// An exit of the function starting here (0: unknown) that closed none of the
    /// chunk's own frames.
    Close(u64),
}

/// A frame event replayed as is.
enum RawFrame {
    Enter(OpenFrame),
    Exit(u64),
}

/// Pass 1's summary of one chunk.
#[derive(Default)]
pub(crate) struct ChunkPre {
    pub(crate) heap: Vec<HeapEv>,
    /// Applied first, to the frames open at the chunk's start.
    ops: Vec<PrefixOp>,
    /// Then pushed.
    local: CallStack<OpenFrame>,
    /// Then replayed: from the first exit whose effect depends on the frames open
    /// before the chunk while some of the chunk's own are open.
    raw: Vec<RawFrame>,
    /// `ThreadStart`: the last stack range set and the last thread pointer.
    stack: Option<(u64, u64)>,
    tls: Option<u64>,
    /// The chunk has a `ThreadStart` or `FuncEnter` (the serial pass creates the
    /// thread's state at the first one).
    pub(crate) creates: bool,
    /// The chunk with its loops folded, when the reader folded them (the writer
    /// had not) and [`REFOLDED_BUDGET`] allowed keeping them for pass 2.
    pub(crate) refolded: Option<Vec<u8>>,
}

/// Bytes of folded chunks pass 1 keeps for pass 2 (each a fraction of its chunk).
pub(crate) const REFOLDED_BUDGET: usize = 256 << 20;

impl ChunkPre {
    fn enter(&mut self, f: OpenFrame) {
        if !self.raw.is_empty() {
            self.raw.push(RawFrame::Enter(f));
            return;
        }
        self.local.enter(f, discard);
        if self.local.len() == 1 && f.rbp != 0 {
            self.ops.push(PrefixOp::PopBelow(f.rbp));
        }
    }

    fn exit(&mut self, func: u64) {
        if !self.raw.is_empty() {
            self.raw.push(RawFrame::Exit(func));
        } else if !self.local.exit(func, discard) {
            if self.local.is_empty() {
                self.ops.push(PrefixOp::Close(func));
            } else {
                // closes an earlier frame (and all of ours) only if one is open: replay
                self.raw.push(RawFrame::Exit(func));
            }
        }
    }

    /// Applies the chunk to a thread's state.
    pub(crate) fn apply(&self, st: &mut ThreadState) {
        for op in &self.ops {
            match *op {
                PrefixOp::PopBelow(rbp) => st.frames.unwind_below(rbp, discard),
                PrefixOp::Close(f) => st.exit(f),
            }
        }
        st.framed |= self.local.frames().iter().any(|o| o.rbp != 0);
        st.frames.extend(self.local.frames().iter().copied());
        for r in &self.raw {
            match *r {
                RawFrame::Enter(f) => st.enter(f),
                RawFrame::Exit(f) => st.exit(f),
            }
        }
        if let Some(s) = self.stack {
            st.stack = Some(s);
        }
        if let Some(t) = self.tls {
            st.tls = t;
        }
    }
}

/// Per-worker cache of function starts: direct-mapped, since every function entry
/// and exit of the trace asks (a hash map lookup each was 6% of naming sort).
pub(crate) struct FnStarts(Vec<(u64, u64)>);

const FN_STARTS_BITS: u32 = 12;

impl Default for FnStarts {
    fn default() -> Self {
        FnStarts(vec![(0, 0); 1 << FN_STARTS_BITS])
    }
}

impl FnStarts {
    #[inline]
    pub(crate) fn get(&mut self, sym: &Symbolizer, pc: Pc) -> u64 {
        if pc.0 == 0 {
            return 0;
        }
        let h = (pc.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - FN_STARTS_BITS)) as usize;
        let e = &mut self.0[h];
        if e.0 != pc.0 {
            *e = (pc.0, function_start(sym, pc));
        }
        e.1
    }
}

/// Pass 1 of chunk `c`; `kept` counts the bytes of folded chunks kept so far.
pub(crate) fn pre_chunk(
    dec: &mut ChunkDecoder,
    r: &TraceReader,
    c: &StreamChunk,
    sym: &Symbolizer,
    fs: &mut FnStarts,
    kept: &AtomicUsize,
) -> Result<ChunkPre, Error> {
    let mut p = ChunkPre::default();
    // accesses are stepped over, not decoded
    dec.skeleton(r, c, |i, ev| {
        let index = c.first_index + i;
        match &ev {
            Event::FuncEnter { pc, call_site, frame } => {
                p.creates = true;
                let func = fs.get(sym, *pc);
                p.enter(OpenFrame { pc: *pc, rbp: frame.0, func, call_site: *call_site });
            }
            Event::FuncExit { pc } => {
                let func = fs.get(sym, *pc);
                p.exit(func);
            }
            Event::ThreadStart { stack_lo, stack_hi, tls, .. } => {
                p.creates = true;
                if stack_hi.0 > stack_lo.0 {
                    p.stack = Some((stack_lo.0, stack_hi.0));
                }
                p.tls = Some(tls.0);
            }
            Event::Alloc { pc, addr, size, stack, .. } => p.heap.push(HeapEv::Alloc {
                index,
                addr: *addr,
                size: *size,
                pc: *pc,
                stack: stack.clone(),
            }),
            Event::Realloc { pc, old, new, size, stack } => p.heap.push(HeapEv::Realloc {
                index,
                old: *old,
                new: *new,
                size: *size,
                pc: *pc,
                stack: stack.clone(),
            }),
            Event::Free { addr, .. } => p.heap.push(HeapEv::Free { index, addr: *addr }),
            _ => {}
        }
    })?;
    if let Some(raw) = dec.take_refolded() {
        if kept.fetch_add(raw.len(), Ordering::Relaxed) + raw.len() <= REFOLDED_BUDGET {
            p.refolded = Some(raw);
        }
    }
    Ok(p)
}

/// Runs `f` over every chunk of `work` on `threads` workers, each with its own
/// state from `init`; returns the states. Stops at the first error.
pub(crate) fn for_chunks<W: Send>(
    work: &[StreamChunk],
    threads: usize,
    init: impl Fn() -> W + Sync,
    f: impl Fn(&mut W, &mut ChunkDecoder, usize, &StreamChunk) -> Result<(), Error> + Sync,
) -> Result<Vec<W>, Error> {
    let threads = threads.max(1).min(work.len().max(1));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Vec<Result<W, Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (next, failed, init, f) = (&next, &failed, &init, &f);
                scope.spawn(move || {
                    let mut w = init();
                    let mut dec = ChunkDecoder::new();
                    while !failed.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(c) = work.get(i) else { break };
                        if let Err(e) = f(&mut w, &mut dec, i, c) {
                            failed.store(true, Ordering::Relaxed);
                            return Err(e);
                        }
                    }
                    Ok(w)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("attribution worker panicked")).collect()
    });
    results.into_iter().collect()
}
