//! Consumers of a memlens trace that write other tools' file formats, so the
//! viewers people already use can open a recording:
//!
//! - [`perfetto`]: Chrome trace-event JSON (`traceEvents`, `B`/`E` per thread) for
//!   ui.perfetto.dev and chrome://tracing.
//! - [`perfetto_pb`]: the same calls in Perfetto's native protobuf trace, with
//!   interned names (about a fifth of the JSON's size).
//! - [`spall`]: Spall's JSON (the trace-event array) for spall-web.
//! - [`speedscope`]: speedscope's file format, one `evented` profile per thread.
//! - [`cachegrind`]: `cachegrind.out` per source line (`Ir Dr Dw`, plus
//!   `D1mr D1mw DLmr DLmw` with a cache simulation) for cg_annotate and KCachegrind.
//! - [`callgrind`]: `callgrind.out` with per-line costs (`Dr Dw Rb Wb`) and the
//!   call graph with inclusive costs, for KCachegrind and callgrind_annotate.
//! - [`dhat`]: DHAT's JSON (`dhatFileVersion` 2, heap mode) for dh_view.html.
//!
//! Time is counted in memory operations, not seconds: a trace has no wall clock.
//! One memory operation is one load or one store as `memlens report` counts them
//! (an atomic read-modify-write is one of each, a `memcpy` range one of each kind).
//! The call-stack formats stream: memory stays bounded by the deepest call stack
//! and the number of distinct functions, whatever the trace's length.
//!
//! Names come through the analysis crate's [`Namer`], so the caller decides how
//! code addresses are symbolised.
//!
//! # Example
//! ```
//! use memlens_analysis::NoNames;
//! use memlens_format::{AccessKind, Addr, Event, EventBuffer, Pc, TraceReader, TraceWriter};
//!
//! let path = std::env::temp_dir().join(format!("export-doc-{}.trace", std::process::id()));
//! let mut w = TraceWriter::new(std::fs::File::create(&path)?, 1, 1)?;
//! let mut buf = EventBuffer::new();
//! buf.push(&Event::FuncEnter { pc: Pc(0x10), call_site: Pc(0), frame: Addr(0) });
//! buf.push(&Event::Access { pc: Pc(0x11), addr: Addr(0x1000), size: 8,
//!     kind: AccessKind::Write, atomic: false, value: None });
//! buf.push(&Event::FuncExit { pc: Pc(0x12) });
//! w.write_events(0, &mut buf, true)?;
//! w.finish(|_| {})?;
//!
//! let r = TraceReader::open(&path)?;
//! let mut out = Vec::new();
//! let s = memlens_export::speedscope(&r, &NoNames, &mut out)?;
//! assert_eq!((s.calls, s.operations), (1, 1));
//! let json: serde_json::Value = serde_json::from_slice(&out)?;
//! assert_eq!(json["profiles"][0]["endValue"], 1);
//! # std::fs::remove_file(&path)?;
//! Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod cachegrind;
mod callgrind;
mod dhat;
mod frames;
mod perfetto_pb;
mod speedscope;
mod trace_events;

pub use cachegrind::{cachegrind, CachegrindOpts};
pub use callgrind::callgrind;
pub use dhat::dhat;
pub use perfetto_pb::perfetto_pb;
pub use speedscope::speedscope;
pub use trace_events::{perfetto, spall};

use memlens_analysis::Namer;

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The trace could not be read, or an analysis kernel refused its options.
    #[error(transparent)]
    Analysis(#[from] memlens_analysis::Error),
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] memlens_format::Error),
    /// The output could not be written.
    #[error("cannot write the export: {0}")]
    Io(#[from] std::io::Error),
}

/// What an export wrote, for a one-line report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Threads (streams) exported.
    pub threads: u64,
    /// Function calls (call-stack formats), source lines (cachegrind) or allocation
    /// sites (DHAT) written.
    pub calls: u64,
    /// Memory operations (loads + stores) covered.
    pub operations: u64,
    /// Distinct frames (functions) or frame-table entries written.
    pub frames: u64,
}

