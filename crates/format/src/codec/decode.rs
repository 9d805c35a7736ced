//! The full decoder: every event as an [`Event`], and the skeleton walk.

use super::columns::varint8;
use super::{tag, varint_at, DecodeError, EventRuns, Predictor, Run};
use crate::event::{AccessKind, AllocKind, Event, FreeKind, RmwOp};
use crate::types::{Addr, Pc, ThreadId};
use crate::varint::{self, unzigzag, MAX_VARINT};

/// `$out.push($ev)`, written so that the event is built in the vector's memory
/// (`Vec::push`, or a function taking the event, built it on the stack and copied
/// it, and the copy stalled on store forwarding: half of the decode time).
macro_rules! push_in_place {
    ($out:expr, $ev:expr) => {{
        let out: &mut Vec<Event> = $out;
        let n = out.len();
        if n == out.capacity() {
            out.reserve(1);
        }
        // SAFETY: room for one more; the length covers it only once written.
        unsafe {
            out.as_mut_ptr().add(n).write($ev);
            out.set_len(n + 1);
        }
    }};
}

/// Decodes a chunk's events in order. Stops (fused) at the first error.
pub struct Decoder<B: AsRef<[u8]>> {
    pub(super) buf: B,
    /// Op stream cursor and end.
    pub(super) pos: usize,
    pub(super) end: usize,
    /// Side stream cursor (the side stream runs to the end of `buf`).
    pub(super) spos: usize,
    pub(super) pred: Box<Predictor>,
    pub(super) failed: bool,
    /// The op-stream length prefix is missing or too large.
    pub(super) bad_layout: bool,
    /// Events decoded so far (by `next`, `next_batch`, `decode_columns`): the
    /// number in the chunk of the next one.
    pub(super) seq: u64,
    /// Where the op stream starts in `buf` (after its length prefix).
    pub(super) ops0: usize,
    /// A `repeat` being replayed (see [`super::fold`]).
    pub(super) rep: Repeat,
    /// The side stream is not read ([`Decoder::scan_counts`]): repeats do not
    /// check or move the side cursor.
    pub(super) ops_only: bool,
}

/// The state of a `repeat` event being replayed: the body (the `ops` bytes before
/// the repeat's tag and the `side` bytes before the side cursor there) is decoded
/// again `left` more times, then decoding goes on after the repeat.
#[derive(Clone, Copy, Default)]
pub(super) struct Repeat {
    pub(super) active: bool,
    /// Op stream: body start, body end (the repeat's tag), after the repeat.
    pub(super) body: usize,
    pub(super) after: usize,
    /// The op stream's real end, restored after the replay.
    pub(super) end: usize,
    /// Side stream: body start and end.
    pub(super) side: usize,
    pub(super) side_end: usize,
    /// Replays still to start after the one under way.
    pub(super) left: u64,
    /// Events in the body, as the repeat says.
    pub(super) events: u64,
    /// `Decoder::seq` when the replay under way started (the fast replays check
    /// that it decoded `events` events).
    pub(super) seq0: u64,
}

impl<B: AsRef<[u8]>> Decoder<B> {
    /// A decoder over one decompressed chunk payload (borrowed or owned): the
    /// layout of [`join`](super::join). A payload holding only the length and the op stream
    /// (see `PayloadBuf::decode_ops`) is enough for [`Decoder::scan_counts`].
    pub fn new(buf: B) -> Decoder<B> {
        let mut d = Decoder {
            buf,
            pos: 0,
            end: 0,
            spos: 0,
            pred: Box::default(),
            failed: false,
            bad_layout: false,
            seq: 0,
            ops0: 0,
            rep: Repeat::default(),
            ops_only: false,
        };
        d.layout();
        d
    }

    /// A decoder over an op stream at `buf[ops]` and a side stream from
    /// `buf[side..]` to the end (a writer's buffer, with a gap between them).
    pub(super) fn with_streams(buf: B, ops: std::ops::Range<usize>, side: usize) -> Decoder<B> {
        let mut d = Decoder::new(buf);
        (d.pos, d.ops0, d.end, d.spos, d.bad_layout) = (ops.start, ops.start, ops.end, side, false);
        d
    }

    fn layout(&mut self) {
        self.rep = Repeat::default();
        let b = self.buf.as_ref();
        let mut at = 0;
        match varint::get(b, &mut at) {
            Some(n) if n <= (b.len() - at) as u64 => {
                self.pos = at;
                self.ops0 = at;
                self.end = at + n as usize;
                self.spos = self.end;
                self.bad_layout = false;
            }
            // an empty payload is an empty chunk
            None if b.is_empty() => (self.pos, self.end, self.spos) = (0, 0, 0),
            _ => {
                (self.pos, self.end, self.spos) = (0, 0, 0);
                self.bad_layout = true;
            }
        }
    }

