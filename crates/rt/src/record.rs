//! Recording events: the inlined fast paths every callback uses, and the general
//! path that handles everything else (first event of a thread, full buffer, values,
//! filter, ROI, tracing off, thread and control events, allocations).

use crate::filter;
use crate::options::{self, MAX_STACK_DEPTH};
use crate::order;
use crate::session::session;
use crate::state::{
    self, class, guard_off, ts, Pending, ThreadState, ACTIVE, BUSY, ROI_MODE, ROI_ON, SHADOW_CAP,
    STATE, TRACING, T_NEW, VALUES,
};
use core::sync::atomic::{compiler_fence, Ordering::*};
use memlens_format::codec::{tag, Encoder, Streams, MAX_ACCESS_LEN, MAX_SIDE_LEN};
use memlens_format::{AccessKind, AllocKind, Event, FreeKind, RmwOp};

/// Writes one event straight into the buffer if the thread is in fast mode.
#[inline(always)]
unsafe fn fast(
    st: &ThreadState,
    class: usize,
    f: impl FnOnce(&mut Encoder, *mut u8) -> *mut u8,
) -> bool {
    let p = st.pos.load(Relaxed);
    if p >= st.limit.load(Relaxed) {
        return false;
    }
    encode_at(st, p, class, f);
    true
}

/// Encodes one event at `p`, the buffer position, with room checked: marked busy
/// meanwhile, so a thread taking the buffer over (exit, crash) sees it unfinished.
#[inline(always)]
unsafe fn encode_at(
    st: &ThreadState,
    p: usize,
    class: usize,
    f: impl FnOnce(&mut Encoder, *mut u8) -> *mut u8,
) {
    st.pos.store(p | BUSY, Relaxed);
    compiler_fence(SeqCst);
    let np = f(st.enc(), p as *mut u8);
    st.bump(class);
    st.pos.store(np as usize, Release);
}

const fn access_class(t: u8) -> usize {
    if t & tag::ACCESS_WRITE != 0 {
        class::WRITES
    } else {
        class::READS
    }
}

/// Nothing to record: the runtime is inactive, or a live `trace:FUNC` probe
/// records and this thread is outside the function (its events stop here).
#[inline(always)]
fn idle() -> bool {
    STATE.load(Relaxed) == state::INACTIVE
        || state::EXTENT_MODE.load(Relaxed) && ts().extent.get() == 0
}

// The cold entries take scalars, so the fast paths can tail-call them and need
// no stack frame of their own; an inactive runtime returns right there.

#[cold]
#[inline(never)]
unsafe extern "C" fn slow_access(tag: u8, pc: u64, addr: u64) {
    if idle() {
        return;
    }
    slow(Ev::Access { tag, pc, addr, value: None }, true);
}

#[cold]
#[inline(never)]
unsafe extern "C" fn slow_atomic(tag: u8, pc: u64, addr: u64, value: u64) {
    if idle() {
        return;
    }
    slow(Ev::Access { tag, pc, addr, value: Some(value) }, true);
}

#[cold]
#[inline(never)]
unsafe extern "C" fn slow_rmw(op: RmwOp, lg: u8, pc: u64, addr: u64, old: u64) {
    if idle() {
        return;
    }
    slow(Ev::Rmw { op, lg, pc, addr, old }, true);
}

#[cold]
#[inline(never)]
unsafe extern "C" fn slow_enter(pc: u64, call_site: u64, sp: usize, frame: u64) {
    if idle() {
        return;
    }
    slow(Ev::Enter { pc, call_site, sp, frame }, true);
}

#[cold]
#[inline(never)]
unsafe extern "C" fn slow_exit(pc: u64, sp: usize) {
    if idle() {
        return;
    }
    slow(Ev::Exit { pc, sp }, true);
}

/// A load or store (`TAG` from `codec::access_tag`).
#[inline(always)]
pub(crate) unsafe fn access<const TAG: u8>(pc: u64, addr: u64) {
    if !fast(ts(), access_class(TAG), |e, p| e.access(p, TAG, pc, addr)) {
        slow_access(TAG, pc, addr);
    }
}

