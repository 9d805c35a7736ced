//! A single-threaded trace writer, for tools, tests and the `--dbi` plugin's worker
//! thread. The compiled-path runtime frames chunks with the same [`ChunkEncoder`]
//! but from its own writer threads.

use crate::chunk::{ChunkCounts, ChunkEncoder, ChunkKind, FileHeader, FLAG_LAST, META_STREAM};
use crate::codec::{Encoder, Streams};
use crate::event::Event;
use crate::meta::MetaRecord;
use std::collections::HashMap;
use std::io::{Seek, SeekFrom, Write};

/// Encodes a thread's events into a raw chunk payload and counts them.
#[derive(Default)]
pub struct EventBuffer {
    enc: Encoder,
    raw: Streams,
    counts: ChunkCounts,
}

impl EventBuffer {
    /// An empty buffer.
    pub fn new() -> EventBuffer {
        EventBuffer::default()
    }

    /// Appends one event.
    pub fn push(&mut self, ev: &Event) {
        self.enc.push(&mut self.raw, ev);
        count(&mut self.counts, ev);
    }

    /// Encoded bytes so far.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// No events yet.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// Takes the payload and counts, leaving the buffer at chunk start.
    pub fn take(&mut self) -> (Streams, ChunkCounts) {
        self.enc.reset();
        (std::mem::take(&mut self.raw), std::mem::take(&mut self.counts))
    }
}

/// Whether a realloc from `old` to `new` counts as an allocation and as a free, as
/// memcheck counts them: `realloc(NULL, n)` only allocates, `realloc(p, 0)` (which
/// returns NULL) only frees, a move or resize does both.
pub fn realloc_counts(old: u64, new: u64) -> (bool, bool) {
    (new != 0, old != 0)
}

/// Adds an event to chunk counters (the same rules the runtime applies).
pub fn count(c: &mut ChunkCounts, ev: &Event) {
    c.events += 1;
    let (l, s) = ev.loads_stores();
    c.loads += l as u32;
    c.stores += s as u32;
    match ev {
        Event::Alloc { .. } => c.allocs += 1,
        Event::Free { .. } => c.frees += 1,
        Event::Realloc { old, new, .. } => {
            let (a, f) = realloc_counts(old.0, new.0);
            c.allocs += u32::from(a);
            c.frees += u32::from(f);
        }
        _ => {}
    }
}

/// Writes a trace file chunk by chunk.
///
/// After a failed write nothing more is written (a partial chunk would hide the
/// ones after it): every later chunk fails too and is counted as dropped in the
/// header, which `finish` still tries to write.
pub struct TraceWriter<W: Write + Seek> {
    w: W,
    header: FileHeader,
    enc: ChunkEncoder,
    seqs: HashMap<u32, u32>,
    frame: Vec<u8>,
    failed: bool,
}

impl<W: Write + Seek> TraceWriter<W> {
    /// Writes the file header; `level` is the zstd level (0: uncompressed).
    pub fn new(w: W, pid: u32, level: i32) -> std::io::Result<TraceWriter<W>> {
        let header = FileHeader { version: crate::VERSION, pid, ..FileHeader::default() };
        TraceWriter::with_header(w, header, level)
    }

    /// Writes `header` (its version is set) and starts the file after it.
    pub fn with_header(
        mut w: W,
        mut header: FileHeader,
        level: i32,
    ) -> std::io::Result<TraceWriter<W>> {
        header.version = crate::VERSION;
        w.write_all(&header.encode())?;
        Ok(TraceWriter {
            w,
            header,
            enc: ChunkEncoder::new(level),
            seqs: HashMap::new(),
            frame: Vec::new(),
            failed: false,
        })
    }

    /// Writes the framed chunk of `events` events (see the type's docs on failure).
    fn put(&mut self, events: u32) -> std::io::Result<()> {
        let r = if self.failed {
            Err(std::io::Error::other("an earlier write of the trace failed"))
        } else {
            self.w.write_all(&self.frame)
        };
        match r {
            Ok(()) => self.header.chunks += 1,
            Err(_) => {
                self.failed = true;
                self.header.dropped_events += u64::from(events);
                self.header.dropped_bytes += self.frame.len() as u64;
            }
        }
        r
    }

    fn next_seq(&mut self, stream: u32) -> u32 {
        let s = self.seqs.entry(stream).or_insert(0);
        *s += 1;
        *s - 1
    }

    /// Writes one chunk of a thread's events; `last` marks the end of the stream.
    pub fn write_events(
        &mut self,
        stream: u32,
        buf: &mut EventBuffer,
        last: bool,
    ) -> std::io::Result<()> {
        let (raw, counts) = buf.take();
        self.write_encoded(stream, last, counts, 0, &raw.ops, &raw.side)
    }

    /// Writes one chunk of a thread's events already encoded ([`Encoder`]'s ops and
    /// side streams) with `first_clock`, the clock in force at its start.
    pub fn write_encoded(
        &mut self,
        stream: u32,
        last: bool,
        counts: ChunkCounts,
        first_clock: u64,
        ops: &[u8],
        side: &[u8],
    ) -> std::io::Result<()> {
        let seq = self.next_seq(stream);
        self.header.threads = self.header.threads.max(stream + 1);
        let flags = if last { FLAG_LAST } else { 0 };
        self.enc.encode_events(stream, seq, flags, counts, first_clock, ops, side, &mut self.frame);
        self.put(counts.events)
    }

    /// Writes metadata records as one chunk.
    pub fn write_meta(&mut self, recs: &[MetaRecord]) -> std::io::Result<()> {
        let mut raw = Vec::new();
        for r in recs {
            r.encode(&mut raw);
        }
        let seq = self.next_seq(META_STREAM);
        let counts = ChunkCounts::default();
        self.enc.encode(ChunkKind::Meta, META_STREAM, seq, 0, counts, 0, &raw, &mut self.frame);
        self.put(0)
    }

    /// Rewrites the header with final figures and returns the writer.
    pub fn finish(mut self, update: impl FnOnce(&mut FileHeader)) -> std::io::Result<W> {
        self.header.finished = true;
        update(&mut self.header);
        self.w.seek(SeekFrom::Start(0))?;
        self.w.write_all(&self.header.encode())?;
        self.w.seek(SeekFrom::End(0))?;
        self.w.flush()?;
        Ok(self.w)
    }
}
