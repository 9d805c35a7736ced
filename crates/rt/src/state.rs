//! Per-thread recording state, the process-wide switches, and the registry of live
//! threads.
//!
//! Each thread owns a buffer and writes events' op stream at `pos`, their side
//! stream at the encoder's side cursor in the region after the buffer's `cap`
//! bytes, which is large enough never to fill first (`session::region_len`). The hot path checks one
//! thing, `pos < limit`: `limit` is the buffer end minus a reserve while the thread
//! may record without further checks ("fast mode"), and 0 otherwise (runtime not
//! started, guard held, values/filter/ROI modes, tracing off, buffer taken away...),
//! which sends every event to the general path. Whoever changes a process-wide switch
//! bumps [`GEN`] and zeroes every live thread's `limit`; a thread recomputes its limit
//! at the end of each general-path call and retries if `GEN` moved meanwhile.
//!
//! While an event is being written `pos` has the [`BUSY`] bit set, so an event raised by a
//! signal handler in the middle of another sees `pos >= limit`, finds `BUSY` and is
//! counted as dropped instead of corrupting the buffer.
//!
//! Buffers change hands under `own` (0 free, 1 taken by another thread at exit/exec/
//! crash, 2 held by the owner swapping buffers). A buffer taken from a running thread
//! is marked `stolen` and never recycled, since the owner may still write one last
//! event into it.

use crate::session::{session, Job, Session};
use crate::sys;
use core::cell::{Cell, UnsafeCell};
use core::sync::atomic::{
    compiler_fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::*,
};
use memlens_format::codec::{Encoder, MAX_ACCESS_LEN};
use memlens_format::{Addr, ChunkCounts, Event, ThreadId};

/// Set in `pos` while an event is being written (the rest is the committed end).
pub(crate) const BUSY: usize = 1 << 63;
/// Room kept free below `limit`: enough for the largest hot-path event pair.
pub(crate) const RESERVE: usize = 4 * MAX_ACCESS_LEN;
/// Op-stream bytes between two `Time` stamps: an event takes at least two op bytes
/// (tag and pc; only rare control events take one), and one fast-path call may
/// write a pair (a copy's two ranges, a clock and its atomic) starting just below
/// the bound, so 8,190 bytes keep the promise of a stamp at least every 4,096
/// events. The fast path's `limit` stops at the next stamp's position, so stamping
/// costs the hot path nothing.
pub(crate) const STAMP_BYTES: usize = 8190;
/// Entries of a thread's shadow call stack.
pub(crate) const SHADOW_CAP: usize = 1 << 16;
/// The shadow stack's mapping: three arrays of [`SHADOW_CAP`] words — saved stack
/// pointer | flags, the frame's return address (call site), the entry pc. The last
/// two recognise and name an exit reached by a tail jump (`jmp __tsan_func_exit`,
/// which gcc emits after the epilogue), where the stack pointer alone looks like
/// a longjmp out of the frame.
pub(crate) const SHADOW_BYTES: usize = SHADOW_CAP * 8 * 3;
const SLOTS: usize = 1 << 14;
/// Live threads beyond which new threads get small buffers.
const SMALL_AFTER: usize = 64;

/// Process states.
pub(crate) const UNINIT: u8 = 0;
pub(crate) const INITING: u8 = 1;
pub(crate) const ACTIVE: u8 = 2;
pub(crate) const INACTIVE: u8 = 3;
pub(crate) const ENDING: u8 = 4;

/// Where the runtime is: [`UNINIT`], [`INITING`], [`ACTIVE`], [`INACTIVE`], [`ENDING`].
pub(crate) static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// Bumped whenever a switch below changes (see the module docs).
pub(crate) static GEN: AtomicU64 = AtomicU64::new(0);
/// `memlens_trace_on/off`.
pub(crate) static TRACING: AtomicBool = AtomicBool::new(true);
/// Inside `memlens_roi_begin/end`.
pub(crate) static ROI_ON: AtomicBool = AtomicBool::new(false);
/// `MEMLENS_ROI=1`.
pub(crate) static ROI_MODE: AtomicBool = AtomicBool::new(false);
/// `MEMLENS_VALUES=1`.
pub(crate) static VALUES: AtomicBool = AtomicBool::new(false);
/// `MEMLENS_REGISTERED_ONLY=1`: only threads that called `memlens_register_thread`
/// record accesses.
pub(crate) static REGISTERED_ONLY: AtomicBool = AtomicBool::new(false);
/// `MEMLENS_FILTER` given.
pub(crate) static FILTER_ON: AtomicBool = AtomicBool::new(false);
/// A live `trace:FUNC` probe records: a thread records only inside the function's
/// dynamic extent ([`ThreadState::extent`] > 0; `livetrace.rs`).
pub(crate) static EXTENT_MODE: AtomicBool = AtomicBool::new(false);
/// Recording sessions started in this process after the first one (live `trace`
/// probes one after the other): a thread whose [`ThreadState::epoch`] differs
/// belongs to an ended session and starts afresh at its next event ([`restart`]).
pub(crate) static EPOCH: AtomicU32 = AtomicU32::new(0);
/// The runtime may start recording later (a live `trace` probe, `livetrace.rs`):
/// threads seen while inactive stay `T_NEW` instead of `T_OFF`.
pub(crate) static MAY_START: AtomicBool = AtomicBool::new(false);

