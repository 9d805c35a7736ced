//! The ThreadSanitizer ABI: plain, unaligned, volatile and range accesses,
//! memory intrinsics, function entry/exit, vtable pointers, fences and `__tsan_init`.
//! (Atomics are in [`crate::atomics`].)

use crate::strings::{real_memcpy, real_memmove, real_memset};
use crate::{livewatch, record};
use memlens_format::codec::access_tag;
use memlens_format::AccessKind::{Read, Write};

pub(crate) const R0: u8 = access_tag(Read, false, 0);
pub(crate) const R1: u8 = access_tag(Read, false, 1);
pub(crate) const R2: u8 = access_tag(Read, false, 2);
pub(crate) const R3: u8 = access_tag(Read, false, 3);
pub(crate) const R4: u8 = access_tag(Read, false, 4);
pub(crate) const W0: u8 = access_tag(Write, false, 0);
pub(crate) const W1: u8 = access_tag(Write, false, 1);
pub(crate) const W2: u8 = access_tag(Write, false, 2);
pub(crate) const W3: u8 = access_tag(Write, false, 3);
pub(crate) const W4: u8 = access_tag(Write, false, 4);

/// `(addr, return address)`: one load or store.
pub(crate) unsafe extern "C" fn imp_access<const TAG: u8>(addr: usize, pc: usize) {
    // A live watch probe is rare: its check is a tail call out of line, so the
    // common path keeps no registers of its own (no stack frame, no pushes).
    if livewatch::on() {
        return watched_access::<TAG>(addr, pc);
    }
    record::access::<TAG>(pc as u64, addr as u64);
}

#[cold]
#[inline(never)]
unsafe extern "C" fn watched_access<const TAG: u8>(addr: usize, pc: usize) {
    livewatch::access(TAG, addr, pc);
    record::access::<TAG>(pc as u64, addr as u64);
}

unsafe extern "C" fn imp_range<const WRITE: bool>(addr: usize, len: usize, pc: usize) {
    if livewatch::on() {
        livewatch::range(WRITE, addr, len, pc);
    }
    record::range(WRITE, pc as u64, addr as u64, len as u64, true);
}

/// A copy reads `src` and writes `dst`, for a watch probe.
#[inline(always)]
fn watch_copy(dst: usize, src: usize, n: usize, pc: usize) {
    if livewatch::on() {
        livewatch::range(false, src, n, pc);
        livewatch::range(true, dst, n, pc);
    }
}

unsafe extern "C" fn imp_memcpy(dst: *mut u8, src: *const u8, n: usize, pc: usize) -> *mut u8 {
    watch_copy(dst as usize, src as usize, n, pc);
    record::copy(pc as u64, dst as u64, src as u64, n as u64, true);
    real_memcpy(dst, src, n)
}

unsafe extern "C" fn imp_memmove(dst: *mut u8, src: *const u8, n: usize, pc: usize) -> *mut u8 {
    watch_copy(dst as usize, src as usize, n, pc);
    record::copy(pc as u64, dst as u64, src as u64, n as u64, true);
    real_memmove(dst, src, n)
}

unsafe extern "C" fn imp_memset(dst: *mut u8, c: i32, n: usize, pc: usize) -> *mut u8 {
    if livewatch::on() {
        livewatch::range(true, dst as usize, n, pc);
    }
    record::range(true, pc as u64, dst as u64, n as u64, true);
    real_memset(dst, c, n)
}

unsafe extern "C" fn imp_func_entry(call_site: usize, pc: usize, sp: usize, frame: usize) {
    let call_site = crate::calls::real_return(call_site as u64);
    record::func_enter(pc as u64, call_site, sp, frame as u64);
}

unsafe extern "C" fn imp_func_exit(pc: usize, sp: usize) {
    record::func_exit(pc as u64, sp);
}

unsafe extern "C" fn imp_vptr_update(slot: usize, _new: usize, pc: usize) {
    record::access::<W3>(pc as u64, slot as u64);
}

unsafe extern "C" fn imp_thread_fence(mo: i32, pc: usize) {
    crate::atomics::thread_fence(mo);
    record::fence(pc as u64, (mo & 7) as u8);
}

unsafe extern "C" fn imp_signal_fence(mo: i32, pc: usize) {
    crate::atomics::signal_fence(mo);
    record::fence(pc as u64, (mo & 7) as u8);
}

macro_rules! accesses {
    ($($name:ident = $tag:ident),* $(,)?) => {$(
        entry!("C" fn $name = stringify!($name); (addr: usize);
            ["mov rsi, qword ptr [rsp]"] => imp_access::<$tag>);
    )*};
}

