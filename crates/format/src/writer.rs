//! The one trace-file writer: [`FileCore`] is the file's layout and accounting
//! (header at 0, whole chunks appended after it, drops counted once a write fails,
//! the final header), used by every producer. The compiled-path runtime drives it
//! from several writer threads through its own descriptor ([`ChunkSink`]);
//! [`TraceWriter`] drives it from one thread over any `Write + Seek`, for tools,
//! tests and the `--dbi` plugin's worker thread.

use crate::chunk::{
    ChunkCounts, ChunkEncoder, ChunkHeader, ChunkKind, Codec, FileHeader, FLAG_LAST, HEADER_SIZE,
    META_STREAM,
};
use crate::codec::{Encoder, Streams};
use crate::event::Event;
use crate::meta::MetaRecord;
use std::collections::HashMap;
use std::io::{self, Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};

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

/// Where a trace file's bytes go.
pub trait ChunkSink {
    /// Writes all of `buf` at byte offset `at`.
    fn write_at(&mut self, buf: &[u8], at: u64) -> io::Result<()>;
    /// Cuts the file to `len` bytes after a torn chunk, so it still ends on a chunk
    /// boundary. A sink that cannot leaves the torn bytes: readers stop there and
    /// say so.
    fn truncate(&mut self, len: u64);
}

/// What [`FileCore::append`] did with a chunk.
#[derive(Debug)]
pub enum Append {
    /// The chunk is in the file.
    Written,
    /// An earlier write failed: the chunk was dropped and counted.
    Skipped,
    /// This write failed (the chunk was cut off, dropped and counted); later chunks
    /// are skipped. `first`: the file had not failed before (say so once).
    Failed {
        /// Why.
        error: io::Error,
        /// The first failure of the file.
        first: bool,
    },
}

/// A trace file's layout and accounting, shared by every writer.
///
/// The header sits at 0 and chunks are appended after it whole: a chunk whose write
/// fails is cut off again, the file is `failed` for good and every later chunk is
/// dropped and counted (the program being traced keeps running; the counts go into
/// the final header, rewritten in place so it needs no new space). Counters are
/// atomics so writer threads can read them without a lock, but appends must be
/// serialised by the caller (the runtime holds its file lock around
/// [`FileCore::append`]; [`TraceWriter`] owns its core).
#[derive(Debug)]
pub struct FileCore {
    end: AtomicU64,
    chunks: AtomicU64,
    events: AtomicU64,
    dropped_events: AtomicU64,
    dropped_bytes: AtomicU64,
    failed: AtomicBool,
    meta_seq: AtomicU32,
    threads: AtomicU32,
}

impl Default for FileCore {
    fn default() -> FileCore {
        FileCore {
            end: AtomicU64::new(HEADER_SIZE as u64),
            chunks: AtomicU64::new(0),
            events: AtomicU64::new(0),
            dropped_events: AtomicU64::new(0),
            dropped_bytes: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            meta_seq: AtomicU32::new(0),
            threads: AtomicU32::new(0),
        }
    }
}

impl FileCore {
    /// A file with nothing written yet.
    pub fn new() -> FileCore {
        FileCore::default()
    }

    /// Writes `header` (as the file's first bytes); a failure fails the file.
    pub fn start(&self, sink: &mut impl ChunkSink, header: &FileHeader) -> io::Result<()> {
        let mut h = *header;
        h.version = crate::VERSION;
        let r = sink.write_at(&h.encode(), 0);
        if r.is_err() {
            self.failed.store(true, Relaxed);
        }
        r
    }

    /// Appends one chunk made of `parts` holding `events` events. `force` writes even
    /// after a failure (the final metadata, when there may be room again).
    pub fn append(
        &self,
        sink: &mut impl ChunkSink,
        parts: &[&[u8]],
        events: u64,
        force: bool,
    ) -> Append {
        let total: u64 = parts.iter().map(|p| p.len() as u64).sum();
        if self.failed.load(Relaxed) && !force {
            self.drop_chunk(events, total);
            return Append::Skipped;
        }
        let start = self.end.load(Relaxed);
        let mut off = start;
        for p in parts {
            if let Err(error) = sink.write_at(p, off) {
                sink.truncate(start);
                let first = self.fail();
                self.drop_chunk(events, total);
                return Append::Failed { error, first };
            }
            off += p.len() as u64;
        }
        self.end.store(off, Relaxed);
        self.chunks.fetch_add(1, Relaxed);
        self.events.fetch_add(events, Relaxed);
        Append::Written
    }

