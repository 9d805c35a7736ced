//! Loop folding: a chunk's events rewritten with `repeat`s before compression.
//!
//! In a loop whose strides do not change, every iteration encodes to the same
//! op and side bytes (the pc deltas and the per-pc address deltas repeat). The
//! writer replaces the second and later copies with one `repeat` event:
//!
//! `0x7e` body op bytes, body side bytes, count, events in the body (varints, all
//! in the op stream)
//!
//! The body is the op bytes just before the tag and the side bytes just before
//! the side cursor there; a reader decodes it `count` more times, then goes on.
//! The body is always plain events (a body never holds a `repeat`). A chunk may
//! hold the runtime's own repeats already (loops recorded as runs): they are
//! kept, and no body found here reaches across one. Decoded,
//! the folded chunk is event for event the chunk it came from; zstd then has a
//! fraction of the bytes to decompress, and a reader that wants columns or
//! counts copies a body's decoded rows instead of decoding them again.

use super::{join, tag, Decoder, Streams};
use crate::varint;
use std::collections::HashMap;
use std::ops::Range;

/// Most events in a body (the loop bodies that matter are short).
const MAX_BODY: usize = 4096;
/// Bytes a repeat must stand for to be worth its own few.
const MIN_SAVED: usize = 16;
/// Events without a fold after which a chunk is copied unchanged from there on
/// (random addresses never repeat: looking costs more than it brings).
const GIVE_UP: usize = 1 << 15;
const TABLE_BITS: u32 = 12;
/// Chunks written unfolded after one where folding did not pay.
const SKIP_AFTER_MISS: u32 = 7;
/// Chunks smaller than this are folded without looking at or changing their
/// stream's pace: a thread's few events flushed on a timer say nothing about its
/// loops (mt: the main thread's 4-byte chunks left its workers' unfolded).
const SMALL: usize = 4096;
/// Folded chunks kept without a check after a check the fold won, and chunks left
/// unfolded after one it lost (see [`Folder::check_due`]).
const CHECK_EVERY: u32 = 15;

/// Reusable scratch space for [`Folder::fold`] (one per writer thread).
#[derive(Default)]
pub struct Folder {
    raw: Vec<u8>,
    scratch: Scratch,
    out: Streams,
    /// The pace of the stream whose chunks come now ([`Folder::set_stream`]).
    pace: Pace,
    stream: u32,
    /// The other streams' paces.
    paces: HashMap<u32, Pace>,
}

/// When a stream's chunks are folded: each stream keeps its own, so that one
/// thread's random accesses do not leave another thread's loops unfolded.
#[derive(Default, Clone, Copy)]
struct Pace {
    /// Chunks still to write unfolded after one where folding did not pay.
    rest: u32,
    /// Folded chunks still to keep before the next compressed-size check.
    trusted: u32,
    /// Misses and lost checks in a row (each doubles the chunks left unfolded
    /// after it).
    lost: u32,
}

#[derive(Default)]
struct Scratch {
    /// Op and side offsets of each event decoded (not of repeated ones).
    op_off: Vec<u32>,
    side_off: Vec<u32>,
    /// Hash of an event's bytes → its index in `op_off` + 1.
    table: Vec<u32>,
}

impl Folder {
    /// An empty folder.
    pub fn new() -> Folder {
        Folder::default()
    }

    /// The chunks that follow are stream `stream`'s (0 until set): misses and
    /// checks are counted per stream.
    pub fn set_stream(&mut self, stream: u32) {
        if stream != self.stream {
            let next = self.paces.remove(&stream).unwrap_or_default();
            let prev = std::mem::replace(&mut self.pace, next);
            self.paces.insert(self.stream, prev);
            self.stream = stream;
        }
    }

    /// The chunk `ops`/`side` with its repeated loop iterations folded, or `None`
    /// when nothing repeats (or the events do not decode: the chunk is then
    /// written as it is, for the reader to report).
    pub fn fold(&mut self, ops: &[u8], side: &[u8]) -> Option<&Streams> {
        if ops.len() + side.len() >= SMALL && self.skipping() {
            return None;
        }
        let mut raw = std::mem::take(&mut self.raw);
        raw.clear();
        join(ops, side, &mut raw);
        let o = raw.len() - ops.len() - side.len();
        let s = o + ops.len();
        let folded = self.fold_core(&raw, o..s, s..raw.len());
        self.raw = raw;
        folded.then_some(&self.out)
    }

    /// [`Folder::fold`] of the op stream `region[ops]` and the side stream
    /// `region[side]` (after it), without copying them together first.
    pub fn fold_region(
        &mut self,
        region: &[u8],
        ops: Range<usize>,
        side: Range<usize>,
    ) -> Option<&Streams> {
        if ops.len() + side.len() >= SMALL && self.skipping() {
            return None;
        }
        self.fold_core(region, ops, side).then_some(&self.out)
    }

