//! The encoder: the runtime's hot per-event writers and the general [`Encoder::push`].

use super::{access_tag, size_log2, tag, Predictor, Streams, MAX_ACCESS_LEN, MAX_SIDE_LEN};
use crate::event::{AccessKind, AllocKind, Event, FreeKind, RmwOp};
use crate::varint::{self, zigzag, MAX_VARINT};

/// Encodes events of one thread. The hot methods write the op stream through a
/// raw pointer into a buffer the caller has reserved, and the side stream at the
/// encoder's side cursor ([`Encoder::set_side`]); [`Encoder::push`] appends to
/// a [`Streams`].
#[derive(Clone)]
pub struct Encoder {
    pred: Predictor,
    side: *mut u8,
}

// SAFETY: `side` is a cursor into a buffer owned by whoever owns the encoder.
unsafe impl Send for Encoder {}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new()
    }
}

impl Encoder {
    /// A fresh encoder (chunk-start state); `const` so the runtime can keep one in a
    /// const-initialised thread-local.
    pub const fn new() -> Encoder {
        Encoder { pred: Predictor::new(), side: std::ptr::null_mut() }
    }

    /// Where the next side-stream bytes go.
    pub fn set_side(&mut self, p: *mut u8) {
        self.side = p;
    }

    /// The side cursor: one past the last side byte written.
    pub fn side(&self) -> *mut u8 {
        self.side
    }

    /// The side cursor of an encoder another thread may be writing with: a value at
    /// least as far as that of the last event whose end the reader has acquired.
    ///
    /// # Safety
    /// `e` must point to a live encoder.
    pub unsafe fn side_of(e: *const Encoder) -> *mut u8 {
        std::ptr::addr_of!((*e).side).read_volatile()
    }

    #[inline(always)]
    unsafe fn put_side(&mut self, v: u64) {
        self.side = varint::put(self.side, v);
    }

    /// Starts a new chunk.
    pub fn reset(&mut self) {
        self.pred.reset();
    }

    /// Encodes a load/store. `tag` is built with [`access_tag`].
    ///
    /// # Safety
    /// `p` must be valid for [`MAX_ACCESS_LEN`] bytes.
    #[inline(always)]
    pub unsafe fn access(&mut self, p: *mut u8, tag: u8, pc: u64, addr: u64) -> *mut u8 {
        p.write(tag);
        let p = varint::put(p.add(1), self.pred.pc_delta(pc));
        let d = self.pred.addr_delta(pc, addr);
        self.put_side(d);
        p
    }

    /// Writes a `repeat` (see `fold.rs`): the `events` events just written, whose
    /// bytes are the last `ops` op bytes before `p` and the last `side` side bytes,
    /// happen `count` more times. The predictor must then be moved to the state after
    /// the last copy with [`Encoder::replay`], as a reader's decoding leaves it.
    ///
    /// # Safety
    /// `p` must be valid for [`super::MAX_REPEAT_LEN`] bytes.
    #[inline]
    pub unsafe fn repeat(
        &mut self,
        p: *mut u8,
        ops: u64,
        side: u64,
        count: u64,
        events: u64,
    ) -> *mut u8 {
        p.write(tag::REPEAT);
        let mut p = p.add(1);
        for v in [ops, side, count, events] {
            p = varint::put(p, v);
        }
        p
    }

    /// Moves the predictor as encoding a load/store or range of `pc` at `addr`
    /// would, writing nothing (after a [`Encoder::repeat`], once per event of the
    /// last copy, in order).
    #[inline]
    pub fn replay(&mut self, pc: u64, addr: u64) {
        self.pred.pc_delta(pc);
        self.pred.addr_delta(pc, addr);
    }

    /// Encodes a load/store followed by its value.
    ///
    /// # Safety
    /// `p` must be valid for [`MAX_ACCESS_LEN`] bytes.
    #[inline(always)]
    pub unsafe fn access_value(
        &mut self,
        p: *mut u8,
        tag: u8,
        pc: u64,
        addr: u64,
        value: u64,
    ) -> *mut u8 {
        let p = self.access(p, tag | tag::ACCESS_VALUE, pc, addr);
        self.put_side(value);
        p
    }

