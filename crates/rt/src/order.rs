//! A global order consistent with synchronisation: Lamport clocks.
//!
//! Every thread keeps a Lamport clock (`ThreadState::lclock`); a bank of striped
//! locks, indexed by cache line (`(addr >> line_shift) & (locks - 1)`), each holds a
//! clock too. A stripe is one cache line holding a lock word (0 free, else the
//! holder's token) and a `u64` with the clock (bits 0..48) and the thread that
//! stamped it last (bits 48..63: stream + 1, 0 unknown), so taking the lock is a
//! single compare-exchange that brings the whole line over, and the clock is then
//! read and written in a line this core already owns.
//!
//! - **Atomics** (`atomics.rs`): the stripe of the address is locked across the real
//!   atomic operation and the clock update (`t = max(thread, stripe) + 1`, then
//!   `stripe = t`): every atomic is treated as both acquire and release, and the
//!   atomic operations on one line are totally ordered by their stamps. The `+ 1`
//!   is skipped when the stripe's clock is below the thread's, or equal to it and
//!   stamped by this thread: the operation is then already after every earlier one
//!   on the stripe (ties within a thread are ordered by position), the thread clock
//!   does not change and no `Clock` event is written — an uncontended atomic costs
//!   the stripe lock only.
//! - **Blocking synchronisation** (`sync.rs`: pthread mutexes, rwlocks, condition
//!   variables, barriers, semaphores, spinlocks, create/join): a release-like
//!   operation does `stripe = max(stripe, thread)` under the stripe lock before the
//!   real call; an acquire-like one reads the stripe after it without locking (every
//!   write of a stripe's clock happens under its lock and never lowers it, and the
//!   release it synchronised with is visible) and does `thread = stripe + 1` unless
//!   the thread's clock is already past it (same rule as for atomics).
//! - Whenever the thread clock changes the thread writes `Clock(t)`; the events that
//!   follow it (up to the next `Clock`) carry that stamp. Ordering events by
//!   `(clock, thread, index in the thread)` gives a total order consistent with
//!   every synchronisation the runtime sees. Plain accesses cost nothing extra.
//! - `MEMLENS_ORDER=atomic`: every recorded access (plain accesses and ranges too)
//!   locks the stripes of the lines it touches (in index order), takes a stamp
//!   `t = max(thread, stripes) + 1` and sets the stripes to `t` in its callback, and
//!   keeps them locked *across the access itself*: TSan callbacks run before the
//!   access they report, so the stripes are released at the start of the thread's
//!   next event the runtime sees (next access, atomic, function entry/exit,
//!   allocation, any pthread interposer, thread exit), when the access has executed.
//!   A thread holds at most one access's stripes and releases them before it waits
//!   for any other stripe, so holders never wait on each other. The accesses to one
//!   line are thus stamped in the order they hit memory, racy or not. A thread may
//!   still block while holding (a system call or a futex in code the runtime does
//!   not see); a thread that waits [`STEAL_NS`] for a stripe whose holder made no
//!   progress takes it over and counts a *steal* — a possible ordering violation,
//!   reported at exit on stderr and in the trace (`info`: `order_steals`).
//! - `MEMLENS_ORDER=none`: no clocks at all (the chunk `first_clock` stays 0).
//!
//! **Bounded skew.** At every buffer hand-over (`handover`) a thread publishes its
//! clock in a global high-water mark and catches its own clock up to it at its
//! next ordering operation or plain event (a `Clock`; not at the hand-over itself,
//! which may fall between a stripe update and the event it stamps). A thread whose
//! last hand-over lies more than [`SKEW_CHUNKS`] hand-overs (of all threads) behind
//! is sent to the general path and, at its next plain event, raises its clock to
//! the mark and hands its partial buffer over. So a streaming merge that reads
//! chunks in file order needs to hold back about `SKEW_CHUNKS + 4` chunks, not the
//! whole trace. A lagging thread that is blocked in an interposed waiting call
//! (mutex, rwlock, semaphore, condition, barrier, join: it is *parked*) cannot hand
//! over: the thread that finds it lagging does it for it (`state::steal_parked`),
//! ending the chunk with a `Clock` one above the mark and raising the parked
//! thread's clock to it, so its stream stops holding the merge back. Only a thread
//! that is not scheduled, or blocked in code the runtime does not see (a system
//! call), still does. docs/trace-format.md states the bound.
//!
//! Options: `MEMLENS_ORDER` (`sync`, the default, `atomic`, `none`),
//! `MEMLENS_ORDER_LOCKS` (stripes, power of two, default 4096, at most 65536),
//! `MEMLENS_ORDER_LINE` (line size, power of two, default 64),
//! `MEMLENS_CAS_AS_WRITE=1` (a failed compare-exchange is recorded as a successful
//! one, i.e. a read and a write; by default it is a read only, `Rmw{CasFailed}`).
//! Test switches (negative controls of the e2e tests): `MEMLENS_ORDER_HOLD=0`
//! releases the stripes right after the stamp, `MEMLENS_ORDER_SKEW=0` turns the
//! skew bound off.