    /// Reuses this decoder (and its prediction table) for another chunk.
    pub fn reset(&mut self, buf: B) {
        self.buf = buf;
        self.failed = false;
        self.seq = 0;
        self.ops_only = false;
        self.pred.reset();
        self.layout();
    }

    /// The buffer back, to reuse its allocation.
    pub fn into_inner(self) -> B {
        self.buf
    }

    /// Current byte offset.
    pub fn offset(&self) -> usize {
        self.pos
    }

    pub(super) fn err(&mut self, what: &'static str) -> DecodeError {
        self.failed = true;
        DecodeError { offset: self.pos, what }
    }

    /// At the end of the op stream: `Ok(true)`, or the layout error. Steps into
    /// and out of `repeat`s on the way, so after `Ok(false)` the cursor is at an
    /// event.
    #[inline(always)]
    pub(super) fn at_end(&mut self) -> Result<bool, DecodeError> {
        if self.pos < self.end && self.buf.as_ref()[self.pos] != tag::REPEAT {
            return Ok(false);
        }
        self.at_end_slow()
    }

    #[cold]
    #[inline(never)]
    fn at_end_slow(&mut self) -> Result<bool, DecodeError> {
        loop {
            if self.pos < self.end {
                if self.buf.as_ref()[self.pos] != tag::REPEAT {
                    return Ok(false);
                }
                self.enter_repeat()?;
                continue;
            }
            if self.rep.active {
                self.repeat_boundary()?;
                continue;
            }
            if self.bad_layout && !self.failed {
                return Err(self.err("chunk does not start with its op-stream length"));
            }
            return Ok(true);
        }
    }

    /// Reads the `repeat` at the cursor and moves to its body's start.
    fn enter_repeat(&mut self) -> Result<(), DecodeError> {
        if self.rep.active {
            return Err(self.err("repeat inside a repeated body"));
        }
        let tag_at = self.pos;
        self.pos += 1;
        let (bp, bs, n, p) = (self.v()?, self.v()?, self.v()?, self.v()?);
        let ops_before = (tag_at - self.ops0) as u64;
        let side_before = if self.ops_only { bs } else { (self.spos - self.end) as u64 };
        // every event takes an op byte at least; at most 2^32 events a repeat
        if bp == 0 || bp > ops_before || bs > side_before || n == 0 || p == 0 || p > bp {
            self.pos = tag_at;
            return Err(self.err("repeat outside its chunk's events"));
        }
        if n.saturating_mul(p) > u64::from(u32::MAX) {
            self.pos = tag_at;
            return Err(self.err("repeat of more events than a chunk holds"));
        }
        self.rep = Repeat {
            active: true,
            body: tag_at - bp as usize,
            after: self.pos,
            end: self.end,
            side: if self.ops_only { self.spos } else { self.spos - bs as usize },
            side_end: self.spos,
            left: n - 1,
            events: p,
            seq0: self.seq,
        };
        self.pos = self.rep.body;
        self.end = tag_at;
        self.spos = self.rep.side;
        Ok(())
    }

    /// For a fast replay: each body event's address delta, when the body (its
    /// replay decoded to `pcs`) is loads, stores and ranges without values, each
    /// taking one side varint, of distinct prediction slots, and its first pc
    /// follows its last one (so every replay has the same pcs and moves each
    /// address by the same delta).
    pub(super) fn replay_deltas(&self, pcs: &[u64]) -> Option<Vec<u64>> {
        if pcs.is_empty() || pcs.len() > 64 {
            return None;
        }
        let mut seen = [0u64; super::SLOTS / 64];
        for &pc in pcs {
            let s = super::slot(pc);
            if seen[s / 64] & (1 << (s % 64)) != 0 {
                return None;
            }
            seen[s / 64] |= 1 << (s % 64);
        }
        let b = self.buf.as_ref();
        let mut at = self.rep.body + 1;
        let d0 = varint::get(&b[..self.rep.after], &mut at)?;
        if pcs[pcs.len() - 1].wrapping_add(unzigzag(d0) as u64) != pcs[0] {
            return None;
        }
        let side = &b[..self.rep.side_end];
        let mut at = self.rep.side;
        let d: Option<Vec<u64>> =
            pcs.iter().map(|_| varint::get(side, &mut at).map(|v| unzigzag(v) as u64)).collect();
        (at == self.rep.side_end).then_some(d?)
    }