/// A load or store whose tag is known only at run time (a loop's run, `loops.rs`).
#[inline(always)]
pub(crate) unsafe fn access_tagged(tag: u8, pc: u64, addr: u64) {
    if !fast(ts(), access_class(tag), |e, p| e.access(p, tag, pc, addr)) {
        slow_access(tag, pc, addr);
    }
}

/// An atomic load or store whose value is known.
#[inline(always)]
pub(crate) unsafe fn atomic_access<const TAG: u8>(pc: u64, addr: u64, value: u64) {
    if crate::livewatch::on() {
        crate::livewatch::access(TAG, addr as usize, pc as usize);
    }
    if !fast(ts(), access_class(TAG), |e, p| e.access(p, TAG, pc, addr)) {
        slow_atomic(TAG, pc, addr, value);
    }
}

/// A range read or written.
#[inline(always)]
pub(crate) unsafe fn range(write: bool, pc: u64, addr: u64, len: u64, may_init: bool) {
    if len == 0 {
        return;
    }
    let (kind, c) =
        if write { (AccessKind::Write, class::WRITES) } else { (AccessKind::Read, class::READS) };
    if !fast(ts(), c, |e, p| e.range(p, kind, pc, addr, len)) {
        slow(Ev::Range { write, pc, addr, len }, may_init);
    }
}

/// A copy: a range read of `src` then a range write of `dst`.
#[inline(always)]
pub(crate) unsafe fn copy(pc: u64, dst: u64, src: u64, len: u64, may_init: bool) {
    if len == 0 {
        return;
    }
    let st = ts();
    let done = fast(st, class::READS, |e, p| {
        st.bump(class::WRITES);
        let p = e.range(p, AccessKind::Read, pc, src, len);
        e.range(p, AccessKind::Write, pc, dst, len)
    });
    if !done {
        slow(Ev::Copy { pc, dst, src, len }, may_init);
    }
}

/// For a watch probe, a read-modify-write reads and (unless a failed CAS) writes.
#[inline(always)]
fn watch_rmw(op: RmwOp, lg: u8, pc: u64, addr: u64) {
    if crate::livewatch::on() {
        let (a, n, pc) = (addr as usize, 1usize << lg, pc as usize);
        crate::livewatch::range(false, a, n, pc);
        if op != RmwOp::CasFailed {
            crate::livewatch::range(true, a, n, pc);
        }
    }
}

/// An atomic read-modify-write performed by the runtime (`old`: value before).
#[inline(always)]
pub(crate) unsafe fn rmw(op: RmwOp, lg: u8, pc: u64, addr: u64, old: u64) {
    watch_rmw(op, lg, pc, addr);
    let c = if op == RmwOp::CasFailed { class::CAS_FAIL } else { class::RMW };
    if !fast(ts(), c, |e, p| e.rmw(p, op, lg, pc, addr, None)) {
        slow_rmw(op, lg, pc, addr, old);
    }
}

/// [`clocked`] then [`rmw`], as one buffer write when the thread is in fast mode
/// (the common case of an atomic under `--order=sync`).
#[inline(always)]
pub(crate) unsafe fn clocked_rmw(t: u64, op: RmwOp, lg: u8, pc: u64, addr: u64, old: u64) {
    if t == 0 {
        return rmw(op, lg, pc, addr, old);
    }
    watch_rmw(op, lg, pc, addr);
    let st = ts();
    let c = if op == RmwOp::CasFailed { class::CAS_FAIL } else { class::RMW };
    let done = fast(st, c, |e, p| {
        st.bump(class::OTHER);
        let p = e.clock(p, t);
        e.rmw(p, op, lg, pc, addr, None)
    });
    if !done {
        slow_clock(t);
        slow_rmw(op, lg, pc, addr, old);
    }
}