    /// Encodes an atomic RMW (`value`: the old value, if recorded).
    ///
    /// # Safety
    /// `p` must be valid for [`MAX_ACCESS_LEN`] bytes.
    #[inline(always)]
    pub unsafe fn rmw(
        &mut self,
        p: *mut u8,
        op: RmwOp,
        size_log2: u8,
        pc: u64,
        addr: u64,
        value: Option<u64>,
    ) -> *mut u8 {
        p.write(tag::RMW);
        let flag = if value.is_some() { 8 } else { 0 };
        p.add(1).write(((op as u8) << 4) | size_log2 | flag);
        let p = varint::put(p.add(2), self.pred.pc_delta(pc));
        let d = self.pred.addr_delta(pc, addr);
        self.put_side(d);
        if let Some(v) = value {
            self.put_side(v);
        }
        p
    }

    /// Encodes a range access.
    ///
    /// # Safety
    /// `p` must be valid for [`MAX_ACCESS_LEN`] bytes.
    #[inline(always)]
    pub unsafe fn range(
        &mut self,
        p: *mut u8,
        kind: AccessKind,
        pc: u64,
        addr: u64,
        len: u64,
    ) -> *mut u8 {
        p.write(match kind {
            AccessKind::Read => tag::RANGE_READ,
            AccessKind::Write => tag::RANGE_WRITE,
        });
        let p = varint::put(p.add(1), self.pred.pc_delta(pc));
        let d = self.pred.addr_delta(pc, addr);
        self.put_side(d);
        varint::put(p, len)
    }

    /// Encodes a function entry. `frame` is the frame pointer (rbp) at the entry
    /// callback, i.e. after the prologue: the canonical frame address is
    /// `frame + 16`, which names stack variables later. 0 when unknown.
    ///
    /// # Safety
    /// `p` must be valid for [`MAX_ACCESS_LEN`] bytes.
    #[inline(always)]
    pub unsafe fn func_enter(
        &mut self,
        p: *mut u8,
        pc: u64,
        call_site: u64,
        frame: u64,
    ) -> *mut u8 {
        p.write(tag::FUNC_ENTER);
        let p = varint::put(p.add(1), self.pred.pc_delta(pc));
        self.put_side(zigzag(call_site.wrapping_sub(pc) as i64));
        let d = zigzag(frame.wrapping_sub(self.pred.prev_frame) as i64);
        self.pred.prev_frame = frame;
        self.put_side(d);
        p
    }

    /// Encodes a function exit.
    ///
    /// # Safety
    /// `p` must be valid for [`MAX_ACCESS_LEN`] bytes.
    #[inline(always)]
    pub unsafe fn func_exit(&mut self, p: *mut u8, pc: u64) -> *mut u8 {
        p.write(tag::FUNC_EXIT);
        varint::put(p.add(1), self.pred.pc_delta(pc))
    }

    /// Encodes an ordering clock (`Event::Clock`).
    ///
    /// # Safety
    /// `p` must be valid for [`MAX_ACCESS_LEN`] bytes.
    #[inline(always)]
    pub unsafe fn clock(&mut self, p: *mut u8, t: u64) -> *mut u8 {
        p.write(tag::CLOCK);
        varint::put(p.add(1), t)
    }

    /// Encodes a wall-clock stamp (`Event::Time`, CLOCK_MONOTONIC ns) as a zigzag
    /// delta from the chunk's previous stamp: 2-3 bytes instead of 7.
    ///
    /// # Safety
    /// `p` must be valid for [`MAX_ACCESS_LEN`] bytes.
    #[inline(always)]
    pub unsafe fn time(&mut self, p: *mut u8, ns: u64) -> *mut u8 {
        p.write(tag::TIME);
        let d = zigzag(ns.wrapping_sub(self.pred.prev_time) as i64);
        self.pred.prev_time = ns;
        varint::put(p.add(1), d)
    }

    /// Encodes a fence.
    ///
    /// # Safety
    /// `p` must be valid for [`MAX_ACCESS_LEN`] bytes.
    #[inline(always)]
    pub unsafe fn fence(&mut self, p: *mut u8, pc: u64, order: u8) -> *mut u8 {
        p.write(tag::FENCE);
        let p = varint::put(p.add(1), self.pred.pc_delta(pc));
        p.write(order);
        p.add(1)
    }

