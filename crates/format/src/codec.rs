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
//! - `0x71..` other thread and control events, see [`Tag`].

use crate::event::{AccessKind, AllocKind, Event, FreeKind, RmwOp};
use crate::types::{Addr, Pc, ThreadId};
use crate::varint::{self, unzigzag, zigzag, MAX_VARINT};

/// Number of address-prediction slots (a power of two).
pub const SLOTS: usize = 1 << SLOT_BITS;
const SLOT_BITS: u32 = 10;

/// Largest encoding of an access or RMW event; the runtime reserves this much
/// before calling the hot encoders.
pub const MAX_ACCESS_LEN: usize = 2 + 3 * MAX_VARINT;

/// Most side-stream bytes one event writes.
pub const MAX_SIDE_LEN: usize = 2 * MAX_VARINT;

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
fn slot(pc: u64) -> usize {
    (pc.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOT_BITS)) as usize
}

/// Per-chunk prediction state, shared in shape by encoder and decoder.
#[derive(Clone)]
pub struct Predictor {
    prev_pc: u64,
    prev_frame: u64,
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
        Predictor { prev_pc: 0, prev_frame: 0, last: [0; SLOTS] }
    }

    /// Back to the chunk-start state.
    pub fn reset(&mut self) {
        self.prev_pc = 0;
        self.prev_frame = 0;
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
            Event::Signal(s) => {
                p.write(tag::SIGNAL);
                varint::put(p.add(1), zigzag(i64::from(*s)))
            }
        }
    }
}

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

unsafe fn one(p: *mut u8, t: u8) -> *mut u8 {
    p.write(t);
    p.add(1)
}