/// [`clocked`] then [`atomic_access`], as one buffer write in fast mode.
#[inline(always)]
pub(crate) unsafe fn clocked_atomic_access<const TAG: u8>(t: u64, pc: u64, addr: u64, value: u64) {
    if t == 0 {
        return atomic_access::<TAG>(pc, addr, value);
    }
    if crate::livewatch::on() {
        crate::livewatch::access(TAG, addr as usize, pc as usize);
    }
    let st = ts();
    let done = fast(st, access_class(TAG), |e, p| {
        st.bump(class::OTHER);
        let p = e.clock(p, t);
        e.access(p, TAG, pc, addr)
    });
    if !done {
        slow_clock(t);
        slow_atomic(TAG, pc, addr, value);
    }
}

/// Writes `Clock(t)` (the thread's Lamport clock changed, see `order.rs`).
#[inline(always)]
pub(crate) fn clock(t: u64) {
    // SAFETY: the encoder writes at most MAX_ACCESS_LEN bytes below `limit + RESERVE`.
    unsafe {
        if !fast(ts(), class::OTHER, |e, p| e.clock(p, t)) {
            slow_clock(t);
        }
    }
}

/// [`clock`] unless `t` is 0 (ordering off).
#[inline(always)]
pub(crate) fn clocked(t: u64) {
    if t != 0 {
        clock(t);
    }
}

#[cold]
#[inline(never)]
fn slow_clock(t: u64) {
    if idle() {
        return;
    }
    control(Event::Clock(t));
}

/// A fence.
pub(crate) unsafe fn fence(pc: u64, order: u8) {
    if !fast(ts(), class::OTHER, |e, p| e.fence(p, pc, order)) {
        slow(Ev::Fence { pc, order }, true);
    }
}

/// Function entry; `sp` is the stack pointer at the callback (see `close_dead`),
/// `frame` the function's frame pointer.
#[inline(always)]
pub(crate) unsafe fn func_enter(pc: u64, call_site: u64, sp: usize, frame: u64) {
    let st = ts();
    let p = st.pos.load(Relaxed);
    if p < st.limit.load(Relaxed) {
        let d = st.depth.get();
        let sh = st.shadow.get();
        if d < SHADOW_CAP && !sh.is_null() && (d == 0 || nests(sh, d, sp, call_site, pc)) {
            st.pos.store(p | BUSY, Relaxed);
            compiler_fence(SeqCst);
            *sh.add(d) = sp | 1;
            *sh.add(SHADOW_CAP + d) = call_site as usize;
            *sh.add(2 * SHADOW_CAP + d) = pc as usize;
            st.depth.set(d + 1);
            let np = st.enc().func_enter(p as *mut u8, pc, call_site, frame);
            st.bump(class::OTHER);
            st.pos.store(np as usize, Release);
            return;
        }
    }
    slow_enter(pc, call_site, sp, frame);
}

/// Function exit.
#[inline(always)]
pub(crate) unsafe fn func_exit(pc: u64, sp: usize) {
    let st = ts();
    let p = st.pos.load(Relaxed);
    if p < st.limit.load(Relaxed) {
        let d = st.depth.get();
        if d > 0 && d <= SHADOW_CAP {
            let sh = st.shadow.get();
            let top = *sh.add(d - 1);
            // A tail jump to the exit callback arrives with the frame's own return
            // address as `pc`, after its stack is popped: name the exit after the entry.
            let tail = top & !7 < sp && *sh.add(SHADOW_CAP + d - 1) == pc as usize;
            if top & !7 >= sp || tail {
                let pc = if tail { *sh.add(2 * SHADOW_CAP + d - 1) as u64 } else { pc };
                st.pos.store(p | BUSY, Relaxed);
                compiler_fence(SeqCst);
                st.depth.set(d - 1);
                let mut np = p as *mut u8;
                if top & 1 != 0 {
                    np = st.enc().func_exit(np, pc);
                    st.bump(class::OTHER);
                }
                st.pos.store(np as usize, Release);
                return;
            }
        }
    }
    slow_exit(pc, sp);
}