static REGISTRY: [AtomicPtr<ThreadState>; SLOTS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; SLOTS];
/// Threads currently looking at other threads' states; a finishing thread waits for 0
/// before its state (TLS) can go away.
static VISITORS: AtomicUsize = AtomicUsize::new(0);
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// pthread key (+1) whose destructor finishes threads the runtime did not start.
pub(crate) static KEY: AtomicU32 = AtomicU32::new(0);

/// Thread states.
pub(crate) const T_NEW: u8 = 0;
pub(crate) const T_REC: u8 = 1;
pub(crate) const T_OFF: u8 = 2;
pub(crate) const T_RUNTIME: u8 = 3;

/// Counter classes: each event bumps exactly one.
pub(crate) mod class {
    pub(crate) const READS: usize = 0;
    pub(crate) const WRITES: usize = 1;
    pub(crate) const RMW: usize = 2;
    pub(crate) const CAS_FAIL: usize = 3;
    pub(crate) const OTHER: usize = 4;
    pub(crate) const ALLOCS: usize = 5;
    pub(crate) const FREES: usize = 6;
    pub(crate) const REALLOCS: usize = 7;
}

/// A plain store whose value is read at the thread's next event (values mode).
#[derive(Clone, Copy)]
pub(crate) struct Pending {
    pub tag: u8,
    pub pc: u64,
    pub addr: u64,
}

impl Pending {
    pub(crate) const NONE: Pending = Pending { tag: 0, pc: 0, addr: 0 };
}

/// Everything a thread needs to record. Lives in TLS; fields other threads read are
/// atomics, or are only touched under the `own` protocol.
pub(crate) struct ThreadState {
    /// Next write position in the buffer, or [`BUSY`].
    pub pos: AtomicUsize,
    /// Fast path allowed while `pos < limit`.
    pub limit: AtomicUsize,
    /// Event counters of the current chunk, by [`class`].
    pub cnt: [AtomicU32; 8],
    /// The chunk's encoder (prediction tables).
    enc: UnsafeCell<Encoder>,
    /// Shadow call stack: saved stack pointers, bit 0 set if the entry was recorded.
    pub shadow: Cell<*mut usize>,
    /// Shadow stack depth (may exceed [`SHADOW_CAP`]: frames not tracked).
    pub depth: Cell<usize>,
    /// Re-entrancy guard: runtime code (or runtime-called libc) is running.
    pub guard: Cell<u32>,
    /// `T_*`.
    pub tstate: AtomicU8,
    pub buf: Cell<usize>,
    pub buf_end: Cell<usize>,
    pub buf_cap: Cell<usize>,
    pub stream: Cell<u32>,
    pub seq: Cell<u32>,
    pub clock: Cell<u64>,
    /// Buffer position at which the next `Time` stamp is due (0: at the next
    /// general path).
    pub stamp_at: Cell<usize>,
    /// Lamport clock of the thread (`order.rs`); 0 before its first ordering event.
    pub lclock: Cell<u64>,
    /// Called `memlens_register_thread` (see [`REGISTERED_ONLY`]).
    pub registered: Cell<bool>,
    /// Open calls of a live `trace:FUNC` probe's function (see [`EXTENT_MODE`]).
    pub extent: Cell<u32>,
    /// The [`EPOCH`] of the session this thread records into.
    pub epoch: Cell<u32>,
    /// Open traced calls (`calls.rs`), mapped at the first one; never unmapped, since
    /// a traced call may return after the thread's recording ended.
    pub calls: Cell<*mut crate::calls::Frame>,
    /// Entries of `calls` in use.
    pub ncalls: Cell<usize>,
    pub own: AtomicU8,
    pub stolen: AtomicBool,
    /// Inside the real call of an interposed waiting call (`order::parked`).
    pub parked: AtomicBool,
    /// Stripes held across the last access (`order.rs`, `--order=atomic`).
    pub held: Cell<crate::order::Held>,
    pub pend: Cell<Pending>,
    pub stack_lo: Cell<usize>,
    pub stack_hi: Cell<usize>,
    pub pthread: AtomicUsize,
    /// Events this thread could not record since the last `Dropped` event.
    pub dropped: Cell<u64>,
    /// In the fatal-signal handler: runtime allocations come from the arena.
    pub crash: Cell<bool>,
    /// Registry slot + 1 (0: not registered), so a fresh state is all zeros.
    slot: Cell<usize>,
    /// A name set by another thread, emitted at this thread's next general path.
    pub name_kick: AtomicBool,
    name_lock: AtomicBool,
    name_len: Cell<usize>,
    name: UnsafeCell<[u8; 16]>,
}

