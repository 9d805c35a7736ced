//! Per-guest-thread state: the raw record buffer of the thread's stream, filled by
//! the callbacks that run in that (host = guest) thread.
//!
//! A callback appends one fixed-size raw record of two words and nothing else:
//! an access is `(address, instruction address + 1 | size shift << 48 | r/w << 51 |
//! decode flags << 56)`, everything else a marker (bit [`MARK`]) whose kind sits in
//! bits 48..55: function entry and exit, a clock, a recorded value, or "the next
//! of this buffer's [`Event`]s" for the rare events (allocations, thread events).
//! Full buffers go to the worker thread ([`crate::writer`]), which encodes and
//! compresses them.

use crate::decode::{ATOMIC, CALL, RET};
use crate::order;
use crate::writer::{self, Raw};
use libc::{c_uint, c_void};
use memlens_format::{Addr, AllocKind, Event, FreeKind, Pc, ThreadId};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::*};
use std::sync::Mutex;

/// Words per raw buffer (4 Ki records, 64 KiB: small enough to stay in a cache the worker shares).
pub const RAW_WORDS: usize = 1 << 13;
/// Words kept free at the end of a buffer: one callback appends at most 6.
const SLACK: usize = 16;
/// Instruction address + 1 in a record's second word.
pub const PC_MASK: u64 = (1 << 48) - 1;
/// A record's second word: a marker, not an access.
pub const MARK: u64 = 1 << 55;
/// Marker kinds (bits 48..55 of the second word).
pub const M_EVENT: u64 = 1;
/// Function entry: first word = call site, pc = the function's first instruction + 1.
pub const M_ENTER: u64 = 2;
/// Function exit: pc = the first instruction + 1 of the function left.
pub const M_EXIT: u64 = 3;
/// A clock: first word = the stamp.
pub const M_CLOCK: u64 = 4;
/// The value of the access just before (`--values`): first word = the value.
pub const M_VALUE: u64 = 5;
/// A wall-clock stamp: first word = CLOCK_MONOTONIC ns. One starts every raw
/// buffer (at most 4 Ki records, so at least every 4,096 events).
pub const M_TIME: u64 = 6;
/// Shadow call stack entries kept per thread (the oldest half goes when full).
const MAX_SHADOW: usize = 4096;
/// Full buffers a thread keeps back until the preload library reports its stack
/// (16 MiB): with `--dbi-filter all` the loader fills several before it runs.
const MAX_WAITING: usize = 256;

/// `--values`: record the value of each load and store.
pub static VALUES: AtomicBool = AtomicBool::new(false);
/// `--roi`: record accesses only inside `memlens_roi_begin/end`.
pub static ROI_MODE: AtomicBool = AtomicBool::new(false);
/// Inside the region of interest (process-wide).
pub static ROI_ON: AtomicBool = AtomicBool::new(false);
/// `memlens_trace_off` turned recording of accesses and function events off.
pub static TRACE_OFF: AtomicBool = AtomicBool::new(false);
/// Accesses are recorded now: not traced off, and inside the ROI under `--roi`.
static RECORDING: AtomicBool = AtomicBool::new(true);
/// The executable is static: allocators are hooked by symbol, not preloaded.
pub static STATIC: AtomicBool = AtomicBool::new(false);
/// Register reads for the static hooks: 0 untested, 1 checked, 2 off.
static REGS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
/// The meminfo layout is QEMU 7.2's (size shift in bits 4..7): checked at start-up.
static SHIFT_FFI: AtomicBool = AtomicBool::new(false);

/// Callers recorded with each allocation (`--stack-depth`).
pub static STACK_DEPTH: AtomicUsize = AtomicUsize::new(8);

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC in ns (the metadata option `clock_offset`).
pub fn clock_offset() -> i64 {
    let m = monotonic_ns();
    let r = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    r - m as i64
}

fn update_recording() {
    let on = !TRACE_OFF.load(SeqCst) && (!ROI_MODE.load(SeqCst) || ROI_ON.load(SeqCst));
    RECORDING.store(on, SeqCst);
}

/// Sets the recording state at start-up (after `ROI_MODE`) and checks the meminfo layout.
pub fn init_flags() {
    update_recording();
    // SAFETY: a pure function of its argument.
    let ok = unsafe { crate::ffi::qemu_plugin_mem_size_shift(3 << 4) } == 3
        && unsafe { crate::ffi::qemu_plugin_mem_size_shift(2 << 4) } == 2;
    SHIFT_FFI.store(!ok, SeqCst);
}

