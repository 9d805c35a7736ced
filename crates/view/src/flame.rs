//! The flame chart's calls: each thread's open calls nested by the call-stack rule
//! every reader shares ([`CallStack`]), closed calls kept as spans.

use memlens_analysis::Namer;
use memlens_format::{CallStack, Pc, StackFrame, ThreadId};
use std::collections::HashMap;

/// A closed call: operations `start..end` of the merged trace.
pub(crate) struct Span {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) func: u32,
    pub(crate) thread: u16,
    pub(crate) depth: u16,
}

/// An open call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Call {
    func: u32,
    start: u64,
    fp: u64,
    fstart: u64,
}

impl StackFrame for Call {
    fn frame_pointer(&self) -> u64 {
        self.fp
    }
    fn function(&self) -> u64 {
        self.fstart
    }
}

/// Open calls per thread and the spans closed so far.
#[derive(Default)]
pub(crate) struct Calls {
    stacks: HashMap<ThreadId, CallStack<Call>>,
    starts: HashMap<Pc, u64>,
    pub(crate) spans: Vec<Span>,
}

impl Calls {
    fn fstart(&mut self, namer: &dyn Namer, pc: Pc) -> u64 {
        *self.starts.entry(pc).or_insert_with(|| namer.function_start(pc).map_or(0, |s| s.0))
    }

    /// `thread` entered function `func` (entry `pc`, frame pointer `fp`) at operation `op`.
    pub(crate) fn enter(
        &mut self,
        namer: &dyn Namer,
        t: ThreadId,
        func: u32,
        pc: Pc,
        fp: u64,
        op: u64,
    ) {
        let fstart = self.fstart(namer, pc);
        let spans = &mut self.spans;
        let close = |c: Call, d: usize| spans.push(span(c, op, t, d));
        self.stacks.entry(t).or_default().enter(Call { func, start: op, fp, fstart }, close);
    }

    /// `thread` left the function holding `pc` at operation `op`.
    pub(crate) fn exit(&mut self, namer: &dyn Namer, t: ThreadId, pc: Pc, op: u64) {
        let fstart = if pc.0 == 0 { 0 } else { self.fstart(namer, pc) };
        let spans = &mut self.spans;
        if let Some(st) = self.stacks.get_mut(&t) {
            st.exit(fstart, |c, d| spans.push(span(c, op, t, d)));
        }
    }

    /// Closes the calls still open at operation `end`.
    pub(crate) fn finish(&mut self, end: u64) {
        for (t, mut st) in std::mem::take(&mut self.stacks) {
            st.close_all(|c, d| self.spans.push(span(c, end, t, d)));
        }
    }
}

fn span(c: Call, end: u64, t: ThreadId, depth: usize) -> Span {
    Span { start: c.start, end, func: c.func, thread: t.0 as u16, depth: depth as u16 }
}