/// An event on its way to the general path.
#[derive(Clone, Copy)]
pub(crate) enum Ev {
    Access { tag: u8, pc: u64, addr: u64, value: Option<u64> },
    Range { write: bool, pc: u64, addr: u64, len: u64 },
    Copy { pc: u64, dst: u64, src: u64, len: u64 },
    Rmw { op: RmwOp, lg: u8, pc: u64, addr: u64, old: u64 },
    Fence { pc: u64, order: u8 },
    Enter { pc: u64, call_site: u64, sp: usize, frame: u64 },
    Exit { pc: u64, sp: usize },
}

/// The general path. `may_init`: this event may start the runtime (TSan/sancov
/// callbacks may; libc interposers, which run before `main` too, may not).
#[cold]
#[inline(never)]
pub(crate) unsafe fn slow(ev: Ev, may_init: bool) {
    if idle() {
        return;
    }
    let st = ts();
    if !enter(st, may_init) {
        return;
    }
    general(st, ev);
    guard_off(st);
}

/// Checks whether this thread can record now and, if so, takes the guard and
/// writes whatever is owed first (a name set from elsewhere, a drop count, a deferred
/// store value). Callers release with `guard_off`.
#[inline]
pub(crate) fn enter(st: &ThreadState, may_init: bool) -> bool {
    if st.guard.get() != 0 {
        return false;
    }
    if st.pos.load(Relaxed) & BUSY != 0 {
        note_drop(st);
        return false;
    }
    if st.recording() && st.stale() {
        state::restart(st);
    }
    if !st.recording()
        && (st.tstate.load(Relaxed) != T_NEW || !state::thread_start(st, None, may_init))
    {
        return false;
    }
    if STATE.load(Acquire) != ACTIVE {
        return false;
    }
    state::guard_on(st);
    if st.pos.load(Relaxed) >= st.stamp_at.get() {
        stamp_time(st);
    }
    // Releases stripes held across the previous access; hands a lagging buffer over.
    order::on_enter(st);
    if st.name_kick.load(Relaxed) {
        if let Some(n) = state::take_name(st) {
            emit_control(st, &Event::ThreadName(n));
        }
    }
    if st.dropped.get() != 0 {
        let n = st.dropped.replace(0);
        emit_control(st, &Event::Dropped(n));
    }
    flush_pending(st);
    true
}

/// [`enter`] for an allocation event, which a live `trace:FUNC` probe records only
/// inside its function.
fn enter_in_extent(st: &ThreadState) -> bool {
    if !enter(st, false) {
        return false;
    }
    if !state::in_extent(st) {
        guard_off(st);
        return false;
    }
    true
}

/// Writes a `Time` stamp now and schedules the next one [`state::STAMP_BYTES`]
/// further (the fast path's limit stops there). Guard held.
pub(crate) fn stamp_time(st: &ThreadState) {
    let now = crate::sys::monotonic_ns();
    // SAFETY: owner, guard held; a stamp takes at most MAX_ACCESS_LEN bytes.
    unsafe { write_unstamped(st, MAX_ACCESS_LEN, class::OTHER, |e, p| e.time(p, now)) };
    st.stamp_at.set((st.pos.load(Relaxed) & !BUSY) + state::STAMP_BYTES);
}

/// Counts an event this thread could not record.
fn note_drop(st: &ThreadState) {
    if st.recording() {
        st.dropped.set(st.dropped.get() + 1);
        st.limit.store(0, Relaxed);
        if let Some(s) = session() {
            s.core.drop_chunk(1, 0);
        }
    }
}

fn accesses_on(st: &ThreadState) -> bool {
    TRACING.load(Relaxed)
        && (!ROI_MODE.load(Relaxed) || ROI_ON.load(Relaxed))
        && (!state::REGISTERED_ONLY.load(Relaxed) || st.registered.get())
        && state::in_extent(st)
}

/// The value at `addr` (low 64 bits for 16-byte accesses).
unsafe fn value_at(addr: u64, lg: u8) -> u64 {
    let p = addr as *const u8;
    match lg {
        0 => u64::from(p.read_volatile()),
        1 => u64::from((p as *const u16).read_unaligned()),
        2 => u64::from((p as *const u32).read_unaligned()),
        _ => (p as *const u64).read_unaligned(),
    }
}