/// A record's size-shift and r/w bits from QEMU's meminfo.
#[inline(always)]
fn info_bits(info: u32) -> u64 {
    let shift = if SHIFT_FFI.load(Relaxed) {
        // SAFETY: plain accessor of QEMU's.
        u64::from(unsafe { crate::ffi::qemu_plugin_mem_size_shift(info) })
    } else {
        // QEMU 7.2: meminfo = MemOpIdx (memop << 4 | mmu index) | rw << 16.
        u64::from(info >> 4)
    };
    ((shift & 7) << 48) | ((u64::from(info >> 16) & 3) << 51)
}

pub struct Ts {
    stream: u32,
    vcpu: c_uint,
    /// The raw buffer: records are written through `cur` up to `end`.
    words: Vec<u64>,
    cur: *mut u64,
    end: *mut u64,
    /// The events the buffer's `M_EVENT` markers stand for.
    events: Vec<Event>,
    /// No buffer handed over yet (the `ThreadStart` is still in `events`).
    first: bool,
    /// The stream's clock at its start.
    clock0: u64,
    done: bool,
    /// Shadow call stack of the calls seen in traced code: (return address, the
    /// stack slot it was pushed to), slots strictly decreasing towards the top.
    shadow: Vec<(u64, u64)>,
    /// The return address of the last traced call, and `cur` right after it: a
    /// function entry with nothing recorded in between was entered by that call.
    call_ret: u64,
    call_at: *mut u64,
    /// The stack slots of the live calls, traced or not, innermost last: a function
    /// entry belongs to the innermost (entered by that call, or jumped to: a tail
    /// call, or lazy binding's resolver, returns through that frame).
    frames: Vec<u64>,
    /// The frames whose entry was recorded, innermost last: (slot, the function's
    /// first instruction + 1). A return that loads from a slot at or above one
    /// records their exits, so entries and exits balance however much of the code
    /// has no symbols; an exit names the function it leaves (a tail-called one
    /// returns through its caller's `ret`).
    entered: Vec<(u64, u64)>,
    /// Lamport clock of the last stamp.
    lclock: u64,
    /// Holds the order lock.
    held: bool,
    /// The thread's name (`comm`): the program's, or what `prctl(PR_SET_NAME)` set.
    name: String,
    /// Stack bounds and thread pointer as reported (the `ThreadStart` ones).
    stack: (u64, u64, u64),
    /// Full buffers kept back while the stack is unknown, so that it can still
    /// be patched into the `ThreadStart` at their head.
    waiting: Vec<Raw>,
    /// The preload library is doing its own work in this thread: nothing of it
    /// is recorded (the stacks are still kept).
    own: bool,
    /// Static executables: an allocator entered and not yet returned:
    /// (hook kind, first argument, second argument, return address, stack pointer).
    pending: Option<(u8, u64, u64, u64, u64)>,
}

struct Ptr(*mut Ts);
// SAFETY: only dereferenced by the owner thread, or at exit once QEMU has stopped
// the vCPUs' callbacks.
unsafe impl Send for Ptr {}

/// What the creating thread knows about a new thread: parent stream, clock, and
/// (from `clone3`) stack low, stack high, thread pointer.
#[derive(Clone, Default)]
struct Birth {
    parent: Option<u32>,
    clock: u64,
    stack: (u64, u64, u64),
    /// The creator's name, which a new thread inherits (as `comm` does).
    name: Option<String>,
}

static NEXT_STREAM: AtomicU32 = AtomicU32::new(0);
static REGISTRY: Mutex<Vec<Ptr>> = Mutex::new(Vec::new());
static BIRTHS: Mutex<Option<HashMap<c_uint, Birth>>> = Mutex::new(None);

thread_local! {
    static TS: Cell<*mut Ts> = const { Cell::new(std::ptr::null_mut()) };
    static DTOR: Dtor = const { Dtor };
    /// Stack and thread pointer of the thread this thread's last `clone3` creates.
    static CLONE_STACK: Cell<(u64, u64, u64)> = const { Cell::new((0, 0, 0)) };
}

struct Dtor;
impl Drop for Dtor {
    fn drop(&mut self) {
        let p = TS.try_with(|c| c.get()).unwrap_or(std::ptr::null_mut());
        if !p.is_null() {
            // SAFETY: this thread's own state.
            unsafe { (*p).end(true) };
        }
    }
}