    /// [`Decoder::next_batch`]'s fast replay (see `replay_columns`): the next
    /// replays copied from the last events of `out` (this batch started at
    /// event `base`), at most up to `max` events.
    #[cold]
    fn replay_events(&mut self, out: &mut Vec<Event>, max: usize, base: u64) {
        let p = self.rep.events as usize;
        let len = out.len();
        if self.rep.left == 0
            || self.seq - self.rep.seq0 != p as u64
            || len < p
            || base > self.rep.seq0
            || max - len < p
            || p > 64
        {
            return;
        }
        let mut pcs = [0u64; 64];
        for (k, e) in out[len - p..].iter().enumerate() {
            pcs[k] = match e {
                Event::Access { pc, value: None, .. } | Event::Range { pc, .. } => pc.0,
                _ => return,
            };
        }
        let Some(deltas) = self.replay_deltas(&pcs[..p]) else { return };
        let reps = (self.rep.left as usize).min((max - len) / p);
        out.reserve(reps * p);
        for r in 0..reps {
            let from = len - p + r * p;
            for (k, d) in deltas.iter().enumerate() {
                let n = out.len();
                // SAFETY: room reserved above; the event copied is an access or a
                // range (checked above), which own no memory, so a bitwise copy is
                // a valid event (built in place: a copy through the stack stalls).
                unsafe {
                    let dst = out.as_mut_ptr().add(n);
                    core::ptr::copy_nonoverlapping(out.as_ptr().add(from + k), dst, 1);
                    out.set_len(n + 1);
                }
                if let Event::Access { addr, .. } | Event::Range { addr, .. } = &mut out[n] {
                    addr.0 = addr.0.wrapping_add(*d);
                }
            }
        }
        for e in &out[out.len() - p..] {
            if let Event::Access { pc, addr, .. } | Event::Range { pc, addr, .. } = e {
                self.pred.last[super::slot(pc.0)] = addr.0;
            }
        }
        self.rep.left -= reps as u64;
        self.rep.seq0 = base + (out.len() - p) as u64;
    }

    /// At the end of a replayed body: the next replay, or out of the repeat.
    pub(super) fn repeat_boundary(&mut self) -> Result<(), DecodeError> {
        if self.spos != self.rep.side_end && !self.ops_only {
            return Err(self.err("repeated body's side stream out of step"));
        }
        if self.rep.left > 0 {
            self.rep.left -= 1;
            self.pos = self.rep.body;
            self.spos = self.rep.side;
            self.rep.seq0 = self.seq;
        } else {
            self.pos = self.rep.after;
            self.end = self.rep.end;
            self.spos = self.rep.side_end;
            self.rep.active = false;
        }
        Ok(())
    }

    pub(super) fn v(&mut self) -> Result<u64, DecodeError> {
        match varint::get(&self.buf.as_ref()[..self.end], &mut self.pos) {
            Some(v) => Ok(v),
            None => Err(self.err("truncated or overlong varint")),
        }
    }

    /// A varint of the side stream.
    pub(super) fn sv(&mut self) -> Result<u64, DecodeError> {
        match varint::get(self.buf.as_ref(), &mut self.spos) {
            Some(v) => Ok(v),
            None => Err(self.err("side stream cut short")),
        }
    }

