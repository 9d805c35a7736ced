//! Thin wrappers over the system calls the runtime needs: ids, clocks, futexes,
//! anonymous mappings, positioned writes and a spin lock that can give up.

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering::*};
use libc::c_int;

pub(crate) fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

pub(crate) fn getpid() -> u32 {
    // SAFETY: getpid cannot fail.
    unsafe { libc::getpid() as u32 }
}

fn clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer; clock_gettime goes through the vDSO.
    unsafe { libc::clock_gettime(id, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// Monotonic nanoseconds (chunk clocks, timeouts).
pub(crate) fn monotonic_ns() -> u64 {
    clock(libc::CLOCK_MONOTONIC)
}

/// Wall-clock nanoseconds since the epoch (the file header's start time).
pub(crate) fn realtime_ns() -> u64 {
    clock(libc::CLOCK_REALTIME)
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec { tv_sec: (ns / 1_000_000_000) as _, tv_nsec: (ns % 1_000_000_000) as _ }
}

/// Sleeps while `word == expected`, at most `timeout_ns`.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout_ns: u64) {
    let ts = timespec(timeout_ns);
    // SAFETY: the futex word outlives the call; a timeout or a changed value just returns.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes every waiter of `word`.
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: as above.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}

pub(crate) fn sleep_ns(ns: u64) {
    let ts = timespec(ns);
    // SAFETY: valid timespec; an interrupted sleep just returns early.
    unsafe { libc::nanosleep(&ts, core::ptr::null_mut()) };
}

/// An anonymous private mapping whose pages are only committed when touched, or null.
pub(crate) fn map(len: usize) -> *mut u8 {
    // SAFETY: a fresh anonymous mapping aliases nothing.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        core::ptr::null_mut()
    } else {
        p.cast()
    }
}

/// # Safety
/// `p..p+len` must be a mapping from [`map`] that nothing uses any more.
pub(crate) unsafe fn unmap(p: *mut u8, len: usize) {
    libc::munmap(p.cast(), len);
}

/// Writes all of `buf` at `off`; `Err(errno)` on failure (a partial write may remain).
pub(crate) fn pwrite_all(fd: c_int, mut buf: &[u8], mut off: u64) -> Result<(), i32> {
    while !buf.is_empty() {
        // SAFETY: `buf` is a valid slice.
        let n = unsafe { libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), off as libc::off_t) };
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(libc::ENOSPC);
        }
        buf = &buf[n as usize..];
        off += n as u64;
    }
    Ok(())
}

pub(crate) fn errno() -> i32 {
    // SAFETY: __errno_location always returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// Prints `memlens: <parts...>` on stderr without allocating.
pub(crate) fn warn(parts: &[&str]) {
    let mut all: [&[u8]; 8] = [b""; 8];
    all[0] = b"memlens: ";
    let mut n = 1;
    for p in parts.iter().take(6) {
        all[n] = p.as_bytes();
        n += 1;
    }
    all[n] = b"\n";
    for s in &all[..=n] {
        // SAFETY: writing a valid slice to fd 2; errors are ignored on purpose.
        unsafe { libc::write(2, s.as_ptr().cast(), s.len()) };
    }
}

/// A test-and-set lock for the trace file. Holders only do a few syscalls, and the
/// crash path must be able to give up instead of deadlocking on a dead holder.
pub(crate) struct SpinLock(AtomicBool);

impl SpinLock {
    pub(crate) const fn new() -> SpinLock {
        SpinLock(AtomicBool::new(false))
    }

    fn try_lock(&self) -> bool {
        !self.0.load(Relaxed) && !self.0.swap(true, Acquire)
    }

    pub(crate) fn lock(&self) {
        let mut spins = 0u32;
        while !self.try_lock() {
            spins += 1;
            if spins < 64 {
                core::hint::spin_loop();
            } else {
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
    }

    /// Takes the lock, or gives up after `ns` and returns false.
    pub(crate) fn lock_for(&self, ns: u64) -> bool {
        let deadline = monotonic_ns() + ns;
        while !self.try_lock() {
            if monotonic_ns() > deadline {
                return false;
            }
            // SAFETY: no preconditions.
            unsafe { libc::sched_yield() };
        }
        true
    }

    pub(crate) fn unlock(&self) {
        self.0.store(false, Release);
    }
}

/// Formats an unsigned integer into `buf` without allocating.
pub(crate) fn fmt_u64(mut v: u64, buf: &mut [u8; 20]) -> &str {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    core::str::from_utf8(&buf[i..]).unwrap_or("?")
}

/// The thread pointer (`%fs` base): glibc keeps it at `%fs:0`.
pub(crate) fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: reads the TCB self-pointer, always present on x86_64 glibc.
    unsafe {
        core::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags))
    };
    tp
}

/// Blocks every asynchronous signal in the calling thread (faults stay deliverable:
/// blocking them would kill the process on the first one). Returns the old mask.
pub(crate) fn block_async_signals() -> libc::sigset_t {
    // SAFETY: plain sigset manipulation on local sets.
    unsafe {
        let mut all: libc::sigset_t = core::mem::zeroed();
        libc::sigfillset(&mut all);
        for s in
            [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL, libc::SIGTRAP, libc::SIGSYS]
        {
            libc::sigdelset(&mut all, s);
        }
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        old
    }
}

/// Restores a mask saved by [`block_async_signals`].
pub(crate) fn set_signal_mask(old: &libc::sigset_t) {
    // SAFETY: `old` is a valid set.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, core::ptr::null_mut()) };
}