use crate::state::{ts, ThreadState};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};

/// No ordering.
pub(crate) const NONE: u8 = 0;
/// Clocks at atomics and blocking synchronisation (default).
pub(crate) const SYNC: u8 = 1;
/// A stamp per recorded access.
pub(crate) const ATOMIC: u8 = 2;

/// The mode in force; set once at start-up when recording.
pub(crate) static MODE: AtomicU8 = AtomicU8::new(NONE);
/// `MEMLENS_CAS_AS_WRITE=1`.
pub(crate) static CAS_AS_WRITE: AtomicU8 = AtomicU8::new(0);
/// Hold the stripes across the access (`MEMLENS_ORDER_HOLD`, default on).
static HOLD: AtomicBool = AtomicBool::new(true);
/// Enforce the skew bound (`MEMLENS_ORDER_SKEW`, default on).
static SKEW: AtomicBool = AtomicBool::new(true);
static SHIFT: AtomicU32 = AtomicU32::new(6);
static MASK: AtomicUsize = AtomicUsize::new(4095);

const MAX_LOCKS: usize = 1 << 16;
/// The clock bits of a stripe.
const CLOCK: u64 = (1 << 48) - 1;
const OWNER_SHIFT: u32 = 48;
/// Owner ids that fit (15 bits, 0 = unknown).
const MAX_OWNER: u32 = (1 << 15) - 1;
/// How long (ns) a waiter in `--order=atomic` waits for a stripe whose holder makes
/// no progress before it takes the stripe over.
pub(crate) const STEAL_NS: u64 = 500_000_000;
/// Hand-overs (of all threads) a thread may lag behind before it is made to hand
/// over its partial buffer (see the module docs).
pub(crate) const SKEW_CHUNKS: u64 = 16;

#[repr(C, align(64))]
struct Stripe {
    /// 0: free; else the holder's token.
    lock: AtomicU32,
    /// Clock | last stamping owner << 48. Written only under `lock`, never lowered.
    word: AtomicU64,
}

static STRIPES: [Stripe; MAX_LOCKS] =
    [const { Stripe { lock: AtomicU32::new(0), word: AtomicU64::new(0) } }; MAX_LOCKS];
/// The clock of process-wide events (ROI begin/end).
static GLOBAL: Stripe = Stripe { lock: AtomicU32::new(0), word: AtomicU64::new(0) };
/// Stripes taken over from a holder that made no progress (`--order=atomic`).
static STEALS: AtomicU64 = AtomicU64::new(0);