    pub(super) fn byte(&mut self) -> Result<u8, DecodeError> {
        match self.buf.as_ref()[..self.end].get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => Err(self.err("event cut short")),
        }
    }

    pub(super) fn pc(&mut self) -> Result<u64, DecodeError> {
        let d = self.v()?;
        Ok(self.pred.pc_from(d))
    }

    pub(super) fn addr(&mut self, pc: u64) -> Result<u64, DecodeError> {
        let d = self.sv()?;
        Ok(self.pred.addr_from(pc, d))
    }

    fn string(&mut self) -> Result<String, DecodeError> {
        let n = self.v()? as usize;
        let buf = &self.buf.as_ref()[..self.end];
        if n > buf.len() - self.pos {
            return Err(self.err("string longer than the chunk"));
        }
        let s = String::from_utf8_lossy(&buf[self.pos..self.pos + n]).into_owned();
        self.pos += n;
        Ok(s)
    }

    fn stack(&mut self, pc: u64) -> Result<Vec<Pc>, DecodeError> {
        let n = self.v()? as usize;
        if n > self.end - self.pos {
            return Err(self.err("stack longer than the chunk"));
        }
        let mut s = Vec::with_capacity(n);
        for _ in 0..n {
            s.push(Pc(pc.wrapping_add(unzigzag(self.v()?) as u64)));
        }
        Ok(s)
    }

    /// Decodes up to `max` events into `out` (cleared first; its allocation is
    /// reused, so a caller decoding a chunk in batches allocates nothing per event).
    /// Returns how many were decoded; 0 at the end of the chunk. On an error, the
    /// events decoded before it are left in `out`, so a caller processes them first.
    pub fn next_batch(&mut self, out: &mut Vec<Event>, max: usize) -> Result<usize, DecodeError> {
        self.batch(out, max, None)
    }

    /// [`Decoder::next_batch`], but a loop's repeated iterations stay folded:
    /// where every replay of a `repeat` body moves each access by the same delta,
    /// the body's first iteration is in `out` and the replays after it are one
    /// [`Run`] in `runs` (cleared first; `row` its place in `out`, `seq` its
    /// first event's number in the chunk), not events. Returns the events in
    /// `out`; [`EventRuns::events`] counts the others.
    pub fn next_batch_runs(
        &mut self,
        out: &mut Vec<Event>,
        runs: &mut EventRuns,
        max: usize,
    ) -> Result<usize, DecodeError> {
        runs.clear();
        self.batch(out, max, Some(runs))
    }

    fn batch(
        &mut self,
        out: &mut Vec<Event>,
        max: usize,
        mut runs: Option<&mut EventRuns>,
    ) -> Result<usize, DecodeError> {
        out.clear();
        out.reserve(max);
        if self.failed {
            return Ok(0);
        }
        let base = self.seq;
        // events folded into runs so far: the next event's number is past them
        let mut folded = 0;
        while out.len() < max {
            // Events are built in the vector's memory: one built on the stack and
            // copied made every copy wait for a store-forwarding failure (half of
            // the decode time).
            if self.fast_access_into(out) {
                continue;
            }
            self.seq = base + folded + out.len() as u64;
            if self.rep.active && self.pos >= self.end {
                match runs.as_deref_mut() {
                    Some(runs) => folded += self.fold_run(out, base, runs),
                    None => self.replay_events(out, max, base),
                }
                self.seq = base + folded + out.len() as u64;
                if out.len() == max {
                    break;
                }
            }
            if self.at_end()? {
                break;
            }
            if !self.next_slow_into(out)? {
                break;
            }
        }
        self.seq = base + folded + out.len() as u64;
        Ok(out.len())
    }

    /// [`Decoder::next_batch_runs`]' fold: the replays still to come of the body
    /// just decoded (the last events of `out`; this batch started at event
    /// `base`) as one run, when each moves every access by the same delta (as
    /// [`Decoder::replay_events`] requires). Returns the events folded (0: none,
    /// the replays are decoded one by one).
    #[cold]
    fn fold_run(&mut self, out: &[Event], base: u64, runs: &mut EventRuns) -> u64 {
        let p = self.rep.events as usize;
        let len = out.len();
        if self.rep.left == 0
            || self.seq - self.rep.seq0 != p as u64
            || len < p
            || base > self.rep.seq0
            || p > 64
        {
            return 0;
        }
        let body = &out[len - p..];
        let mut pcs = [0u64; 64];
        for (k, e) in body.iter().enumerate() {
            pcs[k] = match e {
                Event::Access { pc, value: None, .. } | Event::Range { pc, .. } => pc.0,
                _ => return 0,
            };
        }
        let Some(deltas) = self.replay_deltas(&pcs[..p]) else { return 0 };
        let reps = self.rep.left;
        for (e, d) in body.iter().zip(&deltas) {
            if let Event::Access { pc, addr, .. } | Event::Range { pc, addr, .. } = e {
                self.pred.last[super::slot(pc.0)] = addr.0.wrapping_add(d.wrapping_mul(reps));
            }
        }
        runs.runs.push(Run { row: len, events: p, reps, seq: self.seq, deltas: runs.deltas.len() });
        runs.deltas.extend_from_slice(&deltas);
        let n = reps * p as u64;
        // as if every replay was decoded: the last one is the one under way
        self.rep.left = 0;
        self.rep.seq0 = self.seq + n - p as u64;
        n
    }

    /// The common case, a plain load/store without value with every field's bytes
    /// present, read without per-byte bounds checks: its tag, pc delta and address
    /// delta, the cursors moved past it. `None` sends the caller to the general path
    /// (which also reports errors).
    #[inline(always)]
    pub(super) fn take_plain(&mut self) -> Option<(u8, u64, u64)> {
        // tag + pc in the op stream, the address in the side stream
        const NEED: usize = 1 + MAX_VARINT;
        let buf = self.buf.as_ref();
        let s: &[u8; NEED] = buf[..self.end].get(self.pos..self.pos + NEED)?.try_into().ok()?;
        let t = s[0];
        if t > tag::ACCESS_MAX || t & tag::ACCESS_VALUE != 0 || t & 7 > 4 {
            return None;
        }
        let a: &[u8; MAX_VARINT] = buf.get(self.spos..self.spos + MAX_VARINT)?.try_into().ok()?;
        let (dpc, n1) = varint_at(s, 1)?;
        let (da, n2) = varint_at(a, 0)?;
        self.pos += 1 + n1;
        self.spos += n2;
        Some((t, dpc, da))
    }

    /// [`Decoder::take_plain`]'s access, pushed onto `out`.
    #[inline(always)]
    fn fast_access_into(&mut self, out: &mut Vec<Event>) -> bool {
        let Some((t, dpc, da)) = self.take_plain() else { return false };
        let pc = self.pred.pc_from(dpc);
        let addr = self.pred.addr_from(pc, da);
        let kind = if t & tag::ACCESS_WRITE != 0 { AccessKind::Write } else { AccessKind::Read };
        let (size, atomic) = (1 << (t & 7), t & tag::ACCESS_ATOMIC != 0);
        push_in_place!(
            out,
            Event::Access { pc: Pc(pc), addr: Addr(addr), size, kind, atomic, value: None }
        );
        true
    }

    /// [`Decoder::next_slow`], pushing onto `out`: function entries and exits (a
    /// quarter of the events of call-heavy code) are built in place.
    #[inline(never)]
    fn next_slow_into(&mut self, out: &mut Vec<Event>) -> Result<bool, DecodeError> {
        match self.buf.as_ref().get(self.pos) {
            Some(&tag::FUNC_ENTER) => {
                self.pos += 1;
                let pc = self.pc()?;
                let cs = pc.wrapping_add(unzigzag(self.sv()?) as u64);
                let d = self.sv()?;
                self.pred.prev_frame = self.pred.prev_frame.wrapping_add(unzigzag(d) as u64);
                let frame = Addr(self.pred.prev_frame);
                push_in_place!(out, Event::FuncEnter { pc: Pc(pc), call_site: Pc(cs), frame });
                Ok(true)
            }
            Some(&tag::FUNC_EXIT) => {
                self.pos += 1;
                let pc = self.pc()?;
                push_in_place!(out, Event::FuncExit { pc: Pc(pc) });
                Ok(true)
            }
            _ => match self.next_slow()? {
                Some(e) => {
                    out.push(e);
                    Ok(true)
                }
                None => Ok(false),
            },
        }
    }

    /// [`Decoder::take_plain`]'s access as an event.
    #[inline(always)]
    fn fast_access(&mut self) -> Option<Event> {
        let (t, dpc, da) = self.take_plain()?;
        let pc = self.pred.pc_from(dpc);
        let addr = self.pred.addr_from(pc, da);
        Some(Event::Access {
            pc: Pc(pc),
            addr: Addr(addr),
            size: 1 << (t & 7),
            kind: if t & tag::ACCESS_WRITE != 0 { AccessKind::Write } else { AccessKind::Read },
            atomic: t & tag::ACCESS_ATOMIC != 0,
            value: None,
        })
    }

    /// The next event, `Ok(None)` at the end of the chunk.
    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub fn next(&mut self) -> Result<Option<Event>, DecodeError> {
        if self.failed || self.at_end()? {
            return Ok(None);
        }
        let e = match self.fast_access() {
            Some(e) => Some(e),
            None => self.next_slow()?,
        };
        self.seq += u64::from(e.is_some());
        Ok(e)
    }

    #[inline(never)]
    pub(super) fn next_slow(&mut self) -> Result<Option<Event>, DecodeError> {
        let t = self.byte()?;
        let ev = match t {
            0..=tag::ACCESS_MAX => {
                let lg = t & 7;
                if lg > 4 {
                    return Err(self.err("access size code out of range"));
                }
                let pc = self.pc()?;
                let addr = self.addr(pc)?;
                let value = if t & tag::ACCESS_VALUE != 0 { Some(self.sv()?) } else { None };
                Event::Access {
                    pc: Pc(pc),
                    addr: Addr(addr),
                    size: 1 << lg,
                    kind: if t & tag::ACCESS_WRITE != 0 {
                        AccessKind::Write
                    } else {
                        AccessKind::Read
                    },
                    atomic: t & tag::ACCESS_ATOMIC != 0,
                    value,
                }
            }
            tag::RANGE_READ | tag::RANGE_WRITE => {
                let pc = self.pc()?;
                let len = self.v()?;
                let addr = self.addr(pc)?;
                let kind = if t == tag::RANGE_READ { AccessKind::Read } else { AccessKind::Write };
                Event::Range { pc: Pc(pc), addr: Addr(addr), len, kind }
            }
            tag::RMW => {
                let (b, op) = self.rmw_head()?;
                let lg = b & 7;
                let pc = self.pc()?;
                let addr = self.addr(pc)?;
                let value = if b & 8 != 0 { Some(self.sv()?) } else { None };
                Event::Rmw { pc: Pc(pc), addr: Addr(addr), size: 1 << lg, op, value }
            }
            tag::FENCE => {
                let pc = self.pc()?;
                let order = self.byte()?;
                Event::Fence { pc: Pc(pc), order }
            }
            tag::FUNC_ENTER => {
                let pc = self.pc()?;
                let cs = pc.wrapping_add(unzigzag(self.sv()?) as u64);
                let d = self.sv()?;
                self.pred.prev_frame = self.pred.prev_frame.wrapping_add(unzigzag(d) as u64);
                Event::FuncEnter {
                    pc: Pc(pc),
                    call_site: Pc(cs),
                    frame: Addr(self.pred.prev_frame),
                }
            }
            tag::FUNC_EXIT => Event::FuncExit { pc: Pc(self.pc()?) },
            tag::CALL => {
                let func = Pc(self.pc()?);
                let sp = Addr(self.v()?);
                let args = [self.v()?, self.v()?, self.v()?];
                Event::Call { func, sp, args }
            }
            tag::RETURN => {
                let func = Pc(self.pc()?);
                let sp = Addr(self.v()?);
                Event::Return { func, sp, value: self.v()? }
            }
            tag::ALLOC => {
                let Some(kind) = AllocKind::from_u8(self.byte()?) else {
                    return Err(self.err("unknown allocation kind"));
                };
                let pc = self.pc()?;
                let addr = self.v()?;
                let size = self.v()?;
                let stack = self.stack(pc)?;
                Event::Alloc { pc: Pc(pc), addr: Addr(addr), size, kind, stack }
            }
            tag::REALLOC => {
                let pc = self.pc()?;
                let old = self.v()?;
                let new = self.v()?;
                let size = self.v()?;
                let stack = self.stack(pc)?;
                Event::Realloc { pc: Pc(pc), old: Addr(old), new: Addr(new), size, stack }
            }
            tag::FREE => {
                let Some(kind) = FreeKind::from_u8(self.byte()?) else {
                    return Err(self.err("unknown free kind"));
                };
                let pc = self.pc()?;
                let addr = self.v()?;
                Event::Free { pc: Pc(pc), addr: Addr(addr), kind }
            }
            tag::THREAD_START => {
                let os_tid = self.v()? as u32;
                let p = self.v()?;
                let parent = if p == 0 { None } else { Some(ThreadId((p - 1) as u32)) };
                let stack_lo = Addr(self.v()?);
                let stack_hi = Addr(self.v()?);
                let tls = Addr(self.v()?);
                let name = self.string()?;
                Event::ThreadStart { os_tid, parent, name, stack_lo, stack_hi, tls }
            }
            tag::THREAD_EXIT => Event::ThreadExit,
            tag::THREAD_NAME => Event::ThreadName(self.string()?),
            tag::REGISTER_THREAD => Event::RegisterThread(unzigzag(self.v()?)),
            tag::ROI_BEGIN => Event::Roi(true),
            tag::ROI_END => Event::Roi(false),
            tag::TRACE_ON => Event::Tracing(true),
            tag::TRACE_OFF => Event::Tracing(false),
            tag::FORK => Event::Fork { child_pid: self.v()? as u32 },
            tag::EXEC => Event::Exec,
            tag::CLOCK => Event::Clock(self.v()?),
            tag::DROPPED => Event::Dropped(self.v()?),
            tag::SIGNAL => Event::Signal(unzigzag(self.v()?) as i32),
            tag::TIME => {
                let d = unzigzag(self.v()?) as u64;
                self.pred.prev_time = self.pred.prev_time.wrapping_add(d);
                Event::Time(self.pred.prev_time)
            }
            _ => {
                self.pos -= 1;
                return Err(self.err("unknown event tag"));
            }
        };
        Ok(Some(ev))
    }
}