/// The guest program's name as the kernel would give it (`comm`: the executable's
/// file name, 15 bytes at most): QEMU's own threads are all `qemu-x86_64`.
static GUEST_COMM: Mutex<String> = Mutex::new(String::new());

/// Sets the name threads start with, from the executable's path.
pub fn set_guest_comm(exe: &str) {
    let name = exe.rsplit('/').next().unwrap_or(exe);
    let mut end = name.len().min(15);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    *GUEST_COMM.lock().unwrap_or_else(|e| e.into_inner()) = name[..end].to_string();
}

fn guest_comm() -> String {
    GUEST_COMM.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

#[inline(always)]
fn ts(vcpu: c_uint) -> &'static mut Ts {
    // By vCPU index first: a thread-local of a shared object costs a
    // `__tls_get_addr` call, and this runs for every access.
    let p = match SLOTS.get(vcpu as usize) {
        Some(s) => s.load(Relaxed),
        None => TS.with(|c| c.get()),
    };
    if p.is_null() {
        return init(vcpu);
    }
    // SAFETY: owned by this thread (one guest thread per vCPU index at a time),
    // never freed.
    unsafe { &mut *p }
}

/// Each live vCPU's state by index. linux-user reuses the index of an exited
/// thread: `vcpu_init` clears the slot before the new thread runs.
static SLOTS: [std::sync::atomic::AtomicPtr<Ts>; 1024] =
    [const { std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()) }; 1024];

#[cold]
fn init(vcpu: c_uint) -> &'static mut Ts {
    let stream = NEXT_STREAM.fetch_add(1, Relaxed);
    let birth = BIRTHS.lock().unwrap().as_mut().and_then(|m| m.remove(&vcpu)).unwrap_or_default();
    let name = birth.name.clone().unwrap_or_else(guest_comm);
    let mut words = writer::fresh_words();
    words.reserve(RAW_WORDS);
    let t = Box::leak(Box::new(Ts {
        stream,
        vcpu,
        words,
        cur: std::ptr::null_mut(),
        end: std::ptr::null_mut(),
        events: Vec::new(),
        first: true,
        clock0: birth.clock,
        done: false,
        shadow: Vec::new(),
        call_ret: 0,
        call_at: std::ptr::null_mut(),
        frames: Vec::new(),
        entered: Vec::new(),
        lclock: birth.clock,
        held: false,
        name: name.clone(),
        stack: birth.stack,
        waiting: Vec::new(),
        own: false,
        pending: None,
    }));
    t.reset_ptrs();
    TS.with(|c| c.set(t));
    if let Some(s) = SLOTS.get(vcpu as usize) {
        s.store(t, Relaxed);
    }
    DTOR.with(|_| {});
    REGISTRY.lock().unwrap().push(Ptr(t));
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    let (lo, hi, tls) = birth.stack;
    t.event(Event::ThreadStart {
        os_tid: tid,
        parent: birth.parent.map(ThreadId),
        name,
        stack_lo: Addr(lo),
        stack_hi: Addr(hi),
        tls: Addr(tls),
    });
    t.stamp_time();
    t
}

impl Ts {
    fn reset_ptrs(&mut self) {
        let cap = self.words.capacity();
        let base = self.words.as_mut_ptr();
        self.cur = base;
        // SAFETY: within the allocation (cap >= RAW_WORDS > SLACK).
        self.end = unsafe { base.add(cap - SLACK) };
        self.call_at = std::ptr::null_mut();
    }

    /// Appends a record (room is checked by [`Ts::room`]).
    #[inline(always)]
    fn put(&mut self, a: u64, b: u64) {
        // SAFETY: `room` keeps at least SLACK words free past `cur`.
        unsafe {
            self.cur.write(a);
            self.cur.add(1).write(b);
            self.cur = self.cur.add(2);
        }
    }

    #[inline(always)]
    fn room(&mut self) {
        if self.cur >= self.end {
            self.hand_over(false);
        }
    }