    /// Counts a chunk (or events) that never reached the file.
    pub fn drop_chunk(&self, events: u64, bytes: u64) {
        self.dropped_events.fetch_add(events, Relaxed);
        self.dropped_bytes.fetch_add(bytes, Relaxed);
    }

    /// A write failed (or the file was given up): later chunks are dropped.
    pub fn failed(&self) -> bool {
        self.failed.load(Relaxed)
    }

    /// Gives the file up; true if it had not failed before (say so once).
    pub fn fail(&self) -> bool {
        !self.failed.swap(true, Relaxed)
    }

    /// Events written, bytes in the file, events dropped.
    pub fn written(&self) -> [u64; 3] {
        [self.events.load(Relaxed), self.end.load(Relaxed), self.dropped_events.load(Relaxed)]
    }

    /// Events and bytes dropped so far.
    pub fn dropped(&self) -> (u64, u64) {
        (self.dropped_events.load(Relaxed), self.dropped_bytes.load(Relaxed))
    }

    /// `stream` has chunks (the header's thread count covers it).
    pub fn note_stream(&self, stream: u32) {
        self.threads.fetch_max(stream.saturating_add(1), Relaxed);
    }

    /// Frames metadata records as the next metadata chunk into `out` (`enc`'s level;
    /// 0 stores it, which allocates no compressor).
    pub fn meta_chunk(&self, recs: &[MetaRecord], enc: &mut ChunkEncoder, out: &mut Vec<u8>) {
        let mut raw = Vec::new();
        for r in recs {
            r.encode(&mut raw);
        }
        let seq = self.meta_seq.fetch_add(1, Relaxed);
        enc.encode(ChunkKind::Meta, META_STREAM, seq, 0, ChunkCounts::default(), 0, &raw, out);
    }

    /// The final header: `base` (pid, start, how the process ended) with the file's
    /// figures.
    pub fn final_header(&self, base: &FileHeader) -> FileHeader {
        let (dropped_events, dropped_bytes) = self.dropped();
        FileHeader {
            version: crate::VERSION,
            finished: true,
            dropped_events,
            dropped_bytes,
            chunks: self.chunks.load(Relaxed),
            threads: base.threads.max(self.threads.load(Relaxed)),
            ..*base
        }
    }

    /// The end-of-trace metadata: drop statistics and how the process ended.
    pub fn end_records(&self, end: crate::EndStatus) -> [MetaRecord; 2] {
        let (dropped_events, dropped_bytes) = self.dropped();
        [MetaRecord::Stats { dropped_events, dropped_bytes }, MetaRecord::End(end)]
    }
}

/// The header and op-length prefix of an uncompressed event chunk over `ops` and
/// `side` under `head` ([`ChunkHeader::events`]), built without allocating (a crash handler writes `header, prefix[..n],
/// ops, side`): the same frame [`ChunkEncoder`] writes at level 0.
pub fn stored_event_frame(
    head: ChunkHeader,
    ops: &[u8],
    side: &[u8],
    prefix: &mut [u8; 10],
) -> ([u8; crate::CHUNK_HEADER_SIZE], usize) {
    // SAFETY: a varint takes at most 10 bytes.
    let k = unsafe { crate::varint::put(prefix.as_mut_ptr(), ops.len() as u64) } as usize
        - prefix.as_ptr() as usize;
    let mut crc = crc32fast::Hasher::new();
    for p in [&prefix[..k], ops, side] {
        crc.update(p);
    }
    let len = (k + ops.len() + side.len()) as u32;
    let h = ChunkHeader {
        codec: Codec::None,
        raw_len: len,
        payload_len: len,
        split: (k + ops.len()) as u32,
        payload_crc: crc.finalize(),
        ..head
    };
    (h.encode(), k)
}