unsafe fn put_str(p: *mut u8, s: &str) -> *mut u8 {
    let p = varint::put(p, s.len() as u64);
    std::ptr::copy_nonoverlapping(s.as_ptr(), p, s.len());
    p.add(s.len())
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

/// Decodes a chunk's events in order. Stops (fused) at the first error.
pub struct Decoder<B: AsRef<[u8]>> {
    buf: B,
    /// Op stream cursor and end.
    pos: usize,
    end: usize,
    /// Side stream cursor (the side stream runs to the end of `buf`).
    spos: usize,
    pred: Box<Predictor>,
    failed: bool,
    /// The op-stream length prefix is missing or too large.
    bad_layout: bool,
}

impl<B: AsRef<[u8]>> Decoder<B> {
    /// A decoder over one decompressed chunk payload (borrowed or owned): the
    /// layout of [`join`]. A payload holding only the length and the op stream
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

    fn err(&mut self, what: &'static str) -> DecodeError {
        self.failed = true;
        DecodeError { offset: self.pos, what }
    }

    /// At the end of the op stream: `Ok(true)`, or the layout error.
    #[inline(always)]
    fn at_end(&mut self) -> Result<bool, DecodeError> {
        if self.pos < self.end {
            return Ok(false);
        }
        if self.bad_layout && !self.failed {
            return Err(self.err("chunk does not start with its op-stream length"));
        }
        Ok(true)
    }

    fn v(&mut self) -> Result<u64, DecodeError> {
        match varint::get(&self.buf.as_ref()[..self.end], &mut self.pos) {
            Some(v) => Ok(v),
            None => Err(self.err("truncated or overlong varint")),
        }
    }

    /// A varint of the side stream.
    fn sv(&mut self) -> Result<u64, DecodeError> {
        match varint::get(self.buf.as_ref(), &mut self.spos) {
            Some(v) => Ok(v),
            None => Err(self.err("side stream cut short")),
        }
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        match self.buf.as_ref()[..self.end].get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => Err(self.err("event cut short")),
        }
    }

    fn pc(&mut self) -> Result<u64, DecodeError> {
        let d = self.v()?;
        Ok(self.pred.pc_from(d))
    }

    fn addr(&mut self, pc: u64) -> Result<u64, DecodeError> {
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
        Ok(out.len())
    }

    /// The common case, a plain load/store without value with every field's bytes
    /// present, read without per-byte bounds checks: its tag, pc delta and address
    /// delta, the cursors moved past it. `None` sends the caller to the general path
    /// (which also reports errors).
    #[inline(always)]
    fn take_plain(&mut self) -> Option<(u8, u64, u64)> {
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
        if let Some(e) = self.fast_access() {
            return Ok(Some(e));
        }
        self.next_slow()
    }

    #[inline(never)]
    fn next_slow(&mut self) -> Result<Option<Event>, DecodeError> {
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
            _ => {
                self.pos -= 1;
                return Err(self.err("unknown event tag"));
            }
        };
        Ok(Some(ev))
    }
}

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
    folded: u64,
    /// Whether the next chunk is scanned with folding.
    fold_next: bool,
    /// Folds (each of one or more repetitions) in the current chunk.
    folds: u64,
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
const FOLD_MIN: u64 = 16;

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
        let (i, _) = self.find(pc, tag);
        self.slots[i].count += 1;
        self.bytes[i] = self.bytes[i].wrapping_add(len);
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
        let end = self.end;
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
            } else if self.pos >= end {
                if let Err(e) = self.at_end() {
                    break Err(e);
                }
                break Ok(n);
            }
            self.pred.prev_pc = pc;
            let r = self.scan_slow();
            pc = self.pred.prev_pc;
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
    fn rmw_head(&mut self) -> Result<(u8, RmwOp), DecodeError> {
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
    fn skip_sv(&mut self) -> Result<(), DecodeError> {
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
    fn skip_stack(&mut self) -> Result<(), DecodeError> {
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

impl<B: AsRef<[u8]>> Iterator for Decoder<B> {
    type Item = Result<Event, DecodeError>;
    fn next(&mut self) -> Option<Self::Item> {
        Decoder::next(self).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Loops whose bytes repeat are folded; the sums stay those of the decoder,
    /// including across the breaks (a call, an atomic, a changed stride) and with
    /// loop bodies of one to many accesses.
    #[test]
    fn folded_loops_count_like_the_decoder() {
        let acc = |pc: u64, addr: u64, write: bool, size: u8| Event::Access {
            pc: Pc(pc),
            addr: Addr(addr),
            size,
            kind: if write { AccessKind::Write } else { AccessKind::Read },
            atomic: false,
            value: None,
        };
        let mut evs = Vec::new();
        for i in 0..20_000u64 {
            evs.push(acc(0x1000, 0x10_0000 + 8 * i, false, 8));
            evs.push(acc(0x1008, 0x20_0000 + 4 * i, true, 4));
            if i % 97 == 0 {
                evs.push(Event::FuncEnter {
                    pc: Pc(0x3000),
                    call_site: Pc(0x1010),
                    frame: Addr(0),
                });
                evs.push(Event::FuncExit { pc: Pc(0x3000) });
            }
            if i % 1000 == 0 {
                evs.push(Event::Rmw {
                    pc: Pc(0x1020),
                    addr: Addr(0x30_0000),
                    size: 8,
                    op: RmwOp::FetchAdd,
                    value: None,
                });
            }
            // a body of 1 access, and one of 70 (longer than the ring)
            if i % 5000 == 0 {
                for k in 0..300 {
                    evs.push(acc(0x2000, 0x40_0000 + 16 * k, false, 2));
                }
                for k in 0..3 {
                    for j in 0..70 {
                        evs.push(acc(0x5000 + 4 * j, 0x50_0000 + 8 * j + k, j % 3 == 0, 1));
                    }
                }
            }
            // the stride changes midway
            if i == 12_345 {
                evs.push(acc(0x1000, 0x70_0000, false, 8));
            }
        }
        let mut enc = Encoder::new();
        let mut st = Streams::new();
        for e in &evs {
            enc.push(&mut st, e);
        }
        let buf = st.to_raw();
        let mut want: HashMap<Counted, u64> = HashMap::new();
        for e in Decoder::new(&buf[..]) {
            *want.entry(Counted::of(&e.unwrap())).or_default() += 1;
        }
        let mut tally = AccessTally::default();
        let mut got: HashMap<Counted, u64> = HashMap::new();
        let n = Decoder::new(&buf[..])
            .scan_counts(&mut tally, |c, k| *got.entry(c).or_default() += k)
            .unwrap();
        assert_eq!(n, evs.len() as u64);
        assert_eq!(got, want);
        assert!(tally.folded > n / 2, "folded {} of {n}", tally.folded);
    }

    /// A plain (non-atomic, no value) load or store.
    fn plain(pc: u64, addr: u64, size: u8, write: bool) -> Event {
        let kind = if write { AccessKind::Write } else { AccessKind::Read };
        Event::Access { pc: Pc(pc), addr: Addr(addr), size, kind, atomic: false, value: None }
    }

    fn encode(evs: &[Event]) -> Vec<u8> {
        let mut enc = Encoder::new();
        let mut st = Streams::new();
        for e in evs {
            enc.push(&mut st, e);
        }
        st.to_raw()
    }

    /// Ranges of varying lengths are tallied per (pc, kind) with their bytes
    /// summed: the counts kernel's loads, stores and bytes stay the decoder's.
    #[test]
    fn ranges_are_tallied_with_their_bytes() {
        let mut evs = Vec::new();
        for i in 0..5_000u64 {
            let kind = if i % 3 == 0 { AccessKind::Write } else { AccessKind::Read };
            let pc = Pc(0x2000 + 16 * (i % 2));
            evs.push(Event::Range { pc, addr: Addr(0x40_0000 + 64 * i), len: 1 + i % 200, kind });
            evs.push(plain(0x2100, 0x50_0000 + 8 * i, 8, false));
        }
        let buf = encode(&evs);
        // (pc, write) -> (events, bytes), from the decoder and from the scan
        let mut want: HashMap<(u64, bool), (u64, u64)> = HashMap::new();
        for e in &evs {
            let (pc, write, len) = match *e {
                Event::Range { pc, len, kind, .. } => (pc.0, kind == AccessKind::Write, len),
                Event::Access { pc, size, .. } => (pc.0, false, u64::from(size)),
                _ => unreachable!(),
            };
            let w = want.entry((pc, write)).or_default();
            w.0 += 1;
            w.1 += len;
        }
        let mut got: HashMap<(u64, bool), (u64, u64)> = HashMap::new();
        let mut ranges = 0;
        let n = Decoder::new(&buf[..])
            .scan_counts(&mut AccessTally::default(), |c, k| {
                let (pc, write, bytes) = match c {
                    Counted::Range { pc, write, bytes } => {
                        ranges += 1;
                        (pc.0, write, bytes)
                    }
                    Counted::Access { pc, write, bytes } => (pc.0, write, k * bytes),
                    c => panic!("unexpected {c:?}"),
                };
                let g = got.entry((pc, write)).or_default();
                g.0 += k;
                g.1 += bytes;
            })
            .unwrap();
        assert_eq!(n, evs.len() as u64);
        assert_eq!(got, want);
        // one call per distinct (pc, kind), not one per range (plus one each for
        // the last few events, within a longest event of the end: the full decoder's)
        assert!((4..=12).contains(&ranges), "{ranges} calls");
    }

    /// A loop whose two branches alternate every few iterations folds often, but
    /// each fold is short: the next chunk is scanned without folding.
    #[test]
    fn short_folds_turn_folding_off() {
        let mut evs = Vec::new();
        let (mut i, mut j) = (0u64, 0u64);
        for k in 0..20_000u64 {
            // runs of 1..=3 iterations of one branch, then of the other
            let a = (k / (1 + k % 3)) % 2 == 0;
            let (pc, addr) = if a { (0x1000, &mut i) } else { (0x1010, &mut j) };
            *addr += 4;
            evs.push(plain(pc, 0x10_0000 + *addr, 4, false));
            evs.push(plain(0x1020, 0x90_0000 + 4 * k, 4, true));
        }
        let buf = encode(&evs);
        let mut tally = AccessTally::default();
        let n = Decoder::new(&buf[..]).scan_counts(&mut tally, |_, _| {}).unwrap();
        assert_eq!(n, evs.len() as u64);
        assert!(tally.folds > 0 && tally.folded < FOLD_MIN * tally.folds);
        assert!(!tally.fold_next);
    }

    fn sample() -> Vec<Event> {
        vec![
            Event::ThreadStart {
                os_tid: 42,
                parent: Some(ThreadId(0)),
                name: "w".into(),
                stack_lo: Addr(0x7000),
                stack_hi: Addr(0x9000),
                tls: Addr(0x7f00_0000),
            },
            Event::FuncEnter { pc: Pc(0x1000), call_site: Pc(0x2000), frame: Addr(0x7ffd_0000) },
            Event::Access {
                pc: Pc(0x1010),
                addr: Addr(0x7fff_0000),
                size: 8,
                kind: AccessKind::Read,
                atomic: false,
                value: None,
            },
            Event::Access {
                pc: Pc(0x1010),
                addr: Addr(0x7fff_0008),
                size: 4,
                kind: AccessKind::Write,
                atomic: true,
                value: Some(7),
            },
            Event::Range { pc: Pc(0x1020), addr: Addr(5), len: 4096, kind: AccessKind::Write },
            Event::Rmw {
                pc: Pc(0x1030),
                addr: Addr(64),
                size: 8,
                op: RmwOp::CasFailed,
                value: None,
            },
            Event::Rmw {
                pc: Pc(0x1030),
                addr: Addr(64),
                size: 4,
                op: RmwOp::FetchAdd,
                value: Some(9),
            },
            Event::Fence { pc: Pc(0x1040), order: 5 },
            Event::Alloc {
                pc: Pc(0x1050),
                addr: Addr(0x5555_0000),
                size: 100,
                kind: AllocKind::Calloc,
                stack: vec![Pc(0x3000), Pc(0x900)],
            },
            Event::Realloc { pc: Pc(1), old: Addr(2), new: Addr(3), size: 4, stack: vec![] },
            Event::Free { pc: Pc(0x1060), addr: Addr(0x5555_0000), kind: FreeKind::DeleteArray },
            Event::FuncExit { pc: Pc(0x1070) },
            Event::Call { func: Pc(0x1100), sp: Addr(0x7ffd_fff8), args: [1, u64::MAX, 0] },
            Event::Return { func: Pc(0x1100), sp: Addr(0x7ffd_fff8), value: 42 },
            Event::ThreadName("worker-1".into()),
            Event::RegisterThread(-3),
            Event::Roi(true),
            Event::Roi(false),
            Event::Tracing(false),
            Event::Fork { child_pid: 99 },
            Event::Exec,
            Event::Clock(123456789),
            Event::Dropped(17),
            Event::Signal(11),
            Event::ThreadExit,
        ]
    }

    #[test]
    fn every_event_roundtrips() {
        let evs = sample();
        let mut enc = Encoder::new();
        let mut st = Streams::new();
        for e in &evs {
            enc.push(&mut st, e);
        }
        let buf = st.to_raw();
        let got: Vec<Event> = Decoder::new(&buf[..]).collect::<Result<_, _>>().unwrap();
        assert_eq!(got, evs);
    }

    /// The skeleton pass sees exactly the decoder's non-access events, numbered
    /// as the decoder numbers them.
    #[test]
    fn skeleton_yields_the_non_access_events() {
        let mut evs = sample();
        for i in 0..50u64 {
            evs.insert(3, plain(0x1000 + i, 0x7000_0000 + 8 * i, 4, i % 2 == 0));
        }
        let buf = encode(&evs);
        let want: Vec<(u64, Event)> = Decoder::new(&buf[..])
            .map(|e| e.unwrap())
            .enumerate()
            .filter(|(_, e)| {
                !matches!(
                    e,
                    Event::Access { .. }
                        | Event::Range { .. }
                        | Event::Rmw { .. }
                        | Event::Fence { .. }
                )
            })
            .map(|(i, e)| (i as u64, e))
            .collect();
        let mut got = Vec::new();
        let n = Decoder::new(&buf[..]).skeleton(|i, e| got.push((i, e))).unwrap();
        assert_eq!(n, evs.len() as u64);
        assert!(want.len() > 5);
        assert_eq!(got, want);
    }

    /// The runtime sizes its side region on this: no event writes more than
    /// `SIDE_PER_OP` side bytes per op byte, nor more than `MAX_SIDE_LEN`.
    #[test]
    fn side_bytes_stay_within_the_bound() {
        let far = u64::MAX / 3;
        let worst = [
            Event::Access {
                pc: Pc(0),
                addr: Addr(far),
                size: 8,
                kind: AccessKind::Write,
                atomic: true,
                value: Some(u64::MAX),
            },
            Event::Access {
                pc: Pc(0),
                addr: Addr(far),
                size: 8,
                kind: AccessKind::Read,
                atomic: false,
                value: None,
            },
            Event::Rmw {
                pc: Pc(0),
                addr: Addr(far),
                size: 8,
                op: RmwOp::Cas,
                value: Some(u64::MAX),
            },
            Event::Range { pc: Pc(0), addr: Addr(far), len: 1, kind: AccessKind::Read },
            Event::FuncEnter { pc: Pc(0), call_site: Pc(far), frame: Addr(far) },
        ];
        for e in &worst {
            let mut enc = Encoder::new();
            // a first event moves the predictions away from the worst case's
            enc.push(&mut Streams::new(), &Event::FuncExit { pc: Pc(0) });
            let mut s = Streams::new();
            enc.push(&mut s, e);
            assert!(s.side.len() <= MAX_SIDE_LEN, "{e:?}: {}", s.side.len());
            assert!(s.side.len() <= SIDE_PER_OP * s.ops.len(), "{e:?}: {s:?}");
            assert!(s.ops.len() <= MAX_ACCESS_LEN, "{e:?}");
        }
    }

    #[test]
    fn strided_accesses_encode_small() {
        let mut enc = Encoder::new();
        let mut buf = Streams::new();
        for i in 0..1000u64 {
            let e = Event::Access {
                pc: Pc(0x401000),
                addr: Addr(0x10_0000 + i * 8),
                size: 8,
                kind: AccessKind::Read,
                atomic: false,
                value: None,
            };
            enc.push(&mut buf, &e);
        }
        // tag + 1-byte pc delta, then a 1-byte addr delta, after the first
        assert!(buf.ops.len() < 2 * 1000 + 8, "{}", buf.ops.len());
        assert!(buf.side.len() < 1000 + 8, "{}", buf.side.len());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut d = Decoder::new(&[3, 0xffu8, 1, 2][..]);
        assert!(d.next().is_err());
        assert_eq!(d.next(), Ok(None));
        let mut d = Decoder::new(&[3, tag::ALLOC, 0, 0x80][..]);
        assert!(d.next().is_err());
        // an op-stream length past the end
        let mut d = Decoder::new(&[9, tag::THREAD_EXIT][..]);
        assert!(d.next().is_err());
        assert_eq!(d.next(), Ok(None));
        let mut t = AccessTally::default();
        assert!(Decoder::new(&[9, tag::THREAD_EXIT][..]).scan_counts(&mut t, |_, _| {}).is_err());
        // an access whose address is missing from the side stream
        let mut d = Decoder::new(&[2, 0x03, 0x02][..]);
        assert!(d.next().is_err());
    }
}