/// Installs the options (at start-up, before any thread records).
pub(crate) fn configure(mode: u8, locks: usize, line: usize, cas_as_write: bool) {
    let locks = locks.clamp(1, MAX_LOCKS).next_power_of_two().min(MAX_LOCKS);
    let line = line.clamp(1, 1 << 20).next_power_of_two();
    MASK.store(locks - 1, SeqCst);
    SHIFT.store(line.trailing_zeros(), SeqCst);
    CAS_AS_WRITE.store(u8::from(cas_as_write), SeqCst);
    // Test switch: `MEMLENS_ORDER_HOLD=0` releases the stripes right after stamping,
    // as before they were held across the access (the tests' negative control).
    let env_flag =
        |k: &str| memlens_contract::options::flag(k, std::env::var(k).ok().as_deref(), true);
    let hold = env_flag("MEMLENS_ORDER_HOLD");
    HOLD.store(hold, SeqCst);
    // Test switch: `MEMLENS_ORDER_SKEW=0` turns the skew bound off (negative control).
    let skew = env_flag("MEMLENS_ORDER_SKEW");
    SKEW.store(skew, SeqCst);
    MODE.store(mode, SeqCst);
    crate::loops::refresh();
}

/// The mode in force.
#[inline(always)]
pub(crate) fn mode() -> u8 {
    MODE.load(Relaxed)
}

/// At the end of the recording: the number of stripes taken over (possible
/// ordering violations of `--order=atomic`), on stderr and as the `order_steals`
/// option record that `memlens info` shows. Nothing when there were none.
pub(crate) fn end_record() -> Option<memlens_format::MetaRecord> {
    let n = STEALS.load(Relaxed);
    if n == 0 {
        return None;
    }
    let n = n.to_string();
    crate::sys::warn(&[
        "--order=atomic: ",
        &n,
        " line lock(s) taken over from a thread that held one for 0.5 s without progress ",
        "(blocked outside the runtime's view, or not scheduled): accesses around them may be out of order",
    ]);
    Some(memlens_format::MetaRecord::Option("order_steals".into(), n))
}

#[inline(always)]
fn index(addr: u64) -> usize {
    ((addr >> SHIFT.load(Relaxed)) as usize) & MASK.load(Relaxed)
}

/// This thread's owner id in a stripe (0 when it has no stream yet or its index
/// does not fit).
#[inline(always)]
fn owner(st: &ThreadState) -> u64 {
    let s = st.stream.get();
    if s < MAX_OWNER && st.recording() {
        u64::from(s + 1)
    } else {
        0
    }
}

/// The token this thread writes in the lock words it holds (non-zero).
#[inline(always)]
fn token(st: &ThreadState) -> u32 {
    let o = owner(st);
    if o != 0 {
        o as u32
    } else {
        // No stream: the state's address (distinct among live threads) in the upper half.
        (((st as *const ThreadState as usize) >> 6) as u32) | 1 << 31
    }
}

/// This thread already holds `s` (its held stripes were released first): a signal
/// handler interrupted it inside the stripe's critical section. Waiting would
/// never end; the handler's operation goes unordered instead.
#[inline(always)]
fn reentered(s: &Stripe, tok: u32) -> bool {
    s.lock.load(Relaxed) == tok
}

#[inline(always)]
fn lock(s: &Stripe, tok: u32) {
    lock_as(s, tok, false);
}

/// [`lock`], `polite` for a read-modify-write (see [`BACKOFF_MAX`]).
#[inline(always)]
fn lock_as(s: &Stripe, tok: u32, polite: bool) {
    // No load first: under contention a read would fetch the line shared and the
    // exchange fetch it again for writing.
    if s.lock.compare_exchange(0, tok, Acquire, Relaxed).is_err() {
        lock_contended(s, tok, polite);
    }
}

/// Most pauses between two looks at a contended stripe. Backing off (rather than
/// reading the lock word after every pause) leaves the line with the holder, which
/// can then unlock and often take it again without a transfer: fewer hand-overs,
/// fewer `Clock` events. A waiter for a read-modify-write is *polite*: it backs off
/// the most from the start, so a thread in a run of atomic updates to one line
/// keeps it for several (contended `inc add` at 8 threads: 1.6 -> 1.1 times the
/// unordered run). Loads, stores and blocking calls look again after one pause,
/// then two, four...: a store that ends another thread's spin-wait must not wait
/// out the spinner's loads (a two-thread ping-pong gets 5x slower otherwise).
const BACKOFF_MAX: u32 = 64;
/// Pauses a waiter spends before it yields at every look (the holder may have been
/// preempted: let the others run). `inc add` and `mutex` at 2 and 8 threads and the
/// ping-pong time the same with 6400; the shorter budget wastes less of a time slice.
const SPIN_PAUSES: u32 = 1024;