/// A `Write + Seek` as a [`ChunkSink`] (it cannot be cut: a torn chunk stays).
struct Seeker<'a, W: Write + Seek>(&'a mut W);

impl<W: Write + Seek> ChunkSink for Seeker<'_, W> {
    fn write_at(&mut self, buf: &[u8], at: u64) -> io::Result<()> {
        self.0.seek(SeekFrom::Start(at))?;
        self.0.write_all(buf)
    }

    fn truncate(&mut self, _len: u64) {}
}

/// Writes a trace file chunk by chunk from one thread (see [`FileCore`] on failure).
pub struct TraceWriter<W: Write + Seek> {
    w: W,
    header: FileHeader,
    core: FileCore,
    enc: ChunkEncoder,
    seqs: HashMap<u32, u32>,
    frame: Vec<u8>,
}

impl<W: Write + Seek> TraceWriter<W> {
    /// Writes the file header; `level` is the zstd level (0: uncompressed).
    pub fn new(w: W, pid: u32, level: i32) -> io::Result<TraceWriter<W>> {
        let header = FileHeader { version: crate::VERSION, pid, ..FileHeader::default() };
        TraceWriter::with_header(w, header, level)
    }

    /// Writes `header` (its version is set) and starts the file after it.
    pub fn with_header(mut w: W, header: FileHeader, level: i32) -> io::Result<TraceWriter<W>> {
        let core = FileCore::new();
        core.start(&mut Seeker(&mut w), &header)?;
        Ok(TraceWriter {
            w,
            header,
            core,
            enc: ChunkEncoder::new(level),
            seqs: HashMap::new(),
            frame: Vec::new(),
        })
    }

    /// Appends the framed chunk of `events` events.
    fn put(&mut self, events: u32) -> io::Result<()> {
        match self.core.append(&mut Seeker(&mut self.w), &[&self.frame], events.into(), false) {
            Append::Written => Ok(()),
            Append::Skipped => Err(io::Error::other("an earlier write of the trace failed")),
            Append::Failed { error, .. } => Err(error),
        }
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
    ) -> io::Result<()> {
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
    ) -> io::Result<()> {
        let seq = self.next_seq(stream);
        self.core.note_stream(stream);
        let flags = if last { FLAG_LAST } else { 0 };
        let head = ChunkHeader::events(stream, seq, flags, counts, first_clock);
        self.enc.encode_events(head, ops, side, &mut self.frame);
        self.put(counts.events)
    }

    /// Writes metadata records as one chunk.
    pub fn write_meta(&mut self, recs: &[MetaRecord]) -> io::Result<()> {
        self.core.meta_chunk(recs, &mut self.enc, &mut self.frame);
        self.put(0)
    }