    /// Bytes [`Encoder::alloc`] or [`Encoder::realloc`] may need for a stack of `frames`.
    pub const fn alloc_len(frames: usize) -> usize {
        3 + (6 + frames) * MAX_VARINT
    }

    /// Encodes an allocation.
    ///
    /// # Safety
    /// `p` must be valid for [`Encoder::alloc_len`]`(stack.len())` bytes.
    pub unsafe fn alloc(
        &mut self,
        p: *mut u8,
        kind: AllocKind,
        pc: u64,
        addr: u64,
        size: u64,
        stack: &[u64],
    ) -> *mut u8 {
        p.write(tag::ALLOC);
        p.add(1).write(kind as u8);
        let mut p = varint::put(p.add(2), self.pred.pc_delta(pc));
        p = varint::put(p, addr);
        p = varint::put(p, size);
        self.stack(p, pc, stack)
    }

    /// Encodes a realloc.
    ///
    /// # Safety
    /// `p` must be valid for [`Encoder::alloc_len`]`(stack.len())` bytes.
    pub unsafe fn realloc(
        &mut self,
        p: *mut u8,
        pc: u64,
        old: u64,
        new: u64,
        size: u64,
        stack: &[u64],
    ) -> *mut u8 {
        p.write(tag::REALLOC);
        let mut p = varint::put(p.add(1), self.pred.pc_delta(pc));
        p = varint::put(p, old);
        p = varint::put(p, new);
        p = varint::put(p, size);
        self.stack(p, pc, stack)
    }

    unsafe fn stack(&mut self, mut p: *mut u8, pc: u64, stack: &[u64]) -> *mut u8 {
        p = varint::put(p, stack.len() as u64);
        for &f in stack {
            p = varint::put(p, zigzag(f.wrapping_sub(pc) as i64));
        }
        p
    }

    /// Encodes a free.
    ///
    /// # Safety
    /// `p` must be valid for [`MAX_ACCESS_LEN`] bytes.
    pub unsafe fn free(&mut self, p: *mut u8, kind: FreeKind, pc: u64, addr: u64) -> *mut u8 {
        p.write(tag::FREE);
        p.add(1).write(kind as u8);
        let p = varint::put(p.add(2), self.pred.pc_delta(pc));
        varint::put(p, addr)
    }

    /// Appends any event to `out` (slow path: thread and control events, tests).
    pub fn push(&mut self, out: &mut Streams, ev: &Event) {
        let need = match ev {
            Event::Alloc { stack, .. } | Event::Realloc { stack, .. } => {
                Encoder::alloc_len(stack.len())
            }
            Event::ThreadStart { name, .. } => 6 * MAX_VARINT + name.len() + 1,
            Event::ThreadName(name) => MAX_VARINT + name.len() + 1,
            Event::Call { .. } | Event::Return { .. } => 1 + 5 * MAX_VARINT,
            _ => MAX_ACCESS_LEN,
        };
        // SAFETY: the encoders write at most `need` op bytes.
        unsafe { self.put(out, need, |e, p| e.encode_raw(p, ev)) }
    }

    /// Runs a hot encoder `f` on the ends of `out`'s streams, with `need` op bytes
    /// (and [`MAX_SIDE_LEN`] side bytes) reserved.
    ///
    /// # Safety
    /// `f` may write at most `need` op bytes, and side bytes only at the side cursor.
    #[inline(always)]
    pub unsafe fn put(
        &mut self,
        out: &mut Streams,
        need: usize,
        f: impl FnOnce(&mut Encoder, *mut u8) -> *mut u8,
    ) {
        out.ops.reserve(need);
        out.side.reserve(MAX_SIDE_LEN);
        let (o, s) = (out.ops.len(), out.side.len());
        let p = out.ops.as_mut_ptr().add(o);
        let sp = out.side.as_mut_ptr().add(s);
        // the encoder's own side cursor (a runtime buffer's) is kept
        let saved = std::mem::replace(&mut self.side, sp);
        let end = f(self, p);
        out.ops.set_len(o + (end as usize - p as usize));
        out.side.set_len(s + (self.side as usize - sp as usize));
        self.side = saved;
    }

