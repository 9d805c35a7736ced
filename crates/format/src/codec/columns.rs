//! Batch decoding into columns: [`Columns`] and [`Decoder::decode_columns`].
//!
//! Loads, stores and ranges (nearly every event) go into plain vectors, one per
//! field, that an Arrow buffer can wrap without copying; every other event is kept
//! whole beside them with its number in the chunk. The hot loop decodes a plain
//! access without building an [`Event`]: bounds are checked once per event for the
//! longest encoding it takes, and varints are read eight bytes at a time.

use super::{slot, tag, DecodeError, Decoder};
use crate::event::{AccessKind, Event};
use crate::types::{Addr, Pc};
use crate::varint::unzigzag;

/// Decoded events in columns: row `i` of `seq`, `pc`, `addr`, `size` and `kind`
/// is one load, store or range ([`Event::Access`] or [`Event::Range`]); every other
/// event (atomic read-modify-writes, fences, calls, allocations, thread events...)
/// is in `other`. Both are in stream order; `seq` numbers merge them back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Columns {
    /// The event's number: in the chunk, from 0 ([`Decoder::set_seq`] moves the start).
    pub seq: Vec<u64>,
    /// Code address.
    pub pc: Vec<u64>,
    /// Data address.
    pub addr: Vec<u64>,
    /// Bytes accessed: 1, 2, 4, 8 or 16, or a range's length.
    pub size: Vec<u64>,
    /// [`Columns::WRITE`], [`Columns::ATOMIC`], [`Columns::RANGE`], [`Columns::VALUE`] bits.
    pub kind: Vec<u8>,
    /// Loaded or stored values (`memlens record --values`): empty when no access
    /// so far had one, else one per row (0 where `kind` lacks [`Columns::VALUE`]).
    pub value: Vec<u64>,
    /// The other events, each with its number (as in `seq`).
    pub other: Vec<(u64, Event)>,
    /// Leave a loop's repeated iterations as [`Run`]s instead of rows (default
    /// off: every event is a row or in `other`). Set by a consumer that can count
    /// a run's accesses without visiting each one.
    pub keep_runs: bool,
    /// With [`Columns::keep_runs`]: the repeats left as runs, in stream order.
    pub runs: Vec<Run>,
    /// Each run's address deltas: `run_deltas[r.deltas..r.deltas + r.events]`.
    pub run_deltas: Vec<u64>,
}

/// Iterations of a loop's body that are not rows (see [`Columns::keep_runs`]).
/// The body is the `events` rows before row `row` (one iteration, decoded): the
/// run is that body `reps` more times, each time every row's address moved by its
/// delta (`Columns::run_deltas`, wrapping), the other columns the same. The run's
/// events are numbered `seq..seq + reps × events`, between the body and row `row`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Run {
    /// The row after the body (the body is rows `row - events..row`).
    pub row: usize,
    /// Rows in the body.
    pub events: usize,
    /// Iterations after the body's.
    pub reps: u64,
    /// The number of the run's first event.
    pub seq: u64,
    /// Where the body's deltas start in [`Columns::run_deltas`].
    pub deltas: usize,
}

impl Run {
    /// Events in the run.
    pub fn len(&self) -> u64 {
        self.reps * self.events as u64
    }

    /// No events (never made by the decoder).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Loops' replays a batch decode left folded ([`Decoder::next_batch_runs`]): run
/// `r`'s body is the `r.events` events of the batch before position `r.row`,
/// repeated `r.reps` more times, each access's address moved by its delta
/// ([`EventRuns::deltas`], wrapping) every time; `r.seq` is the number in the
/// chunk of the run's first event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventRuns {
    /// The runs, in stream order.
    pub runs: Vec<Run>,
    /// Each run's address deltas, as in [`Columns::run_deltas`].
    pub deltas: Vec<u64>,
}

impl EventRuns {
    /// No runs.
    pub fn clear(&mut self) {
        self.runs.clear();
        self.deltas.clear();
    }

    /// Address deltas of run `r`'s body events.
    pub fn deltas(&self, r: &Run) -> &[u64] {
        &self.deltas[r.deltas..r.deltas + r.events]
    }