impl ThreadState {
    /// What a zero-filled TLS block holds (see the unit test).
    #[cfg_attr(not(test), allow(dead_code))]
    const fn new() -> ThreadState {
        ThreadState {
            pos: AtomicUsize::new(0),
            limit: AtomicUsize::new(0),
            cnt: [const { AtomicU32::new(0) }; 8],
            enc: UnsafeCell::new(Encoder::new()),
            shadow: Cell::new(core::ptr::null_mut()),
            depth: Cell::new(0),
            guard: Cell::new(0),
            tstate: AtomicU8::new(T_NEW),
            buf: Cell::new(0),
            buf_end: Cell::new(0),
            buf_cap: Cell::new(0),
            stream: Cell::new(0),
            seq: Cell::new(0),
            clock: Cell::new(0),
            stamp_at: Cell::new(0),
            lclock: Cell::new(0),
            registered: Cell::new(false),
            extent: Cell::new(0),
            epoch: Cell::new(0),
            calls: Cell::new(core::ptr::null_mut()),
            ncalls: Cell::new(0),
            own: AtomicU8::new(0),
            stolen: AtomicBool::new(false),
            parked: AtomicBool::new(false),
            held: Cell::new([0; 8]),
            pend: Cell::new(Pending::NONE),
            stack_lo: Cell::new(0),
            stack_hi: Cell::new(0),
            pthread: AtomicUsize::new(0),
            dropped: Cell::new(0),
            crash: Cell::new(false),
            slot: Cell::new(0),
            name_kick: AtomicBool::new(false),
            name_lock: AtomicBool::new(false),
            name_len: Cell::new(0),
            name: UnsafeCell::new([0; 16]),
        }
    }

    /// Counts one event of `class` (a plain increment: only this thread writes it).
    #[inline(always)]
    pub(crate) fn bump(&self, c: usize) {
        let a = &self.cnt[c];
        a.store(a.load(Relaxed).wrapping_add(1), Relaxed);
    }

    /// Whether the current buffer takes `need` more op bytes (false when there is
    /// none, or another thread took it).
    #[inline]
    pub(crate) fn has_room(&self, need: usize) -> bool {
        self.buf.get() != 0
            && !self.stolen.load(Relaxed)
            && self.pos.load(Relaxed).wrapping_add(need) <= self.buf_end.get()
    }

    /// Counts `n` events of `c` (a loop's run, see `loops.rs`).
    #[inline]
    pub(crate) fn bump_by(&self, c: usize, n: u32) {
        let a = &self.cnt[c];
        a.store(a.load(Relaxed).wrapping_add(n), Relaxed);
    }

    /// The encoder.
    ///
    /// # Safety
    /// Only the owning thread, and never twice at once.
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    pub(crate) unsafe fn enc(&self) -> &mut Encoder {
        &mut *self.enc.get()
    }

    /// Side-stream bytes written into the current buffer. Read by another thread
    /// (after `pos`), it covers every committed event and maybe part of one being
    /// written; readers ignore side bytes past the last event's, and the writer
    /// clamps it to the region.
    pub(crate) fn side_len(&self) -> usize {
        // SAFETY: the state is alive; the cursor is read volatile.
        let side = unsafe { Encoder::side_of(self.enc.get()) } as usize;
        side.saturating_sub(self.buf.get() + self.buf_cap.get())
    }

    /// Points the encoder's side cursor at the start of the buffer's side region.
    pub(crate) fn reset_side(&self) {
        let b = self.buf.get();
        let p = if b == 0 { 0 } else { b + self.buf_cap.get() };
        // SAFETY: owner; the encoder is not in use.
        unsafe { self.enc().set_side(p as *mut u8) };
    }

    /// The chunk of the current buffer (at `buf`, `len` bytes of events) for the
    /// writers.
    #[inline]
    pub(crate) fn buffer_job(&self, buf: usize, len: usize, last: bool, recycle: bool) -> Job {
        Job {
            buf,
            len,
            side_len: self.side_len(),
            cap: self.buf_cap.get(),
            stream: self.stream.get(),
            seq: self.seq.get(),
            last,
            counts: self.counts(),
            clock: self.clock.get(),
            recycle,
        }
    }

    /// A chunk of this thread's stream holding one event (`len` bytes in the buffer
    /// `buf` of `cap` bytes), written outside the thread's own buffer.
    pub(crate) fn one_event_job(
        &self,
        buf: usize,
        len: usize,
        cap: usize,
        seq: u32,
        last: bool,
        recycle: bool,
    ) -> Job {
        Job {
            buf,
            len,
            side_len: 0,
            cap,
            stream: self.stream.get(),
            seq,
            last,
            counts: ChunkCounts { events: 1, ..ChunkCounts::default() },
            clock: self.lclock.get(),
            recycle,
        }
    }