    fn fold_core(&mut self, region: &[u8], ops: Range<usize>, side: Range<usize>) -> bool {
        let len = ops.len() + side.len();
        self.out.clear();
        let folded = fold_into(region, ops, side, &mut self.scratch, &mut self.out).is_some();
        // a chunk that did not lose half its bytes: the next few are likely
        // alike (random addresses, short branchy loops), and looking costs the
        // writer time (the writer keeps only folds that halve a chunk)
        if len >= SMALL && (!folded || self.out.len() * 2 > len) {
            self.miss();
        }
        folded
    }

    /// Whether the writer should compress this folded chunk both ways and keep
    /// the smaller ([`Folder::checked`]): the first folded chunk and one in
    /// sixteen after that. A fold that removes most raw bytes can still compress
    /// worse (the repeats' counts break zstd's long matches: sort's trace doubled).
    pub fn check_due(&mut self) -> bool {
        let due = self.pace.trusted == 0;
        self.pace.trusted = self.pace.trusted.saturating_sub(1);
        due
    }

    /// The outcome of a check: after a loss the next chunks are written unfolded
    /// without looking (7, then 14, 28 ... up to 224 chunks after misses in a
    /// row), after a win folded without comparing.
    pub fn checked(&mut self, fold_won: bool) {
        if fold_won {
            self.pace.trusted = CHECK_EVERY;
            self.pace.lost = 0;
        } else {
            self.miss();
        }
    }

    /// A chunk where folding did not pay: the next 7 are written unfolded
    /// without looking, twice as many after each further miss in a row (to 224).
    fn miss(&mut self) {
        let p = &mut self.pace;
        p.rest = SKIP_AFTER_MISS << p.lost.min(5);
        p.lost += 1;
        p.trusted = 0;
    }

    /// Whether this chunk is one to leave unfolded after a miss.
    fn skipping(&mut self) -> bool {
        let skip = self.pace.rest > 0;
        self.pace.rest = self.pace.rest.saturating_sub(1);
        skip
    }
}

/// Folds `buf[ops]`/`buf[side]` into `out`; `None` when nothing folded.
fn fold_into(
    buf: &[u8],
    ops_r: Range<usize>,
    side_r: Range<usize>,
    sc: &mut Scratch,
    out: &mut Streams,
) -> Option<()> {
    if ops_r.len() > u32::MAX as usize
        || side_r.len() > u32::MAX as usize
        || ops_r.end > side_r.start
    {
        return None;
    }
    let (base_op, base_side) = (ops_r.start, side_r.start);
    let (ops, side) = (&buf[ops_r.clone()], &buf[side_r.clone()]);
    sc.table.clear();
    sc.table.resize(1 << TABLE_BITS, 0);
    sc.op_off.clear();
    sc.side_off.clear();
    let mut dec = Decoder::with_streams(&buf[..side_r.end], ops_r, side_r.start);
    let (mut copied_op, mut copied_side) = (0usize, 0usize);
    let mut folds = 0usize;
    let mut since_fold = 0usize;
    // the first event a body may start at: after the last repeat
    let mut lit_start = 0usize;
    let mut none = |_: u64, _: crate::Event| {};
    loop {
        let (o, s) = (dec.pos - base_op, dec.spos - base_side);
        if dec.pos < dec.end && dec.buf[dec.pos] == tag::REPEAT {
            // The runtime's own repeat (a loop recorded as a run): kept as it is,
            // with its body still the plain bytes just before it, and no body of
            // ours reaching across it.
            let mut at = o + 1;
            let mut field = || varint::get(ops, &mut at);
            let (_bytes, _side, _count, events) = (field()?, field()?, field()?, field()?);
            let events = usize::try_from(events).ok()?;
            let first = sc.op_off.len().checked_sub(events)?;
            if events == 0 || first < lit_start || (sc.op_off[first] as usize) < copied_op {
                return None;
            }
            out.ops.extend_from_slice(&ops[copied_op..at]);
            out.side.extend_from_slice(&side[copied_side..s]);
            (copied_op, copied_side) = (at, s);
            lit_start = sc.op_off.len();
            dec.pos = base_op + at;
            // (its body's pc deltas sum to nothing, so the pc prediction is right)
            continue;
        }
        if !dec.skip_one(0, &mut none).ok()? {
            break;
        }
        let (o2, s2) = (dec.pos - base_op, dec.spos - base_side);
        let i = sc.op_off.len();
        sc.op_off.push(o as u32);
        sc.side_off.push(s as u32);
        since_fold += 1;
        if folds == 0 && since_fold > GIVE_UP {
            return None;
        }
        let h = hash(buf, base_op + o, o2 - o, base_side + s, s2 - s);
        let cand = std::mem::replace(&mut sc.table[h], i as u32 + 1) as usize;
        if cand <= lit_start || i - (cand - 1) > MAX_BODY {
            continue;
        }
        // events j..i are the body; i.. repeats it `reps` times
        let j = cand - 1;
        let (bo, bs) = (sc.op_off[j] as usize, sc.side_off[j] as usize);
        let (lo, ls) = (o - bo, s - bs);
        // how many times the body repeats from event i on, in both streams
        let reps = repeats(ops, bo, o, lo, side, bs, s, ls);
        let (co, cs) = (o + reps * lo, s + reps * ls);
        if reps == 0 || reps * (lo + ls) < MIN_SAVED {
            continue;
        }
        let events = i - j;
        out.ops.extend_from_slice(&ops[copied_op..o]);
        out.side.extend_from_slice(&side[copied_side..s]);
        out.ops.push(tag::REPEAT);
        for v in [lo, ls, reps, events] {
            varint::push(&mut out.ops, v as u64);
        }
        (copied_op, copied_side) = (co, cs);
        // a later body starts after this repeat
        lit_start = i + 1;
        folds += 1;
        since_fold = 0;
        dec.pos = base_op + co;
        dec.spos = base_side + cs;
    }
    if folds == 0 {
        return None;
    }
    out.ops.extend_from_slice(&ops[copied_op..]);
    out.side.extend_from_slice(&side[copied_side..]);
    Some(())
}