/// Spins a little, then yields: with more threads than cores the holder may have
/// been preempted, and spinning through its time slice is what made 8 threads on 2
/// cores slow. In `--order=atomic` a holder may be blocked outside the runtime's
/// view while holding (or just not scheduled, on a very loaded machine): after
/// [`STEAL_NS`] without progress (same holder, same clock) the stripe is taken over
/// and the steal counted.
#[cold]
#[inline(never)]
fn lock_contended(s: &Stripe, tok: u32, polite: bool) {
    let steal = mode() == ATOMIC;
    let mut spins = 0u32;
    let mut seen = (0u32, 0u64);
    let mut since = 0u64;
    let mut backoff = if polite { BACKOFF_MAX } else { 1 };
    let mut paused = 0u32;
    loop {
        let h = s.lock.load(Relaxed);
        if h == 0 {
            if s.lock.compare_exchange_weak(0, tok, Acquire, Relaxed).is_ok() {
                return;
            }
            continue;
        }
        spins = spins.wrapping_add(1);
        if paused < SPIN_PAUSES {
            for _ in 0..backoff {
                core::hint::spin_loop();
            }
            paused += backoff;
            backoff = (backoff * 2).min(BACKOFF_MAX);
            continue;
        }
        // SAFETY: no preconditions.
        unsafe { libc::sched_yield() };
        if steal && spins.is_multiple_of(16) {
            let now = crate::sys::monotonic_ns();
            let cur = (h, s.word.load(Relaxed));
            if cur != seen || since == 0 {
                seen = cur;
                since = now;
            } else if now.saturating_sub(since) > STEAL_NS
                && s.lock.compare_exchange(h, tok, Acquire, Relaxed).is_ok()
            {
                STEALS.fetch_add(1, Relaxed);
                return;
            }
        }
    }
}

/// Releases a stripe taken with `lock`. Under `--order=atomic` a stripe may have
/// been taken over meanwhile: then it is not ours to release.
#[inline(always)]
fn unlock(s: &Stripe, tok: u32) {
    if mode() == ATOMIC {
        let _ = s.lock.compare_exchange(tok, 0, Release, Relaxed);
    } else {
        s.lock.store(0, Release);
    }
}

/// Runs the atomic load or store `f` under the stripe lock of `addr` and advances
/// the clocks (`t = max(thread, stripe) + 1`, `stripe = t`). Returns `f`'s result
/// and the new thread clock, 0 when ordering is off or the clock did not change.
#[inline(always)]
pub(crate) fn atomic<R>(addr: u64, f: impl FnOnce() -> R) -> (R, u64) {
    atomic_as(addr, false, f)
}

/// The calling thread, its held stripes released and its clock caught up, before
/// it orders an event; `None` when nothing is ordered (`--order none`).
#[inline(always)]
fn ordering_thread() -> Option<&'static ThreadState> {
    if mode() == NONE {
        return None;
    }
    let st = ts();
    unhold(st);
    catch_up(st);
    Some(st)
}

/// [`atomic`] for a read-modify-write (exchange, compare-exchange, fetch-op): its
/// waiters are polite (see [`BACKOFF_MAX`]).
#[inline(always)]
pub(crate) fn atomic_rmw<R>(addr: u64, f: impl FnOnce() -> R) -> (R, u64) {
    atomic_as(addr, true, f)
}

