//! The annotation API, declared for C and C++ in `include/memlens.h` and callable
//! from Rust through the safe functions below. Every call is a cheap no-op when the
//! program runs without `MEMLENS_OUTPUT`.

use crate::record;
use crate::state::{kick_all, Guard, ROI_ON, TRACING};
use core::sync::atomic::Ordering::SeqCst;
use libc::{c_char, c_long};
use memlens_format::Event;

/// Names the calling thread with a number of the program's choosing
/// (`RegisterThread` event).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn memlens_register_thread(id: c_long) {
    crate::state::ts().registered.set(true);
    record::control(Event::RegisterThread(id));
}

/// Names the calling thread in the trace (`ThreadName` event; the OS name is not
/// changed).
///
/// # Safety
/// `name` must be null or a NUL-terminated string.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn memlens_thread_name(name: *const c_char) {
    if name.is_null() {
        return;
    }
    let n = {
        let _g = Guard::new();
        let b = std::ffi::CStr::from_ptr(name).to_bytes();
        String::from_utf8_lossy(&b[..b.len().min(255)]).into_owned()
    };
    record::control(Event::ThreadName(n));
}

/// Starts the region of interest: with `MEMLENS_ROI=1`, accesses are recorded only
/// inside it (process-wide).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn memlens_roi_begin() {
    ROI_ON.store(true, SeqCst);
    kick_all();
    crate::order::global();
    record::control(Event::Roi(true));
}

/// Ends the region of interest.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn memlens_roi_end() {
    crate::order::global();
    record::control(Event::Roi(false));
    ROI_ON.store(false, SeqCst);
    kick_all();
}

/// Resumes recording accesses and function events (process-wide).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn memlens_trace_on() {
    TRACING.store(true, SeqCst);
    kick_all();
    record::control(Event::Tracing(true));
}

/// Stops recording accesses and function events (process-wide); allocations and
/// thread events are still recorded.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn memlens_trace_off() {
    record::control(Event::Tracing(false));
    TRACING.store(false, SeqCst);
    kick_all();
}

/// Rust: [`memlens_register_thread`].
pub fn register_thread(id: i64) {
    memlens_register_thread(id as c_long);
}

/// Rust: [`memlens_thread_name`].
pub fn thread_name(name: &str) {
    let n = {
        let _g = Guard::new();
        name.chars().take(255).collect::<String>()
    };
    record::control(Event::ThreadName(n));
}

/// Rust: [`memlens_roi_begin`].
pub fn roi_begin() {
    memlens_roi_begin();
}

/// Rust: [`memlens_roi_end`].
pub fn roi_end() {
    memlens_roi_end();
}

/// Rust: [`memlens_trace_on`].
pub fn trace_on() {
    memlens_trace_on();
}

/// Rust: [`memlens_trace_off`].
pub fn trace_off() {
    memlens_trace_off();
}