/// A hash of an event's bytes in `raw`: `ol` at `o` and `sl` at `s` (the first
/// eight of each and the lengths: candidates are compared whole).
#[inline(always)]
fn hash(raw: &[u8], o: usize, ol: usize, s: usize, sl: usize) -> usize {
    let word = |at: usize, len: usize| {
        let w = match raw.get(at..at + 8) {
            Some(w) => u64::from_le_bytes(w.try_into().expect("8 bytes")),
            None => raw[at..].iter().rev().fold(0, |w, &b| w << 8 | u64::from(b)),
        };
        if len >= 8 {
            w
        } else {
            w & ((1u64 << (8 * len)) - 1)
        }
    };
    let x = word(o, ol).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ word(s, sl).wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
        ^ ((ol as u64) << 8 | sl as u64);
    (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - TABLE_BITS)) as usize
}

/// How many whole times the body `ops[bo..o]` / `side[bs..s]` (`lo` / `ls` bytes)
/// repeats from `o` / `s` on. Both streams are compared in growing steps, each
/// no further than the other has matched: when only one repeats for long (sort:
/// the same ops, other addresses), comparing it to its end at every event made
/// folding quadratic (a writer 6x slower).
#[allow(clippy::too_many_arguments)]
pub(super) fn repeats(
    ops: &[u8],
    bo: usize,
    o: usize,
    lo: usize,
    side: &[u8],
    bs: usize,
    s: usize,
    ls: usize,
) -> usize {
    let (mut mo, mut ms) = (0usize, 0usize);
    let mut want = 1usize;
    loop {
        mo = same_run(ops, bo, o, mo, want.saturating_mul(lo));
        if mo < want * lo {
            break;
        }
        if ls > 0 {
            ms = same_run(side, bs, s, ms, want.saturating_mul(ls));
            if ms < want * ls {
                break;
            }
        }
        want = want.saturating_mul(2);
    }
    let r = mo / lo;
    match same_run(side, bs, s, ms, r.saturating_mul(ls)).checked_div(ls) {
        Some(rs) => r.min(rs),
        None => r, // no side bytes: the op stream decides
    }
}

/// How many bytes from `b` on equal those from `a` on (`a < b`; the runs may
/// overlap, so a repeating pattern of period `b - a` counts to its end), given
/// that the first `from` do, and counting no further than `max`. Words of eight
/// at a time, without calling `memcmp`: in a traced program that is the
/// runtime's interposed one.
#[inline]
fn same_run(buf: &[u8], a: usize, b: usize, from: usize, max: usize) -> usize {
    assert!(a <= b && b <= buf.len());
    let n = (buf.len() - b).min(max);
    let p = buf.as_ptr();
    // SAFETY: every read below is of 8 bytes at `a + m` or `b + m` with
    // `m + 8 <= n <= buf.len() - b`, so within `buf` (`a <= b`).
    let word = |i: usize| unsafe { (p.add(i) as *const u64).read_unaligned() };
    let mut m = from.min(n);
    // 32 bytes a step while they all match, then words
    while m + 32 <= n {
        let x = (word(a + m) ^ word(b + m))
            | (word(a + m + 8) ^ word(b + m + 8))
            | (word(a + m + 16) ^ word(b + m + 16))
            | (word(a + m + 24) ^ word(b + m + 24));
        if x != 0 {
            break;
        }
        m += 32;
    }
    while m + 8 <= n {
        let x = word(a + m) ^ word(b + m);
        if x != 0 {
            return m + (u64::from_le(x).trailing_zeros() / 8) as usize;
        }
        m += 8;
    }
    while m < n && buf[a + m] == buf[b + m] {
        m += 1;
    }
    m
}
