//! Reading traces: a fast header scan, then per-stream event iteration.

use crate::chunk::{
    ChunkCounts, ChunkHeader, ChunkKind, FileHeader, PayloadBuf, CHUNK_HEADER_SIZE, CHUNK_MAGIC,
    FLAG_LAST, HEADER_SIZE, META_STREAM,
};
use crate::codec::{Decoder, EventRuns};
use crate::complete::Completeness;
use crate::event::Event;
use crate::meta::{EndStatus, MetaRecord};
use crate::types::{Module, ThreadId};
use crate::Error;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Where a chunk sits in the file.
#[derive(Clone, Copy, Debug)]
pub struct ChunkIndex {
    /// Offset of the chunk header.
    pub offset: u64,
    /// The header.
    pub header: ChunkHeader,
}

/// Why reading stopped before the end of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    /// Offset of the first byte not used.
    pub offset: u64,
    /// What was found there.
    pub reason: String,
}

/// A chunk the reader left out because it failed its checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// Offset of the chunk (or of the damaged bytes).
    pub offset: u64,
    /// Bytes skipped.
    pub bytes: u64,
    /// The chunk's header when it passed its own checks (the payload did not):
    /// stream and event counts of what was lost. `None` when the header was damaged.
    pub header: Option<ChunkHeader>,
    /// What failed.
    pub reason: String,
}

/// One thread's stream.
#[derive(Clone, Debug, Default)]
pub struct StreamInfo {
    /// The stream's thread.
    pub thread: ThreadId,
    /// Its chunks in sequence order (indices into [`TraceReader::chunks`]).
    pub chunks: Vec<usize>,
    /// Summed chunk counters.
    pub counts: ChunkCounts,
    /// The stream's last chunk was found.
    pub complete: bool,
    /// Sequence numbers are missing (a chunk was lost).
    pub gaps: bool,
}

/// Everything the metadata chunks said.
#[derive(Clone, Debug, Default)]
pub struct TraceMeta {
    /// Traced process id.
    pub pid: u32,
    /// Executable path.
    pub exe: String,
    /// Command line.
    pub argv: Vec<String>,
    /// Modules, by id (the latest record for each id).
    pub modules: Vec<Module>,
    /// Options in force.
    pub options: Vec<(String, String)>,
    /// Runtime drop counters (events, bytes), when written.
    pub dropped: Option<(u64, u64)>,
    /// How the process ended.
    pub end: Option<EndStatus>,
    /// Traces of forked children: (pid, path).
    pub children: Vec<(u32, String)>,
    /// The last memory map written (`/proc/self/maps` text).
    pub maps: Option<String>,
}

/// An open trace.
pub struct TraceReader {
    file: File,
    len: u64,
    header: FileHeader,
    chunks: Vec<ChunkIndex>,
    streams: Vec<StreamInfo>,
    truncation: Option<Truncation>,
    skipped: Vec<Skipped>,
    meta: TraceMeta,
}