/// `MEMLENS_ORDER=atomic`: stamps a plain access and writes its `Clock`. Guard held.
unsafe fn stamp(st: &ThreadState, ranges: &[(u64, u64)]) {
    if order::mode() == order::ATOMIC {
        // Hand a full buffer over first: that may wait for the writers, which must
        // not happen while the stripes are held.
        if st.buf.get() == 0
            || st.stolen.load(Relaxed)
            || st.pos.load(Relaxed).wrapping_add(3 * MAX_ACCESS_LEN) > st.buf_end.get()
        {
            state::swap_buffer(st, false);
        }
        let t = order::stamp(st, ranges);
        write_ev(st, MAX_ACCESS_LEN, class::OTHER, |e, p| e.clock(p, t));
    }
}

unsafe fn general(st: &ThreadState, ev: Ev) {
    // Skew bound: catch the clock up, hand a lagging buffer over, at a plain event
    // (never between an atomic's stripe update and its event, see `order::take_floor`).
    if !matches!(ev, Ev::Rmw { .. } | Ev::Access { value: Some(_), .. }) {
        order::plain_event(st, |t| {
            write_ev(st, MAX_ACCESS_LEN, class::OTHER, |e, p| e.clock(p, t));
        });
    }
    match ev {
        Ev::Access { tag: t, pc, addr, value } => {
            if !accesses_on(st) || !filter::allowed(pc) {
                return;
            }
            let write = t & tag::ACCESS_WRITE != 0;
            if value.is_none() {
                stamp(st, &[(addr, 1u64 << (t & 7))]);
            }
            let v = if !VALUES.load(Relaxed) {
                None
            } else if let Some(v) = value {
                Some(v)
            } else if write {
                // The store has not happened yet: read it at the next event.
                st.pend.set(Pending { tag: t, pc, addr });
                return;
            } else {
                Some(value_at(addr, t & 7))
            };
            write_ev(st, MAX_ACCESS_LEN, access_class(t), |e, p| match v {
                Some(v) => e.access_value(p, t, pc, addr, v),
                None => e.access(p, t, pc, addr),
            });
        }
        Ev::Range { write, pc, addr, len } => {
            if accesses_on(st) && filter::allowed(pc) {
                stamp(st, &[(addr, len)]);
                let (k, c) = if write {
                    (AccessKind::Write, class::WRITES)
                } else {
                    (AccessKind::Read, class::READS)
                };
                write_ev(st, MAX_ACCESS_LEN, c, |e, p| e.range(p, k, pc, addr, len));
            }
        }
        Ev::Copy { pc, dst, src, len } => {
            if accesses_on(st) && filter::allowed(pc) {
                // One stamp for both sides: their stripes are held together across the copy.
                stamp(st, &[(src, len), (dst, len)]);
                write_ev(st, MAX_ACCESS_LEN, class::READS, |e, p| {
                    e.range(p, AccessKind::Read, pc, src, len)
                });
                write_ev(st, MAX_ACCESS_LEN, class::WRITES, |e, p| {
                    e.range(p, AccessKind::Write, pc, dst, len)
                });
            }
        }
        Ev::Rmw { op, lg, pc, addr, old } => {
            if accesses_on(st) && filter::allowed(pc) {
                let v = VALUES.load(Relaxed).then_some(old);
                let c = if op == RmwOp::CasFailed { class::CAS_FAIL } else { class::RMW };
                write_ev(st, MAX_ACCESS_LEN, c, |e, p| e.rmw(p, op, lg, pc, addr, v));
            }
        }
        Ev::Fence { pc, order } => {
            if accesses_on(st) && filter::allowed(pc) {
                write_ev(st, MAX_ACCESS_LEN, class::OTHER, |e, p| e.fence(p, pc, order));
            }
        }
        Ev::Enter { pc, call_site, sp, frame } => {
            let d = st.depth.get();
            if d >= SHADOW_CAP || st.shadow.get().is_null() {
                // Too deep to track: count the frame, record nothing for it.
                st.depth.set(d + 1);
                return;
            }
            close_dead(st, sp, Some((call_site, pc)));
            let emit = TRACING.load(Relaxed)
                && state::in_extent(st)
                && filter::allowed(pc)
                && write_ev(st, MAX_ACCESS_LEN, class::OTHER, |e, p| {
                    e.func_enter(p, pc, call_site, frame)
                });
            let d = st.depth.get();
            let sh = st.shadow.get();
            *sh.add(d) = sp | usize::from(emit);
            *sh.add(SHADOW_CAP + d) = call_site as usize;
            *sh.add(2 * SHADOW_CAP + d) = pc as usize;
            st.depth.set(d + 1);
        }
        Ev::Exit { pc, sp } => {
            let d = st.depth.get();
            if d > SHADOW_CAP {
                st.depth.set(d - 1);
                return;
            }
            let sh = st.shadow.get();
            let mut pc = pc;
            if d > 0 && (*sh.add(d - 1) & !7) < sp && *sh.add(SHADOW_CAP + d - 1) == pc as usize {
                // Tail-jump exit of the innermost frame (see `SHADOW_BYTES`).
                pc = *sh.add(2 * SHADOW_CAP + d - 1) as u64;
            } else {
                close_dead(st, sp, None);
            }
            let d = st.depth.get();
            if d > 0 {
                let top = *sh.add(d - 1);
                st.depth.set(d - 1);
                if top & 1 != 0 {
                    write_ev(st, MAX_ACCESS_LEN, class::OTHER, |e, p| e.func_exit(p, pc));
                }
            }
        }
    }
}

