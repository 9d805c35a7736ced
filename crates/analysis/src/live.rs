//! Running a kernel over a trace while it is being written.
//!
//! The trace layout allows it: `memlens record` appends self-contained, checksummed
//! chunks after a fixed header and rewrites the header with `finished = 1` only after
//! the last chunk is on disk. [`TraceTail`] reads chunk headers from the start, stops
//! at a short read (a chunk still being written) and picks up from there on the next
//! [`TraceTail::poll`]; the trace is complete when the header says finished and no
//! bytes follow the last chunk.
//!
//! [`Live`] feeds a kernel from any [`ChunkSource`] (the tail of a file today, a
//! socket later) and can [`Live::snapshot`] it at any time without consuming it (a
//! clone is finished). Two modes:
//! - [`Live::chunks`], for [`ChunkKernel`]s (order-free sums: counts, sharing): every
//!   event chunk is decoded as soon as it lands; a snapshot covers everything read.
//! - [`Live::merged`], for every other kernel: events are released in the global
//!   `(clock, thread, index)` order of [`crate::drive_merged`], up to the point below
//!   which no stream can still deliver an event (a stream waiting for its next chunk
//!   holds the others back). A snapshot is an exact prefix of the offline run. A
//!   stream first seen after events above its first event were released (a thread
//!   whose first chunk landed late) makes the driver replay from the start, so the
//!   final result always equals the offline one.

use crate::{ChunkKernel, Error, Kernel};
use memlens_format::chunk::decode_payload;
use memlens_format::codec::Decoder;
use memlens_format::reader::read_full;
use memlens_format::{
    ChunkHeader, ChunkIndex, ChunkKind, Event, FileHeader, ThreadId, CHUNK_HEADER_SIZE, FLAG_LAST,
    HEADER_SIZE, META_STREAM,
};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fs::File;
use std::path::{Path, PathBuf};

/// Where a followed trace stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TailState {
    /// No trace header yet (the file is missing or shorter than its header).
    Waiting,
    /// The writer is still appending.
    Growing,
    /// The writer finished and every chunk was read.
    Complete,
}

/// A source of chunks for [`Live`]: the tail of a growing file, later a socket.
pub trait ChunkSource {
    /// Chunks that landed since the last call, in arrival order.
    fn poll(&mut self) -> Result<Vec<ChunkIndex>, Error>;
    /// The verified, decompressed payload of a chunk `poll` returned.
    fn payload(&self, c: &ChunkIndex) -> Result<Vec<u8>, Error>;
    /// Where the source stands after the last `poll`.
    fn state(&self) -> TailState;
}

/// Follows a trace file while the recording writes it.
pub struct TraceTail {
    path: PathBuf,
    file: Option<File>,
    header: Option<FileHeader>,
    /// Offset of the next chunk header.
    off: u64,
    state: TailState,
    chunks: usize,
    /// The file ends in a damaged chunk (after the writer finished): reading stopped.
    truncated: Option<u64>,
    /// Complete chunks whose payload checksum failed: skipped, as the offline reader
    /// skips them (offset, stream, events).
    skipped: Vec<(u64, u32, u32)>,
}

impl TraceTail {
    /// A follower of `path`; the file need not exist yet.
    pub fn new(path: impl AsRef<Path>) -> TraceTail {
        TraceTail {
            path: path.as_ref().to_path_buf(),
            file: None,
            header: None,
            off: HEADER_SIZE as u64,
            state: TailState::Waiting,
            chunks: 0,
            truncated: None,
            skipped: Vec::new(),
        }
    }

    /// The file header read last (`None` before the writer wrote it).
    pub fn header(&self) -> Option<&FileHeader> {
        self.header.as_ref()
    }

    /// Bytes of the file consumed so far (complete chunks).
    pub fn offset(&self) -> u64 {
        self.off
    }

    /// Chunks read so far.
    pub fn chunk_count(&self) -> usize {
        self.chunks
    }