impl TraceReader {
    /// Opens a trace and scans its chunk headers (payloads are read on demand).
    pub fn open(path: impl AsRef<Path>) -> Result<TraceReader, Error> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| Error::Io(path.display().to_string(), e))?;
        let len = file.metadata().map_err(|e| Error::Io(path.display().to_string(), e))?.len();
        let mut hb = vec![0u8; HEADER_SIZE];
        let n =
            read_full(&file, &mut hb, 0).map_err(|e| Error::Io(path.display().to_string(), e))?;
        if n < 128 {
            return Err(Error::NotATrace);
        }
        let header = FileHeader::decode(&hb[..n])?;
        let mut r = TraceReader {
            file,
            len,
            header,
            chunks: Vec::new(),
            streams: Vec::new(),
            truncation: None,
            skipped: Vec::new(),
            meta: TraceMeta::default(),
        };
        r.scan().map_err(|e| Error::Io(path.display().to_string(), e))?;
        r.read_meta();
        r.build_streams();
        Ok(r)
    }

    fn scan(&mut self) -> std::io::Result<()> {
        if self.len < HEADER_SIZE as u64 {
            self.truncation =
                Some(Truncation { offset: self.len, reason: "file ends inside the header".into() });
            return Ok(());
        }
        let mut rd = BufReader::with_capacity(1 << 16, self.file.try_clone()?);
        rd.seek(SeekFrom::Start(HEADER_SIZE as u64))?;
        let mut off = HEADER_SIZE as u64;
        let mut hb = [0u8; CHUNK_HEADER_SIZE];
        while off < self.len {
            if self.len - off < CHUNK_HEADER_SIZE as u64 {
                self.truncation = Some(Truncation {
                    offset: off,
                    reason: "file ends inside a chunk header".into(),
                });
                break;
            }
            rd.read_exact(&mut hb)?;
            let h = match ChunkHeader::decode(&hb, off) {
                Ok(h) => h,
                Err(e) => {
                    let reason = short_reason(&e);
                    // A damaged header hides its chunk's length: go on at the next
                    // header that passes its checks, if any.
                    match self.next_header(off + 1)? {
                        Some(next) => {
                            self.skipped.push(Skipped {
                                offset: off,
                                bytes: next - off,
                                header: None,
                                reason,
                            });
                            rd.seek(SeekFrom::Start(next))?;
                            off = next;
                            continue;
                        }
                        None => {
                            self.truncation = Some(Truncation { offset: off, reason });
                            break;
                        }
                    }
                }
            };
            let end = off + CHUNK_HEADER_SIZE as u64 + u64::from(h.payload_len);
            if end > self.len {
                self.truncation = Some(Truncation {
                    offset: off,
                    reason: format!(
                        "file ends inside a chunk ({} of {} payload bytes present)",
                        self.len - off - CHUNK_HEADER_SIZE as u64,
                        h.payload_len
                    ),
                });
                break;
            }
            // Checksum every payload now (no decompression): a damaged chunk is left
            // out of its stream before any command reads it, `info --fast` included.
            if payload_crc(&mut rd, h.payload_len)? == h.payload_crc {
                self.chunks.push(ChunkIndex { offset: off, header: h });
            } else {
                self.skipped.push(Skipped {
                    offset: off,
                    bytes: end - off,
                    header: Some(h),
                    reason: "chunk payload checksum mismatch".into(),
                });
            }
            off = end;
        }
        Ok(())
    }

    /// The offset of the first chunk header at or after `from` that passes its
    /// checks (magic, CRC, lengths).
    fn next_header(&self, from: u64) -> std::io::Result<Option<u64>> {
        const BLOCK: usize = 1 << 20;
        let mut buf = vec![0u8; BLOCK + CHUNK_HEADER_SIZE];
        let mut at = from;
        while at + CHUNK_HEADER_SIZE as u64 <= self.len {
            let n = read_full(&self.file, &mut buf, at)?;
            if n < CHUNK_HEADER_SIZE {
                break;
            }
            for i in 0..=n - CHUNK_HEADER_SIZE {
                if buf[i..i + 4] == CHUNK_MAGIC {
                    let hb: &[u8; CHUNK_HEADER_SIZE] =
                        buf[i..i + CHUNK_HEADER_SIZE].try_into().expect("64 bytes");
                    if ChunkHeader::decode(hb, at + i as u64).is_ok() {
                        return Ok(Some(at + i as u64));
                    }
                }
            }
            // the next block starts where a header could still begin
            at += (n - CHUNK_HEADER_SIZE + 1) as u64;
        }
        Ok(None)
    }

    fn build_streams(&mut self) {
        let mut streams: Vec<StreamInfo> = Vec::new();
        for (i, c) in self.chunks.iter().enumerate() {
            let h = &c.header;
            if h.kind != ChunkKind::Events || h.stream == META_STREAM {
                continue;
            }
            let s = h.stream as usize;
            if s >= streams.len() {
                if s > 1 << 24 {
                    continue;
                }
                streams.resize_with(s + 1, StreamInfo::default);
            }
            let st = &mut streams[s];
            st.chunks.push(i);
            st.counts.add(&h.counts);
            st.complete |= h.flags & FLAG_LAST != 0;
        }
        for (i, st) in streams.iter_mut().enumerate() {
            st.thread = ThreadId(i as u32);
            let chunks = &self.chunks;
            st.chunks.sort_by_key(|&c| chunks[c].header.seq);
            st.gaps = st.chunks.iter().enumerate().any(|(k, &c)| chunks[c].header.seq != k as u32);
        }
        streams.retain(|s| !s.chunks.is_empty());
        self.streams = streams;
    }

    /// Decodes the metadata chunks; one that does not decode is left out (and
    /// reported) like a damaged event chunk.
    fn read_meta(&mut self) {
        let mut meta = TraceMeta::default();
        let mut bad = Vec::new();
        for (i, c) in self.chunks.iter().enumerate() {
            if c.header.kind != ChunkKind::Meta {
                continue;
            }
            let recs = self.read_chunk(c).and_then(|raw| {
                MetaRecord::decode_all(&raw)
                    .ok_or(Error::Corrupt { offset: c.offset, what: "bad metadata record" })
            });
            let recs = match recs {
                Ok(r) => r,
                Err(e) => {
                    bad.push((i, short_reason(&e)));
                    continue;
                }
            };
            for rec in recs {
                match rec {
                    MetaRecord::Process { pid, exe, argv } => {
                        meta.pid = pid;
                        meta.exe = exe;
                        meta.argv = argv;
                    }
                    MetaRecord::Module(m) => match meta.modules.iter_mut().find(|x| x.id == m.id) {
                        Some(x) => *x = m,
                        None => meta.modules.push(m),
                    },
                    MetaRecord::Option(k, v) => meta.options.push((k, v)),
                    MetaRecord::Stats { dropped_events, dropped_bytes } => {
                        meta.dropped = Some((dropped_events, dropped_bytes))
                    }
                    MetaRecord::End(e) => meta.end = Some(e),
                    MetaRecord::Child { pid, path } => meta.children.push((pid, path)),
                    MetaRecord::Maps(m) => meta.maps = Some(m),
                }
            }
        }
        meta.modules.sort_by_key(|m| m.id);
        self.meta = meta;
        for (i, reason) in bad.into_iter().rev() {
            let c = self.chunks.remove(i);
            let bytes = CHUNK_HEADER_SIZE as u64 + u64::from(c.header.payload_len);
            self.skipped.push(Skipped { offset: c.offset, bytes, header: Some(c.header), reason });
        }
        self.skipped.sort_by_key(|s| s.offset);
    }

    /// The file header.
    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    /// Every complete chunk in file order.
    pub fn chunks(&self) -> &[ChunkIndex] {
        &self.chunks
    }

    /// Thread streams, by thread id.
    pub fn streams(&self) -> &[StreamInfo] {
        &self.streams
    }

    /// Where and why reading stopped early, if it did.
    pub fn truncation(&self) -> Option<&Truncation> {
        self.truncation.as_ref()
    }

    /// Damaged chunks left out, in file order (their events are in no stream).
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    /// Whether the trace holds every event the program produced, and if not why:
    /// what every command reports (see [`Completeness`]).
    pub fn completeness(&self) -> Completeness {
        Completeness::of(self)
    }

    /// Decoded metadata.
    pub fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    /// Size of the file.
    pub fn bytes_on_disk(&self) -> u64 {
        self.len
    }

    /// Sum of every event chunk's counters.
    pub fn totals(&self) -> ChunkCounts {
        let mut t = ChunkCounts::default();
        for s in &self.streams {
            t.add(&s.counts);
        }
        t
    }

    /// Events dropped: the larger of what the header and the metadata say.
    pub fn dropped_events(&self) -> u64 {
        self.header.dropped_events.max(self.meta.dropped.map_or(0, |d| d.0))
    }

    /// The chunk behind a [`StreamChunk`].
    fn chunk_of(&self, c: &StreamChunk) -> Result<&ChunkIndex, Error> {
        self.chunks.get(c.chunk).ok_or(Error::Corrupt { offset: 0, what: "no such chunk" })
    }

    /// Reads, verifies and decompresses one chunk's payload.
    pub fn read_chunk(&self, c: &ChunkIndex) -> Result<Vec<u8>, Error> {
        let mut b = PayloadBuf::new();
        self.read_chunk_into(c, &mut b)?;
        Ok(b.raw)
    }

    /// Like [`TraceReader::read_chunk`], into reusable buffers (see [`PayloadBuf::raw`]).
    pub fn read_chunk_into(&self, c: &ChunkIndex, b: &mut PayloadBuf) -> Result<(), Error> {
        self.read_payload(c, b)?;
        b.decode(&c.header, c.offset)
    }

    /// Like [`TraceReader::read_chunk_into`], but an event chunk's op stream only
    /// (enough for [`crate::codec::Decoder::scan_counts`]).
    pub fn read_chunk_ops_into(&self, c: &ChunkIndex, b: &mut PayloadBuf) -> Result<(), Error> {
        self.read_payload(c, b)?;
        b.decode_ops(&c.header, c.offset)
    }

    fn read_payload(&self, c: &ChunkIndex, b: &mut PayloadBuf) -> Result<(), Error> {
        let len = c.header.payload_len as usize;
        b.payload.clear();
        b.payload.resize(len, 0);
        let at = c.offset + CHUNK_HEADER_SIZE as u64;
        let n =
            read_full(&self.file, &mut b.payload, at).map_err(|e| Error::Io("trace".into(), e))?;
        if n != len {
            return Err(Error::Corrupt { offset: c.offset, what: "chunk payload cut short" });
        }
        Ok(())
    }

    /// Every event chunk of every stream, stream by stream in sequence order: the
    /// units of work for decoding in parallel (chunks decode independently).
    pub fn stream_chunks(&self) -> Vec<StreamChunk> {
        let mut out = Vec::new();
        for s in &self.streams {
            let mut base = 0u64;
            for &c in &s.chunks {
                out.push(StreamChunk { thread: s.thread, chunk: c, first_index: base });
                base += u64::from(self.chunks[c].header.counts.events);
            }
        }
        out
    }

    /// Iterates over one thread's events in order, across its chunks.
    pub fn events(&self, thread: ThreadId) -> StreamEvents<'_> {
        self.events_where(thread, |_| true)
    }

    /// Like [`TraceReader::events`], but only from the chunks `keep` accepts (judged
    /// by their headers, e.g. skip chunks without allocations).
    /// [`StreamEvents::index`] still counts every event of the stream.
    pub fn events_where(
        &self,
        thread: ThreadId,
        keep: impl Fn(&ChunkHeader) -> bool,
    ) -> StreamEvents<'_> {
        self.events_of(thread, |_, h| keep(h))
    }

    /// Like [`TraceReader::events`], from the thread's chunk number `from` (its
    /// position among the stream's chunks) on; [`StreamEvents::index`] still counts
    /// every event of the stream.
    pub fn events_from(&self, thread: ThreadId, from: usize) -> StreamEvents<'_> {
        self.events_of(thread, |k, _| k >= from)
    }

    fn events_of(
        &self,
        thread: ThreadId,
        keep: impl Fn(usize, &ChunkHeader) -> bool,
    ) -> StreamEvents<'_> {
        let mut chunks = Vec::new();
        let mut base = 0u64;
        if let Some(s) = self.streams.iter().find(|s| s.thread == thread) {
            for (k, &c) in s.chunks.iter().enumerate() {
                let h = &self.chunks[c].header;
                if keep(k, h) {
                    chunks.push((c, base));
                }
                base += u64::from(h.counts.events);
            }
        }
        StreamEvents {
            reader: self,
            chunks,
            next: 0,
            dec: None,
            buf: PayloadBuf::new(),
            done: false,
            index: 0,
            pending: None,
        }
    }
}

