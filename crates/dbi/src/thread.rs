//! Per-guest-thread state: the encoder and buffer of the thread's stream, filled by
//! the callbacks that run in that (host = guest) thread.

use crate::decode::{CALL, MERGE, OP_MASK, RET};
use crate::order;
use crate::writer::{send, Msg};
use libc::{c_uint, c_void};
use memlens_format::codec::{access_tag, Encoder, MAX_ACCESS_LEN};
use memlens_format::{
    count, AccessKind, Addr, AllocKind, ChunkCounts, Event, FreeKind, Pc, RmwOp, ThreadId,
};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::*};
use std::sync::Mutex;

/// Raw bytes per chunk.
const CHUNK: usize = 1 << 20;
/// udata of a memory callback: instruction address + 1 (bits 0..48), instruction
/// length (48..56), decode flags (56..64).
pub const PC_MASK: u64 = (1 << 48) - 1;
/// Shadow call stack entries kept per thread (the oldest half goes when full).
const MAX_SHADOW: usize = 4096;

/// `--values`: record the value of each load and store.
pub static VALUES: AtomicBool = AtomicBool::new(false);
/// `--roi`: record accesses only inside `memlens_roi_begin/end`.
pub static ROI_MODE: AtomicBool = AtomicBool::new(false);
/// Inside the region of interest (process-wide).
pub static ROI_ON: AtomicBool = AtomicBool::new(false);
/// `memlens_trace_off` turned recording of accesses and function events off.
pub static TRACE_OFF: AtomicBool = AtomicBool::new(false);
/// The executable is static: allocators are hooked by symbol, not preloaded.
pub static STATIC: AtomicBool = AtomicBool::new(false);
/// Register reads for the static hooks: 0 untested, 1 checked, 2 off.
static REGS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Callers recorded with each allocation (`--stack-depth`).
pub static STACK_DEPTH: AtomicUsize = AtomicUsize::new(8);

pub struct Ts {
    stream: u32,
    vcpu: c_uint,
    raw: Vec<u8>,
    counts: ChunkCounts,
    enc: Encoder,
    /// A pending 8-byte half of a possibly 16-byte access: pc (0: none), address, store.
    pend_pc: u64,
    pend_addr: u64,
    pend_write: bool,
    done: bool,
    /// The block running now is traced.
    in_traced: bool,
    /// Shadow call stack of the calls seen in traced code: (return address, the
    /// stack slot it was pushed to), slots strictly decreasing towards the top.
    shadow: Vec<(u64, u64)>,
    /// Lamport clock of the last stamp (`--order=atomic`).
    lclock: u64,
    /// The clock in force where the current chunk started.
    chunk_clock: u64,
    /// Holds the order lock (`--order=atomic`).
    held: bool,
    /// Static executables: an allocator entered and not yet returned:
    /// (hook kind, first argument, second argument, return address, stack pointer).
    pending: Option<(u8, u64, u64, u64, u64)>,
}

struct Ptr(*mut Ts);
// SAFETY: only dereferenced by the owner thread, or at exit once QEMU has stopped
// the vCPUs' callbacks.
unsafe impl Send for Ptr {}

static NEXT_STREAM: AtomicU32 = AtomicU32::new(0);
static REGISTRY: Mutex<Vec<Ptr>> = Mutex::new(Vec::new());
static PARENTS: Mutex<Option<HashMap<c_uint, u32>>> = Mutex::new(None);