    pub(crate) fn counts(&self) -> ChunkCounts {
        let c = |i: usize| self.cnt[i].load(Relaxed);
        use class::*;
        ChunkCounts {
            events: (0..8).map(c).fold(0u32, u32::wrapping_add),
            loads: c(READS).wrapping_add(c(RMW)).wrapping_add(c(CAS_FAIL)),
            stores: c(WRITES).wrapping_add(c(RMW)),
            allocs: c(ALLOCS).wrapping_add(c(REALLOCS)),
            frees: c(FREES).wrapping_add(c(REALLOCS)),
        }
    }

    fn reset_chunk(&self) {
        for c in &self.cnt {
            c.store(0, Relaxed);
        }
        // SAFETY: called by the owner with the guard held.
        unsafe { self.enc().reset() };
    }

    #[inline(always)]
    pub(crate) fn recording(&self) -> bool {
        self.tstate.load(Relaxed) == T_REC
    }

    /// Recording into an ended session (see [`EPOCH`]): it must not write.
    #[inline]
    pub(crate) fn stale(&self) -> bool {
        self.epoch.get() != EPOCH.load(Relaxed)
    }
}

// The per-thread state is a zero-initialised TLS block reached with the
// initial-exec model: two instructions, no `__tls_get_addr` call. (A `thread_local!`
// in a position-independent library compiles to that call; the linker relaxes it
// later, but the registers saved around it stay, on every event.) In an executable
// the linker relaxes initial-exec to local-exec; a shared object carrying the
// runtime works when loaded at start-up, not through `dlopen`.
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".globl memlens_rt_tls",
    ".hidden memlens_rt_tls",
    ".type memlens_rt_tls,@object",
    ".p2align 6",
    "memlens_rt_tls:",
    ".zero {size}",
    ".size memlens_rt_tls, {size}",
    ".popsection",
    size = const core::mem::size_of::<ThreadState>(),
);

// A zero-filled TLS block is a valid fresh state.
const _: () = assert!(core::mem::align_of::<ThreadState>() <= 64);

/// This thread's state.
#[inline(always)]
pub(crate) fn ts() -> &'static ThreadState {
    let p: *const ThreadState;
    // SAFETY: the block is this thread's, zero-initialised by the loader, which is
    // `ThreadState::new()`; it lives as long as the thread, and nothing outlives the
    // thread except registry pointers, which `unregister` retires first.
    unsafe {
        core::arch::asm!(
            "mov {p}, qword ptr fs:[0]",
            "add {p}, qword ptr [rip + memlens_rt_tls@gottpoff]",
            p = out(reg) p,
            options(pure, readonly, nostack),
        );
        &*p
    }
}

/// Marks the calling thread as part of the runtime: it never records.
pub(crate) fn mark_runtime_thread() {
    let st = ts();
    st.tstate.store(T_RUNTIME, Relaxed);
    st.guard.set(1);
    st.limit.store(0, Relaxed);
}

/// Enters runtime code: nothing the thread does is recorded until [`guard_off`].
#[inline]
pub(crate) fn guard_on(st: &ThreadState) {
    st.guard.set(st.guard.get() + 1);
    st.limit.store(0, Relaxed);
    compiler_fence(SeqCst);
}

/// Leaves runtime code.
#[inline]
pub(crate) fn guard_off(st: &ThreadState) {
    compiler_fence(SeqCst);
    let g = st.guard.get().saturating_sub(1);
    st.guard.set(g);
    if g == 0 {
        refresh_limit(st);
    }
}