accesses! {
    __tsan_read1 = R0, __tsan_read2 = R1, __tsan_read4 = R2, __tsan_read8 = R3,
    __tsan_read16 = R4,
    __tsan_write1 = W0, __tsan_write2 = W1, __tsan_write4 = W2, __tsan_write8 = W3,
    __tsan_write16 = W4,
    __tsan_unaligned_read2 = R1, __tsan_unaligned_read4 = R2, __tsan_unaligned_read8 = R3,
    __tsan_unaligned_read16 = R4,
    __tsan_unaligned_write2 = W1, __tsan_unaligned_write4 = W2,
    __tsan_unaligned_write8 = W3, __tsan_unaligned_write16 = W4,
    __tsan_volatile_read1 = R0, __tsan_volatile_read2 = R1, __tsan_volatile_read4 = R2,
    __tsan_volatile_read8 = R3, __tsan_volatile_read16 = R4,
    __tsan_volatile_write1 = W0, __tsan_volatile_write2 = W1,
    __tsan_volatile_write4 = W2, __tsan_volatile_write8 = W3,
    __tsan_volatile_write16 = W4,
    __tsan_vptr_read = R3,
}

macro_rules! accesses_pc {
    ($($name:ident = $tag:ident),* $(,)?) => {$(
        /// Variant with an explicit code address.
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub unsafe extern "C" fn $name(addr: usize, pc: usize) {
            imp_access::<$tag>(addr, pc)
        }
    )*};
}

accesses_pc! {
    __tsan_read1_pc = R0, __tsan_read2_pc = R1, __tsan_read4_pc = R2, __tsan_read8_pc = R3,
    __tsan_read16_pc = R4,
    __tsan_write1_pc = W0, __tsan_write2_pc = W1, __tsan_write4_pc = W2,
    __tsan_write8_pc = W3, __tsan_write16_pc = W4,
}

entry!("C" fn __tsan_read_range = "__tsan_read_range"; (addr: usize, size: usize);
    ["mov rdx, qword ptr [rsp]"] => imp_range::<false>);
entry!("C" fn __tsan_write_range = "__tsan_write_range"; (addr: usize, size: usize);
    ["mov rdx, qword ptr [rsp]"] => imp_range::<true>);
entry!("C" fn __tsan_memcpy = "__tsan_memcpy"; (d: *mut u8, s: *const u8, n: usize) -> *mut u8;
    ["mov rcx, qword ptr [rsp]"] => imp_memcpy);
entry!("C" fn __tsan_memmove = "__tsan_memmove"; (d: *mut u8, s: *const u8, n: usize) -> *mut u8;
    ["mov rcx, qword ptr [rsp]"] => imp_memmove);
entry!("C" fn __tsan_memset = "__tsan_memset"; (d: *mut u8, c: i32, n: usize) -> *mut u8;
    ["mov rcx, qword ptr [rsp]"] => imp_memset);
entry!("C" fn __tsan_func_entry = "__tsan_func_entry"; (call_pc: usize);
    ["mov rsi, qword ptr [rsp]", "mov rdx, rsp", "mov rcx, rbp"] => imp_func_entry);
entry!("C" fn __tsan_func_exit = "__tsan_func_exit"; ();
    ["mov rdi, qword ptr [rsp]", "mov rsi, rsp"] => imp_func_exit);
entry!("C" fn __tsan_vptr_update = "__tsan_vptr_update"; (slot: usize, new: usize);
    ["mov rdx, qword ptr [rsp]"] => imp_vptr_update);
entry!("C" fn __tsan_atomic_thread_fence = "__tsan_atomic_thread_fence"; (mo: i32);
    ["mov rsi, qword ptr [rsp]"] => imp_thread_fence);
entry!("C" fn __tsan_atomic_signal_fence = "__tsan_atomic_signal_fence"; (mo: i32);
    ["mov rsi, qword ptr [rsp]"] => imp_signal_fence);

/// Called by every instrumented module's constructor; idempotent.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn __tsan_init() {
    crate::process::ensure_init();
}

/// Race-detector annotations with nothing to record.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn __tsan_acquire(_addr: usize) {}

/// See [`__tsan_acquire`].
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn __tsan_release(_addr: usize) {}

/// See [`__tsan_acquire`].
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn __tsan_ignore_thread_begin() {}

/// See [`__tsan_acquire`].
#[cfg_attr(not(test), unsafe(no_mangle))]
pub extern "C" fn __tsan_ignore_thread_end() {}
