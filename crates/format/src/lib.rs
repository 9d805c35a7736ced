//! The memlens trace format: what a recording is on disk, and how to read and write it.
//!
//! A trace is a 4 KiB header followed by self-contained chunks. Each traced thread
//! writes its own stream of events, cut into chunks of about a mebibyte, compressed
//! with zstd, checksummed, and numbered; metadata (process, module map, how the run
//! ended) travels in chunks of its own. A reader scans chunk headers, so a trace
//! whose writer died mid-chunk reads up to its last complete chunk and says so.
//! `docs/trace-format.md` describes every byte.
//!
//! # Brief overview
//! - [`Event`]: the decoded form consumers see (an access, an allocation, a function
//!   entry, a thread start...), with newtypes [`Addr`], [`Pc`], [`ThreadId`].
//! - [`codec::Encoder`] / [`codec::Decoder`]: the compact per-thread encoding (code
//!   addresses as deltas, data addresses predicted per code address).
//! - [`codec::Columns`]: decoded events as columns for batch consumers (an Arrow
//!   `RecordBatch` wraps its vectors without copying): `seq`, `pc`, `addr`, `size`
//!   (`Vec<u64>`) and `kind` (`Vec<u8>`, bits [`codec::Columns::WRITE`], `ATOMIC`,
//!   `RANGE`, `VALUE`), one row per load, store or range, `value` (`Vec<u64>`, empty
//!   unless recorded with `--values`), and every other event in `other` as
//!   `(seq, Event)`. Filled by [`codec::Decoder::decode_columns`] (up to `max`
//!   events, appended), [`ChunkDecoder::decode_columns`] (a whole chunk, `seq` =
//!   index in the stream) and [`ChunkDecoder::for_columns`] (a chunk in batches of
//!   [`COLUMN_BATCH`]); [`codec::Columns::to_events`] merges them back into events.
//!   About 1.5× faster than [`codec::Decoder::next_batch`] (docs/PERFORMANCE-history.md,
//!   "Decoder (session 10)"; current figures in docs/PERFORMANCE.md).
//! - [`TraceWriter`] and [`TraceReader`]: files.
//! - [`MetaRecord`]: process, [`Module`] map, options, end status.
//! - [`CallStack`]: a thread's open calls rebuilt from its entries and exits, by the
//!   one rule every reader (names, the viewer, the exports) follows.
//!
//! # Example
//! ```
//! use memlens_format::{AccessKind, Addr, Event, EventBuffer, Pc, ThreadId, TraceReader, TraceWriter};
//!
//! let path = std::env::temp_dir().join(format!("doc-{}.trace", std::process::id()));
//! let mut w = TraceWriter::new(std::fs::File::create(&path)?, 1, 1)?;
//! let mut buf = EventBuffer::new();
//! buf.push(&Event::Access {
//!     pc: Pc(0x401000), addr: Addr(0x1000), size: 8,
//!     kind: AccessKind::Write, atomic: false, value: None,
//! });
//! w.write_events(0, &mut buf, true)?;
//! w.finish(|_| {})?;
//!
//! let r = TraceReader::open(&path)?;
//! assert_eq!(r.totals().stores, 1);
//! let events: Vec<Event> = r.events(ThreadId(0)).collect::<Result<_, _>>()?;
//! assert_eq!(events.len(), 1);
//! # std::fs::remove_file(&path)?;
//! Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

pub mod callstack;
pub mod chunk;
pub mod codec;
pub mod complete;
pub mod event;
pub mod fuzz;
pub mod meta;
pub mod reader;
pub mod types;
pub mod varint;
pub mod writer;

pub use callstack::{CallStack, StackFrame};
pub use chunk::{
    ChunkCounts, ChunkEncoder, ChunkHeader, ChunkKind, Codec, EventParts, FileHeader, PayloadBuf,
    CHUNK_HEADER_SIZE, FLAG_LAST, HEADER_SIZE, META_STREAM, OLDEST_VERSION, VERSION,
};
pub use complete::Completeness;
pub use event::{AccessKind, AllocKind, Event, FreeKind, RmwOp};
pub use meta::{EndStatus, MetaRecord};
pub use reader::{
    ChunkDecoder, ChunkIndex, Skipped, StreamChunk, StreamEvents, StreamInfo, TraceMeta,
    TraceReader, Truncation, BATCH, COLUMN_BATCH,
};
pub use types::{Addr, Module, Pc, Segment, ThreadId};
pub use writer::{
    count, realloc_counts, stored_event_frame, Append, ChunkSink, EventBuffer, FileCore,
    TraceWriter,
};

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file does not start with the memlens magic.
    #[error("not a memlens trace (no MEMLENS header); record one with `memlens record -- PROG`")]
    NotATrace,
    /// Written by another format version.
    #[error(
        "trace format version {0} is not supported by this memlens (it reads versions {OLDEST_VERSION} to {VERSION}): use the memlens that recorded it, or a newer one"
    )]
    Version(u32),
    /// A structure failed its checks.
    #[error("corrupt trace at byte {offset}: {what}")]
    Corrupt {
        /// Where.
        offset: u64,
        /// What.
        what: &'static str,
    },
    /// Events inside a chunk failed to decode.
    #[error("corrupt chunk at byte {chunk_offset}: {source}")]
    Decode {
        /// The chunk.
        chunk_offset: u64,
        /// The decoder's complaint.
        source: codec::DecodeError,
    },
    /// The operating system refused.
    #[error("cannot read {0}: {1}")]
    Io(String, #[source] std::io::Error),
}