    /// Events in every run.
    pub fn events(&self) -> u64 {
        self.runs.iter().map(Run::len).sum()
    }
}

/// Iteration `k` (1 = the first replay) of a folded body event `ev` whose
/// address moves by `delta` each time: what a full decode gives in its place.
pub fn replayed(ev: &Event, delta: u64, k: u64) -> Event {
    let mut e = ev.clone();
    if let Event::Access { addr, .. } | Event::Range { addr, .. } = &mut e {
        addr.0 = addr.0.wrapping_add(delta.wrapping_mul(k));
    }
    e
}

impl Columns {
    /// [`Columns::kind`] bit: a store (else a load).
    pub const WRITE: u8 = 1;
    /// [`Columns::kind`] bit: an atomic load or store.
    pub const ATOMIC: u8 = 2;
    /// [`Columns::kind`] bit: a byte range (`memcpy`, `memset`...); `size` is its length.
    pub const RANGE: u8 = 4;
    /// [`Columns::kind`] bit: the access's value is in [`Columns::value`].
    pub const VALUE: u8 = 8;

    /// Empty columns.
    pub fn new() -> Columns {
        Columns::default()
    }

    /// Rows (loads, stores and ranges).
    pub fn len(&self) -> usize {
        self.pc.len()
    }

    /// No rows and no other events.
    pub fn is_empty(&self) -> bool {
        self.pc.is_empty() && self.other.is_empty() && self.runs.is_empty()
    }

    /// Events of both kinds, the runs' included.
    pub fn events(&self) -> usize {
        self.pc.len() + self.other.len() + self.runs.iter().map(|r| r.len() as usize).sum::<usize>()
    }

    /// Address deltas of run `r`'s body rows.
    pub fn deltas(&self, r: &Run) -> &[u64] {
        &self.run_deltas[r.deltas..r.deltas + r.events]
    }

    /// Empties every column (keeping the allocations and [`Columns::keep_runs`]).
    pub fn clear(&mut self) {
        self.runs.clear();
        self.run_deltas.clear();
        self.seq.clear();
        self.pc.clear();
        self.addr.clear();
        self.size.clear();
        self.kind.clear();
        self.value.clear();
        self.other.clear();
    }

    /// Row `i` as the event it was decoded from.
    pub fn event(&self, i: usize) -> Event {
        let (pc, addr, size, k) = (self.pc[i], self.addr[i], self.size[i], self.kind[i]);
        let kind = if k & Columns::WRITE != 0 { AccessKind::Write } else { AccessKind::Read };
        if k & Columns::RANGE != 0 {
            return Event::Range { pc: Pc(pc), addr: Addr(addr), len: size, kind };
        }
        Event::Access {
            pc: Pc(pc),
            addr: Addr(addr),
            size: size as u8,
            kind,
            atomic: k & Columns::ATOMIC != 0,
            value: (k & Columns::VALUE != 0).then(|| self.value[i]),
        }
    }

    /// Every event in stream order with its number: rows, runs (written out) and
    /// `other` merged by `seq`.
    pub fn to_events(&self) -> Vec<(u64, Event)> {
        let mut out = Vec::with_capacity(self.events());
        let mut o = self.other.iter().peekable();
        let mut runs = self.runs.iter().peekable();
        for i in 0..=self.len() {
            if let Some(r) = runs.next_if(|r| r.row == i) {
                let d = self.deltas(r);
                let mut seq = r.seq;
                for k in 1..=r.reps {
                    for (j, b) in (i - r.events..i).enumerate() {
                        let mut e = self.event(b);
                        if let Event::Access { addr, .. } | Event::Range { addr, .. } = &mut e {
                            addr.0 = addr.0.wrapping_add(d[j].wrapping_mul(k));
                        }
                        out.push((seq, e));
                        seq += 1;
                    }
                }
            }
            if i == self.len() {
                break;
            }
            while let Some((s, e)) = o.next_if(|(s, _)| *s < self.seq[i]) {
                out.push((*s, e.clone()));
            }
            out.push((self.seq[i], self.event(i)));
        }
        out.extend(o.cloned());
        out
    }