/// Holds the guard for a scope (also across a C++ exception unwinding through it).
pub(crate) struct Guard(&'static ThreadState);

impl Guard {
    pub(crate) fn new() -> Guard {
        let st = ts();
        guard_on(st);
        Guard(st)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        guard_off(self.0);
    }
}

fn fast_ok(st: &ThreadState) -> bool {
    STATE.load(SeqCst) == ACTIVE
        && st.recording()
        && st.guard.get() == 0
        && st.buf.get() != 0
        && !st.stolen.load(Relaxed)
        && !st.name_kick.load(Relaxed)
        && st.pend.get().tag == 0
        && st.dropped.get() == 0
        && !VALUES.load(Relaxed)
        && !FILTER_ON.load(Relaxed)
        && TRACING.load(Relaxed)
        && (!ROI_MODE.load(Relaxed) || ROI_ON.load(Relaxed))
        && crate::order::mode() != crate::order::ATOMIC
        && (!REGISTERED_ONLY.load(Relaxed) || st.registered.get())
        && in_extent(st)
}

/// Outside a live `trace:FUNC` probe's function nothing is recorded.
#[inline]
pub(crate) fn in_extent(st: &ThreadState) -> bool {
    !EXTENT_MODE.load(Relaxed) || st.extent.get() > 0
}

/// Recomputes this thread's fast-path limit from the switches.
pub(crate) fn refresh_limit(st: &ThreadState) {
    loop {
        let g = GEN.load(SeqCst);
        let l = if fast_ok(st) { (st.buf_end.get() - RESERVE).min(st.stamp_at.get()) } else { 0 };
        st.limit.store(l, SeqCst);
        if GEN.load(SeqCst) == g {
            break;
        }
    }
}

/// Calls `f` on every registered thread's state, keeping them alive meanwhile.
fn visit(mut f: impl FnMut(&ThreadState)) {
    VISITORS.fetch_add(1, SeqCst);
    for slot in REGISTRY.iter() {
        let p = slot.load(SeqCst);
        if !p.is_null() {
            // SAFETY: a registered state stays valid while VISITORS > 0 (see unregister).
            f(unsafe { &*p });
        }
    }
    VISITORS.fetch_sub(1, SeqCst);
}

/// Sends every thread to the general path once, to notice a changed switch.
pub(crate) fn kick_all() {
    GEN.fetch_add(1, SeqCst);
    visit(|t| t.limit.store(0, SeqCst));
}

fn register(st: &ThreadState) {
    let me = st as *const ThreadState as *mut ThreadState;
    for (i, slot) in REGISTRY.iter().enumerate() {
        if slot.load(Relaxed).is_null()
            && slot.compare_exchange(core::ptr::null_mut(), me, SeqCst, Relaxed).is_ok()
        {
            st.slot.set(i + 1);
            LIVE.fetch_add(1, Relaxed);
            return;
        }
    }
    // Registry full: the thread records, but an exit while it runs loses its tail.
}

fn unregister(st: &ThreadState) {
    let i = st.slot.replace(0).wrapping_sub(1);
    if i < SLOTS {
        REGISTRY[i].store(core::ptr::null_mut(), SeqCst);
        LIVE.fetch_sub(1, Relaxed);
        while VISITORS.load(SeqCst) != 0 {
            core::hint::spin_loop();
        }
    }
}

/// Starts recording on this thread: stream id, buffer, shadow stack, registry and the
/// `ThreadStart` event. `may_init` lets the first event start the runtime itself.
#[cold]
pub(crate) fn thread_start(st: &ThreadState, parent: Option<u32>, may_init: bool) -> bool {
    core::hint::black_box(&crate::process::INIT_ARRAY);
    if may_init && STATE.load(Acquire) == UNINIT {
        crate::process::ensure_init();
    }
    if st.tstate.load(Relaxed) != T_NEW {
        return st.recording();
    }
    match STATE.load(Acquire) {
        INACTIVE => {
            if !MAY_START.load(Relaxed) {
                st.tstate.store(T_OFF, Relaxed);
            }
            return false;
        }
        ACTIVE if st.guard.get() == 0 => {}
        _ => return false,
    }
    let Some(sess) = session() else { return false };
    guard_on(st);
    st.epoch.set(EPOCH.load(Relaxed));
    st.stream.set(sess.next_stream.fetch_add(1, Relaxed));
    st.seq.set(0);
    st.pthread.store(unsafe_pthread_self(), Relaxed);
    stack_bounds(st);
    if st.shadow.get().is_null() {
        st.shadow.set(sys::map(SHADOW_BYTES).cast());
    }
    register(st);
    crate::altstack::install();
    let key = KEY.load(Relaxed);
    if key != 0 {
        // SAFETY: the key was created at init; the value only marks "has state".
        unsafe { libc::pthread_setspecific(key - 1, st as *const ThreadState as *const _) };
    }
    st.tstate.store(T_REC, Relaxed);
    let ev = Event::ThreadStart {
        os_tid: sys::gettid(),
        parent: parent.map(ThreadId),
        name: thread_name(),
        stack_lo: Addr(st.stack_lo.get() as u64),
        stack_hi: Addr(st.stack_hi.get() as u64),
        tls: Addr(sys::thread_pointer() as u64),
    };
    crate::record::emit_control(st, &ev);
    drop(ev);
    guard_off(st);
    st.recording()
}

fn unsafe_pthread_self() -> usize {
    // SAFETY: no preconditions.
    unsafe { libc::pthread_self() as usize }
}

/// The kernel's name of this thread.
pub(crate) fn thread_name() -> String {
    let mut b = [0u8; 17];
    // SAFETY: PR_GET_NAME writes at most 16 bytes.
    unsafe { libc::prctl(libc::PR_GET_NAME, b.as_mut_ptr()) };
    let n = b.iter().position(|&c| c == 0).unwrap_or(16);
    String::from_utf8_lossy(&b[..n]).into_owned()
}

/// Caches the stack limits so allocation stack walks can never fault.
fn stack_bounds(st: &ThreadState) {
    // SAFETY: plain pthread calls with valid out-pointers (they may allocate; the
    // guard is held).
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) == 0 {
            let mut addr: *mut libc::c_void = core::ptr::null_mut();
            let mut size = 0usize;
            if libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0 {
                st.stack_lo.set(addr as usize);
                st.stack_hi.set(addr as usize + size);
            }
            libc::pthread_attr_destroy(&mut attr);
        }
    }
}