#[inline(always)]
fn atomic_as<R>(addr: u64, polite: bool, f: impl FnOnce() -> R) -> (R, u64) {
    // values mode: the pending store's value before the atomic may publish it
    crate::record::settle();
    let Some(st) = ordering_thread() else { return (f(), 0) };
    let me = owner(st);
    let tok = if me != 0 { me as u32 } else { token(st) };
    let th = st.lclock.get();
    let s = &STRIPES[index(addr)];
    if reentered(s, tok) {
        return (f(), 0);
    }
    lock_as(s, tok, polite);
    let v = s.word.load(Relaxed);
    let r = f();
    let c = v & CLOCK;
    let mine = me != 0 && v >> OWNER_SHIFT == me;
    let t = if c < th || (c == th && mine) { th } else { c + 1 };
    if t != c || !mine {
        s.word.store(t | me << OWNER_SHIFT, Relaxed);
    }
    unlock(s, tok);
    if t == th {
        return (r, 0);
    }
    st.lclock.set(t);
    (r, t)
}

/// Stripe-index intervals `[a, b)`, sorted and disjoint, packed as `(a, b)` pairs
/// (`b == 0`: unused): the stripes an access holds under `--order=atomic`.
pub(crate) type Held = [u32; 8];

/// The stripes of the ranges `(addr, len)`, as sorted disjoint intervals.
#[inline(always)]
fn intervals(ranges: &[(u64, u64)]) -> Held {
    let shift = SHIFT.load(Relaxed);
    let n = MASK.load(Relaxed) + 1;
    // The common case, one access within one line: no sorting.
    if let [(addr, len)] = *ranges {
        let (first, last) = (addr >> shift, addr.saturating_add(len.max(1) - 1) >> shift);
        if first == last {
            let i = (first as usize & (n - 1)) as u32;
            return [i, i + 1, 0, 0, 0, 0, 0, 0];
        }
    }
    intervals_general(ranges, shift, n)
}

#[cold]
#[inline(never)]
fn intervals_general(ranges: &[(u64, u64)], shift: u32, n: usize) -> Held {
    let mut iv = [(0usize, 0usize); 4];
    let mut k = 0;
    for &(addr, len) in ranges {
        let first = addr >> shift;
        let last = addr.saturating_add(len.max(1) - 1) >> shift;
        let lines = ((last - first) as usize).saturating_add(1).min(n);
        let start = (first as usize) & (n - 1);
        if start + lines <= n {
            iv[k] = (start, start + lines);
            k += 1;
        } else {
            iv[k] = (start, n);
            iv[k + 1] = (0, start + lines - n);
            k += 2;
        }
    }
    let iv = &mut iv[..k];
    iv.sort_unstable();
    let mut out: Held = [0; 8];
    let mut m = 0;
    for &(a, b) in iv.iter() {
        if m > 0 && a <= out[2 * m - 1] as usize {
            out[2 * m - 1] = out[2 * m - 1].max(b as u32);
        } else {
            out[2 * m] = a as u32;
            out[2 * m + 1] = b as u32;
            m += 1;
        }
    }
    out
}

/// Stamps an access (`MEMLENS_ORDER=atomic`) of the ranges `(addr, len)` (one for an
/// access, two for a copy): releases what the thread held, locks the stripes of
/// the lines touched in index order, takes `t = max(thread, stripes) + 1`, sets the
/// stripes to `t` and keeps them locked until the thread's next event (`unhold`).
/// Returns the new thread clock.
pub(crate) fn stamp(st: &ThreadState, ranges: &[(u64, u64)]) -> u64 {
    unhold(st);
    let me = owner(st);
    let tok = token(st);
    let held = intervals(ranges);
    let mut t = st.lclock.get();
    for p in held.chunks_exact(2).take_while(|p| p[1] != 0) {
        for s in &STRIPES[p[0] as usize..p[1] as usize] {
            lock(s, tok);
            t = t.max(s.word.load(Relaxed) & CLOCK);
        }
    }
    t += 1;
    for p in held.chunks_exact(2).take_while(|p| p[1] != 0) {
        for s in &STRIPES[p[0] as usize..p[1] as usize] {
            s.word.store(t | me << OWNER_SHIFT, Relaxed);
        }
    }
    st.held.set(held);
    st.lclock.set(t);
    if !HOLD.load(Relaxed) {
        unhold(st);
    }
    t
}