impl<B: AsRef<[u8]>> Decoder<B> {
    /// Every event of the rest of the chunk that is not a memory access, with
    /// its number in the chunk: loads, stores, ranges and atomics are stepped
    /// over (their pcs followed, their side bytes skipped, no [`Event`] built) —
    /// what a pass after allocations, frames and threads needs, at a fraction of
    /// the full decoder's cost. Returns the number of events: those not handed
    /// to `f` are the accesses.
    pub fn skeleton(&mut self, mut f: impl FnMut(u64, Event)) -> Result<u64, DecodeError> {
        let mut n = 0u64;
        loop {
            // a repeat of accesses only is stepped over whole
            if !self.rep.active && self.pos < self.end && self.buf.as_ref()[self.pos] == tag::REPEAT
            {
                if let Some((body, after, reps, p)) = self.repeat_head() {
                    let pc0 = self.pred.prev_pc;
                    if self.walk_body(body, pc0, p, |t, _, _| t < tag::FENCE).is_some() {
                        self.pos = after;
                        n += reps * p;
                        continue;
                    }
                }
            }
            let k = self.skeleton_fast(n, &mut f);
            if k > 0 {
                n += k;
                continue;
            }
            if !self.skip_one(n, &mut f)? {
                return Ok(n);
            }
            n += 1;
        }
    }

