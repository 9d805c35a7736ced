//! File header and chunk framing.
//!
//! ```text
//! file   := header(4096 bytes) chunk*
//! chunk  := chunk-header(64 bytes) payload(payload_len bytes)
//! ```
//! All integers little-endian. A chunk is self-contained: its header says which
//! stream it belongs to, its sequence number in that stream, how it is compressed,
//! how long it is, and carries CRC-32s of itself and of its payload, so a reader can
//! skip, verify and decode it alone and stop cleanly at a torn tail.
//!
//! An event chunk's payload keeps its two streams apart (see [`crate::codec`]):
//! `varint(op length) ++ frame(ops) ++ frame(side)`, each frame zstd-compressed
//! (or, uncompressed, the bytes themselves); the header's `split` is where the
//! side frame starts, so a reader that needs no addresses decompresses the ops
//! alone. Decompressed, that is the layout [`crate::codec::Decoder`] reads.

use crate::Error;

/// First eight bytes of every trace.
pub const FILE_MAGIC: [u8; 8] = *b"MEMLENS\0";
/// Current format version.
pub const VERSION: u32 = 3;
/// The oldest version this reader reads (version 3 added `repeat`, see `codec/fold.rs`).
pub const OLDEST_VERSION: u32 = 2;
/// Bytes reserved for the file header; chunks start here.
pub const HEADER_SIZE: usize = 4096;
/// First four bytes of every chunk.
pub const CHUNK_MAGIC: [u8; 4] = *b"MLCK";
/// Size of a chunk header.
pub const CHUNK_HEADER_SIZE: usize = 64;
/// Upper bound on a chunk's decompressed size, so corrupt lengths cannot make a
/// reader allocate gigabytes.
pub const MAX_CHUNK_RAW: u32 = 1 << 29;
/// The stream number of metadata chunks.
pub const META_STREAM: u32 = u32::MAX;

/// What a chunk carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ChunkKind {
    /// Events of one thread.
    Events = 1,
    /// Metadata records ([`crate::meta`]).
    Meta = 2,
}

/// How a chunk's payload is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Codec {
    /// Stored as is.
    None = 0,
    /// zstd frame.
    Zstd = 1,
}

/// Per-chunk counters, so `memlens info` can sum a trace without decoding it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkCounts {
    /// Events in the chunk.
    pub events: u32,
    /// Loads (an RMW counts once here and once in stores).
    pub loads: u32,
    /// Stores.
    pub stores: u32,
    /// Allocations (realloc counts as one).
    pub allocs: u32,
    /// Frees (realloc counts as one).
    pub frees: u32,
}

impl ChunkCounts {
    /// Adds another chunk's counts (saturating: damaged or crafted headers must
    /// not overflow a sum).
    pub fn add(&mut self, o: &ChunkCounts) {
        self.events = self.events.saturating_add(o.events);
        self.loads = self.loads.saturating_add(o.loads);
        self.stores = self.stores.saturating_add(o.stores);
        self.allocs = self.allocs.saturating_add(o.allocs);
        self.frees = self.frees.saturating_add(o.frees);
    }
}

/// A decoded chunk header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Events or metadata.
    pub kind: ChunkKind,
    /// Payload compression.
    pub codec: Codec,
    /// Bit 0: last chunk of its stream.
    pub flags: u16,
    /// Thread stream, or [`META_STREAM`].
    pub stream: u32,
    /// Sequence number within the stream, from 0.
    pub seq: u32,
    /// Decompressed payload length.
    pub raw_len: u32,
    /// Stored payload length.
    pub payload_len: u32,
    /// Event chunks: where in the stored payload the side stream's frame starts
    /// (0 in metadata chunks).
    pub split: u32,
    /// Counters of the events inside.
    pub counts: ChunkCounts,
    /// Ordering clock of the first event (0: none).
    pub first_clock: u64,
    /// CRC-32 of the stored payload.
    pub payload_crc: u32,
}