    /// Offset of a damaged chunk at which reading stopped once the writer finished.
    pub fn truncated_at(&self) -> Option<u64> {
        self.truncated
    }

    /// Damaged chunks stepped over: (offset, stream, events).
    pub fn skipped(&self) -> &[(u64, u32, u32)] {
        &self.skipped
    }

    /// Whether the recorded process is gone without having finished the trace
    /// (killed with SIGKILL, or the disk was full when it ended): nothing more will come.
    pub fn writer_gone(&self) -> bool {
        let Some(h) = &self.header else { return false };
        if h.finished || h.pid == 0 {
            return false;
        }
        // a zombie counts as gone: it writes nothing more
        match std::fs::read_to_string(format!("/proc/{}/stat", h.pid)) {
            Err(_) => true,
            Ok(s) => {
                let Some((_, rest)) = s.rsplit_once(')') else { return true };
                rest.trim_start().starts_with('Z') || started_after(rest, h.start_ns)
            }
        }
    }

    fn read_header(&mut self) -> Result<Option<FileHeader>, Error> {
        if self.file.is_none() {
            match File::open(&self.path) {
                Ok(f) => self.file = Some(f),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(Error::Trace(io_err(&self.path, e))),
            }
        }
        let f = self.file.as_ref().expect("opened above");
        let mut b = [0u8; 128];
        let n = read_full(f, &mut b, 0).map_err(|e| Error::Trace(io_err(&self.path, e)))?;
        if n < b.len() {
            return Ok(None);
        }
        match FileHeader::decode(&b) {
            Ok(h) => Ok(Some(h)),
            // all zero: created, header not written yet; a bad checksum: being rewritten
            Err(memlens_format::Error::NotATrace) if b.iter().all(|&x| x == 0) => Ok(None),
            Err(memlens_format::Error::Corrupt { .. }) => Ok(self.header),
            Err(e) => Err(Error::Trace(e)),
        }
    }
}

/// Whether the process whose `/proc/PID/stat` fields after the command are `rest`
/// started well after `start_ns` (wall clock): then the recorded process is gone
/// and its pid was given to another one.
fn started_after(rest: &str, start_ns: u64) -> bool {
    // field 22, starttime, in clock ticks (USER_HZ, 100 on Linux) since boot; `rest`
    // starts at field 3
    let Some(ticks) = rest.split_whitespace().nth(19).and_then(|t| t.parse::<u64>().ok()) else {
        return false;
    };
    let Some(btime) = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines().find_map(|l| l.strip_prefix("btime ").and_then(|v| v.trim().parse::<u64>().ok()))
    }) else {
        return false;
    };
    let started =
        btime.saturating_mul(1_000_000_000).saturating_add(ticks.saturating_mul(10_000_000));
    // btime is whole seconds: allow for its rounding
    start_ns != 0 && started > start_ns.saturating_add(2_000_000_000)
}

fn io_err(p: &Path, e: std::io::Error) -> memlens_format::Error {
    memlens_format::Error::Io(p.display().to_string(), e)
}