/// What failed, without the offset (said next to it already).
fn short_reason(e: &Error) -> String {
    match e {
        Error::Corrupt { what, .. } => what.to_string(),
        e => e.to_string(),
    }
}

/// CRC-32 of the next `len` bytes of `rd`, read in pieces (no payload-sized buffer).
fn payload_crc(rd: &mut impl Read, len: u32) -> std::io::Result<u32> {
    let mut h = crc32fast::Hasher::new();
    let mut buf = [0u8; 1 << 14];
    let mut left = len as usize;
    while left > 0 {
        let n = left.min(buf.len());
        rd.read_exact(&mut buf[..n])?;
        h.update(&buf[..n]);
        left -= n;
    }
    Ok(h.finalize())
}

/// Reads from `at` until `buf` is full or the file ends; returns the bytes read
/// (a file still being written may end short).
pub fn read_full(f: &File, buf: &mut [u8], mut at: u64) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        let n = f.read_at(&mut buf[got..], at)?;
        if n == 0 {
            break;
        }
        got += n;
        at += n as u64;
    }
    Ok(got)
}

/// One chunk of one thread's stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamChunk {
    /// The stream's thread.
    pub thread: ThreadId,
    /// Index into [`TraceReader::chunks`].
    pub chunk: usize,
    /// Index in the stream of the chunk's first event.
    pub first_index: u64,
}