/// Flag: no more chunks follow in this stream.
pub const FLAG_LAST: u16 = 1;

impl ChunkHeader {
    /// The header of an event chunk before framing: stream, sequence number, flags,
    /// event counts and the clock at its start (lengths, codec and CRC are filled in
    /// by [`ChunkEncoder::encode_events`] or [`crate::stored_event_frame`]).
    pub fn events(
        stream: u32,
        seq: u32,
        flags: u16,
        counts: ChunkCounts,
        first_clock: u64,
    ) -> Self {
        ChunkHeader {
            kind: ChunkKind::Events,
            codec: Codec::None,
            flags,
            stream,
            seq,
            raw_len: 0,
            payload_len: 0,
            split: 0,
            counts,
            first_clock,
            payload_crc: 0,
        }
    }

    /// Serialises the header (computing its own CRC).
    pub fn encode(&self) -> [u8; CHUNK_HEADER_SIZE] {
        let mut b = [0u8; CHUNK_HEADER_SIZE];
        b[0..4].copy_from_slice(&CHUNK_MAGIC);
        b[4] = self.kind as u8;
        b[5] = self.codec as u8;
        b[6..8].copy_from_slice(&self.flags.to_le_bytes());
        let words = [
            self.stream,
            self.seq,
            self.raw_len,
            self.payload_len,
            self.counts.events,
            self.counts.loads,
            self.counts.stores,
            self.counts.allocs,
            self.counts.frees,
            self.split,
        ];
        for (i, w) in words.iter().enumerate() {
            b[8 + 4 * i..12 + 4 * i].copy_from_slice(&w.to_le_bytes());
        }
        b[48..56].copy_from_slice(&self.first_clock.to_le_bytes());
        b[56..60].copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = crc32fast::hash(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses and verifies a header; `offset` is only used in errors.
    pub fn decode(b: &[u8; CHUNK_HEADER_SIZE], offset: u64) -> Result<ChunkHeader, Error> {
        if b[0..4] != CHUNK_MAGIC {
            return Err(Error::Corrupt { offset, what: "chunk magic missing" });
        }
        if crc32fast::hash(&b[..60]) != u32_at(b, 60) {
            return Err(Error::Corrupt { offset, what: "chunk header checksum mismatch" });
        }
        let kind = match b[4] {
            1 => ChunkKind::Events,
            2 => ChunkKind::Meta,
            _ => return Err(Error::Corrupt { offset, what: "unknown chunk kind" }),
        };
        let codec = match b[5] {
            0 => Codec::None,
            1 => Codec::Zstd,
            _ => return Err(Error::Corrupt { offset, what: "unknown chunk codec" }),
        };
        let w = |i: usize| u32_at(b, 8 + 4 * i);
        let h = ChunkHeader {
            kind,
            codec,
            flags: u16::from_le_bytes([b[6], b[7]]),
            stream: w(0),
            seq: w(1),
            raw_len: w(2),
            payload_len: w(3),
            counts: ChunkCounts {
                events: w(4),
                loads: w(5),
                stores: w(6),
                allocs: w(7),
                frees: w(8),
            },
            split: w(9),
            first_clock: u64::from_le_bytes(b[48..56].try_into().unwrap()),
            payload_crc: u32_at(b, 56),
        };
        if h.raw_len > MAX_CHUNK_RAW || h.payload_len > MAX_CHUNK_RAW {
            return Err(Error::Corrupt { offset, what: "chunk length out of range" });
        }
        if h.split > h.payload_len {
            return Err(Error::Corrupt { offset, what: "chunk stream split out of range" });
        }
        Ok(h)
    }
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().unwrap())
}

/// The fixed-size file header. The runtime rewrites its stats in place when the
/// process ends, which needs no new disk space even when the disk is full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileHeader {
    /// Format version.
    pub version: u32,
    /// Recording process id.
    pub pid: u32,
    /// Wall-clock start, ns since the Unix epoch.
    pub start_ns: u64,
    /// The final stats were written (the process ended through a path memlens saw).
    pub finished: bool,
    /// How it ended: [`crate::meta::EndStatus`] code.
    pub end_kind: u32,
    /// Exit code or signal number.
    pub end_value: i32,
    /// Events the runtime could not record or write.
    pub dropped_events: u64,
    /// Bytes of chunks that could not be written.
    pub dropped_bytes: u64,
    /// Chunks written.
    pub chunks: u64,
    /// Thread streams started.
    pub threads: u32,
}