    /// Hands the buffer to the worker (`last`: the stream ends with it).
    #[cold]
    fn hand_over(&mut self, last: bool) {
        // SAFETY: cur lies within words' allocation, at or after its start.
        let len = unsafe { self.cur.offset_from(self.words.as_ptr()) } as usize;
        // SAFETY: the words up to cur were written.
        unsafe { self.words.set_len(len) };
        // After the last buffer callbacks may still come (QEMU tears down late):
        // they fill a fresh buffer that the worker ignores for an ended stream.
        let words = std::mem::replace(&mut self.words, writer::fresh_words());
        let events = std::mem::take(&mut self.events);
        self.words.reserve(RAW_WORDS);
        self.reset_ptrs();
        if !last {
            self.stamp_time();
        }
        let raw = Raw { stream: self.stream, words, events, last, clock0: self.clock0 };
        // No stack bounds yet, and the preload library will report them.
        let unknown = self.stack.1 == 0 && !STATIC.load(Relaxed);
        if self.first && unknown && !last && self.waiting.len() < MAX_WAITING {
            self.waiting.push(raw);
            return;
        }
        self.send_waiting();
        if crate::PID.load(Relaxed) == std::process::id() as u64 {
            // Waiting for the worker with the order lock held would stall everyone.
            self.unhold();
            writer::hand_over(raw);
        }
        self.first = false;
    }

    /// Hands the buffers kept back to the worker.
    fn send_waiting(&mut self) {
        if self.waiting.is_empty() {
            return;
        }
        let waiting = std::mem::take(&mut self.waiting);
        if crate::PID.load(Relaxed) == std::process::id() as u64 {
            self.unhold();
            for r in waiting {
                writer::hand_over(r);
            }
        }
        self.first = false;
    }

    /// The `ThreadStart` at the head of the stream, while it is not handed over.
    fn start_event(&mut self) -> Option<&mut Event> {
        if !self.first {
            return None;
        }
        match self.waiting.first_mut() {
            Some(r) => r.events.first_mut(),
            None => self.events.first_mut(),
        }
    }

    /// Appends a `Time` stamp (vDSO clock_gettime).
    fn stamp_time(&mut self) {
        if !self.done {
            self.put(monotonic_ns(), MARK | (M_TIME << 48));
        }
    }

    fn event(&mut self, ev: Event) {
        if self.done {
            return;
        }
        self.events.push(ev);
        self.put(0, MARK | (M_EVENT << 48));
        self.room();
    }

    /// Ends the stream (`exit`: the thread ended normally).
    fn end(&mut self, exit: bool) {
        if self.done {
            return;
        }
        if exit {
            self.stamp_time();
            self.event(Event::ThreadExit);
        }
        self.done = true;
        self.hand_over(true);
    }

    /// The stamp of an access or synchronisation about to be recorded. Taken under
    /// the order lock (held since the instruction's execution callback, or taken
    /// here); writes a clock when another thread stamped since this thread's last
    /// stamp.
    fn stamp(&mut self) {
        if !self.held {
            self.held = order::lock();
        }
        let t = order::tick(self.lclock, self.stream);
        if t != self.lclock {
            self.lclock = t;
            if !self.done {
                self.put(t, MARK | (M_CLOCK << 48));
            }
        }
    }

    /// A synchronisation point (thread start, exit, the preload's pthread
    /// interposers): stamped unless `--order none`.
    fn sync_point(&mut self) {
        if order::sync() {
            self.stamp();
            self.unhold();
            self.room();
        }
    }

    /// Releases the order lock if this thread holds it.
    #[inline(always)]
    pub fn unhold(&mut self) {
        if self.held {
            self.held = false;
            order::unlock();
        }
    }

    /// A call in traced code pushed `ret` to `slot`.
    fn push_call(&mut self, ret: u64, slot: u64) {
        self.pop_to(slot);
        if self.shadow.len() >= MAX_SHADOW {
            self.shadow.drain(..MAX_SHADOW / 2);
        }
        self.shadow.push((ret, slot));
    }

    /// Frames at or below `slot` are gone (a return loaded from it, or a new call
    /// stored there after longjmp, an exception or an unseen return).
    #[inline(always)]
    fn pop_to(&mut self, slot: u64) {
        while self.shadow.last().is_some_and(|&(_, s)| s <= slot) {
            self.shadow.pop();
        }
    }