/// Events decoded per batch: small enough to stay in the L1/L2 cache.
pub const BATCH: usize = 1024;

/// Events per batch of [`ChunkDecoder::for_columns`]: its columns (about 33
/// bytes an event) stay in the L2 cache.
pub const COLUMN_BATCH: usize = 4096;

/// Decodes chunks into batches of events, reusing its buffers from one chunk to
/// the next; one per decoding thread.
#[derive(Default)]
pub struct ChunkDecoder {
    buf: PayloadBuf,
    batch: Vec<Event>,
    tally: crate::codec::AccessTally,
    cols: crate::codec::Columns,
    /// Folds the loops of chunks the writer left unfolded, when runs are kept.
    folder: crate::codec::Folder,
    refolded: Vec<u8>,
    /// `refolded` holds the last chunk read ([`ChunkDecoder::take_refolded`]).
    has_refolded: bool,
}

impl ChunkDecoder {
    /// Empty buffers.
    pub fn new() -> ChunkDecoder {
        ChunkDecoder::default()
    }

    /// Reads, verifies and decodes one chunk, calling `f` with its events in stream
    /// order, in batches of at most [`BATCH`]. A corrupt chunk is an error after the
    /// events before the damage were handed to `f`.
    pub fn decode(
        &mut self,
        r: &TraceReader,
        c: &StreamChunk,
        mut f: impl FnMut(&[Event]),
    ) -> Result<(), Error> {
        let ci = r.chunk_of(c)?;
        r.read_chunk_into(ci, &mut self.buf)?;
        let mut dec = Decoder::new(&self.buf.raw[..]);
        loop {
            match dec.next_batch(&mut self.batch, BATCH) {
                Ok(0) => return Ok(()),
                Ok(_) => f(&self.batch),
                Err(e) => {
                    if !self.batch.is_empty() {
                        f(&self.batch);
                    }
                    self.batch.clear();
                    return Err(Error::Decode { chunk_offset: ci.offset, source: e });
                }
            }
        }
    }