impl FileHeader {
    /// Serialises into the 4096-byte header block.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_SIZE];
        b[0..8].copy_from_slice(&FILE_MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
        b[16..20].copy_from_slice(&self.pid.to_le_bytes());
        b[24..32].copy_from_slice(&self.start_ns.to_le_bytes());
        b[32..36].copy_from_slice(&u32::from(self.finished).to_le_bytes());
        b[36..40].copy_from_slice(&self.end_kind.to_le_bytes());
        b[40..44].copy_from_slice(&self.end_value.to_le_bytes());
        b[44..48].copy_from_slice(&self.threads.to_le_bytes());
        b[48..56].copy_from_slice(&self.dropped_events.to_le_bytes());
        b[56..64].copy_from_slice(&self.dropped_bytes.to_le_bytes());
        b[64..72].copy_from_slice(&self.chunks.to_le_bytes());
        let crc = crc32fast::hash(&b[..124]);
        b[124..128].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses the header block.
    pub fn decode(b: &[u8]) -> Result<FileHeader, Error> {
        if b.len() < 128 || b[0..8] != FILE_MAGIC {
            return Err(Error::NotATrace);
        }
        let version = u32_at(b, 8);
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(Error::Version(version));
        }
        if crc32fast::hash(&b[..124]) != u32_at(b, 124) {
            return Err(Error::Corrupt { offset: 0, what: "file header checksum mismatch" });
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        Ok(FileHeader {
            version,
            pid: u32_at(b, 16),
            start_ns: u64_at(24),
            finished: u32_at(b, 32) != 0,
            end_kind: u32_at(b, 36),
            end_value: u32_at(b, 40) as i32,
            threads: u32_at(b, 44),
            dropped_events: u64_at(48),
            dropped_bytes: u64_at(56),
            chunks: u64_at(64),
        })
    }
}

/// An event chunk's two streams for [`ChunkEncoder::encode_event_parts`].
#[derive(Clone)]
pub enum EventParts<'a> {
    /// Two slices.
    Streams {
        /// The op stream.
        ops: &'a [u8],
        /// The side stream.
        side: &'a [u8],
    },
    /// Both in one buffer (a thread's buffer: the op stream, a gap, the side
    /// stream), so loop folding need not copy them together.
    Region {
        /// The buffer.
        buf: &'a [u8],
        /// Where the op stream is in it.
        ops: std::ops::Range<usize>,
        /// Where the side stream is in it (after the op stream).
        side: std::ops::Range<usize>,
    },
}

impl<'a> EventParts<'a> {
    fn streams(&self) -> (&'a [u8], &'a [u8]) {
        match self {
            EventParts::Streams { ops, side } => (ops, side),
            EventParts::Region { buf, ops, side } => (&buf[ops.clone()], &buf[side.clone()]),
        }
    }
}

/// Compresses payloads and frames chunks; one per writer thread (keeps its zstd
/// context between chunks).
pub struct ChunkEncoder {
    level: i32,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    folder: Option<Box<crate::codec::Folder>>,
    fold: bool,
    /// The other candidate when a fold's compressed size is checked.
    alt: Vec<u8>,
}

