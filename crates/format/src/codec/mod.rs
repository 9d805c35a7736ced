//! The wire encoding of one thread's events inside a chunk.
//!
//! A chunk's events are written as two streams: the *op* stream holds each event's
//! tag byte, its code address and the few fields that say what it did (range
//! lengths, atomic operations, and every field of the rare events); the *side*
//! stream holds the access addresses, values, call sites and frame pointers of the
//! common events, in the same order. Kernels that need no addresses (the counts
//! behind `memlens report`) read and decompress the op stream alone: a fifth of
//! the bytes to decompress and half to parse. Split, each stream also compresses
//! better than the mix. A decompressed chunk is `varint(op length) ++ ops ++ side`.
//!
//! Every event starts with a tag byte. Code addresses are zigzag deltas from the
//! previous code address in the chunk; access addresses are zigzag deltas from the
//! last address seen at the same code address (a direct-mapped table indexed by a
//! hash of the pc). A strided loop therefore encodes to the same few bytes again
//! and again, which the chunk compressor then folds away. Encoder and decoder start
//! each chunk from a zeroed state, so every chunk decodes on its own.
//!
//! Tag layout (fields after `|` are in the side stream):
//! - `0x00..=0x3f` access: bit 5 store, bit 4 atomic, bit 3 value follows,
//!   bits 0..=2 log2(size) (0..=4). Fields: pc | addr, \[value\].
//! - `0x40`/`0x41` range read/write: pc, len | addr.
//! - `0x42` RMW: byte `op << 4 | log2(size)` (bit 3 of the low nibble: value follows),
//!   pc | addr, \[value\].
//! - `0x43` fence: pc, order.
//! - `0x50` function entry: pc | call site (zigzag delta from pc), frame pointer
//!   (zigzag delta from the previous one). `0x51` exit: pc.
//! - `0x52` traced call: function (as a pc), stack pointer, three arguments.
//!   `0x53` traced return: function (as a pc), stack pointer, return value.
//! - `0x60` alloc: kind, pc, addr, size, n, n stack pcs (zigzag deltas from pc).
//! - `0x61` free: kind, pc, addr. `0x62` realloc: pc, old, new, size, n, stack.
//! - `0x70` thread start: os tid, parent+1, stack low, stack high, thread pointer, name.
//! - `0x71..` other thread and control events, see [`Tag`]; `0x7d` time: CLOCK_MONOTONIC
//!   ns as a zigzag delta from the chunk's previous time (the first: from 0).
//!
//! The code by role: `encode.rs` ([`Encoder`]), `decode.rs` ([`Decoder`]'s events),
//! `columns.rs` ([`Columns`], [`Decoder::decode_columns`]), `tally.rs` (the counts
//! kernels' [`Decoder::scan_counts`]).

mod columns;
mod decode;
mod encode;
mod fold;
mod tally;
#[cfg(test)]
mod tests;

pub use columns::{replayed, Columns, EventRuns, Run};
pub use decode::Decoder;
pub use encode::Encoder;
pub use fold::Folder;
pub use tally::{AccessTally, Counted};

use crate::event::AccessKind;
use crate::varint::{self, unzigzag, zigzag, MAX_VARINT};

/// Number of address-prediction slots (a power of two).
pub const SLOTS: usize = 1 << SLOT_BITS;
const SLOT_BITS: u32 = 10;

/// Largest encoding of an access or RMW event; the runtime reserves this much
/// before calling the hot encoders.
pub const MAX_ACCESS_LEN: usize = 2 + 3 * MAX_VARINT;

/// Most side-stream bytes one event writes.
pub const MAX_SIDE_LEN: usize = 2 * MAX_VARINT;
/// Most op bytes a `repeat` takes (tag and four varints).
pub const MAX_REPEAT_LEN: usize = 1 + 4 * MAX_VARINT;

/// Most side-stream bytes an event writes per op-stream byte (an entry: two
/// bytes of tag and pc, two varints of call site and frame). A side buffer of
/// `SIDE_PER_OP` times the op buffer, plus [`MAX_SIDE_LEN`], never overflows
/// before the op buffer does.
pub const SIDE_PER_OP: usize = MAX_VARINT;

/// Tags of the non-access events.
#[allow(missing_docs)]
pub mod tag {
    pub const ACCESS_MAX: u8 = 0x3f;
    pub const ACCESS_WRITE: u8 = 0x20;
    pub const ACCESS_ATOMIC: u8 = 0x10;
    pub const ACCESS_VALUE: u8 = 0x08;
    pub const RANGE_READ: u8 = 0x40;
    pub const RANGE_WRITE: u8 = 0x41;
    pub const RMW: u8 = 0x42;
    pub const FENCE: u8 = 0x43;
    pub const FUNC_ENTER: u8 = 0x50;
    pub const FUNC_EXIT: u8 = 0x51;
    pub const CALL: u8 = 0x52;
    pub const RETURN: u8 = 0x53;
    pub const ALLOC: u8 = 0x60;
    pub const FREE: u8 = 0x61;
    pub const REALLOC: u8 = 0x62;
    pub const THREAD_START: u8 = 0x70;
    pub const THREAD_EXIT: u8 = 0x71;
    pub const THREAD_NAME: u8 = 0x72;
    pub const REGISTER_THREAD: u8 = 0x73;
    pub const ROI_BEGIN: u8 = 0x74;
    pub const ROI_END: u8 = 0x75;
    pub const TRACE_ON: u8 = 0x76;
    pub const TRACE_OFF: u8 = 0x77;
    pub const FORK: u8 = 0x78;
    pub const EXEC: u8 = 0x79;
    pub const CLOCK: u8 = 0x7a;
    pub const DROPPED: u8 = 0x7b;
    pub const SIGNAL: u8 = 0x7c;
    pub const TIME: u8 = 0x7d;
    /// Not an event: the body before it again, `count` more times (see `fold.rs`).
    pub const REPEAT: u8 = 0x7e;
}
pub use tag as Tag;