    /// Reads, verifies and decodes one whole chunk into `out` (appended; see
    /// [`crate::codec::Columns`]), its events numbered by their index in the
    /// stream. Returns how many events were appended. A corrupt chunk is an
    /// error, with the events before the damage in `out`.
    pub fn decode_columns(
        &mut self,
        r: &TraceReader,
        c: &StreamChunk,
        out: &mut crate::codec::Columns,
    ) -> Result<usize, Error> {
        let ci = r.chunk_of(c)?;
        r.read_chunk_into(ci, &mut self.buf)?;
        let mut dec = Decoder::new(&self.buf.raw[..]);
        dec.set_seq(c.first_index);
        // the whole chunk at once: growing the columns batch by batch copied
        // them over and over (a tenth of a Parquet export)
        let events = r.chunks().get(c.chunk).map_or(0, |h| h.header.counts.events as usize);
        out.reserve(events.min(1 << 26));
        let mut n = 0;
        loop {
            // within what was reserved (a batch asks for room of its own)
            let room = out.seq.capacity() - out.seq.len();
            let max = if room >= 1024 { room.min(1 << 16) } else { 1 << 16 };
            match dec.decode_columns(out, max) {
                Ok(0) => return Ok(n),
                Ok(k) => n += k,
                Err(e) => return Err(Error::Decode { chunk_offset: ci.offset, source: e }),
            }
        }
    }

    /// Whether [`ChunkDecoder::for_columns`] leaves loops' repeats as runs
    /// ([`crate::codec::Columns::keep_runs`]; default off).
    pub fn keep_runs(&mut self, on: bool) {
        self.cols.keep_runs = on;
    }

    /// Like [`ChunkDecoder::decode_columns`], but in batches of at most
    /// [`COLUMN_BATCH`] events handed to `f` (the same [`crate::codec::Columns`],
    /// cleared between batches, so it stays in the cache). A corrupt chunk is an
    /// error after the events before the damage were handed to `f`.
    pub fn for_columns(
        &mut self,
        r: &TraceReader,
        c: &StreamChunk,
        f: impl FnMut(&crate::codec::Columns),
    ) -> Result<(), Error> {
        self.for_columns_of(r, c, None, f)
    }