    /// [`Decoder::skeleton`]'s common events while every byte they may need is
    /// present: plain loads and stores stepped over (their pcs followed, their
    /// address bytes counted, not decoded) and function entries and exits handed
    /// to `f` (event `n0` first). Returns the events passed; anything else (and
    /// every error) is left to [`Decoder::skip_one`].
    #[inline(always)]
    fn skeleton_fast(&mut self, n0: u64, f: &mut impl FnMut(u64, Event)) -> u64 {
        let buf = self.buf.as_ref();
        // an event takes at most 9 op bytes (tag, 8-byte pc) and 16 side bytes
        // (an entry's two 8-byte varints): checked once per event
        let (Some(op_lim), Some(side_lim)) = (self.end.checked_sub(9), buf.len().checked_sub(16))
        else {
            return 0;
        };
        if self.end > buf.len() {
            return 0;
        }
        let b = buf.as_ptr();
        // SAFETY: `at + 8 <= buf.len()` at every call below.
        let word = |at: usize| unsafe { u64::from_le((b.add(at) as *const u64).read_unaligned()) };
        let (mut pos, mut spos, mut pc) = (self.pos, self.spos, self.pred.prev_pc);
        let mut frame = self.pred.prev_frame;
        let mut n = 0;
        while pos <= op_lim && spos <= side_lim {
            let w = word(pos);
            let t = w as u8;
            if t <= tag::ACCESS_MAX && t & tag::ACCESS_VALUE == 0 && t & 7 <= 4 {
                let (dpc, n1) = match varint8(w >> 8) {
                    Some((d, n)) if n < 8 => (d, n),
                    _ => match varint8(word(pos + 1)) {
                        Some(v) => v,
                        None => break,
                    },
                };
                let stops = !word(spos) & 0x8080_8080_8080_8080;
                if stops == 0 {
                    break;
                }
                pos += 1 + n1;
                spos += stops.trailing_zeros() as usize / 8 + 1;
                pc = pc.wrapping_add(unzigzag(dpc) as u64);
            } else if t == tag::FUNC_EXIT || t == tag::FUNC_ENTER {
                let Some((dpc, n1)) = varint8(word(pos + 1)) else { break };
                let epc = pc.wrapping_add(unzigzag(dpc) as u64);
                if t == tag::FUNC_EXIT {
                    f(n0 + n, Event::FuncExit { pc: Pc(epc) });
                } else {
                    let Some((dcs, m1)) = varint8(word(spos)) else { break };
                    let Some((dfr, m2)) = varint8(word(spos + m1)) else { break };
                    spos += m1 + m2;
                    frame = frame.wrapping_add(unzigzag(dfr) as u64);
                    let call_site = Pc(epc.wrapping_add(unzigzag(dcs) as u64));
                    f(n0 + n, Event::FuncEnter { pc: Pc(epc), call_site, frame: Addr(frame) });
                }
                pos += 1 + n1;
                pc = epc;
            } else {
                break;
            }
            n += 1;
        }
        self.pos = pos;
        self.spos = spos;
        self.pred.prev_pc = pc;
        self.pred.prev_frame = frame;
        n
    }