impl ChunkEncoder {
    /// `level` 0 stores chunks uncompressed; 1..=19 are zstd levels, negative ones
    /// zstd's fast levels (faster, larger; the same codec to a reader).
    pub fn new(level: i32) -> ChunkEncoder {
        let zstd = if level != 0 { zstd::bulk::Compressor::new(level).ok() } else { None };
        ChunkEncoder { level, zstd, folder: None, fold: true, alt: Vec::new() }
    }

    /// Whether event chunks are folded ([`ChunkEncoder::encode_events`]; on by default).
    pub fn with_fold(mut self, on: bool) -> ChunkEncoder {
        self.fold = on;
        self
    }

    /// The zstd level in force.
    pub fn level(&self) -> i32 {
        self.level
    }

    /// Changes the zstd level for the following chunks (a writer that falls behind
    /// switches to a fast level). 0 stores chunks uncompressed.
    pub fn set_level(&mut self, level: i32) {
        if level == self.level {
            return;
        }
        if level != 0 {
            let ok = match self.zstd.as_mut() {
                Some(z) => z.set_compression_level(level).is_ok(),
                None => match zstd::bulk::Compressor::new(level) {
                    Ok(z) => {
                        self.zstd = Some(z);
                        true
                    }
                    Err(_) => false,
                },
            };
            if !ok {
                return;
            }
        }
        self.level = level;
    }

    /// Frames `raw` as one chunk into `out` (cleared first): header then payload.
    /// Event chunks are framed by [`ChunkEncoder::encode_events`].
    #[allow(clippy::too_many_arguments)]
    pub fn encode(
        &mut self,
        kind: ChunkKind,
        stream: u32,
        seq: u32,
        flags: u16,
        counts: ChunkCounts,
        first_clock: u64,
        raw: &[u8],
        out: &mut Vec<u8>,
    ) {
        out.clear();
        out.resize(CHUNK_HEADER_SIZE, 0);
        let mut codec = Codec::None;
        if let (Some(z), true) = (self.zstd.as_mut(), self.level != 0) {
            let bound = zstd::zstd_safe::compress_bound(raw.len());
            out.reserve(bound);
            let start = out.len();
            out.resize(start + bound, 0);
            match z.compress_to_buffer(raw, &mut out[start..]) {
                Ok(n) if n < raw.len() => {
                    out.truncate(start + n);
                    codec = Codec::Zstd;
                }
                _ => out.truncate(start),
            }
        }
        if codec == Codec::None {
            out.extend_from_slice(raw);
        }
        let head = ChunkHeader {
            kind,
            codec,
            flags,
            stream,
            seq,
            counts,
            first_clock,
            split: 0,
            raw_len: raw.len() as u32,
            payload_len: 0,
            payload_crc: 0,
        };
        seal(out, head);
    }

    /// Frames one event chunk made of an op and a side stream into `out` (cleared
    /// first) under `head` ([`ChunkHeader::events`]; its lengths, codec and CRC are
    /// filled in): header, then `varint(ops.len())`, the ops' frame and the side's.
    /// At zstd's positive levels repeated loop iterations are folded first
    /// ([`crate::codec::Folder`]); the fast levels a writer that falls behind
    /// switches to skip that.
    pub fn encode_events(&mut self, head: ChunkHeader, ops: &[u8], side: &[u8], out: &mut Vec<u8>) {
        self.encode_event_parts(head, EventParts::Streams { ops, side }, out);
    }