/// Whether an entry at `sp` from `call_site` into `pc` opens a frame inside the
/// innermost of the `d` open ones rather than replacing it: its stack pointer is
/// below, or it is the entry of a function inlined into the open frame's function
/// (rustc instruments before inlining, so an inlined callee's entry runs in its
/// caller's frame, with its caller's return address as call site, at another pc
/// than the frame's own entry). A re-entry of the same function at the same stack
/// pointer (its exit was skipped) or a call from elsewhere replaces it.
#[inline(always)]
unsafe fn nests(sh: *mut usize, d: usize, sp: usize, call_site: u64, pc: u64) -> bool {
    let tsp = *sh.add(d - 1) & !7;
    tsp > sp
        || (tsp == sp
            && *sh.add(SHADOW_CAP + d - 1) == call_site as usize
            && *sh.add(2 * SHADOW_CAP + d - 1) != pc as usize)
}

/// Pops frames left without an exit (longjmp, unwinding without cleanups): every
/// frame whose saved stack pointer lies below `sp` is dead, and for an entry
/// (`Some((call_site, pc))`) also one at `sp` that the new frame does not nest in
/// ([`nests`]), since a new frame at that depth replaces the old one. Recorded ones
/// get a synthesized `FuncExit { pc: 0 }`.
unsafe fn close_dead(st: &ThreadState, sp: usize, entry: Option<(u64, u64)>) {
    let sh = st.shadow.get();
    let mut d = st.depth.get().min(SHADOW_CAP);
    while d > 0 {
        let top = *sh.add(d - 1);
        let tsp = top & !7;
        let replaced = entry.is_some_and(|(cs, pc)| tsp == sp && !nests(sh, d, sp, cs, pc));
        if tsp < sp || replaced {
            d -= 1;
            st.depth.set(d);
            if top & 1 != 0 {
                write_ev(st, MAX_ACCESS_LEN, class::OTHER, |e, p| e.func_exit(p, 0));
            }
        } else {
            break;
        }
    }
}