    /// [`ChunkDecoder::for_columns`] of the chunk as [`ChunkDecoder::take_refolded`]
    /// gave it (`refolded`), when given: the chunk is not read again.
    pub fn for_columns_of(
        &mut self,
        r: &TraceReader,
        c: &StreamChunk,
        refolded: Option<&[u8]>,
        mut f: impl FnMut(&crate::codec::Columns),
    ) -> Result<(), Error> {
        let ci = r.chunk_of(c)?;
        let raw = match refolded {
            Some(raw) => raw,
            None => {
                r.read_chunk_into(ci, &mut self.buf)?;
                match self.cols.keep_runs && self.refold(&ci.header) {
                    true => &self.refolded[..],
                    false => &self.buf.raw[..],
                }
            }
        };
        let mut dec = Decoder::new(raw);
        dec.set_seq(c.first_index);
        loop {
            self.cols.clear();
            let res = dec.decode_columns(&mut self.cols, COLUMN_BATCH);
            if !self.cols.is_empty() {
                f(&self.cols);
            }
            match res {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(Error::Decode { chunk_offset: ci.offset, source: e }),
            }
        }
    }

    /// Folds the loops of the chunk in `self.buf` into `self.refolded` when the
    /// writer left them unfolded (it does when it falls behind: mt's four threads
    /// on two cores left half their chunks as rows). A folded chunk holds far fewer
    /// bytes than events; one byte an event or more is worth a look, and the
    /// folder's per-stream pace stops looking at chunks that do not fold. The
    /// events are the same either way (the writer's own fold).
    fn refold(&mut self, h: &crate::chunk::ChunkHeader) -> bool {
        self.has_refolded = false;
        let raw = &self.buf.raw[..];
        if (raw.len() as u64) < u64::from(h.counts.events).max(1 << 12) {
            return false;
        }
        let mut at = 0;
        let Some(n) = crate::varint::get(raw, &mut at) else { return false };
        let Some(mid) = usize::try_from(n).ok().and_then(|n| at.checked_add(n)) else {
            return false;
        };
        if mid > raw.len() {
            return false;
        }
        self.folder.set_stream(h.stream);
        let Some(f) = self.folder.fold_region(raw, at..mid, mid..raw.len()) else {
            return false;
        };
        if f.len() * 2 > raw.len() {
            return false;
        }
        self.refolded.clear();
        crate::codec::join(&f.ops, &f.side, &mut self.refolded);
        self.has_refolded = true;
        true
    }

    /// The chunk [`ChunkDecoder::skeleton`] walked last, when it folded its loops
    /// first: a second pass can decode it from these bytes
    /// ([`ChunkDecoder::for_columns_of`]) instead of reading and folding it again.
    pub fn take_refolded(&mut self) -> Option<Vec<u8>> {
        std::mem::take(&mut self.has_refolded).then(|| std::mem::take(&mut self.refolded))
    }

    /// Reads, verifies and walks one chunk for its non-access events (see
    /// [`Decoder::skeleton`]); `f` gets each with its number in the chunk. Returns
    /// the number of events.
    pub fn skeleton(
        &mut self,
        r: &TraceReader,
        c: &StreamChunk,
        f: impl FnMut(u64, Event),
    ) -> Result<u64, Error> {
        let ci = r.chunk_of(c)?;
        r.read_chunk_into(ci, &mut self.buf)?;
        // folding first and stepping over the repeats takes half the time of
        // stepping over every access of a loop the writer left unfolded
        let raw = match self.refold(&ci.header) {
            true => &self.refolded[..],
            false => &self.buf.raw[..],
        };
        Decoder::new(raw)
            .skeleton(f)
            .map_err(|e| Error::Decode { chunk_offset: ci.offset, source: e })
    }

    /// Reads and verifies one chunk and scans it for the counts kernels (see
    /// [`Decoder::scan_counts`]): no addresses, no [`Event`]s; `f` gets each distinct
    /// plain access once with its count. Returns the number of events. A corrupt chunk is an error after the events before the damage were
    /// handed to `f`.
    pub fn scan_counts(
        &mut self,
        r: &TraceReader,
        c: &StreamChunk,
        f: impl FnMut(crate::codec::Counted, u64),
    ) -> Result<u64, Error> {
        let ci = r.chunk_of(c)?;
        r.read_chunk_ops_into(ci, &mut self.buf)?;
        let mut dec = Decoder::new(&self.buf.raw[..]);
        dec.scan_counts(&mut self.tally, f)
            .map_err(|e| Error::Decode { chunk_offset: ci.offset, source: e })
    }
}

