//! Functions of the call-stack formats: one frame per distinct (function, file),
//! each code address symbolised once.

use crate::DynNamer;
use memlens_format::{Pc, StackFrame};
use std::collections::HashMap;

/// One function as the viewers show it.
pub(crate) struct Frame {
    /// Source file ("" when unknown).
    pub file: String,
    /// Line of the function's entry (0 when unknown).
    pub line: u32,
    /// Demangled function name as a JSON string literal, escaped once.
    pub json_name: String,
}

/// An open call of frame `frame`, nested by [`memlens_format::CallStack`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Open {
    pub frame: u32,
    fp: u64,
    fstart: u64,
}

impl StackFrame for Open {
    fn frame_pointer(&self) -> u64 {
        self.fp
    }
    fn function(&self) -> u64 {
        self.fstart
    }
}

/// Interns frames by code address.
pub(crate) struct Frames<'n> {
    namer: DynNamer<'n>,
    by_pc: HashMap<Pc, u32>,
    starts: HashMap<Pc, u64>,
    by_key: HashMap<(String, String), u32>,
    pub list: Vec<Frame>,
}

impl<'n> Frames<'n> {
    pub fn new(namer: DynNamer<'n>) -> Frames<'n> {
        Frames {
            namer,
            by_pc: HashMap::new(),
            starts: HashMap::new(),
            by_key: HashMap::new(),
            list: Vec::new(),
        }
    }

    /// The frame of a function-entry address.
    pub fn of(&mut self, pc: Pc) -> u32 {
        if let Some(&i) = self.by_pc.get(&pc) {
            return i;
        }
        let c = self.namer.function(pc);
        let n = self.list.len() as u32;
        let i = *self.by_key.entry((c.function.clone(), c.file.clone())).or_insert(n);
        if i == n {
            self.list.push(Frame {
                json_name: crate::json_str(&c.function),
                file: c.file,
                line: c.line,
            });
        }
        self.by_pc.insert(pc, i);
        i
    }

    /// The open call of a function entry at `pc` with frame pointer `fp`.
    pub fn open(&mut self, pc: Pc, fp: u64) -> Open {
        Open { frame: self.of(pc), fp, fstart: self.start(pc) }
    }

    /// The function an exit at `pc` leaves (0: unknown), as [`Open`] matches it.
    pub fn start(&mut self, pc: Pc) -> u64 {
        if pc.0 == 0 {
            return 0;
        }
        let namer = self.namer;
        *self.starts.entry(pc).or_insert_with(|| namer.function_start(pc).map_or(0, |s| s.0))
    }

    pub fn get(&self, i: u32) -> &Frame {
        &self.list[i as usize]
    }
}

/// Per-thread identity for the trace-event formats.
pub(crate) struct ThreadIds {
    used: HashMap<u32, u32>,
}

impl ThreadIds {
    pub fn new() -> ThreadIds {
        ThreadIds { used: HashMap::new() }
    }

    /// The `tid` of a memlens thread: its kernel tid, unless another memlens
    /// thread already has it (tids are reused after join) or it is unknown.
    pub fn tid(&mut self, thread: u32, os_tid: u32) -> u32 {
        let synthetic = 1_000_000_000 + thread;
        let t = if os_tid == 0 { synthetic } else { os_tid };
        match self.used.get(&t) {
            Some(&owner) if owner != thread => {
                self.used.insert(synthetic, thread);
                synthetic
            }
            _ => {
                self.used.insert(t, thread);
                t
            }
        }
    }
}

/// `T3 worker` / `T0`: how threads are named in every export.
pub(crate) fn thread_label(thread: u32, name: &str) -> String {
    if name.is_empty() {
        format!("T{thread}")
    } else {
        format!("T{thread} {name}")
    }
}

/// The memory operations (loads and stores) of `e`: the timeline exports' clock
/// ticks once per operation.
pub(crate) fn operations(e: &memlens_format::Event) -> u64 {
    let (l, s) = e.loads_stores();
    l + s
}

/// `threads`' entries in thread order, so what an export closes at the end comes
/// in a fixed order.
pub(crate) fn in_thread_order<S>(
    threads: HashMap<memlens_format::ThreadId, S>,
) -> Vec<(memlens_format::ThreadId, S)> {
    let mut v: Vec<_> = threads.into_iter().collect();
    v.sort_by_key(|(t, _)| *t);
    v
}

impl Frames<'_> {
    /// The summary of a finished export that drew `operations` memory operations
    /// with these frames, after flushing `out`.
    pub fn finish(
        &self,
        out: &mut impl std::io::Write,
        mut sum: crate::Summary,
        operations: u64,
    ) -> Result<crate::Summary, crate::Error> {
        out.flush()?;
        sum.operations = operations;
        sum.frames = self.list.len() as u64;
        Ok(sum)
    }
}