/// Closes every open frame (thread or process end). Guard held.
pub(crate) fn close_frames(st: &ThreadState) {
    let sh = st.shadow.get();
    if sh.is_null() {
        st.depth.set(0);
        return;
    }
    let mut d = st.depth.get().min(SHADOW_CAP);
    while d > 0 {
        // SAFETY: entries below depth were written by this thread.
        let top = unsafe { *sh.add(d - 1) };
        d -= 1;
        st.depth.set(d);
        if top & 1 != 0 {
            // SAFETY: owner, guard held.
            unsafe { write_ev(st, MAX_ACCESS_LEN, class::OTHER, |e, p| e.func_exit(p, 0)) };
        }
    }
    st.depth.set(0);
}

/// Before a release-like operation (an unlock, an atomic, a thread creation):
/// writes the pending store's value while it is still the one this thread stored.
/// Once the release is done another thread may overwrite it, and the next event
/// of this thread would read that value instead.
#[inline(always)]
pub(crate) fn settle() {
    let st = ts();
    if st.pend.get().tag != 0 {
        settle_slow(st);
    }
}

#[cold]
#[inline(never)]
fn settle_slow(st: &ThreadState) {
    // not from inside the runtime or a signal handler interrupting an event
    if st.guard.get() == 0 && st.pos.load(Relaxed) & BUSY == 0 && enter(st, false) {
        guard_off(st);
    }
}

/// Writes a deferred store with the value now in memory. Guard held.
pub(crate) fn flush_pending(st: &ThreadState) {
    let pd = st.pend.replace(Pending::NONE);
    if pd.tag != 0 {
        // SAFETY: the program stored to this address at its last event.
        unsafe {
            let v = value_at(pd.addr, pd.tag & 7);
            write_ev(st, MAX_ACCESS_LEN, class::WRITES, |e, p| {
                e.access_value(p, pd.tag, pd.pc, pd.addr, v)
            });
        }
    }
}

/// Writes an event through the general path: makes room (handing the buffer over
/// when full), then encodes. Guard held. False if it had to be dropped.
unsafe fn write_ev(
    st: &ThreadState,
    need: usize,
    class: usize,
    f: impl FnOnce(&mut Encoder, *mut u8) -> *mut u8,
) -> bool {
    // One call can write several events (the frames closed at a thread's exit, a
    // longjmp's skipped frames): each keeps the stamp promise. 0: not started.
    let at = st.stamp_at.get();
    if at != 0 && st.pos.load(Relaxed) & !BUSY >= at {
        stamp_time(st);
    }
    write_unstamped(st, need, class, f)
}

/// [`write_ev`] without the stamp check (the stamp itself).
unsafe fn write_unstamped(
    st: &ThreadState,
    need: usize,
    class: usize,
    f: impl FnOnce(&mut Encoder, *mut u8) -> *mut u8,
) -> bool {
    if !(st.has_room(need) || state::swap_buffer(st, false) && st.has_room(need)) {
        st.dropped.set(st.dropped.get() + 1);
        if let Some(s) = session() {
            s.core.drop_chunk(1, 0);
        }
        return false;
    }
    encode_at(st, st.pos.load(Relaxed), class, f);
    true
}

/// Writes a thread or control event (encoded into a small vector first). Guard held.
pub(crate) fn emit_control(st: &ThreadState, ev: &Event) -> bool {
    let mut v = Streams::new();
    // SAFETY: owner, guard held; control events do not touch the prediction state.
    unsafe {
        st.enc().push(&mut v, ev);
        // control events have no side bytes; copied all the same, within the
        // side room one event may take
        let side = &v.side[..v.side.len().min(MAX_SIDE_LEN)];
        let ok = write_ev(st, v.ops.len(), class::OTHER, |e, p| {
            core::ptr::copy_nonoverlapping(v.ops.as_ptr(), p, v.ops.len());
            let sp = e.side();
            core::ptr::copy_nonoverlapping(side.as_ptr(), sp, side.len());
            e.set_side(sp.add(side.len()));
            p.add(v.ops.len())
        });
        // The stamp promise counts two op bytes an event: a one-byte event
        // (thread exit, roi, tracing) is charged the byte it does not take.
        if ok && v.ops.len() < 2 && st.stamp_at.get() != 0 {
            st.stamp_at.set(st.stamp_at.get() - 1);
        }
        ok
    }
}

