//! The counts kernels' fast path: [`Decoder::scan_counts`] and its [`AccessTally`].

use super::{tag, varint_at, DecodeError, Decoder};
use crate::event::{AccessKind, AllocKind, Event};
use crate::types::Pc;
use crate::varint::{unzigzag, MAX_VARINT};

/// What the counts kernels need of one event: no addresses, no values, no stacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Counted {
    /// A load/store or range: `bytes` is the size or the range length.
    Access {
        /// Code address.
        pc: Pc,
        /// A store.
        write: bool,
        /// Bytes touched.
        bytes: u64,
    },
    /// An atomic read-modify-write (a load, and a store when `stores`).
    Rmw {
        /// Code address.
        pc: Pc,
        /// Access size.
        size: u64,
        /// Whether the operation stores.
        stores: bool,
    },
    /// An allocation, or a realloc (see [`crate::realloc_counts`]).
    Alloc {
        /// Call site.
        pc: Pc,
        /// Bytes requested.
        size: u64,
        /// It allocated a block (all but `realloc(p, 0)`).
        allocates: bool,
        /// It freed a block (a realloc of a non-null pointer).
        frees: bool,
    },
    /// Loads or stores of a byte range (`memcpy` and the like); unlike
    /// [`Counted::Access`], `bytes` is the total over all of them, as their
    /// lengths differ.
    Range {
        /// Code address.
        pc: Pc,
        /// Stores (else loads).
        write: bool,
        /// Bytes of all of them together.
        bytes: u64,
    },
    /// A free.
    Free,
    /// A function entry.
    Call,
    /// Any other event.
    Other,
}

impl Counted {
    /// The counted view of a fully decoded event.
    pub fn of(ev: &Event) -> Counted {
        match *ev {
            Event::Access { pc, size, kind, .. } => {
                Counted::Access { pc, write: kind == AccessKind::Write, bytes: u64::from(size) }
            }
            Event::Range { pc, len, kind, .. } => {
                Counted::Range { pc, write: kind == AccessKind::Write, bytes: len }
            }
            Event::Rmw { pc, size, op, .. } => {
                Counted::Rmw { pc, size: u64::from(size), stores: op.stores() }
            }
            Event::Alloc { pc, size, .. } => {
                Counted::Alloc { pc, size, allocates: true, frees: false }
            }
            Event::Realloc { pc, size, old, new, .. } => {
                let (allocates, frees) = crate::realloc_counts(old.0, new.0);
                Counted::Alloc { pc, size, allocates, frees }
            }
            Event::Free { .. } => Counted::Free,
            Event::FuncEnter { .. } => Counted::Call,
            _ => Counted::Other,
        }
    }
}

/// Plain loads and stores of one chunk tallied by (code address, tag), so the
/// counts scan touches one counter per event and its caller sees each distinct
/// (pc, size, kind) once per chunk. Reused from chunk to chunk (one per decoding
/// thread); empty between scans.
///
/// It also folds loops: the slot and start of the last `RING` accesses are kept,
/// and when an access meets its (pc, tag) again within them, and the bytes that
/// follow repeat the bytes since then, every repetition is counted at once. The
/// fast path's decoding depends only on the bytes and the running code address,
/// which is the same at both starts, so the repeats decode to the same accesses.
#[derive(Debug, Default)]
pub struct AccessTally {
    /// Open addressing, linear probing; `tag == EMPTY` marks a free slot. 16
    /// bytes a slot, so a chunk's hot slots fit in L1.
    slots: Vec<TallySlot>,
    /// Per slot, the event number of its last occurrence (`u32::MAX`: none; a
    /// chunk holds fewer events than bytes, at most 4 GiB), for folding.
    last: Vec<u32>,
    /// Per slot, the bytes of its range events (plain accesses have theirs in
    /// the tag).
    bytes: Vec<u64>,
    /// Indices of the used slots, in first-seen order.
    used: Vec<u32>,
    /// (slot, start in the chunk) of access number `seq`, at `seq % RING`.
    ring: Vec<(u32, usize)>,
    /// Accesses folded in the current chunk.
    pub(super) folded: u64,
    /// Whether the next chunk is scanned with folding.
    pub(super) fold_next: bool,
    /// Folds (each of one or more repetitions) in the current chunk.
    pub(super) folds: u64,
    /// Chunks scanned without folding since the last try.
    plain_chunks: u32,
}

