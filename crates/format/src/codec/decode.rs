//! The full decoder: every event as an [`Event`], and the skeleton walk.

use super::{tag, varint_at, DecodeError, Predictor};
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
        };
        d.layout();
        d
    }

    fn layout(&mut self) {
        let b = self.buf.as_ref();
        let mut at = 0;
        match varint::get(b, &mut at) {
            Some(n) if n <= (b.len() - at) as u64 => {
                self.pos = at;
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

    /// At the end of the op stream: `Ok(true)`, or the layout error.
    #[inline(always)]
    pub(super) fn at_end(&mut self) -> Result<bool, DecodeError> {
        if self.pos < self.end {
            return Ok(false);
        }
        if self.bad_layout && !self.failed {
            return Err(self.err("chunk does not start with its op-stream length"));
        }
        Ok(true)
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
        out.clear();
        out.reserve(max);
        if self.failed {
            return Ok(0);
        }
        while out.len() < max {
            // Events are built in the vector's memory: one built on the stack and
            // copied made every copy wait for a store-forwarding failure (half of
            // the decode time).
            if self.fast_access_into(out) {
                continue;
            }
            if self.at_end()? {
                break;
            }
            if !self.next_slow_into(out)? {
                break;
            }
        }
        self.seq += out.len() as u64;
        Ok(out.len())
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
    /// its number in the chunk: loads, stores, ranges, atomics and fences are
    /// stepped over (their pcs followed, their side bytes skipped, no [`Event`]
    /// built) — what a pass after allocations, frames and threads needs, at a
    /// fraction of the full decoder's cost. Returns the number of events.
    pub fn skeleton(&mut self, mut f: impl FnMut(u64, Event)) -> Result<u64, DecodeError> {
        let mut n = 0u64;
        loop {
            if self.failed || self.at_end()? {
                return Ok(n);
            }
            if let Some((_, dpc, _)) = self.take_plain() {
                self.pred.pc_from(dpc);
                n += 1;
                continue;
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
                tag::FENCE => {
                    self.pos += 1;
                    self.pc()?;
                    self.byte()?;
                }
                _ => match self.next_slow()? {
                    Some(e) => f(n, e),
                    None => return Ok(n),
                },
            }
            n += 1;
        }
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