impl ChunkSource for TraceTail {
    fn poll(&mut self) -> Result<Vec<ChunkIndex>, Error> {
        let mut out = Vec::new();
        if self.state == TailState::Complete {
            return Ok(out);
        }
        // The header first: if it already says finished, every chunk is on disk.
        let Some(h) = self.read_header()? else { return Ok(out) };
        self.header = Some(h);
        let f = self.file.as_ref().expect("the header was read");
        let len = f.metadata().map_err(|e| Error::Trace(io_err(&self.path, e)))?.len();
        let mut hb = [0u8; CHUNK_HEADER_SIZE];
        let mut damaged = false;
        while len - self.off.min(len) >= CHUNK_HEADER_SIZE as u64 {
            let n =
                read_full(f, &mut hb, self.off).map_err(|e| Error::Trace(io_err(&self.path, e)))?;
            if n < hb.len() {
                break;
            }
            let ch = match ChunkHeader::decode(&hb, self.off) {
                Ok(ch) => ch,
                Err(_) => {
                    // possibly torn mid-write: retried next time unless the writer is done
                    damaged = true;
                    break;
                }
            };
            let end = self.off + CHUNK_HEADER_SIZE as u64 + u64::from(ch.payload_len);
            if end > len {
                break;
            }
            // Whole on disk (the writer only appends), so a checksum that fails is
            // damage, not a write in flight: step over the chunk, as `info` does.
            let mut p = vec![0u8; ch.payload_len as usize];
            let n = read_full(f, &mut p, self.off + CHUNK_HEADER_SIZE as u64)
                .map_err(|e| Error::Trace(io_err(&self.path, e)))?;
            if n == p.len() && crc32fast::hash(&p) != ch.payload_crc {
                self.skipped.push((self.off, ch.stream, ch.counts.events));
                self.off = end;
                continue;
            }
            out.push(ChunkIndex { offset: self.off, header: ch });
            self.off = end;
        }
        self.chunks += out.len();
        self.state = if h.finished && (self.off >= len || damaged) {
            if self.off < len {
                self.truncated = Some(self.off);
            }
            TailState::Complete
        } else {
            TailState::Growing
        };
        Ok(out)
    }

    fn payload(&self, c: &ChunkIndex) -> Result<Vec<u8>, Error> {
        let f = self.file.as_ref().ok_or(Error::Config("trace not open".into()))?;
        let mut p = vec![0u8; c.header.payload_len as usize];
        let n = read_full(f, &mut p, c.offset + CHUNK_HEADER_SIZE as u64)
            .map_err(|e| Error::Trace(io_err(&self.path, e)))?;
        if n != p.len() {
            return Err(Error::Trace(memlens_format::Error::Corrupt {
                offset: c.offset,
                what: "chunk payload cut short",
            }));
        }
        Ok(decode_payload(&c.header, &p, c.offset)?)
    }

    fn state(&self) -> TailState {
        self.state
    }
}

/// How [`Live`] orders events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    Chunks,
    Merged,
}

/// Merge state of one stream.
#[derive(Default)]
struct Stream {
    /// Chunks landed ahead of their sequence number.
    pending: BTreeMap<u32, ChunkIndex>,
    next_seq: u32,
    /// In sequence, not decoded yet.
    ready: std::collections::VecDeque<ChunkIndex>,
    /// The last chunk is in `ready` or decoded.
    last_seen: bool,
    dec: Option<(u64, Decoder<Vec<u8>>)>,
    head: Option<Event>,
    clock: u64,
    next_index: u64,
    chunks_decoded: usize,
}

impl Stream {
    fn done(&self) -> bool {
        self.last_seen && self.head.is_none() && self.ready.is_empty() && self.dec.is_none()
    }
}

/// A kernel fed incrementally from a [`ChunkSource`] (see the module docs).
pub struct Live<K, S = TraceTail> {
    src: S,
    order: Order,
    pristine: K,
    kernel: K,
    /// Every event chunk seen, in arrival order (for a replay).
    seen: Vec<ChunkIndex>,
    streams: Vec<Stream>,
    heap: BinaryHeap<Reverse<(u64, u32, u64)>>,
    last_released: Option<(u64, u32, u64)>,
    events: u64,
    replays: u32,
    batch: Vec<Event>,
}

impl<K: ChunkKernel + Clone> Live<K> {
    /// Follows the trace at `path` with an order-free kernel: every chunk is
    /// processed as soon as it lands.
    pub fn chunks(path: impl AsRef<Path>, kernel: K) -> Live<K> {
        Live::with_source(TraceTail::new(path), kernel, Order::Chunks)
    }
}

impl<K: Kernel + Clone> Live<K> {
    /// [`Live::chunks`] for a kernel the caller knows to be order-free (the
    /// registry's erased kernels, which cannot carry the [`ChunkKernel`] bound).
    pub(crate) fn chunks_unchecked(path: impl AsRef<Path>, kernel: K) -> Live<K> {
        Live::with_source(TraceTail::new(path), kernel, Order::Chunks)
    }