    /// [`ChunkEncoder::encode_events`] of the streams as [`EventParts`] gives them.
    pub fn encode_event_parts(
        &mut self,
        head: ChunkHeader,
        parts: EventParts<'_>,
        out: &mut Vec<u8>,
    ) {
        let fold = self.fold && self.level > 0;
        let mut folder = if fold { self.folder.take() } else { None };
        if fold && folder.is_none() {
            folder = Some(Box::default());
        }
        let (ops, side) = parts.streams();
        if let Some(f) = folder.as_mut() {
            f.set_stream(head.stream);
        }
        let folded = folder.as_mut().and_then(|f| match parts {
            EventParts::Region { buf, ops, side } => f.fold_region(buf, ops, side),
            EventParts::Streams { ops, side } => f.fold(ops, side),
        });
        // a fold must remove half the raw bytes and, checked on a
        // sample of chunks, must compress to nine tenths of the original at most:
        // zstd's long matches often do as well (bzip2, sort), and there the fold
        // only costs the writer time (sort: 3x) that makes it fall behind
        let folded = folded.filter(|f| f.len() * 2 <= ops.len() + side.len());
        match folded {
            None => self.frame_events(head, ops, side, out),
            Some(f) => {
                self.frame_events(head, &f.ops, &f.side, out);
                let check = self.zstd.is_some() && folder.as_mut().is_some_and(|f| f.check_due());
                if check {
                    let mut alt = std::mem::take(&mut self.alt);
                    self.frame_events(head, ops, side, &mut alt);
                    let fold_won = out.len() * 10 <= alt.len() * 9;
                    if !fold_won {
                        std::mem::swap(out, &mut alt);
                    }
                    self.alt = alt;
                    if let Some(f) = folder.as_mut() {
                        f.checked(fold_won);
                    }
                }
            }
        }
        if folder.is_some() {
            self.folder = folder;
        }
    }

    /// Frames `ops` and `side` (see [`ChunkEncoder::encode_events`]) under `head`,
    /// whose sizes, codec and CRC it fills in.
    fn frame_events(&mut self, mut head: ChunkHeader, ops: &[u8], side: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.resize(CHUNK_HEADER_SIZE, 0);
        crate::varint::push(out, ops.len() as u64);
        let start = out.len();
        let raw_len = start - CHUNK_HEADER_SIZE + ops.len() + side.len();
        let mut codec = Codec::None;
        let mut split = 0;
        if let (Some(z), true) = (self.zstd.as_mut(), self.level != 0) {
            let bound = zstd::zstd_safe::compress_bound(ops.len())
                + zstd::zstd_safe::compress_bound(side.len());
            out.resize(start + bound, 0);
            let mut at = start;
            let mut ok = true;
            for (i, part) in [ops, side].into_iter().enumerate() {
                match z.compress_to_buffer(part, &mut out[at..]) {
                    Ok(n) => at += n,
                    Err(_) => ok = false,
                }
                if i == 0 {
                    split = at;
                }
            }
            if ok && at - CHUNK_HEADER_SIZE < raw_len {
                out.truncate(at);
                codec = Codec::Zstd;
            } else {
                out.truncate(start);
            }
        }
        if codec == Codec::None {
            out.extend_from_slice(ops);
            split = out.len();
            out.extend_from_slice(side);
        }
        head.codec = codec;
        head.raw_len = raw_len as u32;
        head.split = (split - CHUNK_HEADER_SIZE) as u32;
        seal(out, head);
    }
}

/// Writes `head` in front of the payload framed after it in `out`, with the
/// payload's length and CRC.
fn seal(out: &mut [u8], mut head: ChunkHeader) {
    let payload = &out[CHUNK_HEADER_SIZE..];
    head.payload_len = payload.len() as u32;
    head.payload_crc = crc32fast::hash(payload);
    out[..CHUNK_HEADER_SIZE].copy_from_slice(&head.encode());
}

/// An event chunk payload's op-stream length prefix: its own length and the op
/// stream's (`(0, 0)` for a metadata chunk, which has none).
fn prefix(h: &ChunkHeader, payload: &[u8]) -> Option<(usize, u64)> {
    if h.kind != ChunkKind::Events {
        return Some((0, 0));
    }
    let mut at = 0;
    let ops = crate::varint::get(payload, &mut at)?;
    (at <= h.split as usize).then_some((at, ops))
}

/// `Vec` spare capacity after `start` as a zstd output buffer, so a frame
/// decompresses behind bytes already there without zero-filling first.
struct Tail<'a> {
    v: &'a mut Vec<u8>,
    start: usize,
}