/// Ends this thread's stream: closes the open frames, writes `ThreadExit`, hands the
/// buffer over as the stream's last chunk and leaves the registry.
pub(crate) fn finish_thread(st: &ThreadState) {
    if !st.recording() {
        return;
    }
    guard_on(st);
    if STATE.load(Acquire) == ACTIVE && !st.stale() {
        crate::record::flush_pending(st);
        crate::record::close_frames(st);
        crate::record::stamp_time(st);
        crate::record::emit_control(st, &Event::ThreadExit);
        swap_buffer(st, true);
    }
    st.tstate.store(T_OFF, Relaxed);
    unregister(st);
    crate::altstack::remove();
    let sh = st.shadow.replace(core::ptr::null_mut());
    st.depth.set(0);
    if !sh.is_null() {
        // SAFETY: mapped in thread_start; nobody else uses a thread's shadow stack.
        unsafe { sys::unmap(sh.cast(), SHADOW_BYTES) };
    }
    guard_off(st);
}

/// A thread of an ended session (see [`EPOCH`]) at its first event since: its
/// buffer went out with that session's end, its open frames are not the new
/// session's; it leaves the registry and is new again (owner, guard not held).
pub(crate) fn restart(st: &ThreadState) {
    guard_on(st);
    take_own(st);
    unregister(st);
    let buf = st.buf.replace(0);
    if buf != 0 && st.stolen.load(Relaxed) {
        // taken and written out by the session's end (which drained its writers)
        // SAFETY: mapped by `acquire` for `buf_cap` bytes; no one holds it now.
        unsafe { sys::unmap(buf as *mut u8, crate::session::region_len(st.buf_cap.get())) };
    }
    st.stolen.store(false, Relaxed);
    st.buf_end.set(0);
    st.pos.store(0, Relaxed);
    st.pend.set(Pending::NONE);
    st.dropped.set(0);
    st.reset_chunk();
    st.reset_side();
    let sh = st.shadow.get();
    if !sh.is_null() {
        for i in 0..st.depth.get().min(SHADOW_CAP) {
            // SAFETY: entries below depth were written by this thread.
            unsafe { *sh.add(i) &= !1 };
        }
    }
    st.tstate.store(T_NEW, Relaxed);
    st.own.store(0, Release);
    guard_off(st);
}

fn take_own(st: &ThreadState) {
    while st.own.compare_exchange(0, 2, Acquire, Relaxed).is_err() {
        // SAFETY: no preconditions.
        unsafe { libc::sched_yield() };
    }
}

/// Hands the current buffer (if it holds events) to the writers and, unless `last`,
/// installs an empty one. Owner only, guard held. False when no buffer could be had.
pub(crate) fn swap_buffer(st: &ThreadState, last: bool) -> bool {
    let Some(sess) = session() else { return false };
    take_own(st);
    if st.stolen.swap(false, Relaxed) {
        // Someone wrote this chunk out at exit/exec; continue in a fresh buffer.
        st.buf.set(0);
        st.seq.set(st.seq.get().wrapping_add(1));
    } else if st.buf.get() != 0 {
        let buf = st.buf.get();
        let len = st.pos.load(Relaxed).saturating_sub(buf);
        if len > 0 || last {
            let job = st.buffer_job(buf, len, last, true);
            if sess.core.failed() && !last {
                // The disk is gone: count the chunk and reuse the buffer.
                sess.core.drop_chunk(u64::from(job.counts.events), 0);
            } else {
                sess.submit(job);
                st.buf.set(0);
            }
            st.seq.set(st.seq.get().wrapping_add(1));
        }
    }
    st.reset_chunk();
    if !last && st.buf.get() == 0 {
        let small = LIVE.load(Relaxed) > SMALL_AFTER;
        match sess.acquire(small) {
            Some((b, cap)) => {
                st.buf.set(b);
                st.buf_cap.set(cap);
                st.buf_end.set(b + cap);
            }
            None => st.buf_end.set(0),
        }
    }
    st.pos.store(st.buf.get(), Relaxed);
    st.reset_side();
    // (the first chunk starts with `ThreadStart`; `enter` stamps right after it)
    if !last && st.seq.get() != 0 {
        stamp_chunk(st);
    }
    // Skew bound: publish this thread's clock (order.rs).
    crate::order::handover(st, last);
    // The chunk header's `first_clock`: the Lamport clock in force at its start.
    st.clock.set(st.lclock.get());
    st.own.store(0, Release);
    st.buf.get() != 0
}