/// Records a thread or control event from outside the runtime. The event is dropped
/// with the guard held, so freeing its strings is not recorded.
pub(crate) fn control(ev: Event) {
    let st = ts();
    if enter(st, true) {
        emit_control(st, &ev);
        drop(ev);
        guard_off(st);
    } else {
        let _g = state::Guard::new();
        drop(ev);
    }
}

/// Callers' return addresses from a frame-pointer walk starting at `fp`, kept
/// inside this thread's stack so a frame-pointer-less caller cannot make it fault.
fn walk(st: &ThreadState, mut fp: usize, out: &mut [u64]) -> usize {
    let (lo, hi) = (st.stack_lo.get(), st.stack_hi.get());
    let mut n = 0;
    while n < out.len() {
        if fp < lo || fp.wrapping_add(16) > hi || fp & 7 != 0 {
            break;
        }
        // SAFETY: `fp..fp+16` lies inside this thread's mapped stack.
        let (next, ret) = unsafe { (*(fp as *const usize), *((fp + 8) as *const usize)) };
        if ret == 0 {
            break;
        }
        out[n] = ret as u64;
        n += 1;
        if next <= fp {
            break;
        }
        fp = next;
    }
    n
}

fn stack_of(st: &ThreadState, fp: usize, buf: &mut [u64; MAX_STACK_DEPTH]) -> usize {
    let depth = options::get().rec.stack_depth.min(MAX_STACK_DEPTH);
    walk(st, fp, &mut buf[..depth])
}

/// Runs `write(st, stack)` with the call stack that starts at the frame pointer
/// `fp`, if this thread records here (then with the guard held).
#[inline(always)]
fn with_stack(fp: usize, write: impl FnOnce(&ThreadState, &[u64])) {
    let st = ts();
    if !enter_in_extent(st) {
        return;
    }
    let mut stack = [0u64; MAX_STACK_DEPTH];
    let n = stack_of(st, fp, &mut stack);
    write(st, &stack[..n]);
    guard_off(st);
}

/// Records an allocation made at `pc` (the caller's frame pointer is `fp`).
pub(crate) fn alloc(kind: AllocKind, pc: u64, fp: usize, addr: u64, size: u64) {
    with_stack(fp, |st, stack| {
        // SAFETY: owner, guard held; `alloc_len(n)` bytes are reserved.
        unsafe {
            write_ev(st, Encoder::alloc_len(stack.len()), class::ALLOCS, |e, p| {
                e.alloc(p, kind, pc, addr, size, stack)
            })
        };
    });
}

/// Records a realloc.
pub(crate) fn realloc(pc: u64, fp: usize, old: u64, new: u64, size: u64) {
    // Counted as memcheck does (`memlens_format::realloc_counts`): realloc(NULL, n)
    // is an allocation, realloc(p, 0) a free.
    let cls = match (old, new) {
        (0, _) => class::ALLOCS,
        (_, 0) => class::FREES,
        _ => class::REALLOCS,
    };
    with_stack(fp, |st, stack| {
        // SAFETY: as in `alloc`.
        unsafe {
            write_ev(st, Encoder::alloc_len(stack.len()), cls, |e, p| {
                e.realloc(p, pc, old, new, size, stack)
            })
        };
    });
}

/// Records a free (before the block is released, so a deferred store value can
/// still be read).
pub(crate) fn free(kind: FreeKind, pc: u64, addr: u64) {
    let st = ts();
    if !enter_in_extent(st) {
        return;
    }
    // SAFETY: owner, guard held.
    unsafe { write_ev(st, MAX_ACCESS_LEN, class::FREES, |e, p| e.free(p, kind, pc, addr)) };
    guard_off(st);
}

/// Writes a deferred store before an interposed function changes memory.
#[inline(always)]
pub(crate) fn before_op() {
    let st = ts();
    if st.pend.get().tag != 0 && enter(st, false) {
        guard_off(st);
    }
}