/// log2 of an access size, or `None` for sizes that must be sent as ranges.
#[inline(always)]
pub fn size_log2(size: usize) -> Option<u8> {
    match size {
        1 => Some(0),
        2 => Some(1),
        4 => Some(2),
        8 => Some(3),
        16 => Some(4),
        _ => None,
    }
}

#[inline(always)]
/// Whether a loop body's accesses, `(pc, address stride)` in order, encode to the
/// same bytes in every iteration from the second on, so that a `repeat` of one
/// iteration stands for the others: addresses are predicted per slot of the pc,
/// so accesses whose pcs share a slot must move by the same stride.
pub fn repeats_alike(body: &[(u64, u64)]) -> bool {
    body.iter()
        .enumerate()
        .all(|(i, &(pc, st))| body[..i].iter().all(|&(p, s)| slot(p) != slot(pc) || s == st))
}

fn slot(pc: u64) -> usize {
    (pc.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOT_BITS)) as usize
}

/// Per-chunk prediction state, shared in shape by encoder and decoder.
#[derive(Clone)]
pub struct Predictor {
    prev_pc: u64,
    prev_frame: u64,
    prev_time: u64,
    last: [u64; SLOTS],
}

impl Default for Predictor {
    fn default() -> Self {
        Predictor::new()
    }
}

impl Predictor {
    /// The chunk-start state (usable in `const` thread-local initialisers).
    pub const fn new() -> Predictor {
        Predictor { prev_pc: 0, prev_frame: 0, prev_time: 0, last: [0; SLOTS] }
    }

    /// Back to the chunk-start state.
    pub fn reset(&mut self) {
        self.prev_pc = 0;
        self.prev_frame = 0;
        self.prev_time = 0;
        self.last.fill(0);
    }

    #[inline(always)]
    fn pc_delta(&mut self, pc: u64) -> u64 {
        let d = zigzag(pc.wrapping_sub(self.prev_pc) as i64);
        self.prev_pc = pc;
        d
    }

    #[inline(always)]
    fn addr_delta(&mut self, pc: u64, addr: u64) -> u64 {
        let s = &mut self.last[slot(pc)];
        let d = zigzag(addr.wrapping_sub(*s) as i64);
        *s = addr;
        d
    }

    #[inline(always)]
    fn pc_from(&mut self, d: u64) -> u64 {
        self.prev_pc = self.prev_pc.wrapping_add(unzigzag(d) as u64);
        self.prev_pc
    }

    #[inline(always)]
    fn addr_from(&mut self, pc: u64, d: u64) -> u64 {
        let s = &mut self.last[slot(pc)];
        *s = s.wrapping_add(unzigzag(d) as u64);
        *s
    }
}

/// One chunk's events as two growable streams (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Streams {
    /// The op stream.
    pub ops: Vec<u8>,
    /// The side stream.
    pub side: Vec<u8>,
}

impl Streams {
    /// Empty streams.
    pub fn new() -> Streams {
        Streams::default()
    }

    /// Bytes in both streams.
    pub fn len(&self) -> usize {
        self.ops.len() + self.side.len()
    }

    /// No events.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Empties both (keeping the allocations).
    pub fn clear(&mut self) {
        self.ops.clear();
        self.side.clear();
    }

    /// The decompressed chunk: `varint(ops.len()) ++ ops ++ side`.
    pub fn to_raw(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAX_VARINT + self.len());
        join(&self.ops, &self.side, &mut out);
        out
    }
}

/// Appends the decompressed-chunk layout of `ops` and `side` to `out`.
pub fn join(ops: &[u8], side: &[u8], out: &mut Vec<u8>) {
    varint::push(out, ops.len() as u64);
    out.extend_from_slice(ops);
    out.extend_from_slice(side);
}

/// The tag byte of a load/store.
#[inline(always)]
pub const fn access_tag(kind: AccessKind, atomic: bool, size_log2: u8) -> u8 {
    let w = match kind {
        AccessKind::Read => 0,
        AccessKind::Write => tag::ACCESS_WRITE,
    };
    w | if atomic { tag::ACCESS_ATOMIC } else { 0 } | size_log2
}

/// Why a chunk's events could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad event encoding at byte {offset} of the chunk: {what}")]
pub struct DecodeError {
    /// Offset in the decompressed chunk.
    pub offset: usize,
    /// What was wrong.
    pub what: &'static str,
}

/// Reads the varint starting at `s[i]` (`i + MAX_VARINT <= s.len()`): its value
/// and length; `None` when overlong, like [`varint::get`].
#[inline(always)]
fn varint_at<const N: usize>(s: &[u8; N], i: usize) -> Option<(u64, usize)> {
    let w: &[u8; MAX_VARINT] = s.get(i..i + MAX_VARINT)?.try_into().ok()?;
    if w[0] < 0x80 {
        return Some((u64::from(w[0]), 1));
    }
    let mut v = u64::from(w[0] & 0x7f);
    for (k, &b) in w.iter().enumerate().skip(1) {
        v |= u64::from(b & 0x7f) << (7 * k);
        if b < 0x80 {
            if k == MAX_VARINT - 1 && b > 1 {
                return None;
            }
            return Some((v, k + 1));
        }
    }
    None
}