/// The namer as a trait object (keeps the public functions generic-free).
type DynNamer<'a> = &'a dyn Namer;

/// JSON string literal of `s`.
pub(crate) fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// The traced program's command line, for headers.
pub(crate) fn command(r: &memlens_format::TraceReader) -> String {
    let m = r.meta();
    if m.argv.is_empty() {
        m.exe.clone()
    } else {
        m.argv.join(" ")
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use memlens_analysis::{CodeName, DataName, Namer};
    use memlens_format::{AccessKind, Addr, Event, EventBuffer, Pc, TraceReader, TraceWriter};
    use std::sync::atomic::{AtomicU32, Ordering};

    pub fn trace(streams: &[(u32, Vec<Event>)]) -> TraceReader {
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "memlens-export-test-{}-{}.trace",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let mut w = TraceWriter::new(std::fs::File::create(&path).unwrap(), 42, 1).unwrap();
        for (t, evs) in streams {
            let mut buf = EventBuffer::new();
            for e in evs {
                buf.push(e);
            }
            w.write_events(*t, &mut buf, true).unwrap();
        }
        w.finish(|_| {}).unwrap();
        let r = TraceReader::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        r
    }

    /// The call-stack exporters' common scene: thread 0 nests 0x20 in 0x10, calls
    /// 0x20 again, has a stray exit and leaves 0x30 open; thread 1 calls 0x20 and is
    /// renamed inside it. 4 memory operations, 5 calls, 3 functions.
    pub fn nested_calls() -> TraceReader {
        trace(&[
            (
                0,
                vec![
                    start(100, "main"),
                    enter(0x10),
                    wr(1, 0x1000),
                    enter(0x20),
                    rd(2, 0x1000),
                    rd(2, 0x1008),
                    exit(),
                    enter(0x20),
                    exit(),
                    exit(),
                    exit(), // stray: dropped
                    enter(0x30),
                ],
            ),
            (
                1,
                vec![
                    start(101, "worker"),
                    enter(0x20),
                    wr(3, 0x2000),
                    Event::ThreadName("renamed".into()),
                    exit(),
                ],
            ),
        ])
    }

    pub fn enter(pc: u64) -> Event {
        Event::FuncEnter { pc: Pc(pc), call_site: Pc(0), frame: Addr(0) }
    }

    pub fn exit() -> Event {
        Event::FuncExit { pc: Pc(0) }
    }

    pub fn rd(pc: u64, addr: u64) -> Event {
        Event::Access {
            pc: Pc(pc),
            addr: Addr(addr),
            size: 8,
            kind: AccessKind::Read,
            atomic: false,
            value: None,
        }
    }

    pub fn wr(pc: u64, addr: u64) -> Event {
        Event::Access {
            pc: Pc(pc),
            addr: Addr(addr),
            size: 8,
            kind: AccessKind::Write,
            atomic: false,
            value: None,
        }
    }

    /// pc → line pc & 0xff of function `f<pc >> 8>`, in `h.h` when pc has bit 12 set,
    /// else in `f.c`.
    pub struct ByPc;
    impl Namer for ByPc {
        fn code(&self, pc: Pc) -> CodeName {
            CodeName {
                function: format!("f{}", pc.0 >> 8),
                file: if pc.0 & 0x1000 == 0 { "/src/f.c" } else { "/src/h.h" }.into(),
                line: (pc.0 & 0xff) as u32,
            }
        }
        fn data(&self, _: Addr) -> Option<DataName> {
            None
        }
    }

    pub fn start(os_tid: u32, name: &str) -> Event {
        Event::ThreadStart {
            os_tid,
            parent: None,
            name: name.into(),
            stack_lo: Addr(0),
            stack_hi: Addr(0),
            tls: Addr(0),
        }
    }
}