    /// Appends one row.
    fn push_row(&mut self, seq: u64, pc: u64, addr: u64, size: u64, k: u8, value: Option<u64>) {
        if let Some(v) = value {
            // the value column starts at the first value, zero-filled behind it
            self.value.resize(self.pc.len(), 0);
            self.value.push(v);
        }
        self.seq.push(seq);
        self.pc.push(pc);
        self.addr.push(addr);
        self.size.push(size);
        self.kind.push(k);
    }

    pub(crate) fn reserve(&mut self, n: usize) {
        self.seq.reserve(n);
        self.pc.reserve(n);
        self.addr.reserve(n);
        self.size.reserve(n);
        self.kind.reserve(n);
    }
}

/// Per tag byte: the [`Columns::kind`] bits of a plain load or store without
/// value (size codes 0..=4), or `NOT_PLAIN`.
const KIND_OF: [u8; 256] = {
    let mut k = [NOT_PLAIN; 256];
    let mut t = 0;
    while t <= tag::ACCESS_MAX as usize {
        if t as u8 & tag::ACCESS_VALUE == 0 && t & 7 <= 4 {
            let mut v = 0;
            if t as u8 & tag::ACCESS_WRITE != 0 {
                v |= Columns::WRITE;
            }
            if t as u8 & tag::ACCESS_ATOMIC != 0 {
                v |= Columns::ATOMIC;
            }
            k[t] = v;
        }
        t += 1;
    }
    k
};
const NOT_PLAIN: u8 = 0xff;

/// Per tag byte of a row the fast path decoded: its [`Columns::kind`] bits.
const ROW_KIND: [u8; 256] = {
    let mut k = KIND_OF;
    k[tag::RANGE_READ as usize] = Columns::RANGE;
    k[tag::RANGE_WRITE as usize] = Columns::RANGE | Columns::WRITE;
    k
};

/// Per tag byte: an access's size in bytes (a table load is cheaper than the
/// shift); 0 for ranges, whose length the fast path wrote already.
const SIZE_OF: [u64; 256] = {
    let mut s = [0u64; 256];
    let mut t = 0;
    while t < 256 {
        s[t] = 1 << (t & 7);
        t += 1;
    }
    s[tag::RANGE_READ as usize] = 0;
    s[tag::RANGE_WRITE as usize] = 0;
    s
};

/// The varint at the start of the little-endian word `w` and its length, when it
/// is at most 8 bytes long (longer ones take the general path). One and two
/// bytes (a loop's strides) take a branch each; longer ones are gathered
/// without a branch per byte.
#[inline(always)]
pub(super) fn varint8(w: u64) -> Option<(u64, usize)> {
    if w & 0x80 == 0 {
        return Some((w & 0x7f, 1));
    }
    if w & 0x8000 == 0 {
        return Some(((w & 0x7f) | ((w >> 1) & 0x3f80), 2));
    }
    let stops = !w & 0x8080_8080_8080_8080;
    if stops == 0 {
        return None;
    }
    let bits = stops.trailing_zeros() + 1;
    let x = w & (u64::MAX >> (64 - bits)) & 0x7f7f_7f7f_7f7f_7f7f;
    // gather the 7-bit groups: pairs, then quads, then all eight
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    let x = (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4);
    Some((x, bits as usize / 8))
}

impl<B: AsRef<[u8]>> Decoder<B> {
    /// Numbers the next event `seq` (e.g. the chunk's first index in its stream,
    /// so [`Columns::seq`] holds stream indices).
    pub fn set_seq(&mut self, seq: u64) {
        self.seq = seq;
    }

