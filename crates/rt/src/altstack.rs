//! An alternate signal stack for every recorded thread, so the crash handler
//! (installed with `SA_ONSTACK`) can run and flush the trace after a stack
//! overflow. A thread that already has one (set by the program, or by Rust's std)
//! keeps it.

use core::cell::Cell;

/// Usable size: the crash path formats metadata and reads `/proc/self/maps`.
const SIZE: usize = 256 << 10;
/// Guard page below the stack, so an overflow of the handler itself faults cleanly.
const GUARD: usize = 4096;

thread_local! {
    /// The mapping this thread installed (guard page included), or 0.
    static MINE: Cell<usize> = const { Cell::new(0) };
}

fn current() -> Option<libc::stack_t> {
    // SAFETY: valid out-pointer; a null new stack only queries.
    unsafe {
        let mut ss: libc::stack_t = core::mem::zeroed();
        (libc::sigaltstack(core::ptr::null(), &mut ss) == 0).then_some(ss)
    }
}

/// Gives the calling thread an alternate signal stack unless it has one.
pub(crate) fn install() {
    if MINE.with(Cell::get) != 0 || current().is_none_or(|ss| ss.ss_flags & libc::SS_DISABLE == 0) {
        return;
    }
    let base = crate::sys::map(SIZE + GUARD);
    if base.is_null() {
        return;
    }
    // SAFETY: a fresh mapping of SIZE + GUARD bytes, used by this thread only.
    unsafe {
        libc::mprotect(base.cast(), GUARD, libc::PROT_NONE);
        let ss = libc::stack_t { ss_sp: base.add(GUARD).cast(), ss_flags: 0, ss_size: SIZE };
        if libc::sigaltstack(&ss, core::ptr::null_mut()) != 0 {
            crate::sys::unmap(base, SIZE + GUARD);
            return;
        }
    }
    MINE.with(|m| m.set(base as usize));
}

/// At thread exit: takes the stack down and frees it (left alone if a handler is
/// running on it).
pub(crate) fn remove() {
    let base = MINE.with(Cell::get);
    if base == 0 {
        return;
    }
    let Some(ss) = current() else { return };
    if ss.ss_flags & libc::SS_ONSTACK != 0 {
        return;
    }
    if ss.ss_sp as usize == base + GUARD {
        let off =
            libc::stack_t { ss_sp: core::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
        // SAFETY: disabling this thread's alternate stack, which is not in use.
        if unsafe { libc::sigaltstack(&off, core::ptr::null_mut()) } != 0 {
            return;
        }
    }
    MINE.with(|m| m.set(0));
    // SAFETY: mapped in `install`; no longer installed (the program may have put
    // its own in place meanwhile).
    unsafe { crate::sys::unmap(base as *mut u8, SIZE + GUARD) };
}