    /// A return loaded from `slot` (or a call stored there, so the frames at or
    /// below it were left by longjmp or an exception): the calls at or below it are
    /// gone, and the exits of the entered frames among them are recorded.
    #[inline(always)]
    fn leave(&mut self, slot: u64) {
        while self.frames.last().is_some_and(|&s| s <= slot) {
            self.frames.pop();
        }
        while let Some(&(s, func)) = self.entered.last() {
            if s > slot {
                break;
            }
            self.entered.pop();
            self.put(0, func | MARK | (M_EXIT << 48));
            self.room();
        }
    }

    /// A call stored its return address at `slot`.
    #[inline(always)]
    fn note_call(&mut self, slot: u64) {
        self.leave(slot);
        if self.frames.len() >= MAX_SHADOW {
            self.frames.drain(..MAX_SHADOW / 2);
        }
        self.frames.push(slot);
    }

    /// Callers of the function that called an allocator at `pc` with the stack
    /// pointer `sp` (pointing at the return address `pc`), innermost first.
    fn callers(&self, pc: u64, sp: u64) -> Vec<Pc> {
        let depth = STACK_DEPTH.load(Relaxed);
        let mut v = Vec::new();
        for &(ret, slot) in self.shadow.iter().rev() {
            if v.len() >= depth {
                break;
            }
            if slot < sp || (slot == sp && ret == pc) {
                continue; // deeper than the allocator's caller, or its own call
            }
            // A frame whose slot no longer holds its return address is stale.
            // SAFETY: slot >= sp lies in this thread's live stack.
            if sp != 0 && unsafe { crate::read_guest(slot, 3) } != ret {
                continue;
            }
            v.push(Pc(ret));
        }
        v
    }

    /// Stack bounds and thread pointer reported after the thread started: patched
    /// into its `ThreadStart` while that is still here.
    fn set_stack(&mut self, lo: u64, hi: u64, tls: u64) {
        self.stack = (lo, hi, tls);
        if let Some(Event::ThreadStart { stack_lo, stack_hi, tls: t, .. }) = self.start_event() {
            // pthread_getattr_np's bounds, as the compiled path records them.
            *stack_lo = Addr(lo);
            *stack_hi = Addr(hi);
            *t = Addr(tls);
        }
        self.send_waiting();
    }
}

/// Memory callback of an ordinary instruction of traced code: one raw record.
/// `udata` is the instruction address + 1 and its decode flags (bits 56..64).
pub unsafe extern "C" fn mem_cb(vcpu: c_uint, info: u32, vaddr: u64, udata: *mut c_void) {
    if !RECORDING.load(Relaxed) {
        return;
    }
    let t = ts(vcpu);
    if t.own {
        return;
    }
    t.put(vaddr, udata as u64 | info_bits(info));
    t.room();
}

/// Memory callback of the other traced instructions: calls and returns (the
/// shadow call stack), atomic instructions (stamped), and every instruction under
/// `--values` or `--order atomic`. `udata` as for [`mem_cb`] plus the instruction
/// length in bits 48..56.
pub unsafe extern "C" fn slow_cb(vcpu: c_uint, info: u32, vaddr: u64, udata: *mut c_void) {
    let t = ts(vcpu);
    let u = udata as u64;
    let flags = (u >> 56) as u8;
    let rw = (info >> 16) & 3;
    // the 8-byte store of the return address (not a helper's stray access)
    let slot_access = (info_bits(info) >> 48) & 7 == 3;
    let call = flags & CALL != 0 && rw == 2 && slot_access;
    if call {
        let ret = (u & PC_MASK) - 1 + ((u >> 48) & 0xff);
        t.push_call(ret, vaddr);
        t.call_ret = ret;
        t.note_call(vaddr);
    } else if flags & RET != 0 && rw == 1 && slot_access {
        t.pop_to(vaddr);
        t.leave(vaddr);
    }
    if !RECORDING.load(Relaxed) || t.own {
        t.unhold();
        if call {
            t.call_at = t.cur;
        }
        return;
    }
    if order::on() || (flags & ATOMIC != 0 && order::sync()) {
        t.stamp();
    }
    let bits = info_bits(info);
    t.put(vaddr, (u & !(0xff << 48)) | bits);
    let shift = ((bits >> 48) & 7) as u8;
    if rw != 3 && shift <= 3 && VALUES.load(Relaxed) {
        // SAFETY: the access just succeeded, so the bytes are mapped.
        let v = crate::read_guest(vaddr, shift);
        t.put(v, MARK | (M_VALUE << 48));
    }
    if call {
        t.call_at = t.cur;
    }
    t.unhold();
    t.room();
}