// SAFETY: pointer and capacity describe the vector's storage after `start`, and
// `filled_until` only covers bytes zstd wrote.
unsafe impl zstd::zstd_safe::WriteBuf for Tail<'_> {
    fn as_slice(&self) -> &[u8] {
        &self.v[self.start..]
    }
    fn capacity(&self) -> usize {
        self.v.capacity() - self.start
    }
    fn as_mut_ptr(&mut self) -> *mut u8 {
        // SAFETY: start <= len <= capacity.
        unsafe { self.v.as_mut_ptr().add(self.start) }
    }
    unsafe fn filled_until(&mut self, n: usize) {
        self.v.set_len(self.start + n);
    }
}

/// Verifies and decompresses a chunk payload.
pub fn decode_payload(h: &ChunkHeader, payload: &[u8], offset: u64) -> Result<Vec<u8>, Error> {
    if crc32fast::hash(payload) != h.payload_crc {
        return Err(Error::Corrupt { offset, what: "chunk payload checksum mismatch" });
    }
    let mut b = PayloadBuf::new();
    b.payload = payload.to_vec();
    b.decode(h, offset)?;
    Ok(b.raw)
}

/// Reusable buffers and zstd context for reading chunks one after another (one per
/// reading thread), so a pass over a trace allocates per chunk neither the payload,
/// nor the decompressed bytes, nor a decompression context.
#[derive(Default)]
pub struct PayloadBuf {
    /// The stored payload as read from the file.
    pub(crate) payload: Vec<u8>,
    /// The decompressed payload.
    pub(crate) raw: Vec<u8>,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl PayloadBuf {
    /// Empty buffers.
    pub fn new() -> PayloadBuf {
        PayloadBuf::default()
    }

    /// The payload decoded last.
    pub fn raw(&self) -> &[u8] {
        &self.raw
    }

    /// Verifies and decompresses `self.payload` (for the chunk `h`) into `self.raw`.
    pub(crate) fn decode(&mut self, h: &ChunkHeader, offset: u64) -> Result<(), Error> {
        self.verify(h, offset)?;
        if h.codec == Codec::None && h.raw_len != h.payload_len {
            return Err(Error::Corrupt { offset, what: "chunk decompressed to the wrong size" });
        }
        self.decode_part(h, offset, self.payload.len(), h.raw_len as usize)
    }

    /// Like `decode`, but of an event chunk's op stream only: `self.raw` gets the
    /// length prefix and the ops, enough for [`crate::codec::Decoder::scan_counts`].
    pub(crate) fn decode_ops(&mut self, h: &ChunkHeader, offset: u64) -> Result<(), Error> {
        if h.kind != ChunkKind::Events {
            return self.decode(h, offset);
        }
        self.verify(h, offset)?;
        let bad = || Error::Corrupt { offset, what: "event chunk without its op-stream length" };
        let (k, ops) = prefix(h, &self.payload).ok_or_else(bad)?;
        let want = (k as u64).saturating_add(ops);
        if want > u64::from(h.raw_len) {
            return Err(bad());
        }
        self.decode_part(h, offset, h.split as usize, want as usize)
    }

    /// Checks the stored payload against the header's checksum.
    fn verify(&self, h: &ChunkHeader, offset: u64) -> Result<(), Error> {
        if crc32fast::hash(&self.payload) != h.payload_crc {
            return Err(Error::Corrupt { offset, what: "chunk payload checksum mismatch" });
        }
        Ok(())
    }

    /// Decompresses `payload[..end]` (verified) into `raw`, expecting `want` bytes.
    fn decode_part(
        &mut self,
        h: &ChunkHeader,
        offset: u64,
        end: usize,
        want: usize,
    ) -> Result<(), Error> {
        let wrong = Error::Corrupt { offset, what: "chunk decompressed to the wrong size" };
        self.raw.clear();
        match h.codec {
            Codec::None => {
                // a payload shorter than its header says is damage, not a panic
                let part = self.payload.get(..want).filter(|_| want <= end).ok_or(wrong)?;
                self.raw.extend_from_slice(part);
            }
            Codec::Zstd => {
                let bad = || Error::Corrupt { offset, what: "zstd payload does not decompress" };
                let (k, _) = prefix(h, &self.payload).ok_or(Error::Corrupt {
                    offset,
                    what: "event chunk without its op-stream length",
                })?;
                if self.zstd.is_none() {
                    self.zstd = Some(zstd::bulk::Decompressor::new().map_err(|_| bad())?);
                }
                let z = self.zstd.as_mut().expect("set above");
                let frame = self.payload.get(k..end).ok_or_else(bad)?;
                self.raw.reserve(want);
                self.raw.extend_from_slice(&self.payload[..k]);
                let mut t = Tail { v: &mut self.raw, start: k };
                let n = z.decompress_to_buffer(frame, &mut t).map_err(|_| bad())?;
                if k + n != want {
                    return Err(wrong);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip_and_crc() {
        let h = ChunkHeader {
            kind: ChunkKind::Events,
            codec: Codec::Zstd,
            flags: FLAG_LAST,
            stream: 3,
            seq: 9,
            raw_len: 100,
            payload_len: 40,
            counts: ChunkCounts { events: 5, loads: 2, stores: 1, allocs: 1, frees: 1 },
            first_clock: 77,
            split: 12,
            payload_crc: 0xdead_beef,
        };
        let mut b = h.encode();
        assert_eq!(ChunkHeader::decode(&b, 0).unwrap(), h);
        b[10] ^= 1;
        assert!(ChunkHeader::decode(&b, 0).is_err());
    }

    #[test]
    fn fast_levels_are_zstd_chunks_that_decode() {
        let raw: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i.wrapping_mul(2_654_435_761) >> 20).to_le_bytes())
            .collect();
        let mut enc = ChunkEncoder::new(1);
        let mut sizes = Vec::new();
        for level in [1, -5, 0, 3] {
            enc.set_level(level);
            assert_eq!(enc.level(), level);
            let mut out = Vec::new();
            let (ops, side) = raw.split_at(300_000);
            let head = ChunkHeader::events(0, 0, 0, ChunkCounts::default(), 0);
            enc.encode_events(head, ops, side, &mut out);
            let h = ChunkHeader::decode(out[..CHUNK_HEADER_SIZE].try_into().unwrap(), 0).unwrap();
            let want = if level == 0 { Codec::None } else { Codec::Zstd };
            assert_eq!(h.codec, want, "level {level}");
            let mut joined = Vec::new();
            crate::codec::join(ops, side, &mut joined);
            assert_eq!(decode_payload(&h, &out[CHUNK_HEADER_SIZE..], 0).unwrap(), joined);
            // the op stream alone
            let mut b = PayloadBuf::new();
            b.payload = out[CHUNK_HEADER_SIZE..].to_vec();
            b.decode_ops(&h, 0).unwrap();
            assert_eq!(b.raw(), &joined[..joined.len() - side.len()]);
            sizes.push(out.len());
        }
        // both levels compress; level 0 stores
        assert!(sizes[0] < sizes[2] && sizes[1] < sizes[2] && sizes[3] < sizes[2], "{sizes:?}");
    }

    #[test]
    fn file_header_roundtrip() {
        let f = FileHeader {
            version: VERSION,
            pid: 5,
            start_ns: 6,
            finished: true,
            end_kind: 1,
            end_value: -3,
            dropped_events: 7,
            dropped_bytes: 8,
            chunks: 9,
            threads: 10,
        };
        assert_eq!(FileHeader::decode(&f.encode()).unwrap(), f);
        assert!(matches!(FileHeader::decode(b"hello world"), Err(Error::NotATrace)));
    }
}