/// Events of one stream; yields an error (then stops) on a corrupt chunk.
pub struct StreamEvents<'r> {
    reader: &'r TraceReader,
    chunks: Vec<(usize, u64)>,
    next: usize,
    dec: Option<(u64, Decoder<Vec<u8>>)>,
    buf: PayloadBuf,
    done: bool,
    index: u64,
    /// An error found by `next_batch` after events it returned first.
    pending: Option<Error>,
}

impl StreamEvents<'_> {
    /// Index in the stream of the event returned last (0 before the first).
    pub fn index(&self) -> u64 {
        self.index.saturating_sub(1)
    }

    /// The next events, up to `max`, into `out` (cleared first; from one chunk, so
    /// usually fewer at a chunk's end): 0 at the end of the stream. Faster than
    /// [`Iterator::next`] per event (no event is copied). On an error the events
    /// before it are in `out`, and the next call returns the error.
    pub fn next_batch(&mut self, out: &mut Vec<Event>, max: usize) -> Result<usize, Error> {
        self.batch(out, None, max)
    }

    /// [`StreamEvents::next_batch`] with loops' replays left folded in `runs`
    /// ([`Decoder::next_batch_runs`]): the events of the batch are those in `out`
    /// with each run's after its row.
    pub fn next_batch_runs(
        &mut self,
        out: &mut Vec<Event>,
        runs: &mut EventRuns,
        max: usize,
    ) -> Result<usize, Error> {
        runs.clear();
        self.batch(out, Some(runs), max)
    }

    fn batch(
        &mut self,
        out: &mut Vec<Event>,
        mut runs: Option<&mut EventRuns>,
        max: usize,
    ) -> Result<usize, Error> {
        out.clear();
        loop {
            if self.done {
                return self.pending.take().map_or(Ok(0), Err);
            }
            if let Some((off, dec)) = self.dec.as_mut() {
                let got = match runs.as_deref_mut() {
                    Some(r) => dec.next_batch_runs(out, r, max),
                    None => dec.next_batch(out, max),
                };
                let folded = runs.as_deref().map_or(0, EventRuns::events);
                match got {
                    Ok(0) => {
                        if let Some((_, d)) = self.dec.take() {
                            self.buf.raw = d.into_inner();
                        }
                    }
                    Ok(n) => {
                        self.index += n as u64 + folded;
                        return Ok(n);
                    }
                    Err(e) => {
                        self.done = true;
                        let err = Error::Decode { chunk_offset: *off, source: e };
                        if out.is_empty() {
                            return Err(err);
                        }
                        // hand these over first; the error comes with the next call
                        self.index += out.len() as u64 + folded;
                        self.pending = Some(err);
                        return Ok(out.len());
                    }
                }
            }
            if !self.open_next()? {
                return Ok(0);
            }
        }
    }

    /// Reads the next chunk into the decoder; false (and done) after the last. An
    /// unreadable chunk ends the stream with its error.
    fn open_next(&mut self) -> Result<bool, Error> {
        let Some(&(ci, base)) = self.chunks.get(self.next) else {
            self.done = true;
            return Ok(false);
        };
        self.next += 1;
        self.index = base;
        let c = &self.reader.chunks[ci];
        if let Err(e) = self.reader.read_chunk_into(c, &mut self.buf) {
            self.done = true;
            return Err(e);
        }
        let raw = std::mem::take(&mut self.buf.raw);
        self.dec = Some((c.offset, Decoder::new(raw)));
        Ok(true)
    }
}

impl Iterator for StreamEvents<'_> {
    type Item = Result<Event, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.done {
                return None;
            }
            if let Some((off, dec)) = self.dec.as_mut() {
                match Decoder::next(dec) {
                    Ok(Some(e)) => {
                        self.index += 1;
                        return Some(Ok(e));
                    }
                    Err(e) => {
                        self.done = true;
                        return Some(Err(Error::Decode { chunk_offset: *off, source: e }));
                    }
                    Ok(None) => {
                        // keep the decompression buffer for the next chunk
                        if let Some((_, d)) = self.dec.take() {
                            self.buf.raw = d.into_inner();
                        }
                    }
                }
            }
            match self.open_next() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}