/// Memory callback of a `ret` in untraced code: keeps the shadow stack right, and
/// records the exits of entered frames it leaves. Armed for loads and stores
/// (QEMU 7.2 never calls a loads-only callback).
pub unsafe extern "C" fn ret_cb(vcpu: c_uint, info: u32, vaddr: u64, _udata: *mut c_void) {
    if info_bits(info) >> 48 != 3 | (1 << 3) {
        return; // not the 8-byte load of the return address: a helper's stray access
    }
    let t = ts(vcpu);
    t.pop_to(vaddr);
    t.leave(vaddr);
}

/// Memory callback of a helper-using instruction of untraced code: nothing to record.
pub unsafe extern "C" fn sink_cb(_vcpu: c_uint, _i: u32, _v: u64, _u: *mut c_void) {}

/// Memory callback of a `call` in untraced code: the next function entry was not
/// entered by the last traced call, but its frame is at the slot stored to.
pub unsafe extern "C" fn untraced_call_cb(vcpu: c_uint, info: u32, vaddr: u64, _u: *mut c_void) {
    // QEMU 7.2 reports a later helper's accesses to the callbacks armed last, and
    // filters neither loads nor stores: only the 8-byte store of the return address.
    if info_bits(info) >> 48 != 3 | (2 << 3) {
        return;
    }
    let t = ts(vcpu);
    t.call_at = std::ptr::null_mut();
    t.note_call(vaddr);
}

/// Before an instruction that is stamped (`--order atomic`: any memory access; by
/// default: atomic instructions): takes the order lock so that the access and its
/// stamp are one step.
pub unsafe extern "C" fn order_cb(vcpu: c_uint, _udata: *mut c_void) {
    let t = ts(vcpu);
    if !t.held {
        t.held = order::lock();
    }
}

/// A block starts (`--order atomic`): an instruction that made no access left the lock held.
pub unsafe extern "C" fn tb_cb(vcpu: c_uint, _udata: *mut c_void) {
    ts(vcpu).unhold();
}

/// Guest registers at a block start of a static executable.
///
/// QEMU 7.2's plugin API (version 1) has no register reads (`qemu_plugin_read_register`
/// came with 8.2/9.0). But a block-start callback is called straight from the
/// translated code, whose x86-64 TCG backend keeps the CPU state pointer `env` in
/// `rbp` (`TCG_AREG0`), and at a block start every guest register is in `env`:
/// `CPUX86State` begins with `regs[16]` (rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi,
/// r8..r15). The trampolines pass `rbp` on. The first use is checked against the
/// shadow call stack (the `call` that entered the allocator stored its return
/// address at the new `rsp`); on a mismatch the hooks turn off with a message.
#[derive(Clone, Copy)]
struct Regs(*const u64);

impl Regs {
    fn get(self, i: usize) -> u64 {
        // SAFETY: `env` of the running vCPU (see above), read at a block start.
        unsafe { self.0.add(i).read() }
    }
    fn rax(self) -> u64 {
        self.get(0)
    }
    fn rsp(self) -> u64 {
        self.get(4)
    }
    fn rsi(self) -> u64 {
        self.get(6)
    }
    fn rdi(self) -> u64 {
        self.get(7)
    }
}

/// Block start of a static executable: `udata` = block address.
#[unsafe(naked)]
pub unsafe extern "C" fn tb_static_cb(vcpu: c_uint, udata: *mut c_void) {
    core::arch::naked_asm!("mov rdx, rbp", "jmp {f}", f = sym tb_static)
}

unsafe extern "C" fn tb_static(vcpu: c_uint, udata: *mut c_void, env: *const u64) {
    let t = ts(vcpu);
    t.unhold();
    let Some((kind, a, b, ret, sp)) = t.pending else { return };
    let regs = Regs(env);
    if udata as u64 != ret || regs.rsp() != sp + 8 {
        return;
    }
    t.pending = None;
    let result = regs.rax();
    let stack = t.callers(ret, sp);
    let ev = match kind {
        crate::modules::HOOK_MALLOC | crate::modules::HOOK_CALLOC => {
            if result == 0 {
                return;
            }
            let (size, kind) = if kind == crate::modules::HOOK_MALLOC {
                (a, AllocKind::Malloc)
            } else {
                (a.wrapping_mul(b), AllocKind::Calloc)
            };
            Event::Alloc { pc: Pc(ret), addr: Addr(result), size, kind, stack }
        }
        _ => {
            if result == 0 && b != 0 {
                return; // failed: the old block is untouched
            }
            Event::Realloc { pc: Pc(ret), old: Addr(a), new: Addr(result), size: b, stack }
        }
    };
    t.event(ev);
}