/// Writes the `Time` stamp that starts every chunk (owner, guard held, fresh buffer).
fn stamp_chunk(st: &ThreadState) {
    let p = st.pos.load(Relaxed);
    if st.buf.get() == 0 || p + MAX_ACCESS_LEN > st.buf_end.get() {
        return;
    }
    // SAFETY: owner with the guard held; room checked above.
    let np = unsafe { st.enc().time(p as *mut u8, sys::monotonic_ns()) } as usize;
    st.bump(class::OTHER);
    st.pos.store(np, Relaxed);
    st.stamp_at.set(np + STAMP_BYTES);
}

/// Takes a running thread's partial buffer and writes it as the stream's last chunk
/// (exit, exec, crash). `here`: write it on this thread, uncompressed (crash).
fn steal(sess: &Session, st: &ThreadState, deadline: u64, here: bool) {
    while st.own.compare_exchange(0, 1, Acquire, Relaxed).is_err() {
        if sys::monotonic_ns() > deadline {
            return;
        }
        // SAFETY: no preconditions.
        unsafe { libc::sched_yield() };
    }
    let mut pos = st.pos.load(Acquire);
    while pos & BUSY != 0 && sys::monotonic_ns() <= deadline {
        core::hint::spin_loop();
        pos = st.pos.load(Acquire);
    }
    // Still busy at the deadline: keep what was committed.
    let pos = pos & !BUSY;
    let buf = st.buf.get();
    if st.recording() && buf != 0 && !st.stolen.load(Relaxed) && pos >= buf {
        if st.pend.get().tag != 0 {
            sess.core.drop_chunk(1, 0);
        }
        // the owner may already be writing its next event (see `side_len`)
        let job = st.buffer_job(buf, pos - buf, true, false);
        st.stolen.store(true, Relaxed);
        if here {
            sess.run_job(job, None, &mut Vec::new(), Some(500_000_000));
        } else {
            sess.submit(job);
        }
    }
    st.own.store(0, Release);
}

/// Hands over, for each other live thread that is parked in a waiting call and
/// whose stream `lagging` says lags, its partial buffer ended by a `Clock(t)` (or,
/// when that buffer went already, a chunk of that `Clock` alone), raises its clock
/// to `t` and calls `done` with its stream. The parked thread records nothing until
/// it has left `order::parked`, which waits for a steal in progress; its next event
/// takes the general path (`limit` 0, `stolen`), which starts a fresh buffer.
pub(crate) fn steal_parked(t: u64, lagging: impl Fn(u32) -> bool, mut done: impl FnMut(u32)) {
    let Some(sess) = session() else { return };
    let me = ts() as *const ThreadState;
    visit(|st| {
        let s = st.stream.get();
        if core::ptr::eq(st, me) || !st.parked.load(Relaxed) || !lagging(s) {
            return;
        }
        if st.own.compare_exchange(0, 1, SeqCst, Relaxed).is_err() {
            return;
        }
        if st.parked.load(SeqCst)
            && st.recording()
            && !st.stale()
            && st.lclock.get() < t
            && park_chunk(sess, st, t)
        {
            st.lclock.set(t);
            st.limit.store(0, SeqCst);
            done(s);
        }
        st.own.store(0, Release);
    });
}

/// The chunk of `steal_parked` (the thief holds `own`, the owner is parked).
fn park_chunk(sess: &Session, st: &ThreadState, t: u64) -> bool {
    let mut clk = [0u8; 1 + 10];
    clk[0] = memlens_format::codec::tag::CLOCK;
    // SAFETY: a varint takes at most 10 bytes.
    let n = unsafe { memlens_format::varint::put(clk.as_mut_ptr().add(1), t) } as usize
        - clk.as_ptr() as usize;
    let buf = st.buf.get();
    if !st.stolen.load(Relaxed) && buf != 0 {
        // The owner is parked, but a signal handler may interrupt its wait and
        // record: send its events to the general path (`limit` 0), which drops and
        // counts them while `pos` is busy, and take `pos` busy ourselves.
        st.limit.store(0, SeqCst);
        let pos = st.pos.load(SeqCst);
        if pos & BUSY != 0
            || pos + n > st.buf_end.get()
            || st.pos.compare_exchange(pos, pos | BUSY, SeqCst, Relaxed).is_err()
        {
            // busy or full: the owner hands it over itself when it wakes
            return false;
        }
        // A handler's fast path that passed its limit check just before would end
        // its event by moving `pos`: give it time to show, and leave then.
        for _ in 0..256 {
            core::hint::spin_loop();
        }
        if st.pos.load(SeqCst) != pos | BUSY {
            return false;
        }
        // SAFETY: room checked; the owner is parked, `own` and `pos` are ours.
        unsafe { core::ptr::copy_nonoverlapping(clk.as_ptr(), pos as *mut u8, n) };
        st.bump(class::OTHER);
        st.pos.store(pos + n, Release);
        // recycled: the owner never writes to a stolen buffer again (its next
        // event takes the general path, which starts a fresh one)
        let job = st.buffer_job(buf, pos + n - buf, false, true);
        st.stolen.store(true, SeqCst);
        sess.submit(job);
        return true;
    }
    // The buffer went already (an earlier park, or none): a chunk of its own.
    let Some((b, bcap)) = sess.acquire(true) else { return false };
    // SAFETY: a fresh buffer of `bcap` bytes.
    unsafe { core::ptr::copy_nonoverlapping(clk.as_ptr(), b as *mut u8, n) };
    let seq = if buf == 0 && !st.stolen.load(Relaxed) { st.seq.get() } else { st.seq.get() + 1 };
    let job = st.one_event_job(b, n, bcap, seq, false, true);
    st.seq.set(seq);
    st.stolen.store(true, SeqCst);
    sess.submit(job);
    true
}

