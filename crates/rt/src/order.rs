//! A global order consistent with synchronisation: Lamport clocks.
//!
//! Every thread keeps a Lamport clock (`ThreadState::lclock`); a bank of striped
//! spinlocks, indexed by cache line (`(addr >> line_shift) & (locks - 1)`), each
//! holds a clock too. Every stripe is one `u64`: bit 63 is the lock, bits 48..63
//! the thread that stamped it last (stream + 1, 0 unknown), the rest the clock, so
//! locking and reading the clock is one compare-exchange.
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
//!   operation does `stripe = max(stripe, thread)` before the real call, an
//!   acquire-like one `thread = max(thread, stripe) + 1` after it.
//! - Whenever the thread clock changes the thread writes `Clock(t)`; the events that
//!   follow it (up to the next `Clock`) carry that stamp. Ordering events by
//!   `(clock, thread, index in the thread)` gives a total order consistent with
//!   every synchronisation the runtime sees. Plain accesses cost nothing extra.
//! - `MEMLENS_ORDER=atomic`: every recorded access (plain accesses and ranges too)
//!   locks the stripes of the lines it touches, takes a stamp
//!   `t = max(thread, stripes) + 1`, sets the stripes to `t` and unlocks, all inside
//!   the callback. TSan callbacks run *before* the access they report, so the lock is
//!   not held across a plain access itself (holding it until the thread's next
//!   callback, as atomic-memory-trace does under Pin, could deadlock here when the
//!   thread blocks in code the runtime does not see). Consequence: accesses to one
//!   line are stamped in the order of their callbacks; for data-race-free programs
//!   that is the order of the accesses; racing plain accesses may be stamped in
//!   a different order than the one the hardware chose.
//! - `MEMLENS_ORDER=none`: no clocks at all (the chunk `first_clock` stays 0).
//!
//! Options: `MEMLENS_ORDER` (`sync`, the default, `atomic`, `none`),
//! `MEMLENS_ORDER_LOCKS` (stripes, power of two, default 4096, at most 65536),
//! `MEMLENS_ORDER_LINE` (line size, power of two, default 64),
//! `MEMLENS_CAS_AS_WRITE=1` (a failed compare-exchange is recorded as a successful
//! one, i.e. a read and a write; by default it is a read only, `Rmw{CasFailed}`).

use crate::state::{ts, ThreadState};
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};

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
static SHIFT: AtomicU32 = AtomicU32::new(6);
static MASK: AtomicUsize = AtomicUsize::new(4095);

const MAX_LOCKS: usize = 1 << 16;
const LOCKED: u64 = 1 << 63;
/// The clock bits of a stripe.
const CLOCK: u64 = (1 << 48) - 1;
const OWNER_SHIFT: u32 = 48;
/// Owner ids that fit (15 bits, 0 = unknown).
const MAX_OWNER: u32 = (1 << 15) - 1;

#[repr(align(64))]
struct Stripe(AtomicU64);

static STRIPES: [Stripe; MAX_LOCKS] = [const { Stripe(AtomicU64::new(0)) }; MAX_LOCKS];
/// The clock of process-wide events (ROI begin/end).
static GLOBAL: Stripe = Stripe(AtomicU64::new(0));

/// Parses the mode name (`None` when unknown).
pub(crate) fn parse_mode(s: &str) -> Option<u8> {
    match s.trim() {
        "" | "sync" | "default" | "1" => Some(SYNC),
        "atomic" | "2" => Some(ATOMIC),
        "none" | "off" | "0" => Some(NONE),
        _ => None,
    }
}

/// Installs the options (at start-up, before any thread records).
pub(crate) fn configure(mode: u8, locks: usize, line: usize, cas_as_write: bool) {
    let locks = locks.clamp(1, MAX_LOCKS).next_power_of_two().min(MAX_LOCKS);
    let line = line.clamp(1, 1 << 20).next_power_of_two();
    MASK.store(locks - 1, SeqCst);
    SHIFT.store(line.trailing_zeros(), SeqCst);
    CAS_AS_WRITE.store(u8::from(cas_as_write), SeqCst);
    MODE.store(mode, SeqCst);
}

/// The mode in force.
#[inline(always)]
pub(crate) fn mode() -> u8 {
    MODE.load(Relaxed)
}

#[inline(always)]
fn index(addr: u64) -> usize {
    ((addr >> SHIFT.load(Relaxed)) as usize) & MASK.load(Relaxed)
}

#[inline(always)]
fn lock(s: &AtomicU64) -> u64 {
    let v = s.load(Relaxed);
    if v & LOCKED == 0 && s.compare_exchange_weak(v, v | LOCKED, Acquire, Relaxed).is_ok() {
        return v;
    }
    lock_contended(s)
}