/// Releases the stripes this thread holds across its last access (`--order=atomic`;
/// nothing otherwise). Called at the start of each of its events.
#[inline(always)]
pub(crate) fn unhold(st: &ThreadState) {
    if st.held.get()[1] != 0 {
        unhold_slow(st);
    }
}

#[cold]
#[inline(never)]
fn unhold_slow(st: &ThreadState) {
    let held = st.held.replace([0; 8]);
    let tok = token(st);
    for p in held.chunks_exact(2).take_while(|p| p[1] != 0) {
        for s in &STRIPES[p[0] as usize..p[1] as usize] {
            let _ = s.lock.compare_exchange(tok, 0, Release, Relaxed);
        }
    }
}

/// Before an interposed call that may block: releases the stripes held across the
/// last access, so no thread waits for them while this one sleeps.
#[inline(always)]
pub(crate) fn before_blocking() {
    if mode() == ATOMIC {
        unhold(ts());
    }
}

/// Runs the real call `f` of an interposed waiting call with this thread *parked*:
/// meanwhile a thread that finds it lagging may hand its buffer over for it (see
/// the module docs). Nothing is recorded while parked.
#[inline(always)]
pub(crate) fn parked<R>(f: impl FnOnce() -> R) -> R {
    if mode() == NONE || !SKEW.load(Relaxed) {
        return f();
    }
    let st = ts();
    // Release: the buffer's committed events are visible to whoever sees the flag.
    st.parked.store(true, Release);
    let r = f();
    // Dekker with `state::steal_parked`: either the thief sees `parked` false and
    // leaves, or this thread sees its hold on `own` and waits until it is done.
    if st.parked.swap(false, SeqCst) {
        let mut spins = 0u32;
        while st.own.load(SeqCst) == 1 {
            // the thief may wait for room in the writers' queue
            spins += 1;
            if spins < 100 {
                core::hint::spin_loop();
            } else {
                // SAFETY: no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
    }
    r
}

/// At the start of every general-path event (guard held): releases held stripes.
#[inline]
pub(crate) fn on_enter(st: &ThreadState) {
    unhold(st);
}

/// Before a plain event on the general path (guard held; no stripe update awaits
/// its event): catches the clock up (`write` records the `Clock`) and, when this
/// thread lags more than [`SKEW_CHUNKS`] hand-overs behind, first to the high-water
/// mark, then hands its partial buffer over — so the chunk ends at that clock.
pub(crate) fn plain_event(st: &ThreadState, write: impl FnOnce(u64)) {
    if mode() == NONE {
        return;
    }
    if lagging(st) {
        let s = st.stream.get() as usize;
        let t = HIGH.load(Relaxed).max(FLOOR[s].load(Relaxed));
        if t > st.lclock.get() {
            st.lclock.set(t);
            write(t);
        }
        crate::state::swap_buffer(st, false);
    } else if let Some(t) = take_floor(st) {
        write(t);
    }
}

/// A release-like operation on the object at `addr` (before the real call):
/// `stripe = max(stripe, thread)`.
pub(crate) fn release(addr: u64) {
    let Some(st) = ordering_thread() else { return };
    let tok = token(st);
    let s = &STRIPES[index(addr)];
    let th = st.lclock.get();
    if reentered(s, tok) {
        return;
    }
    lock(s, tok);
    let v = s.word.load(Relaxed);
    let me = owner(st);
    // At an equal clock the owner must become this thread too: an acquirer that
    // finds its own id there would keep its clock, tying its critical section with
    // this one (the soak test's mutex counter replayed out of order).
    if v & CLOCK < th || (v & CLOCK == th && v >> OWNER_SHIFT != me) {
        s.word.store(th | me << OWNER_SHIFT, Relaxed);
    }
    unlock(s, tok);
}

/// An acquire-like operation on the object at `addr` (after the real call):
/// `thread = max(thread, stripe + 1)` (see the module docs); writes `Clock` when the
/// clock changes.
pub(crate) fn acquire(addr: u64) {
    let Some(st) = ordering_thread() else { return };
    // No lock: the release this synchronised with wrote the stripe before the real
    // unlock, and no later write lowers it.
    let v = STRIPES[index(addr)].word.load(Acquire);
    let (c, th) = (v & CLOCK, st.lclock.get());
    let me = owner(st);
    if c < th || (c == th && me != 0 && v >> OWNER_SHIFT == me) {
        return;
    }
    st.lclock.set(c + 1);
    crate::record::clock(c + 1);
}

/// A process-wide event (ROI begin/end): ordered after everything the calling thread
/// has seen and every earlier process-wide event. Writes `Clock`.
pub(crate) fn global() {
    let Some(st) = ordering_thread() else { return };
    let tok = token(st);
    if reentered(&GLOBAL, tok) {
        return;
    }
    lock(&GLOBAL, tok);
    let c = GLOBAL.word.load(Relaxed) & CLOCK;
    let t = c.max(st.lclock.get()) + 1;
    GLOBAL.word.store(t, Relaxed);
    unlock(&GLOBAL, tok);
    st.lclock.set(t);
    crate::record::clock(t);
}

/// In the child of `fork`, which has one thread: a stripe another parent thread
/// held at the fork would never be released (the child would wait for it forever
/// in `sync` mode, 0.5 s then steal it in `atomic` mode), so every stripe is freed.
/// Clocks are kept, so the child's order stays after what it inherited. Only used
/// stripes are visited, and only held ones written (no copy-on-write of the rest).
pub(crate) fn after_fork_in_child(st: &ThreadState) {
    if mode() == NONE {
        return;
    }
    st.held.set([0; 8]);
    let n = (MASK.load(Relaxed) + 1).min(MAX_LOCKS);
    for s in STRIPES[..n].iter().chain(core::iter::once(&GLOBAL)) {
        if s.lock.load(Relaxed) != 0 {
            s.lock.store(0, Release);
        }
    }
}

/// The clock a new thread inherits from its creator (the creator ticks first).
pub(crate) fn fork_clock() -> u64 {
    let Some(st) = ordering_thread() else { return 0 };
    let t = st.lclock.get() + 1;
    st.lclock.set(t);
    crate::record::clock(t);
    t
}

/// A new thread starts after its creator's `fork_clock` and the high-water mark.
pub(crate) fn inherit(parent: u64) {
    if mode() == NONE {
        return;
    }
    let st = ts();
    let t = st.lclock.get().max(parent).max(HIGH.load(Relaxed)) + 1;
    st.lclock.set(t);
    started(st);
    crate::record::clock(t);
}

/// How a failed compare-exchange is recorded (`MEMLENS_CAS_AS_WRITE`).
#[inline(always)]
pub(crate) fn failed_op() -> memlens_format::RmwOp {
    if CAS_AS_WRITE.load(Relaxed) != 0 {
        memlens_format::RmwOp::Cas
    } else {
        memlens_format::RmwOp::CasFailed
    }
}

// ---- Bounded skew --------------------------------------------------------------

/// Buffer hand-overs of all threads so far.
static HANDOVERS: AtomicU64 = AtomicU64::new(0);
/// The highest clock published at a hand-over.
static HIGH: AtomicU64 = AtomicU64::new(0);
/// `HANDOVERS` when the last lagging threads were sent to hand over.
static KICKED: AtomicU64 = AtomicU64::new(0);
/// Streams seen (bound of the scan over `LAST`).
static STREAMS: AtomicU32 = AtomicU32::new(0);
/// Per stream: the clock to catch up to at the next safe point (`catch_up`).
static FLOOR: [AtomicU64; MAX_OWNER as usize] = [const { AtomicU64::new(0) }; MAX_OWNER as usize];
/// Per stream: `HANDOVERS` at its start or last hand-over, `u64::MAX` once ended.
static LAST: [AtomicU64; MAX_OWNER as usize] = [const { AtomicU64::new(0) }; MAX_OWNER as usize];

/// The clock this thread must catch up to, if above its own: raises `lclock` and
/// returns it (the caller writes `Clock`). Called only where no stripe update awaits
/// its event: before an ordering operation or a plain event.
#[inline(always)]
pub(crate) fn take_floor(st: &ThreadState) -> Option<u64> {
    let s = st.stream.get() as usize;
    if s < MAX_OWNER as usize {
        let f = FLOOR[s].load(Relaxed);
        if f > st.lclock.get() {
            st.lclock.set(f);
            return Some(f);
        }
    }
    None
}

/// [`take_floor`] outside the runtime's guard: writes the `Clock` too.
#[inline(always)]
fn catch_up(st: &ThreadState) {
    if let Some(t) = take_floor(st) {
        crate::record::clock(t);
    }
}

/// A thread starts: it counts as handed over now.
fn started(st: &ThreadState) {
    let s = st.stream.get();
    if st.recording() && s < MAX_OWNER {
        LAST[s as usize].store(HANDOVERS.load(Relaxed), Relaxed);
        STREAMS.fetch_max(s + 1, Relaxed);
    }
}

/// True when this thread's last hand-over lies more than [`SKEW_CHUNKS`] behind.
#[inline]
fn lagging(st: &ThreadState) -> bool {
    let s = st.stream.get();
    s < MAX_OWNER
        && HANDOVERS.load(Relaxed).saturating_sub(LAST[s as usize].load(Relaxed)) > SKEW_CHUNKS
        && st.buf.get() != 0
}

/// Called by `state::swap_buffer` (owner, guard held) once the new buffer is in
/// place, before the chunk header's clock is taken: publishes the thread's clock,
/// catches it up to the high-water mark (a `Clock` at the head of the new buffer)
/// and sends threads that lag too far behind to hand over theirs.
pub(crate) fn handover(st: &ThreadState, last: bool) {
    if mode() == NONE || !st.recording() || !SKEW.load(Relaxed) {
        return;
    }
    let s = st.stream.get();
    let h = HANDOVERS.fetch_add(1, Relaxed) + 1;
    let mine = st.lclock.get();
    let high = HIGH.fetch_max(mine, Relaxed);
    if s < MAX_OWNER {
        LAST[s as usize].store(if last { u64::MAX } else { h }, Relaxed);
        STREAMS.fetch_max(s + 1, Relaxed);
    }
    if last {
        return;
    }
    // Not applied here: a hand-over may happen between a stripe update and the
    // event it stamps (the stripe must not fall behind the clock the event gets).
    if high > mine && s < MAX_OWNER {
        FLOOR[s as usize].fetch_max(high, Relaxed);
    }
    // Someone lagging? Send everybody to the general path once, at most every
    // SKEW_CHUNKS / 4 hand-overs; the laggards hand over at their next plain event.
    if h.saturating_sub(KICKED.load(Relaxed)) < SKEW_CHUNKS / 4 {
        return;
    }
    let n = STREAMS.load(Relaxed).min(MAX_OWNER) as usize;
    let behind = LAST[..n].iter().any(|l| {
        let l = l.load(Relaxed);
        l != u64::MAX && h.saturating_sub(l) > SKEW_CHUNKS
    });
    if behind {
        KICKED.store(h, Relaxed);
        crate::state::kick_all();
        // Parked laggards cannot hand over: do it for them, at a clock above
        // every chunk handed over so far.
        let t = HIGH.load(Relaxed) + 1;
        crate::state::steal_parked(
            t,
            |s| {
                let l = LAST[s as usize].load(Relaxed);
                s < n as u32 && l != u64::MAX && h.saturating_sub(l) > SKEW_CHUNKS
            },
            |s| {
                FLOOR[s as usize].fetch_max(t, Relaxed);
                LAST[s as usize].store(h, Relaxed);
            },
        );
    }
}