    /// Follows the trace at `path` in the merged global order (any kernel).
    pub fn merged(path: impl AsRef<Path>, kernel: K) -> Live<K> {
        Live::with_source(TraceTail::new(path), kernel, Order::Merged)
    }
}

impl<K: Kernel + Clone, S: ChunkSource> Live<K, S> {
    /// A live driver over any chunk source; `order_free` selects the chunk mode
    /// (allowed for [`ChunkKernel`]s only, see [`Live::chunks`]).
    pub fn from_source(src: S, kernel: K) -> Live<K, S> {
        Live::with_source(src, kernel, Order::Merged)
    }

    /// [`Live::chunks`] over any chunk source.
    pub fn chunks_from_source(src: S, kernel: K) -> Live<K, S>
    where
        K: ChunkKernel,
    {
        Live::with_source(src, kernel, Order::Chunks)
    }

    fn with_source(src: S, kernel: K, order: Order) -> Live<K, S> {
        Live {
            src,
            order,
            pristine: kernel.clone(),
            kernel,
            seen: Vec::new(),
            streams: Vec::new(),
            heap: BinaryHeap::new(),
            last_released: None,
            events: 0,
            replays: 0,
            batch: Vec::new(),
        }
    }

    /// The chunk source (e.g. the [`TraceTail`] with the file header).
    pub fn source(&self) -> &S {
        &self.src
    }

    /// Events processed by the kernel so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// How often a late stream forced a replay from the start (merged mode).
    pub fn replays(&self) -> u32 {
        self.replays
    }

    /// Reads what landed and feeds the kernel; returns where the source stands.
    /// Once it returns [`TailState::Complete`], [`Live::finish`] equals the offline
    /// run over the finished trace.
    pub fn poll(&mut self) -> Result<TailState, Error> {
        let new = self.src.poll()?;
        let complete = self.src.state() == TailState::Complete;
        let new: Vec<ChunkIndex> = new
            .into_iter()
            .filter(|c| c.header.kind == ChunkKind::Events && c.header.stream != META_STREAM)
            // as TraceReader: absurd stream numbers are ignored
            .filter(|c| c.header.stream <= 1 << 24)
            .collect();
        match self.order {
            Order::Chunks => {
                for c in &new {
                    let raw = self.src.payload(c)?;
                    let mut dec = Decoder::new(&raw[..]);
                    let t = ThreadId(c.header.stream);
                    loop {
                        let r = dec.next_batch(&mut self.batch, memlens_format::BATCH);
                        if !self.batch.is_empty() {
                            self.kernel.process_batch(t, &self.batch);
                            self.events += self.batch.len() as u64;
                        }
                        match r {
                            Ok(0) => break,
                            Ok(_) => {}
                            Err(e) => {
                                return Err(Error::Trace(memlens_format::Error::Decode {
                                    chunk_offset: c.offset,
                                    source: e,
                                }))
                            }
                        }
                    }
                }
            }
            Order::Merged => {
                self.seen.extend_from_slice(&new);
                for c in new {
                    self.land(c);
                }
                if complete {
                    self.take_gaps();
                }
                if !self.release()? {
                    self.replay(complete)?;
                }
            }
        }
        Ok(self.src.state())
    }

    fn land(&mut self, c: ChunkIndex) {
        let i = c.header.stream as usize;
        if i >= self.streams.len() {
            self.streams.resize_with(i + 1, Stream::default);
        }
        let s = &mut self.streams[i];
        s.pending.insert(c.header.seq, c);
        while let Some(c) = s.pending.remove(&s.next_seq) {
            s.next_seq += 1;
            s.last_seen |= c.header.flags & FLAG_LAST != 0;
            s.ready.push_back(c);
        }
    }

