//! Clocks under QEMU: one global order lock and a Lamport clock.
//!
//! By default (`--order sync`) only synchronisation points are stamped: every
//! atomic instruction of traced code (LOCK-prefixed or `xchg` with memory, the
//! lock held from before the instruction to its memory callback, so the stamps of
//! the atomics follow their real order), a thread's creation (the new thread
//! starts with its creator's stamp) and exit, and the guest preload library's
//! pthread interposers (mutexes, condition variables, barriers, semaphores,
//! create/join: stamped before a release, after an acquire). `dump --merged` then
//! gives an order consistent with synchronisation, as in the compiled path.
//!
//! `--order=atomic` stamps every access:
//! QEMU 7.2 tells a plugin the address of an access only after the access, so the
//! lock cannot be striped by address as in the compiled path
//! (`memlens-rt`'s `order.rs`): it is one lock, taken by an execution callback
//! before every instruction of traced code that may access memory and released
//! after the instruction's memory callback (or at the next block, translation or
//! system call when the instruction made no access). Each access is stamped under
//! the lock, so the stamps of all recorded accesses follow the order in which they
//! really happened. A thread keeps its stamp while no other thread stamped since
//! (`Clock` is written only when the stamp changes), so the events of a
//! single-threaded phase cost nothing extra in the trace.
//!
//! A thread that cannot get the lock for a long time ([`PATIENCE`]) goes on without
//! it rather than deadlock against QEMU's own stop-the-world operations
//! (`start_exclusive`); those accesses are counted and reported at exit.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::time::{Duration, Instant};

static ON: AtomicBool = AtomicBool::new(false);
/// Synchronisation points are stamped (the default; off with `--order none`).
static SYNC: AtomicBool = AtomicBool::new(true);
static LOCK: AtomicBool = AtomicBool::new(false);
/// The global clock: the last stamp handed out.
static CLOCK: AtomicU64 = AtomicU64::new(0);
/// The stream that handed out the last stamp.
static OWNER: AtomicU32 = AtomicU32::new(u32::MAX);
/// Lock waits that gave up.
pub static GAVE_UP: AtomicU64 = AtomicU64::new(0);

/// How long a thread waits for the order lock before it goes on without it.
const PATIENCE: Duration = Duration::from_secs(2);

/// Turns `--order=atomic` on (at start-up).
pub fn enable() {
    ON.store(true, SeqCst);
}

/// `--order none`: no clocks at all.
pub fn disable_sync() {
    SYNC.store(false, SeqCst);
}

/// Whether synchronisation points (atomic instructions, thread start and exit, the
/// preload library's pthread interposers) are stamped: the default `sync` order
/// and `atomic`.
#[inline(always)]
pub fn sync() -> bool {
    SYNC.load(Relaxed)
}

/// Whether `--order=atomic` is on.
#[inline(always)]
pub fn on() -> bool {
    ON.load(Relaxed)
}

/// Takes the order lock; `false` if it gave up waiting.
#[inline(always)]
pub fn lock() -> bool {
    if LOCK.compare_exchange_weak(false, true, Acquire, Relaxed).is_ok() {
        return true;
    }
    lock_slow()
}

#[cold]
fn lock_slow() -> bool {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if !LOCK.load(Relaxed) && LOCK.compare_exchange_weak(false, true, Acquire, Relaxed).is_ok()
        {
            return true;
        }
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            // More guest threads than cores: let the holder run.
            std::thread::yield_now();
            if spins.is_multiple_of(1024) && start.elapsed() > PATIENCE {
                GAVE_UP.fetch_add(1, Relaxed);
                return false;
            }
        }
    }
}

/// Releases the order lock.
#[inline(always)]
pub fn unlock() {
    LOCK.store(false, Release);
}

/// The stamp of thread `me` whose last stamp was `mine` (lock held): the same
/// stamp while nobody else stamped since, else one past the global clock. A new
/// thread starts with its creator's stamp but does not own it.
#[inline(always)]
pub fn tick(mine: u64, me: u32) -> u64 {
    let g = CLOCK.load(Relaxed);
    if g == mine && mine != 0 && OWNER.load(Relaxed) == me {
        return mine;
    }
    let t = g.max(mine) + 1;
    CLOCK.store(t, Relaxed);
    OWNER.store(me, Relaxed);
    t
}