/// Takes every other live thread's partial buffer.
pub(crate) fn steal_all(sess: &Session, deadline: u64, here: bool) {
    let me = ts() as *const ThreadState;
    visit(|t| {
        if !core::ptr::eq(t, me) {
            steal(sess, t, deadline, here);
        }
    });
}

/// Gives `name` to the live thread `pthread` (set from another thread); it is
/// emitted as that thread's next event.
pub(crate) fn name_other(pthread: usize, name: &[u8]) {
    visit(|t| {
        if t.pthread.load(Relaxed) != pthread || !t.recording() {
            return;
        }
        while t.name_lock.swap(true, Acquire) {
            core::hint::spin_loop();
        }
        let n = name.len().min(15);
        // SAFETY: `name` and `name_len` are only touched under `name_lock`.
        unsafe { (&mut *t.name.get())[..n].copy_from_slice(&name[..n]) };
        t.name_len.set(n);
        t.name_lock.store(false, Release);
        t.name_kick.store(true, SeqCst);
        GEN.fetch_add(1, SeqCst);
        t.limit.store(0, SeqCst);
    });
}

/// Takes a name set by another thread, if any.
pub(crate) fn take_name(st: &ThreadState) -> Option<String> {
    if !st.name_kick.swap(false, SeqCst) {
        return None;
    }
    while st.name_lock.swap(true, Acquire) {
        core::hint::spin_loop();
    }
    // SAFETY: under `name_lock`.
    let s =
        String::from_utf8_lossy(unsafe { &(&*st.name.get())[..st.name_len.get()] }).into_owned();
    st.name_lock.store(false, Release);
    Some(s)
}

/// In a forked child: forget the parent's threads and restart this one as stream 0
/// of the child's new session, keeping its (private copy of the) buffer.
pub(crate) fn reset_after_fork(st: &ThreadState) {
    for slot in REGISTRY.iter() {
        slot.store(core::ptr::null_mut(), Relaxed);
    }
    LIVE.store(0, Relaxed);
    VISITORS.store(0, Relaxed);
    st.slot.set(0);
    st.own.store(0, Relaxed);
    st.stolen.store(false, Relaxed);
    st.pend.set(Pending::NONE);
    st.dropped.set(0);
    st.name_kick.store(false, Relaxed);
    // Frames entered before the fork belong to the parent's stream.
    let sh = st.shadow.get();
    if !sh.is_null() {
        for i in 0..st.depth.get().min(SHADOW_CAP) {
            // SAFETY: entries below depth were written by this thread.
            unsafe { *sh.add(i) &= !1 };
        }
    }
    if st.recording() {
        st.tstate.store(T_NEW, Relaxed);
        st.pos.store(st.buf.get(), Relaxed);
        st.reset_chunk();
        st.reset_side();
        st.stamp_at.set(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zeroed_block_is_a_fresh_state() {
        // SAFETY: every field is an integer, pointer, bool or cell of those.
        let z: ThreadState = unsafe { core::mem::zeroed() };
        let n = ThreadState::new();
        assert_eq!(z.pos.load(Relaxed), n.pos.load(Relaxed));
        assert_eq!(z.limit.load(Relaxed), n.limit.load(Relaxed));
        assert_eq!(z.tstate.load(Relaxed), n.tstate.load(Relaxed));
        assert_eq!(z.slot.get(), n.slot.get());
        assert_eq!((z.buf.get(), z.guard.get(), z.depth.get()), (n.buf.get(), 0, 0));
        assert!(z.shadow.get().is_null() && !z.crash.get() && z.pend.get().tag == 0);
        assert_eq!(ts() as *const _, ts() as *const _);
        assert!(!ts().recording());
    }
}