    /// The trace is complete: lost chunks (sequence gaps) and streams without a last
    /// chunk leave nothing more to wait for; take what there is, in sequence order,
    /// as the offline reader does.
    fn take_gaps(&mut self) {
        for s in &mut self.streams {
            let rest = std::mem::take(&mut s.pending);
            s.ready.extend(rest.into_values());
            s.last_seen = true;
        }
    }

    /// Starts again from the first chunk (a stream appeared below what was released).
    fn replay(&mut self, complete: bool) -> Result<(), Error> {
        self.replays += 1;
        self.kernel = self.pristine.clone();
        self.streams.clear();
        self.heap.clear();
        self.last_released = None;
        self.events = 0;
        for c in self.seen.clone() {
            self.land(c);
        }
        if complete {
            self.take_gaps();
        }
        if self.release()? {
            Ok(())
        } else {
            Err(Error::Config("live merge: a stream starts below its own replay".into()))
        }
    }

    /// Advances stream `i` to its next event (decoding its next ready chunk when
    /// needed) and queues it. Returns false when that event sorts below an event
    /// already released (only possible for a stream's first event).
    fn advance(&mut self, i: usize) -> Result<bool, Error> {
        let s = &mut self.streams[i];
        loop {
            if let Some((off, dec)) = s.dec.as_mut() {
                match dec.next() {
                    Ok(Some(ev)) => {
                        if let Event::Clock(t) = ev {
                            s.clock = s.clock.max(t);
                        }
                        let key = (s.clock, i as u32, s.next_index);
                        s.next_index += 1;
                        s.head = Some(ev);
                        self.heap.push(Reverse(key));
                        return Ok(self.last_released.is_none_or(|l| key > l));
                    }
                    Ok(None) => s.dec = None,
                    Err(e) => {
                        return Err(Error::Trace(memlens_format::Error::Decode {
                            chunk_offset: *off,
                            source: e,
                        }))
                    }
                }
            }
            let Some(c) = s.ready.pop_front() else {
                s.head = None;
                return Ok(true);
            };
            let raw = self.src.payload(&c)?;
            s.chunks_decoded += 1;
            s.dec = Some((c.offset, Decoder::new(raw)));
        }
    }

    /// Feeds the kernel every event that no stream can still precede. Returns
    /// false when a replay is needed.
    fn release(&mut self) -> Result<bool, Error> {
        // give every stream with something to decode a head
        for i in 0..self.streams.len() {
            let s = &self.streams[i];
            if s.head.is_none() && (s.dec.is_some() || !s.ready.is_empty()) && !self.advance(i)? {
                return Ok(false);
            }
        }
        loop {
            let Some(&Reverse(key)) = self.heap.peek() else { return Ok(true) };
            // streams waiting for their next chunk bound what may be released
            let blocked = self.streams.iter().enumerate().any(|(j, s)| {
                s.head.is_none() && !s.done() && key >= (s.clock, j as u32, s.next_index)
            });
            if blocked {
                return Ok(true);
            }
            self.heap.pop();
            let i = key.1 as usize;
            let ev = self.streams[i].head.take().expect("a queued stream has a head");
            self.kernel.process(ThreadId(key.1), &ev);
            self.events += 1;
            self.last_released = Some(key);
            if !self.advance(i)? {
                return Ok(false);
            }
        }
    }

    /// The kernel's result over everything processed so far; the kernel keeps going.
    pub fn snapshot(&self) -> K::Output {
        self.kernel.clone().finish()
    }