/// The longest event of the counts scan's fast path: a range (pc, length).
const NEED: usize = 1 + 2 * MAX_VARINT;

/// Accesses remembered for loop folding.
const RING: u64 = 64;
/// Fewest accesses a fold must count on average for folding to go on in the
/// next chunk: below it (a merge loop's branches alternating every few
/// iterations) the byte comparisons cost more than decoding.
pub(super) const FOLD_MIN: u64 = 16;

#[derive(Clone, Copy, Debug)]
struct TallySlot {
    pc: u64,
    /// Occurrences in this chunk (fewer than its bytes).
    count: u32,
    tag: u8,
}

impl AccessTally {
    /// Tags of plain accesses are at most 0x3f, of ranges 0x40 and 0x41.
    const EMPTY: u8 = 0xff;
    const EMPTY_SLOT: TallySlot = TallySlot { pc: 0, tag: Self::EMPTY, count: 0 };

    /// Counts one access of (pc, tag).
    #[inline(always)]
    fn add(&mut self, pc: u64, tag: u8) {
        let mask = self.slots.len() - 1;
        let mut i = Self::hash(pc, tag) & mask;
        loop {
            let s = &mut self.slots[i];
            if s.pc == pc && s.tag == tag {
                s.count += 1;
                return;
            }
            if s.tag == Self::EMPTY {
                let (i, _) = self.insert(i, pc, tag);
                self.slots[i].count = 1;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// Counts one range event of (pc, tag) over `len` bytes.
    #[inline(always)]
    fn add_range(&mut self, pc: u64, tag: u8, len: u64) {
        self.add_n(pc, tag, len, 1);
    }

    /// Counts `n` occurrences of (pc, tag), each of `len` bytes if a range.
    fn add_n(&mut self, pc: u64, tag: u8, len: u64, n: u32) {
        let (i, _) = self.find(pc, tag);
        self.slots[i].count += n;
        if tag > tag::ACCESS_MAX {
            self.bytes[i] = self.bytes[i].wrapping_add(len.wrapping_mul(u64::from(n)));
        }
    }

    /// The slot of (pc, tag), inserted with count 0 if new; `None` for the index
    /// when the table grew (slot indices changed).
    #[inline(always)]
    fn find(&mut self, pc: u64, tag: u8) -> (usize, bool) {
        // never empty here: `ready` runs before a scan; at most half full
        let mask = self.slots.len() - 1;
        let mut i = Self::hash(pc, tag) & mask;
        loop {
            let s = &self.slots[i];
            if s.pc == pc && s.tag == tag {
                return (i, false);
            }
            if s.tag == Self::EMPTY {
                return self.insert(i, pc, tag);
            }
            i = (i + 1) & mask;
        }
    }

    /// Fills the free slot `i`; grows the table when half full.
    #[cold]
    #[inline(never)]
    fn insert(&mut self, i: usize, pc: u64, tag: u8) -> (usize, bool) {
        self.slots[i] = TallySlot { pc, tag, count: 0 };
        self.used.push(i as u32);
        if self.used.len() * 2 < self.slots.len() {
            return (i, false);
        }
        self.grow();
        let mask = self.slots.len() - 1;
        let mut i = Self::hash(pc, tag) & mask;
        while self.slots[i].pc != pc || self.slots[i].tag != tag {
            i = (i + 1) & mask;
        }
        (i, true)
    }

    #[inline(always)]
    fn hash(pc: u64, tag: u8) -> usize {
        ((pc ^ u64::from(tag)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize
    }

    /// Makes room before a scan.
    fn ready(&mut self) {
        if self.slots.is_empty() {
            self.resize(256);
            self.ring = vec![(0, 0); RING as usize];
            self.fold_next = true;
        }
    }

    /// An empty table of `n` slots.
    fn resize(&mut self, n: usize) {
        self.slots = vec![Self::EMPTY_SLOT; n];
        self.last = vec![u32::MAX; n];
        self.bytes = vec![0; n];
    }

    #[cold]
    fn grow(&mut self) {
        let old: Vec<(TallySlot, u32, u64)> = self
            .used
            .iter()
            .map(|&i| (self.slots[i as usize], self.last[i as usize], self.bytes[i as usize]))
            .collect();
        self.resize(self.slots.len() * 2);
        self.used.clear();
        let mask = self.slots.len() - 1;
        for (s, last, bytes) in old {
            let mut i = Self::hash(s.pc, s.tag) & mask;
            while self.slots[i].tag != Self::EMPTY {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
            self.last[i] = last;
            self.bytes[i] = bytes;
            self.used.push(i as u32);
        }
    }

    /// Hands every tallied access to `f` with its count and empties the tally.
    fn drain(&mut self, f: &mut impl FnMut(Counted, u64)) {
        for &i in &self.used {
            let i = i as usize;
            let s = std::mem::replace(&mut self.slots[i], Self::EMPTY_SLOT);
            self.last[i] = u32::MAX;
            let bytes = std::mem::take(&mut self.bytes[i]);
            let c = if s.tag <= tag::ACCESS_MAX {
                Counted::Access {
                    pc: Pc(s.pc),
                    write: s.tag & tag::ACCESS_WRITE != 0,
                    bytes: 1 << (s.tag & 7),
                }
            } else {
                Counted::Range { pc: Pc(s.pc), write: s.tag == tag::RANGE_WRITE, bytes }
            };
            f(c, u64::from(s.count));
        }
        // A table grown for one chunk with many code addresses would spread the
        // next chunks' few hot slots over more cache lines than L1 holds.
        let want = (self.used.len() * 4).next_power_of_two().max(256);
        if want * 4 <= self.slots.len() {
            self.resize(want);
        }
        self.used.clear();
    }
}

impl<B: AsRef<[u8]>> Decoder<B> {
    /// Scans the rest of the chunk for the counts kernels, calling `f` with the
    /// [`Counted`] view of its events and how many times it occurred. It reads the
    /// op stream only (the side stream may be absent): loads, stores and ranges
    /// (nearly every event) are tallied in `tally` by (pc, tag) and handed to `f`
    /// once per distinct (pc, size, kind) at the end; function entries and exits
    /// are counted the same way (one call each for the chunk); atomics are handed
    /// over one by one; the rare events take the full decoder's path, one call
    /// each. Errors are the full decoder's for the op stream; the side stream is
    /// not checked. Order is not kept. Returns the number of events; on an error,
    /// `f` has seen every event before it.
    pub fn scan_counts(
        &mut self,
        tally: &mut AccessTally,
        mut f: impl FnMut(Counted, u64),
    ) -> Result<u64, DecodeError> {
        if self.failed {
            return Ok(0);
        }
        self.ops_only = true;
        tally.ready();
        let (mut enters, mut exits) = (0u64, 0u64);
        // loop folding pays when the bytes repeat; chunks where it did not try
        // again only now and then
        let res = if tally.fold_next {
            tally.folded = 0;
            tally.folds = 0;
            let r = self.scan_loop::<true>(tally, &mut f, &mut enters, &mut exits);
            if let Ok(n) = r {
                tally.fold_next = tally.folded * 4 >= n && tally.folded >= FOLD_MIN * tally.folds;
            }
            tally.plain_chunks = 0;
            r
        } else {
            tally.plain_chunks += 1;
            tally.fold_next = tally.plain_chunks >= 16;
            self.scan_loop::<false>(tally, &mut f, &mut enters, &mut exits)
        };
        tally.drain(&mut f);
        if enters > 0 {
            f(Counted::Call, enters);
        }
        if exits > 0 {
            f(Counted::Other, exits);
        }
        res
    }

    /// The scan of [`Decoder::scan_counts`], with or without loop folding.
    #[inline(always)]
    fn scan_loop<const FOLD: bool>(
        &mut self,
        tally: &mut AccessTally,
        f: &mut impl FnMut(Counted, u64),
        enters: &mut u64,
        exits: &mut u64,
    ) -> Result<u64, DecodeError> {
        let mut n = 0u64;
        // the first event number loop folding may look back to
        let mut ring_start = 0u64;
        let mut pc = self.pred.prev_pc;
        let mut end = self.end;
        let res = loop {
            let buf = &self.buf.as_ref()[..end];
            // the fast path: every byte of the event present, no per-byte bounds checks
            if let Some(s) = buf.get(self.pos..self.pos + NEED) {
                let s: &[u8; NEED] = s.try_into().expect("NEED bytes");
                let t = s[0];
                if t <= tag::ACCESS_MAX && t & 7 <= 4 {
                    if let Some((dpc, n1)) = varint_at(s, 1) {
                        let start = self.pos;
                        let pc_before = pc;
                        pc = pc.wrapping_add(unzigzag(dpc) as u64);
                        // a value lives in the side stream: the same access
                        let t = t & !tag::ACCESS_VALUE;
                        if !FOLD {
                            tally.add(pc, t);
                            self.pos += 1 + n1;
                            n += 1;
                            continue;
                        }
                        let (i, grew) = tally.find(pc, t);
                        if grew {
                            ring_start = n;
                        }
                        let prev = u64::from(tally.last[i]);
                        if prev < n && prev >= ring_start && n - prev <= RING {
                            // accesses prev..n run from q to start and end where
                            // they began: fold the repeats that follow
                            let q = tally.ring[(prev % RING) as usize].1;
                            let len = start - q;
                            let reps = (repeat_len(buf, q, start) / len) as u64;
                            if reps > 0 {
                                for k in prev..n {
                                    let slot = tally.ring[(k % RING) as usize].0;
                                    tally.slots[slot as usize].count += reps as u32;
                                }
                                tally.folded += reps * (n - prev);
                                tally.folds += 1;
                                n += reps * (n - prev);
                                self.pos = start + reps as usize * len;
                                pc = pc_before;
                                // positions in the ring no longer line up
                                ring_start = n;
                                continue;
                            }
                        }
                        let sl = &mut tally.slots[i];
                        sl.count += 1;
                        tally.last[i] = n as u32;
                        tally.ring[(n % RING) as usize] = (i as u32, start);
                        self.pos += 1 + n1;
                        n += 1;
                        continue;
                    }
                } else if t == tag::RANGE_READ || t == tag::RANGE_WRITE {
                    // tallied like plain accesses, with their lengths summed
                    if let Some((dpc, n1)) = varint_at(s, 1) {
                        if let Some((len, n2)) = varint_at(s, 1 + n1) {
                            pc = pc.wrapping_add(unzigzag(dpc) as u64);
                            tally.add_range(pc, t, len);
                            self.pos += 1 + n1 + n2;
                            n += 1;
                            ring_start = n;
                            continue;
                        }
                    }
                } else if t == tag::FUNC_ENTER || t == tag::FUNC_EXIT {
                    // only counted: the call site and frame are in the side stream
                    if let Some((dpc, n1)) = varint_at(s, 1) {
                        self.pos += 1 + n1;
                        pc = pc.wrapping_add(unzigzag(dpc) as u64);
                        n += 1;
                        ring_start = n;
                        if t == tag::FUNC_ENTER {
                            *enters += 1;
                        } else {
                            *exits += 1;
                        }
                        continue;
                    }
                }
            } else if self.pos >= end && !self.rep.active {
                if let Err(e) = self.at_end() {
                    break Err(e);
                }
                break Ok(n);
            }
            if self.pos < end && self.buf.as_ref()[self.pos] == tag::REPEAT && !self.rep.active {
                // a repeat of plain code counts its body once, times its count
                if let Some(k) = self.repeat_counts(tally, pc, enters, exits) {
                    n += k;
                    ring_start = n;
                    continue;
                }
            }
            self.pred.prev_pc = pc;
            let r = self.scan_slow();
            pc = self.pred.prev_pc;
            // the slow path may have stepped into or out of a repeat
            end = self.end;
            match r {
                Ok(Some(c)) => {
                    n += 1;
                    ring_start = n;
                    f(c, 1);
                }
                Ok(None) => break Ok(n),
                Err(e) => break Err(e),
            }
        };
        self.pred.prev_pc = pc;
        res
    }

    /// The `repeat` at the cursor, counted without replaying it when its body is
    /// loads, stores, ranges, entries and exits that end at the pc they start
    /// from: each counted `count` times more. Returns the events counted, with
    /// the cursor after the repeat; `None` (cursor unmoved) sends the caller to
    /// the replay.
    fn repeat_counts(
        &mut self,
        tally: &mut AccessTally,
        pc0: u64,
        enters: &mut u64,
        exits: &mut u64,
    ) -> Option<u64> {
        let (body, after, reps, p) = self.repeat_head()?;
        let reps32 = u32::try_from(reps).ok()?;
        let counted = |t: u8| t <= tag::RANGE_WRITE || t == tag::FUNC_ENTER || t == tag::FUNC_EXIT;
        // first pass: check the body, second: count it
        self.walk_body(body, pc0, p, |t, _, _| counted(t))?;
        self.walk_body(body, pc0, p, |t, pc, len| {
            match t {
                tag::FUNC_ENTER => *enters += reps,
                tag::FUNC_EXIT => *exits += reps,
                _ => tally.add_n(pc, t & !tag::ACCESS_VALUE, len, reps32),
            }
            true
        })?;
        self.pos = after;
        Some(reps * p)
    }

    /// One event of the scan off its fast path, read from the op stream alone.
    #[inline(never)]
    fn scan_slow(&mut self) -> Result<Option<Counted>, DecodeError> {
        if self.at_end()? {
            return Ok(None);
        }
        let t = self.buf.as_ref()[self.pos];
        let c = match t {
            0..=tag::ACCESS_MAX => {
                if t & 7 > 4 {
                    return Err(self.err("access size code out of range"));
                }
                self.pos += 1;
                let pc = Pc(self.pc()?);
                let write = t & tag::ACCESS_WRITE != 0;
                Counted::Access { pc, write, bytes: 1 << (t & 7) }
            }
            tag::RANGE_READ | tag::RANGE_WRITE => {
                self.pos += 1;
                let pc = Pc(self.pc()?);
                Counted::Range { pc, write: t == tag::RANGE_WRITE, bytes: self.v()? }
            }
            tag::RMW => {
                self.pos += 1;
                let (b, op) = self.rmw_head()?;
                let pc = Pc(self.pc()?);
                Counted::Rmw { pc, size: 1 << (b & 7), stores: op.stores() }
            }
            tag::FUNC_ENTER | tag::FUNC_EXIT => {
                self.pos += 1;
                self.pc()?;
                if t == tag::FUNC_ENTER {
                    Counted::Call
                } else {
                    Counted::Other
                }
            }
            // allocations without building their stacks (the checks are the
            // full decoder's)
            tag::ALLOC => {
                self.pos += 1;
                if AllocKind::from_u8(self.byte()?).is_none() {
                    return Err(self.err("unknown allocation kind"));
                }
                let pc = self.pc()?;
                self.v()?;
                let size = self.v()?;
                self.skip_stack()?;
                Counted::Alloc { pc: Pc(pc), size, allocates: true, frees: false }
            }
            tag::REALLOC => {
                self.pos += 1;
                let pc = self.pc()?;
                let old = self.v()?;
                let new = self.v()?;
                let size = self.v()?;
                self.skip_stack()?;
                let (allocates, frees) = crate::realloc_counts(old, new);
                Counted::Alloc { pc: Pc(pc), size, allocates, frees }
            }
            _ => match self.next_slow()? {
                Some(e) => Counted::of(&e),
                None => return Ok(None),
            },
        };
        Ok(Some(c))
    }
}

/// How many bytes from `start` on repeat the bytes `start - q` earlier
/// (`q < start`): the longest `m` with `buf[start + j] == buf[q + j]` for `j < m`.
/// Zero unless at least 8 bytes repeat, so a failed try costs one comparison.
#[inline(always)]
fn repeat_len(buf: &[u8], q: usize, start: usize) -> usize {
    let word = |i: usize| buf.get(i..i + 8).map(|w| u64::from_le_bytes(w.try_into().expect("8")));
    match (word(q), word(start)) {
        (Some(a), Some(b)) if a == b => {}
        _ => return 0,
    }
    let (a, b) = (&buf[q..], &buf[start..]);
    let mut m = 8;
    while m + 32 <= b.len() && a[m..m + 32] == b[m..m + 32] {
        m += 32;
    }
    while m < b.len() && a[m] == b[m] {
        m += 1;
    }
    m
}