    /// Decodes up to `max` events, appending them to `out` (not cleared: a chunk
    /// can be decoded whole into one [`Columns`] by calling until 0). Returns how
    /// many were decoded; 0 at the end of the chunk. On an error, the events
    /// decoded before it are in `out`. Decodes exactly what [`Decoder::next`] does.
    pub fn decode_columns(&mut self, out: &mut Columns, max: usize) -> Result<usize, DecodeError> {
        if self.failed {
            return Ok(0);
        }
        out.reserve(max);
        let mut n = 0;
        let res = loop {
            n += self.columns_fast(out, max.saturating_sub(n));
            if n < max && self.rep.active && self.pos >= self.end {
                n += if out.keep_runs {
                    self.replay_run(out)
                } else {
                    self.replay_columns(out, max - n)
                };
            }
            if n >= max {
                break Ok(());
            }
            match self.at_end() {
                Ok(true) => break Ok(()),
                Ok(false) => {}
                Err(e) => break Err(e),
            }
            match self.column_slow(out) {
                Ok(()) => n += 1,
                Err(e) => break Err(e),
            }
        };
        if !out.value.is_empty() {
            out.value.resize(out.pc.len(), 0);
        }
        res.map(|()| n)
    }

    /// Plain loads and stores, ranges, function entries and exits while every
    /// byte they may need is present, at most `max` events (room for the rows reserved);
    /// returns how many.
    #[inline(always)]
    fn columns_fast(&mut self, out: &mut Columns, max: usize) -> usize {
        let buf = self.buf.as_ref();
        // tag and an 8-byte pc varint in the ops, an 8-byte address varint in the
        // side stream: checked once per event, then read unchecked
        let (Some(op_lim), Some(side_lim)) = (self.end.checked_sub(9), buf.len().checked_sub(8))
        else {
            return 0;
        };
        if self.end > buf.len() {
            return 0;
        }
        let row = out.pc.len();
        let room = (out.seq.capacity() - out.seq.len())
            .min(out.pc.capacity() - row)
            .min(out.addr.capacity() - out.addr.len())
            .min(out.size.capacity() - out.size.len())
            .min(out.kind.capacity() - out.kind.len());
        let max = max.min(room);
        let b = buf.as_ptr();
        // SAFETY (reads): `at + 8 <= buf.len()` at every call below.
        let word = |at: usize| unsafe { u64::from_le((b.add(at) as *const u64).read_unaligned()) };
        let (mut pos, mut spos, end) = (self.pos, self.spos, self.end);
        let mut pc = self.pred.prev_pc;
        let last = &mut self.pred.last;
        let first = self.seq;
        // SAFETY (writes): rows row..row + max are within every column's capacity.
        let (seq, pcs, addrs, sizes, kinds) = unsafe {
            (
                out.seq.as_mut_ptr().add(out.seq.len()),
                out.pc.as_mut_ptr().add(row),
                out.addr.as_mut_ptr().add(out.addr.len()),
                out.size.as_mut_ptr().add(out.size.len()),
                out.kind.as_mut_ptr().add(out.kind.len()),
            )
        };
        let mut k = 0;
        // function entries and exits (a quarter of the events of call-heavy code)
        // decoded here too, into `other`; `extra` counts them
        let mut extra = 0u64;
        let mut frame = self.pred.prev_frame;
        'runs: while k + (extra as usize) < max && pos <= op_lim && spos <= side_lim {
            // an event takes at most 9 op and 8 side bytes: this many are in
            // bounds without a check each
            let left = max - k - extra as usize;
            let stop = k + ((op_lim - pos) / 9).min((side_lim - spos) / 8).min(left - 1) + 1;
            while k < stop {
                let w = word(pos);
                let t = w as u8;
                // a load, store or range: its pc delta, its op bytes and, for a
                // range, its length (an entry or exit is decoded here whole)
                let (dpc, ops, range) = if KIND_OF[t as usize] != NOT_PLAIN {
                    // the pc's first 7 bytes are in `w`; a longer one is read again
                    match varint8(w >> 8) {
                        Some((d, n)) if n < 8 => (d, 1 + n, None),
                        _ => match varint8(word(pos + 1)) {
                            Some((d, n)) => (d, 1 + n, None),
                            None => break 'runs,
                        },
                    }
                } else if t == tag::RANGE_READ || t == tag::RANGE_WRITE {
                    // tag, pc and length: up to 17 op bytes
                    if pos + 17 > end {
                        break 'runs;
                    }
                    let Some((d, n1)) = varint8(word(pos + 1)) else { break 'runs };
                    let Some((len, n2)) = varint8(word(pos + 1 + n1)) else { break 'runs };
                    (d, 1 + n1 + n2, Some(len))
                } else {
                    if t != tag::FUNC_ENTER && t != tag::FUNC_EXIT {
                        break 'runs;
                    }
                    let Some((dpc, n1)) = varint8(word(pos + 1)) else { break 'runs };
                    let at = first + k as u64 + extra;
                    let epc = pc.wrapping_add(unzigzag(dpc) as u64);
                    let o = &mut out.other;
                    if o.len() == o.capacity() {
                        o.reserve(256);
                    }
                    // SAFETY: room for one more, written in place (an event built
                    // on the stack and copied stalled on store forwarding); the
                    // length covers it only once written.
                    let slot = unsafe { o.as_mut_ptr().add(o.len()) };
                    if t == tag::FUNC_EXIT {
                        pos += 1 + n1;
                        unsafe { slot.write((at, Event::FuncExit { pc: Pc(epc) })) };
                    } else {
                        // call site and frame: two side varints of up to 8 bytes
                        if spos + 16 > buf.len() {
                            break 'runs;
                        }
                        let Some((dcs, m1)) = varint8(word(spos)) else { break 'runs };
                        let Some((dfr, m2)) = varint8(word(spos + m1)) else { break 'runs };
                        pos += 1 + n1;
                        spos += m1 + m2;
                        frame = frame.wrapping_add(unzigzag(dfr) as u64);
                        let call_site = Pc(epc.wrapping_add(unzigzag(dcs) as u64));
                        let ev = Event::FuncEnter { pc: Pc(epc), call_site, frame: Addr(frame) };
                        unsafe { slot.write((at, ev)) };
                    }
                    // SAFETY: the slot was written above.
                    unsafe { o.set_len(o.len() + 1) };
                    pc = epc;
                    extra += 1;
                    // an entry's side bytes may exceed the per-event bound: recount
                    continue 'runs;
                };
                let Some((da, n2)) = varint8(word(spos)) else { break 'runs };
                pos += ops;
                spos += n2;
                pc = pc.wrapping_add(unzigzag(dpc) as u64);
                // the new address kept in a register: the column stores below
                // may alias `last` for the compiler, which reloaded the slot
                // after them (a stall on the store just made: a fifth of sort's decode)
                let s = &mut last[slot(pc)];
                let addr = s.wrapping_add(unzigzag(da) as u64);
                *s = addr;
                // SAFETY: k < max (see above). The tag goes in the kind column;
                // the pass below derives kind and size from it, out of this
                // loop, which keeps its pointers in registers (a range's length,
                // which the tag does not give, is written here).
                unsafe {
                    pcs.add(k).write(pc);
                    addrs.add(k).write(addr);
                    kinds.add(k).write(t);
                    seq.add(k).write(first + k as u64 + extra);
                    if let Some(len) = range {
                        sizes.add(k).write(len);
                    }
                }
                if range.is_some() {
                    // more op bytes than the per-event bound: recount
                    k += 1;
                    continue 'runs;
                }
                k += 1;
            }
        }
        for i in 0..k {
            // SAFETY: rows below k of `kinds` were written above; i < k <= max.
            unsafe {
                let t = *kinds.add(i) as usize;
                kinds.add(i).write(ROW_KIND[t]);
                let size = SIZE_OF[t];
                if size != 0 {
                    sizes.add(i).write(size);
                }
            }
        }
        // SAFETY: rows row..row + k of every column were written above.
        unsafe {
            out.seq.set_len(out.seq.len() + k);
            out.pc.set_len(row + k);
            out.addr.set_len(out.addr.len() + k);
            out.size.set_len(out.size.len() + k);
            out.kind.set_len(out.kind.len() + k);
        }
        self.pos = pos;
        self.spos = spos;
        self.pred.prev_pc = pc;
        self.pred.prev_frame = frame;
        self.seq += k as u64 + extra;
        k + extra as usize
    }

    /// At the end of a replayed body whose replay is the last rows of `out`:
    /// the next replays (at most `room` rows) copied from those rows, each address
    /// moved by its event's delta, when the body is loads, stores and ranges
    /// without values, of distinct prediction slots, ending at the pc it starts
    /// from. Returns the rows added (0: decode the next replay instead).
    fn replay_columns(&mut self, out: &mut Columns, room: usize) -> usize {
        if room < self.rep.events as usize {
            return 0;
        }
        let Some((p, deltas)) = self.copyable_replay(out) else { return 0 };
        let len = out.pc.len();
        let reps = (self.rep.left as usize).min(room / p);
        let n = reps * p;
        out.reserve(n);
        for r in 0..reps {
            let from = len - p + r * p;
            out.pc.extend_from_within(from..from + p);
            out.size.extend_from_within(from..from + p);
            out.kind.extend_from_within(from..from + p);
            for (k, d) in deltas.iter().enumerate() {
                let a = out.addr[from + k].wrapping_add(*d);
                out.addr.push(a);
            }
        }
        out.seq.extend(self.seq..self.seq + n as u64);
        for k in 0..p {
            let i = out.pc.len() - p + k;
            self.pred.last[slot(out.pc[i])] = out.addr[i];
        }
        self.seq += n as u64;
        self.rep.seq0 = self.seq - p as u64;
        self.rep.left -= reps as u64;
        n
    }

    /// When the last rows of `out` are the replay under way, whole, and further
    /// replays are copies of it (see `replay_deltas`): its rows and address deltas.
    fn copyable_replay(&self, out: &Columns) -> Option<(usize, Vec<u64>)> {
        let p = self.rep.events as usize;
        let len = out.pc.len();
        if self.rep.left == 0
            || self.seq - self.rep.seq0 != p as u64
            || len < p
            || out.seq[len - p] != self.rep.seq0
        {
            return None;
        }
        let rows = len - p..len;
        if out.kind[rows.clone()].iter().any(|&k| k & Columns::VALUE != 0) {
            return None;
        }
        Some((p, self.replay_deltas(&out.pc[rows])?))
    }

    /// [`Decoder::replay_columns`] for [`Columns::keep_runs`]: the replays left
    /// as one [`Run`] after the rows (whatever their number), the predictor moved
    /// past them. Returns the run's events (0: decode the next replay instead).
    fn replay_run(&mut self, out: &mut Columns) -> usize {
        let Some((p, deltas)) = self.copyable_replay(out) else { return 0 };
        let len = out.pc.len();
        let reps = self.rep.left;
        out.runs.push(Run {
            row: len,
            events: p,
            reps,
            seq: self.seq,
            deltas: out.run_deltas.len(),
        });
        for (k, d) in deltas.iter().enumerate() {
            let i = len - p + k;
            self.pred.last[slot(out.pc[i])] = out.addr[i].wrapping_add(d.wrapping_mul(reps));
        }
        out.run_deltas.extend_from_slice(&deltas);
        let n = reps * p as u64;
        self.seq += n;
        self.rep.seq0 = self.seq - p as u64;
        self.rep.left = 0;
        n as usize
    }

    /// One event off the fast path, into its place in `out`.
    #[inline(never)]
    fn column_slow(&mut self, out: &mut Columns) -> Result<(), DecodeError> {
        let seq = self.seq;
        let Some(ev) = self.next_slow()? else { return Ok(()) };
        self.seq += 1;
        match ev {
            Event::Access { pc, addr, size, kind: k, atomic, value } => {
                let mut bits = if k == AccessKind::Write { Columns::WRITE } else { 0 };
                if atomic {
                    bits |= Columns::ATOMIC;
                }
                if value.is_some() {
                    bits |= Columns::VALUE;
                }
                out.push_row(seq, pc.0, addr.0, u64::from(size), bits, value);
            }
            Event::Range { pc, addr, len, kind: k } => {
                let w = if k == AccessKind::Write { Columns::WRITE } else { 0 };
                out.push_row(seq, pc.0, addr.0, len, Columns::RANGE | w, None);
            }
            ev => out.other.push((seq, ev)),
        }
        Ok(())
    }
}