    /// The kernel's result (after [`TailState::Complete`]: the whole trace).
    pub fn finish(self) -> K::Output {
        self.kernel.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use crate::{counts::Counts, sharing::Sharing, working_set::WorkingSet};
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    /// Copies a finished trace file into `dst` a few chunks at a time (cutting
    /// chunks in the middle), polling the live driver in between.
    fn follow<K: Kernel + Clone>(
        src: &Path,
        dst: &Path,
        mut live: Live<K>,
        step: usize,
    ) -> (K::Output, u32) {
        let bytes = std::fs::read(src).unwrap();
        let mut f = File::create(dst).unwrap();
        assert_eq!(live.poll().unwrap(), TailState::Waiting);
        // the header as the runtime writes it first: not finished
        let mut h = FileHeader::decode(&bytes[..HEADER_SIZE]).unwrap();
        let finished = h.finished;
        h.finished = false;
        f.write_all(&h.encode()).unwrap();
        let mut at = HEADER_SIZE;
        while at < bytes.len() {
            let end = (at + step).min(bytes.len());
            f.write_all(&bytes[at..end]).unwrap();
            at = end;
            assert_eq!(live.poll().unwrap(), TailState::Growing);
        }
        assert!(finished);
        f.write_all_at(&bytes[..HEADER_SIZE], 0).unwrap();
        assert_eq!(live.poll().unwrap(), TailState::Complete);
        let replays = live.replays();
        (live.finish(), replays)
    }

    #[test]
    fn live_results_equal_offline_ones() {
        let mut streams = Vec::new();
        for t in 0..3u32 {
            let mut evs = Vec::new();
            for i in 0..40_000u64 {
                if i % 1000 == 0 {
                    evs.push(Event::Clock(i / 100 + u64::from(t)));
                }
                evs.push(rd(0x400 + i % 7, 0x10000 + (i * 24 + u64::from(t) * 8) % 4096, 8));
                evs.push(wr(0x500 + i % 3, 0x20000 + (i * 8) % 65536, 4));
            }
            streams.push((t, evs));
        }
        let path = trace_file(&streams);
        let r = memlens_format::TraceReader::open(&path).unwrap();
        let dir = std::env::temp_dir();
        for step in [4096 * 3 + 17, 1 << 20] {
            let dst = dir.join(format!("an-live-{}-{step}.trace", std::process::id()));
            let (live, _) = follow(&path, &dst, Live::chunks(&dst, Counts::default()), step);
            let offline = crate::drive_serial(&r, Counts::default(), |_| {}).unwrap();
            assert_eq!(live.by_pc, offline.by_pc);
            assert_eq!(live.by_thread, offline.by_thread);

            let (live, _) = follow(&path, &dst, Live::chunks(&dst, Sharing::default()), step);
            let offline = crate::drive_serial(&r, Sharing::default(), |_| {}).unwrap();
            assert_eq!(live.by_addr, offline.by_addr);

            let ws = || WorkingSet::new(Default::default()).unwrap();
            let (live, _) = follow(&path, &dst, Live::merged(&dst, ws()), step);
            let offline = crate::drive_merged(&r, ws(), |_| {}).unwrap();
            assert_eq!(format!("{live:?}"), format!("{offline:?}"));
            std::fs::remove_file(&dst).unwrap();
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_late_stream_below_the_released_events_replays() {
        // stream 1's first chunk lands after stream 0 ran ahead in clock terms
        let s0: Vec<Event> = (0..2000u64)
            .flat_map(|i| [Event::Clock(10 + i), rd(0x10, 0x1000 + i * 8, 8)])
            .collect();
        let s1: Vec<Event> = (0..10u64).map(|i| rd(0x20, 0x9000 + i * 8, 8)).collect();
        let path = trace_file(&[(0, s0), (1, s1)]);
        let r = memlens_format::TraceReader::open(&path).unwrap();
        let dst = std::env::temp_dir().join(format!("an-live-late-{}.trace", std::process::id()));
        let ws = || WorkingSet::new(Default::default()).unwrap();
        let (live, replays) = follow(&path, &dst, Live::merged(&dst, ws()), 64);
        let offline = crate::drive_merged(&r, ws(), |_| {}).unwrap();
        assert_eq!(format!("{live:?}"), format!("{offline:?}"));
        // stream 0 is in the file first and its events have clocks > 0; stream 1's are 0
        assert!(replays >= 1, "{replays}");
        std::fs::remove_file(&dst).unwrap();
        std::fs::remove_file(&path).unwrap();
    }
}