/// First block of an allocator of a static executable: `udata` = hook kind.
#[unsafe(naked)]
pub unsafe extern "C" fn alloc_entry_cb(vcpu: c_uint, udata: *mut c_void) {
    core::arch::naked_asm!("mov rdx, rbp", "jmp {f}", f = sym alloc_entry)
}

unsafe extern "C" fn alloc_entry(vcpu: c_uint, udata: *mut c_void, env: *const u64) {
    let t = ts(vcpu);
    if t.pending.is_some() || REGS.load(Relaxed) == 2 {
        return; // an allocator called inside another one is part of it
    }
    let regs = Regs(env);
    let sp = regs.rsp();
    if REGS.load(Relaxed) == 0 {
        // The call into the allocator stored its return address at rsp.
        let ok = t.shadow.last().is_some_and(|&(_, slot)| slot == sp);
        if !ok {
            REGS.store(2, SeqCst);
            crate::say("this static executable's allocations are not recorded: the guest registers could not be located (QEMU 7.2's plugin API cannot read them)");
            return;
        }
        REGS.store(1, SeqCst);
    }
    let ret = crate::read_guest(sp, 3);
    let kind = udata as u64 as u8;
    if kind == crate::modules::HOOK_FREE {
        if regs.rdi() != 0 {
            t.event(Event::Free { pc: Pc(ret), addr: Addr(regs.rdi()), kind: FreeKind::Free });
        }
        return;
    }
    t.pending = Some((kind, regs.rdi(), regs.rsi(), ret, sp));
}

/// Releases the order lock of the calling thread, if any (before QEMU work that may
/// wait for the other threads: translation, system calls).
pub fn unhold_current() {
    let p = TS.with(|c| c.get());
    if !p.is_null() {
        // SAFETY: this thread's own state.
        unsafe { (*p).unhold() };
    }
}

/// First instruction of a function: `udata` = its address + 1.
pub unsafe extern "C" fn enter_cb(vcpu: c_uint, udata: *mut c_void) {
    if TRACE_OFF.load(Relaxed) {
        return;
    }
    let t = ts(vcpu);
    if t.own {
        return;
    }
    // Entered by the last traced call only if nothing was recorded since.
    let call_site = if t.call_at == t.cur { t.call_ret } else { 0 };
    // Its frame is the innermost live call's (none known: it never returns).
    let slot = t.frames.last().copied().unwrap_or(u64::MAX);
    t.entered.push((slot, udata as u64));
    t.put(call_site, udata as u64 | MARK | (M_ENTER << 48));
    t.room();
}

/// A `clone3` of this thread (read from its `struct clone_args`): the new thread's
/// stack and thread pointer.
pub fn clone_args(stack_lo: u64, stack_size: u64, tls: u64) {
    let hi = if stack_lo == 0 { 0 } else { stack_lo.wrapping_add(stack_size) };
    CLONE_STACK.with(|c| c.set((stack_lo, hi, tls)));
}

/// A vCPU (guest thread) is created; in linux-user this runs in the creating thread.
pub unsafe extern "C" fn vcpu_init(_id: u64, vcpu: c_uint) {
    if let Some(s) = SLOTS.get(vcpu as usize) {
        s.store(std::ptr::null_mut(), SeqCst);
    }
    let p = TS.with(|c| c.get());
    if !p.is_null() {
        // Creating a thread is a release: the new thread starts after this stamp.
        (*p).sync_point();
        let birth = Birth {
            parent: Some((*p).stream),
            clock: (*p).lclock,
            stack: CLONE_STACK.with(|c| c.replace((0, 0, 0))),
            name: Some((*p).name.clone()),
        };
        BIRTHS.lock().unwrap().get_or_insert_with(HashMap::new).insert(vcpu, birth);
    }
}

/// A vCPU ends: the guest thread exits.
pub unsafe extern "C" fn vcpu_exit(_id: u64, vcpu: c_uint) {
    let p = TS.with(|c| c.get());
    if !p.is_null() && (*p).vcpu == vcpu {
        // Ending is a release for whoever joins this thread.
        (*p).sync_point();
        (*p).unhold();
        (*p).end(true);
    }
}