    /// The `repeat` at the cursor, checked as [`Decoder::at_end`] checks it:
    /// its body's start, the op position after it, the count and the events in
    /// the body.
    pub(super) fn repeat_head(&self) -> Option<(usize, usize, u64, u64)> {
        let buf = &self.buf.as_ref()[..self.end];
        let tag_at = self.pos;
        let mut at = tag_at + 1;
        let mut field = || varint::get(buf, &mut at);
        let (bp, _bs, reps, p) = (field()?, field()?, field()?, field()?);
        if bp == 0 || bp as usize > tag_at - self.ops0 || reps == 0 || p == 0 || p > bp {
            return None;
        }
        if reps.checked_mul(p)? > u64::from(u32::MAX) {
            return None;
        }
        Some((tag_at - bp as usize, at, reps, p))
    }

    /// Walks the op bytes of the body from `body` to the cursor (a repeat's tag)
    /// from pc `pc0`, calling `f(tag, pc, range length)` per event while it
    /// accepts them: `Some` when `f` accepted `p` events of kinds whose op bytes
    /// are the tag and the pc (accesses, fences, entries and exits; ranges and
    /// atomics with their length or operation) and the body ends at `pc0`.
    pub(super) fn walk_body(
        &self,
        body: usize,
        pc0: u64,
        p: u64,
        mut f: impl FnMut(u8, u64, u64) -> bool,
    ) -> Option<()> {
        let buf = &self.buf.as_ref()[..self.pos];
        let (mut i, mut pc, mut events) = (body, pc0, 0u64);
        while i < buf.len() {
            let t = buf[i];
            let mut j = i + 1;
            if t == tag::RMW {
                let b = *buf.get(j)?;
                if RmwOp::from_u8(b >> 4).is_none() || b & 7 > 4 {
                    return None;
                }
                j += 1;
            }
            let dpc = varint::get(buf, &mut j)?;
            pc = pc.wrapping_add(unzigzag(dpc) as u64);
            let len = match t {
                0..=tag::ACCESS_MAX if t & 7 <= 4 => 0,
                tag::RANGE_READ | tag::RANGE_WRITE => varint::get(buf, &mut j)?,
                tag::RMW | tag::FUNC_ENTER | tag::FUNC_EXIT => 0,
                tag::FENCE => {
                    j += 1;
                    0
                }
                _ => return None,
            };
            if j > buf.len() || !f(t, pc, len) {
                return None;
            }
            i = j;
            events += 1;
        }
        (i == buf.len() && pc == pc0 && events == p).then_some(())
    }