    unsafe fn encode_raw(&mut self, p: *mut u8, ev: &Event) -> *mut u8 {
        match ev {
            Event::Access { pc, addr, size, kind, atomic, value } => {
                let t = access_tag(*kind, *atomic, size_log2(*size as usize).unwrap_or(0));
                match value {
                    Some(v) => self.access_value(p, t, pc.0, addr.0, *v),
                    None => self.access(p, t, pc.0, addr.0),
                }
            }
            Event::Range { pc, addr, len, kind } => self.range(p, *kind, pc.0, addr.0, *len),
            Event::Rmw { pc, addr, size, op, value } => {
                self.rmw(p, *op, size_log2(*size as usize).unwrap_or(0), pc.0, addr.0, *value)
            }
            Event::Fence { pc, order } => self.fence(p, pc.0, *order),
            Event::FuncEnter { pc, call_site, frame } => {
                self.func_enter(p, pc.0, call_site.0, frame.0)
            }
            Event::FuncExit { pc } => self.func_exit(p, pc.0),
            Event::Call { func, sp, args } => {
                p.write(tag::CALL);
                let mut q = varint::put(p.add(1), self.pred.pc_delta(func.0));
                q = varint::put(q, sp.0);
                for a in args {
                    q = varint::put(q, *a);
                }
                q
            }
            Event::Return { func, sp, value } => {
                p.write(tag::RETURN);
                let q = varint::put(p.add(1), self.pred.pc_delta(func.0));
                let q = varint::put(q, sp.0);
                varint::put(q, *value)
            }
            Event::Alloc { pc, addr, size, kind, stack } => {
                let s: Vec<u64> = stack.iter().map(|x| x.0).collect();
                self.alloc(p, *kind, pc.0, addr.0, *size, &s)
            }
            Event::Realloc { pc, old, new, size, stack } => {
                let s: Vec<u64> = stack.iter().map(|x| x.0).collect();
                self.realloc(p, pc.0, old.0, new.0, *size, &s)
            }
            Event::Free { pc, addr, kind } => self.free(p, *kind, pc.0, addr.0),
            Event::ThreadStart { os_tid, parent, name, stack_lo, stack_hi, tls } => {
                p.write(tag::THREAD_START);
                let mut q = varint::put(p.add(1), u64::from(*os_tid));
                q = varint::put(q, parent.map_or(0, |t| u64::from(t.0) + 1));
                q = varint::put(q, stack_lo.0);
                q = varint::put(q, stack_hi.0);
                q = varint::put(q, tls.0);
                put_str(q, name)
            }
            Event::ThreadExit => one(p, tag::THREAD_EXIT),
            Event::ThreadName(name) => {
                p.write(tag::THREAD_NAME);
                put_str(p.add(1), name)
            }
            Event::RegisterThread(id) => {
                p.write(tag::REGISTER_THREAD);
                varint::put(p.add(1), zigzag(*id))
            }
            Event::Roi(b) => one(p, if *b { tag::ROI_BEGIN } else { tag::ROI_END }),
            Event::Tracing(b) => one(p, if *b { tag::TRACE_ON } else { tag::TRACE_OFF }),
            Event::Fork { child_pid } => {
                p.write(tag::FORK);
                varint::put(p.add(1), u64::from(*child_pid))
            }
            Event::Exec => one(p, tag::EXEC),
            Event::Clock(t) => {
                p.write(tag::CLOCK);
                varint::put(p.add(1), *t)
            }
            Event::Dropped(n) => {
                p.write(tag::DROPPED);
                varint::put(p.add(1), *n)
            }
            Event::Time(ns) => self.time(p, *ns),
            Event::Signal(s) => {
                p.write(tag::SIGNAL);
                varint::put(p.add(1), zigzag(i64::from(*s)))
            }
        }
    }
}

unsafe fn one(p: *mut u8, t: u8) -> *mut u8 {
    p.write(t);
    p.add(1)
}

unsafe fn put_str(p: *mut u8, s: &str) -> *mut u8 {
    let p = varint::put(p, s.len() as u64);
    std::ptr::copy_nonoverlapping(s.as_ptr(), p, s.len());
    p.add(s.len())
}