/// An event of the preload library (see `memlens-dbi-preload`); `sp` is the stack
/// pointer at the allocator's entry.
pub fn preload_event(vcpu: c_uint, op: u64, a: u64, b: u64, pc: u64, c: u64, sp: u64) {
    let t = ts(vcpu);
    t.unhold();
    let ev = match op {
        0..=7 => Event::Alloc {
            pc: Pc(pc),
            addr: Addr(a),
            size: b,
            kind: AllocKind::from_u8(op as u8).unwrap_or(AllocKind::Malloc),
            stack: t.callers(pc, sp),
        },
        16..=20 => Event::Free {
            pc: Pc(pc),
            addr: Addr(a),
            kind: FreeKind::from_u8((op - 16) as u8).unwrap_or(FreeKind::Free),
        },
        32 => Event::Realloc {
            pc: Pc(pc),
            old: Addr(c),
            new: Addr(a),
            size: b,
            stack: t.callers(pc, sp),
        },
        64 => Event::RegisterThread(a as i64),
        66 | 67 => {
            let on = op == 66;
            // Process-wide: ordered against every stamped event.
            t.sync_point();
            if on {
                ROI_ON.store(true, SeqCst);
            }
            t.event(Event::Roi(on));
            if !on {
                ROI_ON.store(false, SeqCst);
            }
            update_recording();
            return;
        }
        68 | 69 => {
            TRACE_OFF.store(op == 69, SeqCst);
            update_recording();
            Event::Tracing(op == 68)
        }
        // A pthread synchronisation (create, join, mutex, barrier, ...).
        70 => {
            t.sync_point();
            return;
        }
        // The thread's stack and thread pointer (the preload library at start-up).
        71 => {
            t.set_stack(a, b, c);
            return;
        }
        // The preload library's own work begins or ends.
        72 => {
            t.own = a != 0;
            return;
        }
        _ => return,
    };
    t.event(ev);
}

/// A thread name from the preload library (`memlens_thread_name`).
pub fn thread_name(vcpu: c_uint, name: String) {
    ts(vcpu).event(Event::ThreadName(name));
}

/// The guest renamed the calling thread (`prctl(PR_SET_NAME)`, which
/// `pthread_setname_np` uses for the calling thread).
pub fn renamed(vcpu: c_uint, name: String) {
    let t = ts(vcpu);
    if t.name != name {
        t.name.clone_from(&name);
        // Reports name a thread by its start: the usual rename, at the start of
        // the thread's work, goes there while that is still here.
        if let Some(Event::ThreadStart { name: n, .. }) = t.start_event() {
            n.clone_from(&name);
        }
        t.event(Event::ThreadName(name));
    }
}

/// The parent of a `fork`: record it.
pub fn forked(vcpu: c_uint, child_pid: u32) {
    ts(vcpu).event(Event::Fork { child_pid });
}

/// In the child of a `fork`: the calling thread is the only one left; it becomes
/// stream 0 of the child's new trace. The parent's buffered events are its own.
pub fn reset_after_fork(vcpu: c_uint) {
    let t = ts(vcpu);
    t.held = false;
    t.events.clear();
    t.waiting.clear();
    // The parent's trace holds their entries.
    t.entered.clear();
    t.frames.clear();
    t.reset_ptrs();
    t.done = false;
    t.first = true;
    t.stream = 0;
    t.clock0 = t.lclock;
    NEXT_STREAM.store(1, SeqCst);
    let me = t as *mut Ts;
    // The other threads do not exist in the child (their state is left leaked).
    let mut reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    reg.clear();
    reg.push(Ptr(me));
    drop(reg);
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    t.event(Event::ThreadStart {
        os_tid: tid,
        parent: None,
        name: t.name.clone(),
        stack_lo: Addr(t.stack.0),
        stack_hi: Addr(t.stack.1),
        tls: Addr(t.stack.2),
    });
}

/// At process exit: the calling thread exits normally, every other stream is cut.
pub fn finish_all() {
    let me = TS.with(|c| c.get());
    let all: Vec<*mut Ts> = REGISTRY.lock().unwrap().iter().map(|p| p.0).collect();
    for p in all {
        // SAFETY: QEMU has stopped the other vCPUs' instrumentation at exit.
        unsafe { (*p).end(p == me) };
    }
}