thread_local! {
    static TS: Cell<*mut Ts> = const { Cell::new(std::ptr::null_mut()) };
    static DTOR: Dtor = const { Dtor };
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

fn comm() -> String {
    std::fs::read_to_string("/proc/thread-self/comm")
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

#[inline(always)]
fn ts(vcpu: c_uint) -> &'static mut Ts {
    // By vCPU index first: a thread-local of a shared object costs a
    // `__tls_get_addr` call, and this runs for every access and every block.
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
    let parent = PARENTS.lock().unwrap().as_mut().and_then(|m| m.remove(&vcpu));
    let t = Box::leak(Box::new(Ts {
        stream,
        vcpu,
        raw: Vec::with_capacity(CHUNK + 4096),
        counts: ChunkCounts::default(),
        enc: Encoder::new(),
        pend_pc: 0,
        pend_addr: 0,
        pend_write: false,
        done: false,
        in_traced: false,
        shadow: Vec::new(),
        lclock: 0,
        chunk_clock: 0,
        held: false,
        pending: None,
    }));
    TS.with(|c| c.set(t));
    if let Some(s) = SLOTS.get(vcpu as usize) {
        s.store(t, Relaxed);
    }
    DTOR.with(|_| {});
    REGISTRY.lock().unwrap().push(Ptr(t));
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    t.event(&Event::ThreadStart {
        os_tid: tid,
        parent: parent.map(ThreadId),
        name: comm(),
        stack_lo: Addr(0),
        stack_hi: Addr(0),
        tls: Addr(0),
    });
    t
}

impl Ts {
    fn flush(&mut self, last: bool) {
        if self.raw.is_empty() && !last {
            return;
        }
        let raw = std::mem::replace(
            &mut self.raw,
            if last { Vec::new() } else { Vec::with_capacity(CHUNK + 4096) },
        );
        let counts = std::mem::take(&mut self.counts);
        self.enc.reset();
        let clock = std::mem::replace(&mut self.chunk_clock, self.lclock);
        if crate::PID.load(Relaxed) == std::process::id() as u64 {
            send(Msg::Chunk { stream: self.stream, raw, counts, last, clock });
        }
    }

    #[inline(always)]
    fn room(&mut self) {
        if self.raw.len() >= CHUNK {
            self.flush(false);
        }
    }

    fn event(&mut self, ev: &Event) {
        if self.done {
            return;
        }
        self.flush_pending();
        self.enc.push(&mut self.raw, ev);
        count(&mut self.counts, ev);
        self.room();
    }

    #[inline(always)]
    fn access(&mut self, pc: u64, addr: u64, shift: u8, write: bool) {
        if self.done {
            return;
        }
        let kind = if write { AccessKind::Write } else { AccessKind::Read };
        self.raw.reserve(MAX_ACCESS_LEN);
        let value = if shift <= 3 && VALUES.load(Relaxed) {
            // SAFETY: the access just succeeded, so the bytes are mapped.
            Some(unsafe { crate::read_guest(addr, shift) })
        } else {
            None
        };
        // SAFETY: MAX_ACCESS_LEN bytes reserved past len.
        unsafe {
            let base = self.raw.as_mut_ptr();
            let p = base.add(self.raw.len());
            let tag = access_tag(kind, false, shift);
            let e = match value {
                Some(v) => self.enc.access_value(p, tag, pc, addr, v),
                None => self.enc.access(p, tag, pc, addr),
            };
            self.raw.set_len(e.offset_from(base) as usize);
        }
        self.counts.events += 1;
        if write {
            self.counts.stores += 1;
        } else {
            self.counts.loads += 1;
        }
        self.room();
    }

    #[inline(always)]
    fn flush_pending(&mut self) {
        if self.pend_pc != 0 {
            let (pc, a, w) = (self.pend_pc, self.pend_addr, self.pend_write);
            self.pend_pc = 0;
            self.access(pc, a, 3, w);
        }
    }

    /// Ends the stream (`exit`: the thread ended normally).
    fn end(&mut self, exit: bool) {
        if self.done {
            return;
        }
        self.flush_pending();
        if exit {
            self.event(&Event::ThreadExit);
        }
        self.done = true;
        self.flush(true);
    }

    /// `--order=atomic`: the stamp of the access about to be recorded. Taken under
    /// the order lock (held since the instruction's execution callback, or taken
    /// here for the second access of an instruction); writes `Clock` when another
    /// thread stamped since this thread's last stamp.
    fn stamp(&mut self) {
        if !self.held {
            self.held = order::lock();
        }
        let t = order::tick(self.lclock);
        if t != self.lclock {
            self.lclock = t;
            self.event(&Event::Clock(t));
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
}

/// Memory callback: `udata` is the instruction address + 1, its length and decode
/// flags (see [`PC_MASK`]).
pub unsafe extern "C" fn mem_cb(vcpu: c_uint, info: u32, vaddr: u64, udata: *mut c_void) {
    let t = ts(vcpu);
    if !t.in_traced {
        return;
    }
    let u = udata as u64;
    let pc = u & PC_MASK;
    let flags = (u >> 56) as u8;
    let rw = (info >> 16) & 3;
    if flags & (CALL | RET) != 0 {
        if flags & CALL != 0 && rw == 2 {
            let len = (u >> 48) & 0xff;
            t.push_call(pc - 1 + len, vaddr);
        } else if flags & RET != 0 && rw == 1 {
            t.pop_to(vaddr);
        }
    }
    if TRACE_OFF.load(Relaxed) || (ROI_MODE.load(Relaxed) && !ROI_ON.load(Relaxed)) {
        t.unhold();
        return;
    }
    if order::on() {
        t.stamp();
    }
    let shift = (crate::ffi::qemu_plugin_mem_size_shift(info) & 7) as u8;
    if rw == 3 {
        // The old value is gone by now: an RMW carries none.
        let op = RmwOp::from_u8(flags & OP_MASK).unwrap_or(RmwOp::FetchAdd);
        t.event(&Event::Rmw { pc: Pc(pc), addr: Addr(vaddr), size: 1 << shift, op, value: None });
        t.unhold();
        return;
    }
    let write = rw & 2 != 0;
    if flags & MERGE != 0 && shift == 3 {
        if t.pend_pc == pc && t.pend_write == write && vaddr == t.pend_addr.wrapping_add(8) {
            t.pend_pc = 0;
            t.access(pc, t.pend_addr, 4, write);
            t.unhold();
            return;
        }
        t.flush_pending();
        t.pend_pc = pc;
        t.pend_addr = vaddr;
        t.pend_write = write;
        t.unhold();
        return;
    }
    t.flush_pending();
    t.access(pc, vaddr, shift, write);
    t.unhold();
}

/// Memory callback of a `ret` in untraced code: only keeps the shadow stack right.
pub unsafe extern "C" fn ret_cb(vcpu: c_uint, _info: u32, vaddr: u64, _udata: *mut c_void) {
    ts(vcpu).pop_to(vaddr);
}

/// `--order=atomic`: before an instruction of traced code that may access memory.
pub unsafe extern "C" fn order_cb(vcpu: c_uint, _udata: *mut c_void) {
    let t = ts(vcpu);
    if !t.held {
        t.held = order::lock();
    }
}

/// A block starts: whether it is traced.
pub unsafe extern "C" fn tb_cb(vcpu: c_uint, udata: *mut c_void) {
    let t = ts(vcpu);
    t.unhold();
    t.in_traced = !udata.is_null();
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

/// Block start of a static executable: `udata` = block address << 1 | traced.
#[unsafe(naked)]
pub unsafe extern "C" fn tb_static_cb(vcpu: c_uint, udata: *mut c_void) {
    core::arch::naked_asm!("mov rdx, rbp", "jmp {f}", f = sym tb_static)
}

unsafe extern "C" fn tb_static(vcpu: c_uint, udata: *mut c_void, env: *const u64) {
    let t = ts(vcpu);
    t.unhold();
    let u = udata as u64;
    t.in_traced = u & 1 != 0;
    let Some((kind, a, b, ret, sp)) = t.pending else { return };
    let regs = Regs(env);
    if u >> 1 != ret || regs.rsp() != sp + 8 {
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
    t.event(&ev);
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
            t.event(&Event::Free { pc: Pc(ret), addr: Addr(regs.rdi()), kind: FreeKind::Free });
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

/// First instruction of a function.
pub unsafe extern "C" fn enter_cb(vcpu: c_uint, udata: *mut c_void) {
    if TRACE_OFF.load(Relaxed) {
        return;
    }
    let pc = Pc(udata as u64);
    ts(vcpu).event(&Event::FuncEnter { pc, call_site: Pc(0), frame: Addr(0) });
}

/// A `ret`.
pub unsafe extern "C" fn exit_cb(vcpu: c_uint, udata: *mut c_void) {
    if TRACE_OFF.load(Relaxed) {
        return;
    }
    ts(vcpu).event(&Event::FuncExit { pc: Pc(udata as u64) });
}

/// A vCPU (guest thread) is created; in linux-user this runs in the creating thread.
pub unsafe extern "C" fn vcpu_init(_id: u64, vcpu: c_uint) {
    if let Some(s) = SLOTS.get(vcpu as usize) {
        s.store(std::ptr::null_mut(), SeqCst);
    }
    let p = TS.with(|c| c.get());
    if !p.is_null() {
        let parent = (*p).stream;
        PARENTS.lock().unwrap().get_or_insert_with(HashMap::new).insert(vcpu, parent);
    }
}

/// A vCPU ends: the guest thread exits.
pub unsafe extern "C" fn vcpu_exit(_id: u64, vcpu: c_uint) {
    let p = TS.with(|c| c.get());
    if !p.is_null() && (*p).vcpu == vcpu {
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
            if order::on() {
                // Process-wide: ordered against every stamped access.
                t.stamp();
                t.unhold();
            }
            if on {
                ROI_ON.store(true, SeqCst);
            }
            t.event(&Event::Roi(on));
            if !on {
                ROI_ON.store(false, SeqCst);
            }
            return;
        }
        68 | 69 => {
            TRACE_OFF.store(op == 69, SeqCst);
            Event::Tracing(op == 68)
        }
        _ => return,
    };
    t.event(&ev);
}

/// A thread name from the preload library.
pub fn thread_name(vcpu: c_uint, name: String) {
    ts(vcpu).event(&Event::ThreadName(name));
}

/// The parent of a `fork`: record it.
pub fn forked(vcpu: c_uint, child_pid: u32) {
    ts(vcpu).event(&Event::Fork { child_pid });
}

/// In the child of a `fork`: the calling thread is the only one left; it becomes
/// stream 0 of the child's new trace. The parent's buffered events are its own.
pub fn reset_after_fork(vcpu: c_uint) {
    let t = ts(vcpu);
    t.held = false;
    t.raw.clear();
    t.counts = ChunkCounts::default();
    t.enc.reset();
    t.pend_pc = 0;
    t.done = false;
    t.stream = 0;
    t.chunk_clock = t.lclock;
    NEXT_STREAM.store(1, SeqCst);
    let me = t as *mut Ts;
    // The other threads do not exist in the child (their state is left leaked).
    let mut reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    reg.clear();
    reg.push(Ptr(me));
    drop(reg);
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    t.event(&Event::ThreadStart {
        os_tid: tid,
        parent: None,
        name: comm(),
        stack_lo: Addr(0),
        stack_hi: Addr(0),
        tls: Addr(0),
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
