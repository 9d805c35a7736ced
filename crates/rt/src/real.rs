//! The interposed functions' real implementations, found with `dlsym(RTLD_NEXT)`.
//!
//! The malloc family is reached through glibc's exported `__libc_*` entry points
//! instead, so looking symbols up (which may allocate) never recurses into itself.
//! A symbol asked for while this thread is already inside `dlsym` yields 0 and the
//! caller falls back to a simple built-in implementation.

use core::cell::Cell;
use core::sync::atomic::{AtomicUsize, Ordering::*};

macro_rules! reals {
    ([$($id:ident = $name:literal),* $(,)?] $($sync:ident = $ver:literal, $class:ident;)*) => {
        /// One interposed symbol: this module's own list, then the contract's
        /// synchronisation entry points.
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(Clone, Copy)]
        #[repr(usize)]
        pub(crate) enum R { $($id,)* $($sync,)* }
        const NAMES: &[&str] =
            &[$(concat!($name, "\0"),)* $(concat!(stringify!($sync), "\0"),)*];
    };
}

// This module's own symbols, then (appended by the contract) the synchronisation ones.
memlens_contract::sync_entry_points! { reals, [
    memcpy = "memcpy", memmove = "memmove", memset = "memset", memcmp = "memcmp", bcmp = "bcmp",
    strlen = "strlen", strnlen = "strnlen", strcpy = "strcpy", strncpy = "strncpy",
    strcat = "strcat", strncat = "strncat", strcmp = "strcmp", strncmp = "strncmp",
    strchr = "strchr", strrchr = "strrchr", pthread_create = "pthread_create",
    pthread_exit = "pthread_exit", pthread_setname_np = "pthread_setname_np", fork = "fork",
    dlopen = "dlopen", execve = "execve", execv = "execv", execvp = "execvp", execvpe = "execvpe",
    _exit = "_exit", _Exit = "_Exit", new = "_Znwm", new_array = "_Znam",
    new_nothrow = "_ZnwmRKSt9nothrow_t", new_array_nothrow = "_ZnamRKSt9nothrow_t",
    new_aligned = "_ZnwmSt11align_val_t", new_array_aligned = "_ZnamSt11align_val_t",
    new_aligned_nothrow = "_ZnwmSt11align_val_tRKSt9nothrow_t",
    new_array_aligned_nothrow = "_ZnamSt11align_val_tRKSt9nothrow_t", delete = "_ZdlPv",
    delete_array = "_ZdaPv", delete_sized = "_ZdlPvm", delete_array_sized = "_ZdaPvm",
    delete_aligned = "_ZdlPvSt11align_val_t", delete_array_aligned = "_ZdaPvSt11align_val_t",
    delete_sized_aligned = "_ZdlPvmSt11align_val_t",
    delete_array_sized_aligned = "_ZdaPvmSt11align_val_t", delete_nothrow = "_ZdlPvRKSt9nothrow_t",
    delete_array_nothrow = "_ZdaPvRKSt9nothrow_t",
    delete_aligned_nothrow = "_ZdlPvSt11align_val_tRKSt9nothrow_t",
    delete_array_aligned_nothrow = "_ZdaPvSt11align_val_tRKSt9nothrow_t", close = "close",
    dup = "dup", dup2 = "dup2", dup3 = "dup3", fcntl = "fcntl", fcntl64 = "fcntl64",
    close_range = "close_range", closefrom = "closefrom", sigaction = "sigaction",
] }

const COUNT: usize = NAMES.len();
static PTRS: [AtomicUsize; COUNT] = [const { AtomicUsize::new(0) }; COUNT];

thread_local! {
    static RESOLVING: Cell<bool> = const { Cell::new(false) };
}

/// The real function's address, or 0 if it cannot be found (yet).
#[inline]
pub(crate) fn get(r: R) -> usize {
    let v = PTRS[r as usize].load(Relaxed);
    if v != 0 {
        v
    } else {
        resolve(r)
    }
}

#[cold]
fn resolve(r: R) -> usize {
    RESOLVING.with(|busy| {
        if busy.get() {
            return 0;
        }
        busy.set(true);
        let name = NAMES[r as usize];
        // The version the contract asks for (the current condition variables, not
        // the pre-2.3.2 ones `dlsym` could find).
        let version = memlens_contract::entry::version_of(name.trim_end_matches('\0'));
        let p = if let Some(v) = version.filter(|v| v.len() < 31) {
            let mut buf = [0u8; 32];
            buf[..v.len()].copy_from_slice(v.as_bytes());
            // SAFETY: NUL-terminated strings.
            unsafe { libc::dlvsym(libc::RTLD_NEXT, name.as_ptr().cast(), buf.as_ptr().cast()) }
        } else {
            // SAFETY: NUL-terminated.
            unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) }
        } as usize;
        busy.set(false);
        if p != 0 {
            PTRS[r as usize].store(p, Relaxed);
        }
        p
    })
}

/// Looks everything up once, early, so later calls never enter the loader.
pub(crate) fn resolve_all() {
    for (i, p) in PTRS.iter().enumerate() {
        if p.load(Relaxed) == 0 {
            // SAFETY: `i < COUNT`, the discriminants are 0..COUNT.
            resolve(unsafe { core::mem::transmute::<usize, R>(i) });
        }
    }
}

extern "C" {
    pub(crate) fn __libc_malloc(size: usize) -> *mut libc::c_void;
    pub(crate) fn __libc_calloc(n: usize, size: usize) -> *mut libc::c_void;
    pub(crate) fn __libc_realloc(p: *mut libc::c_void, size: usize) -> *mut libc::c_void;
    pub(crate) fn __libc_free(p: *mut libc::c_void);
    pub(crate) fn __libc_memalign(align: usize, size: usize) -> *mut libc::c_void;
    pub(crate) fn __libc_valloc(size: usize) -> *mut libc::c_void;
    pub(crate) fn __libc_pvalloc(size: usize) -> *mut libc::c_void;
}

/// Byte-by-byte fallbacks for the window in which `dlsym` itself is running. They
/// use `rep` string instructions so the compiler cannot turn them back into calls to
/// the very functions being interposed.
pub(crate) mod fallback {
    /// # Safety
    /// As `memcpy`.
    pub(crate) unsafe fn copy(dst: *mut u8, src: *const u8, n: usize) {
        core::arch::asm!("rep movsb", inout("rcx") n => _, inout("rdi") dst => _,
            inout("rsi") src => _, options(nostack, preserves_flags));
    }

    /// # Safety
    /// As `memmove`.
    pub(crate) unsafe fn mov(dst: *mut u8, src: *const u8, n: usize) {
        if (dst as usize) <= (src as usize) || (dst as usize) >= (src as usize) + n {
            copy(dst, src, n);
        } else if n > 0 {
            core::arch::asm!("std", "rep movsb", "cld", inout("rcx") n => _,
                inout("rdi") dst.add(n - 1) => _, inout("rsi") src.add(n - 1) => _,
                options(nostack));
        }
    }

    /// # Safety
    /// As `memset`.
    pub(crate) unsafe fn set(dst: *mut u8, c: u8, n: usize) {
        core::arch::asm!("rep stosb", inout("rcx") n => _, inout("rdi") dst => _,
            in("al") c, options(nostack, preserves_flags));
    }

    /// # Safety
    /// `s` must be NUL-terminated.
    pub(crate) unsafe fn strlen(s: *const u8) -> usize {
        let mut n = 0;
        while core::ptr::read_volatile(s.add(n)) != 0 {
            n += 1;
        }
        n
    }
}
