//! The memlens annotation API for Rust programs: the same calls as `memlens.h`
//! (`memlens_register_thread`, `memlens_thread_name`, `memlens_roi_begin/end`,
//! `memlens_trace_on/off`), safe, and harmless no-ops when the program was not built
//! with `memlens cargo` (or runs without being recorded).
//!
//! The crate does not link the runtime. Each call looks the runtime's C symbol up
//! once with `dlsym(RTLD_DEFAULT, ...)` and caches the address in an atomic (stable
//! Rust has no weak linkage); when the symbol is absent every later call is one
//! relaxed load and a branch. `memlens cargo` exports the runtime's `memlens_*`
//! symbols from the executable so the lookup finds them.
//!
//! # Example
//! ```
//! use memlens_annotate as memlens;
//!
//! memlens::register_thread(7);
//! memlens::thread_name("main");
//! {
//!     let _roi = memlens::Roi::begin(); // memlens record --roi: only accesses in here
//!     let v: u64 = (0..10u64).sum();
//!     assert_eq!(v, 45);
//! } // roi_end
//! memlens::trace_off();
//! memlens::trace_on();
//! // Without the runtime linked (as in this doc test) nothing happened:
//! assert!(!memlens::runtime_present());
//! ```

use core::ffi::{c_char, c_long, c_void};
use core::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::ffi::CStr;

// Declared here rather than through the `libc` crate so that the crate has no
// dependencies at all (glibc has `dlsym` in libc proper since 2.34).
extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// glibc's `RTLD_DEFAULT`: search the global scope.
const RTLD_DEFAULT: *mut c_void = core::ptr::null_mut();

/// Not looked up yet.
const UNKNOWN: usize = 0;
/// Looked up and not found.
const ABSENT: usize = 1;

/// One runtime entry point: its name and the cached address.
struct Sym {
    name: &'static CStr,
    addr: AtomicUsize,
}

impl Sym {
    const fn new(name: &'static CStr) -> Sym {
        Sym { name, addr: AtomicUsize::new(UNKNOWN) }
    }

    /// The symbol's address, `None` when the runtime is not in the process.
    #[inline]
    fn get(&self) -> Option<usize> {
        match self.addr.load(Relaxed) {
            UNKNOWN => self.resolve(),
            ABSENT => None,
            a => Some(a),
        }
    }

    #[cold]
    fn resolve(&self) -> Option<usize> {
        // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the global scope.
        let p = unsafe { dlsym(RTLD_DEFAULT, self.name.as_ptr()) } as usize;
        // Racing threads store the same value, so a plain store is enough.
        self.addr.store(if p == 0 { ABSENT } else { p }, Relaxed);
        (p != 0).then_some(p)
    }
}

static REGISTER: Sym = Sym::new(c"memlens_register_thread");
static NAME: Sym = Sym::new(c"memlens_thread_name");
static ROI_BEGIN: Sym = Sym::new(c"memlens_roi_begin");
static ROI_END: Sym = Sym::new(c"memlens_roi_end");
static TRACE_ON: Sym = Sym::new(c"memlens_trace_on");
static TRACE_OFF: Sym = Sym::new(c"memlens_trace_off");

/// Calls a `void f(void)` entry point if present.
#[inline]
fn call0(s: &Sym) {
    if let Some(a) = s.get() {
        // SAFETY: the runtime defines this symbol as `extern "C" fn()`.
        let f: extern "C" fn() = unsafe { core::mem::transmute(a) };
        f();
    }
}

/// Whether the memlens runtime is linked into this process (the program was built
/// with `memlens cargo` / `memlens cc`). Recording additionally needs
/// `memlens record`; without it the runtime's entry points are no-ops too.
pub fn runtime_present() -> bool {
    ROI_BEGIN.get().is_some()
}

/// Tags the calling thread with a number of the program's choosing (`tr` in the
/// atomic-memory-trace dump, whose `tid` column then shows `id`; with
/// `memlens record --registered-only` only registered threads record accesses).
pub fn register_thread(id: i64) {
    if let Some(a) = REGISTER.get() {
        // SAFETY: `void memlens_register_thread(long)`; long is 64 bits on x86-64 Linux.
        let f: extern "C" fn(c_long) = unsafe { core::mem::transmute(a) };
        f(id as c_long);
    }
}

/// Names the calling thread in the trace (the OS thread name is not changed).
/// Names are cut at 255 bytes and at the first NUL.
pub fn thread_name(name: &str) {
    if let Some(a) = NAME.get() {
        let b = name.as_bytes();
        let n = b.iter().position(|&c| c == 0).unwrap_or(b.len()).min(255);
        let mut buf = [0u8; 256];
        buf[..n].copy_from_slice(&b[..n]);
        // SAFETY: `void memlens_thread_name(const char *)` with a NUL-terminated buffer.
        let f: extern "C" fn(*const c_char) = unsafe { core::mem::transmute(a) };
        f(buf.as_ptr().cast());
    }
}

/// Starts the region of interest (process-wide): with `memlens record --roi`,
/// memory accesses are recorded only inside it.
pub fn roi_begin() {
    call0(&ROI_BEGIN);
}

/// Ends the region of interest.
pub fn roi_end() {
    call0(&ROI_END);
}

/// Resumes recording accesses and function events (process-wide).
pub fn trace_on() {
    call0(&TRACE_ON);
}

/// Stops recording accesses and function events (process-wide); allocations and
/// thread events are still recorded.
pub fn trace_off() {
    call0(&TRACE_OFF);
}

/// The region of interest as a scope: [`roi_begin`] now, [`roi_end`] on drop.
#[must_use = "the region ends when the guard is dropped"]
pub struct Roi(());

impl Roi {
    /// Begins the region of interest.
    pub fn begin() -> Roi {
        roi_begin();
        Roi(())
    }
}

impl Drop for Roi {
    fn drop(&mut self) {
        roi_end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_runtime_is_cached_as_absent() {
        assert!(!runtime_present());
        assert_eq!(ROI_BEGIN.addr.load(Relaxed), ABSENT);
        register_thread(3);
        thread_name("a\0b");
        let _r = Roi::begin();
        assert_eq!(REGISTER.addr.load(Relaxed), ABSENT);
    }

    #[test]
    fn present_symbols_are_found_and_cached() {
        // Any exported C symbol of the process resolves the same way.
        let s = Sym::new(c"malloc");
        let a = s.get().expect("malloc is in the global scope");
        assert_eq!(s.addr.load(Relaxed), a);
        assert_eq!(s.get(), Some(a));
    }
}
