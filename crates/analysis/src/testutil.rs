//! Helpers for tests: events and synthetic traces.

use memlens_format::codec::Folder;
use memlens_format::{
    AccessKind, Addr, AllocKind, Event, EventBuffer, FreeKind, Pc, RmwOp, TraceReader, TraceWriter,
};
use std::sync::atomic::{AtomicU32, Ordering};

pub fn rd(pc: u64, addr: u64, size: u8) -> Event {
    Event::Access {
        pc: Pc(pc),
        addr: Addr(addr),
        size,
        kind: AccessKind::Read,
        atomic: false,
        value: None,
    }
}

pub fn wr(pc: u64, addr: u64, size: u8) -> Event {
    Event::Access {
        pc: Pc(pc),
        addr: Addr(addr),
        size,
        kind: AccessKind::Write,
        atomic: false,
        value: None,
    }
}

pub fn range_rd(pc: u64, addr: u64, len: u64) -> Event {
    Event::Range { pc: Pc(pc), addr: Addr(addr), len, kind: AccessKind::Read }
}

pub fn range_wr(pc: u64, addr: u64, len: u64) -> Event {
    Event::Range { pc: Pc(pc), addr: Addr(addr), len, kind: AccessKind::Write }
}

pub fn rmw(pc: u64, addr: u64, size: u8) -> Event {
    Event::Rmw { pc: Pc(pc), addr: Addr(addr), size, op: RmwOp::FetchAdd, value: None }
}

pub fn alloc(pc: u64, addr: u64, size: u64, stack: &[u64]) -> Event {
    Event::Alloc {
        pc: Pc(pc),
        addr: Addr(addr),
        size,
        kind: AllocKind::Malloc,
        stack: stack.iter().map(|&p| Pc(p)).collect(),
    }
}

pub fn free(pc: u64, addr: u64) -> Event {
    Event::Free { pc: Pc(pc), addr: Addr(addr), kind: FreeKind::Free }
}

/// Writes the streams (thread id, events) into a trace file and opens it. The file is
/// unlinked at once; the reader keeps it open.
pub fn trace(streams: &[(u32, Vec<Event>)]) -> TraceReader {
    let path = trace_file(streams);
    let r = TraceReader::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    r
}

/// [`trace`], each stream's loops folded into `repeat`s ([`Folder`]) whether or
/// not the writer's size test would keep them: one chunk per stream.
pub fn trace_folded(streams: &[(u32, Vec<Event>)]) -> TraceReader {
    let path = temp_trace();
    let mut w = TraceWriter::new(std::fs::File::create(&path).unwrap(), 1, 0).unwrap();
    for (t, evs) in streams {
        let mut buf = EventBuffer::new();
        for e in evs {
            buf.push(e);
        }
        let (raw, counts) = buf.take();
        let mut f = Folder::new();
        let s = f.fold(&raw.ops, &raw.side).expect("the stream folds").clone();
        w.write_encoded(*t, true, counts, 0, &s.ops, &s.side).unwrap();
    }
    w.finish(|_| {}).unwrap();
    let r = TraceReader::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    r
}

fn temp_trace() -> std::path::PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!(
        "memlens-an-{}-{}.trace",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Writes the streams (thread id, events) into a trace file (the caller removes it).
pub fn trace_file(streams: &[(u32, Vec<Event>)]) -> std::path::PathBuf {
    let path = temp_trace();
    let mut w = TraceWriter::new(std::fs::File::create(&path).unwrap(), 1, 0).unwrap();
    for (t, evs) in streams {
        let mut buf = EventBuffer::new();
        for (i, e) in evs.iter().enumerate() {
            buf.push(e);
            if buf.len() > 1 << 20 && i + 1 < evs.len() {
                w.write_events(*t, &mut buf, false).unwrap();
            }
        }
        w.write_events(*t, &mut buf, true).unwrap();
    }
    w.finish(|_| {}).unwrap();
    path
}