    /// One event of [`Decoder::skeleton`] (number `n`): `false` at the end.
    #[inline(always)]
    pub(super) fn skip_one(
        &mut self,
        n: u64,
        f: &mut impl FnMut(u64, Event),
    ) -> Result<bool, DecodeError> {
        if self.failed || self.at_end()? {
            return Ok(false);
        }
        if let Some((_, dpc, _)) = self.take_plain() {
            self.pred.pc_from(dpc);
            return Ok(true);
        }
        let t = self.buf.as_ref()[self.pos];
        match t {
            0..=tag::ACCESS_MAX => {
                if t & 7 > 4 {
                    return Err(self.err("access size code out of range"));
                }
                self.pos += 1;
                self.pc()?;
                self.skip_sv()?;
                if t & tag::ACCESS_VALUE != 0 {
                    self.skip_sv()?;
                }
            }
            tag::RANGE_READ | tag::RANGE_WRITE => {
                self.pos += 1;
                self.pc()?;
                self.v()?;
                self.skip_sv()?;
            }
            tag::RMW => {
                self.pos += 1;
                let (b, _) = self.rmw_head()?;
                self.pc()?;
                self.skip_sv()?;
                if b & 8 != 0 {
                    self.skip_sv()?;
                }
            }
            _ => match self.next_slow()? {
                Some(e) => f(n, e),
                None => return Ok(false),
            },
        }
        Ok(true)
    }

    /// An atomic's operation byte (after its tag), checked: the byte and the op.
    pub(super) fn rmw_head(&mut self) -> Result<(u8, RmwOp), DecodeError> {
        let b = self.byte()?;
        let Some(op) = RmwOp::from_u8(b >> 4) else {
            return Err(self.err("unknown atomic operation"));
        };
        if b & 7 > 4 {
            return Err(self.err("atomic size code out of range"));
        }
        Ok((b, op))
    }

    /// Steps over one varint of the side stream.
    #[inline(always)]
    pub(super) fn skip_sv(&mut self) -> Result<(), DecodeError> {
        let b = self.buf.as_ref();
        let w = b.get(self.spos..).unwrap_or(&[]);
        match w.iter().take(MAX_VARINT).position(|&x| x < 0x80) {
            Some(k) if k + 1 < MAX_VARINT || w[k] <= 1 => {
                self.spos += k + 1;
                Ok(())
            }
            _ => Err(self.err("side stream cut short")),
        }
    }

    /// [`Decoder::stack`] without the stack.
    pub(super) fn skip_stack(&mut self) -> Result<(), DecodeError> {
        let n = self.v()? as usize;
        if n > self.end - self.pos {
            return Err(self.err("stack longer than the chunk"));
        }
        for _ in 0..n {
            self.v()?;
        }
        Ok(())
    }
}

impl<B: AsRef<[u8]>> Iterator for Decoder<B> {
    type Item = Result<Event, DecodeError>;
    fn next(&mut self) -> Option<Self::Item> {
        Decoder::next(self).transpose()
    }
}