    /// Rewrites the header with final figures and returns the writer.
    pub fn finish(mut self, update: impl FnOnce(&mut FileHeader)) -> io::Result<W> {
        update(&mut self.header);
        let h = self.core.final_header(&self.header);
        Seeker(&mut self.w).write_at(&h.encode(), 0)?;
        self.w.seek(SeekFrom::End(0))?;
        self.w.flush()?;
        Ok(self.w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AccessKind, Addr, Pc, ThreadId, TraceReader};

    /// A file that holds `room` bytes, then fails every write past them.
    struct Small {
        data: Vec<u8>,
        room: usize,
    }

    impl ChunkSink for Small {
        fn write_at(&mut self, buf: &[u8], at: u64) -> io::Result<()> {
            let at = at as usize;
            let fits = self.room.saturating_sub(at).min(buf.len());
            if self.data.len() < at + fits {
                self.data.resize(at + fits, 0);
            }
            self.data[at..at + fits].copy_from_slice(&buf[..fits]);
            if fits < buf.len() {
                return Err(io::Error::from_raw_os_error(28));
            }
            Ok(())
        }

        fn truncate(&mut self, len: u64) {
            self.data.truncate(len as usize);
        }
    }

    /// Pushes `n` accesses of `size` bytes, one after the other from `base`, by one
    /// code address; stores carry their index as the value.
    fn push_accesses(b: &mut EventBuffer, kind: AccessKind, size: u8, base: u64, n: u64) {
        for i in 0..n {
            b.push(&Event::Access {
                kind,
                size,
                addr: Addr(base + u64::from(size) * i),
                pc: Pc(0x401010),
                atomic: false,
                value: (kind == AccessKind::Write).then_some(i),
            });
        }
    }

    /// The chunk the encoder makes of `raw` under `head`.
    fn encoded(head: ChunkHeader, raw: &Streams) -> Vec<u8> {
        let mut out = Vec::new();
        ChunkEncoder::new(0).encode_events(head, &raw.ops, &raw.side, &mut out);
        out
    }

    fn chunk(stream: u32, seq: u32, n: u64) -> (Vec<u8>, u64) {
        let mut b = EventBuffer::new();
        push_accesses(&mut b, AccessKind::Read, 8, 0x1000, n);
        let (raw, counts) = b.take();
        (encoded(ChunkHeader::events(stream, seq, 0, counts, 0), &raw), n)
    }

    #[test]
    fn a_torn_chunk_is_cut_off_and_every_later_one_counted() {
        let (a, na) = chunk(0, 0, 100);
        let (b, nb) = chunk(0, 1, 100);
        let room = HEADER_SIZE + a.len() + b.len() / 2;
        let mut f = Small { data: Vec::new(), room };
        let core = FileCore::new();
        core.start(&mut f, &FileHeader { pid: 7, ..FileHeader::default() }).unwrap();
        assert!(matches!(core.append(&mut f, &[&a], na, false), Append::Written));
        let r = core.append(&mut f, &[&b], nb, false);
        assert!(matches!(r, Append::Failed { first: true, .. }), "{r:?}");
        // the file ends on the last whole chunk
        assert_eq!(f.data.len(), HEADER_SIZE + a.len());
        assert!(matches!(core.append(&mut f, &[&a], na, false), Append::Skipped));
        assert_eq!(core.written(), [na, (HEADER_SIZE + a.len()) as u64, nb + na]);
        assert_eq!(core.dropped(), (nb + na, (b.len() + a.len()) as u64));
        // a forced write that fails again is not a first failure
        let r = core.append(&mut f, &[&b], nb, true);
        assert!(matches!(r, Append::Failed { first: false, .. }), "{r:?}");
        core.note_stream(0);
        let h = core.final_header(&FileHeader { pid: 7, ..FileHeader::default() });
        assert!(h.finished);
        assert_eq!((h.chunks, h.threads, h.pid), (1, 1, 7));
        assert_eq!(h.dropped_events, 2 * nb + na);
        // what is there reads: one chunk of 100 events
        f.room = usize::MAX;
        f.write_at(&h.encode(), 0).unwrap();
        let path = std::env::temp_dir().join(format!("fcore-{}.trace", std::process::id()));
        std::fs::write(&path, &f.data).unwrap();
        let t = TraceReader::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let evs: Vec<Event> = t.events(ThreadId(0)).collect::<Result<_, _>>().unwrap();
        assert_eq!(evs.len(), na as usize);
        assert_eq!(t.header().dropped_events, 2 * nb + na);
    }

    #[test]
    fn the_stored_frame_is_the_encoders_level_zero_frame() {
        let mut b = EventBuffer::new();
        b.push(&Event::FuncEnter {
            pc: Pc(0x401000),
            call_site: Pc(0x400500),
            frame: Addr(0x7fff0000),
        });
        push_accesses(&mut b, AccessKind::Write, 4, 0x2000, 300);
        let (raw, counts) = b.take();
        let head = ChunkHeader::events(3, 9, FLAG_LAST, counts, 42);
        let want = encoded(head, &raw);
        let mut pre = [0u8; 10];
        let (h, k) = stored_event_frame(head, &raw.ops, &raw.side, &mut pre);
        let got = [&h[..], &pre[..k], &raw.ops, &raw.side].concat();
        assert_eq!(got, want);
    }
}