/// Spins a little, then yields: with more threads than cores the holder may have
/// been preempted, and spinning through its time slice is what made 8 threads on 2
/// cores slow.
#[cold]
#[inline(never)]
fn lock_contended(s: &AtomicU64) -> u64 {
    let mut spins = 0u32;
    loop {
        let v = s.load(Relaxed);
        if v & LOCKED == 0 && s.compare_exchange_weak(v, v | LOCKED, Acquire, Relaxed).is_ok() {
            return v;
        }
        spins += 1;
        if spins < 100 {
            core::hint::spin_loop();
        } else {
            // SAFETY: no preconditions.
            unsafe { libc::sched_yield() };
        }
    }
}

#[inline(always)]
fn unlock(s: &AtomicU64, clock: u64) {
    s.store(clock & CLOCK, Release);
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

/// Runs the atomic operation `f` under the stripe lock of `addr` and advances the
/// clocks (`t = max(thread, stripe) + 1`, `stripe = t`). Returns `f`'s result and the
/// new thread clock, 0 when ordering is off or the clock did not change.
#[inline(always)]
pub(crate) fn atomic<R>(addr: u64, f: impl FnOnce() -> R) -> (R, u64) {
    if mode() == NONE {
        return (f(), 0);
    }
    let st = ts();
    let me = owner(st);
    let th = st.lclock.get();
    let s = &STRIPES[index(addr)].0;
    let v = lock(s);
    let r = f();
    let c = v & CLOCK;
    let mine = me != 0 && v >> OWNER_SHIFT == me;
    let t = if c < th || (c == th && mine) { th } else { c + 1 };
    s.store(t | me << OWNER_SHIFT, Release);
    if t == th {
        return (r, 0);
    }
    st.lclock.set(t);
    (r, t)
}

/// Stamps an access of `len` bytes at `addr` (`MEMLENS_ORDER=atomic`): locks the
/// stripes of its lines in index order, advances the clocks, unlocks. Returns the new
/// thread clock.
pub(crate) fn stamp(st: &ThreadState, addr: u64, len: u64) -> u64 {
    let shift = SHIFT.load(Relaxed);
    let n = MASK.load(Relaxed) + 1;
    let first = (addr >> shift) as usize;
    let lines = ((addr.saturating_add(len.max(1) - 1) >> shift) as usize - first + 1).min(n);
    let start = first & (n - 1);
    // Stripes start..start+lines, wrapping: locked as [0, wrap) then [start, end).
    let end = (start + lines).min(n);
    let wrap = (start + lines).saturating_sub(n);
    let mut t = st.lclock.get();
    for i in (0..wrap).chain(start..end) {
        t = t.max(lock(&STRIPES[i].0) & CLOCK);
    }
    t += 1;
    for i in (0..wrap).chain(start..end) {
        unlock(&STRIPES[i].0, t);
    }
    st.lclock.set(t);
    t
}

/// A release-like operation on the object at `addr` (before the real call):
/// `stripe = max(stripe, thread)`.
pub(crate) fn release(addr: u64) {
    if mode() == NONE {
        return;
    }
    let st = ts();
    let s = &STRIPES[index(addr)].0;
    let c = lock(s) & CLOCK;
    unlock(s, c.max(st.lclock.get()));
}

/// An acquire-like operation on the object at `addr` (after the real call):
/// `thread = max(thread, stripe) + 1`; writes `Clock`.
pub(crate) fn acquire(addr: u64) {
    if mode() == NONE {
        return;
    }
    let st = ts();
    let s = &STRIPES[index(addr)].0;
    let v = lock(s);
    s.store(v, Release);
    let t = (v & CLOCK).max(st.lclock.get()) + 1;
    st.lclock.set(t);
    crate::record::clock(t);
}

/// A process-wide event (ROI begin/end): ordered after everything the calling thread
/// has seen and every earlier process-wide event. Writes `Clock`.
pub(crate) fn global() {
    if mode() == NONE {
        return;
    }
    let st = ts();
    let c = lock(&GLOBAL.0) & CLOCK;
    let t = c.max(st.lclock.get()) + 1;
    unlock(&GLOBAL.0, t);
    st.lclock.set(t);
    crate::record::clock(t);
}

/// The clock a new thread inherits from its creator (the creator ticks first).
pub(crate) fn fork_clock() -> u64 {
    if mode() == NONE {
        return 0;
    }
    let st = ts();
    let t = st.lclock.get() + 1;
    st.lclock.set(t);
    crate::record::clock(t);
    t
}

/// A new thread starts after its creator's `fork_clock`.
pub(crate) fn inherit(parent: u64) {
    if mode() == NONE {
        return;
    }
    let st = ts();
    let t = st.lclock.get().max(parent) + 1;
    st.lclock.set(t);
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
