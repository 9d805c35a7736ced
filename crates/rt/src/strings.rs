//! libc `mem*`/`str*` interposers: the real function does the work, the bytes it
//! reads and writes are recorded as ranges. gcc's TSan pass leaves these as libc
//! calls (and so do both compilers for `strlen` & co.); copies the compiler inlines
//! as plain instructions stay invisible. Lengths are those the function's contract
//! implies (`memcmp` is recorded as reading all `n` bytes of both sides).
//!
//! The runtime's own Rust code calls `memcpy` too: it runs with the guard held, so
//! the interposer just forwards.

use crate::real::{self, fallback, R};
use crate::record;
use libc::{c_char, c_int, c_void};
use memlens_format::AllocKind;

type F3 = unsafe extern "C" fn(usize, usize, usize) -> usize;

#[inline(always)]
unsafe fn call(r: R, a: usize, b: usize, c: usize) -> usize {
    let f = real::get(r);
    if f == 0 {
        unresolved(r, a, b, c)
    } else {
        core::mem::transmute::<usize, F3>(f)(a, b, c)
    }
}

#[cold]
unsafe fn unresolved(r: R, a: usize, b: usize, c: usize) -> usize {
    match r {
        R::memcpy => fallback::copy(a as *mut u8, b as *const u8, c),
        R::memmove => fallback::mov(a as *mut u8, b as *const u8, c),
        R::memset => fallback::set(a as *mut u8, b as u8, c),
        R::strlen => return fallback::strlen(a as *const u8),
        _ => {
            crate::sys::warn(&["a libc string function could not be resolved"]);
            libc::abort();
        }
    }
    a
}

/// The real `memcpy` (the runtime's own copies and `__tsan_memcpy`).
pub(crate) unsafe fn real_memcpy(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
    call(R::memcpy, d as usize, s as usize, n) as *mut u8
}

/// The real `memmove`.
pub(crate) unsafe fn real_memmove(d: *mut u8, s: *const u8, n: usize) -> *mut u8 {
    call(R::memmove, d as usize, s as usize, n) as *mut u8
}

/// The real `memset`.
pub(crate) unsafe fn real_memset(d: *mut u8, c: i32, n: usize) -> *mut u8 {
    call(R::memset, d as usize, c as usize, n) as *mut u8
}

unsafe fn real_strlen(s: usize) -> usize {
    call(R::strlen, s, 0, 0)
}

unsafe fn real_strnlen(s: usize, n: usize) -> usize {
    call(R::strnlen, s, n, 0)
}

fn read(pc: usize, addr: usize, len: usize) {
    // SAFETY: recording only.
    unsafe { record::range(false, pc as u64, addr as u64, len as u64, false) };
}

fn write(pc: usize, addr: usize, len: usize) {
    // SAFETY: recording only.
    unsafe { record::range(true, pc as u64, addr as u64, len as u64, false) };
}

/// Bytes `strcmp`/`strncmp` examined: up to the first difference or NUL, at most `n`.
unsafe fn cmp_len(a: usize, b: usize, n: usize) -> usize {
    let mut i = 0;
    while i < n {
        let x = core::ptr::read_volatile((a + i) as *const u8);
        let y = core::ptr::read_volatile((b + i) as *const u8);
        i += 1;
        if x != y || x == 0 {
            break;
        }
    }
    i
}

unsafe extern "C" fn memcpy_imp(d: usize, s: usize, n: usize, pc: usize) -> usize {
    record::copy(pc as u64, d as u64, s as u64, n as u64, false);
    call(R::memcpy, d, s, n)
}

unsafe extern "C" fn memmove_imp(d: usize, s: usize, n: usize, pc: usize) -> usize {
    record::copy(pc as u64, d as u64, s as u64, n as u64, false);
    call(R::memmove, d, s, n)
}

unsafe extern "C" fn memset_imp(d: usize, c: usize, n: usize, pc: usize) -> usize {
    write(pc, d, n);
    call(R::memset, d, c, n)
}

unsafe extern "C" fn memcmp_imp(a: usize, b: usize, n: usize, pc: usize) -> usize {
    let r = call(R::memcmp, a, b, n);
    read(pc, a, n);
    read(pc, b, n);
    r
}

unsafe extern "C" fn bcmp_imp(a: usize, b: usize, n: usize, pc: usize) -> usize {
    let r = call(R::bcmp, a, b, n);
    read(pc, a, n);
    read(pc, b, n);
    r
}

unsafe extern "C" fn strlen_imp(s: usize, _: usize, _: usize, pc: usize) -> usize {
    let n = real_strlen(s);
    read(pc, s, n + 1);
    n
}

unsafe extern "C" fn strnlen_imp(s: usize, max: usize, _: usize, pc: usize) -> usize {
    let n = real_strnlen(s, max);
    read(pc, s, (n + 1).min(max));
    n
}

unsafe extern "C" fn strcpy_imp(d: usize, s: usize, _: usize, pc: usize) -> usize {
    let n = real_strlen(s) + 1;
    record::copy(pc as u64, d as u64, s as u64, n as u64, false);
    call(R::strcpy, d, s, 0)
}

unsafe extern "C" fn strncpy_imp(d: usize, s: usize, n: usize, pc: usize) -> usize {
    let l = real_strnlen(s, n);
    record::before_op();
    read(pc, s, (l + 1).min(n));
    write(pc, d, n);
    call(R::strncpy, d, s, n)
}

unsafe extern "C" fn strcat_imp(d: usize, s: usize, _: usize, pc: usize) -> usize {
    let (dl, sl) = (real_strlen(d), real_strlen(s));
    record::before_op();
    read(pc, d, dl + 1);
    read(pc, s, sl + 1);
    write(pc, d + dl, sl + 1);
    call(R::strcat, d, s, 0)
}

unsafe extern "C" fn strncat_imp(d: usize, s: usize, n: usize, pc: usize) -> usize {
    let (dl, sl) = (real_strlen(d), real_strnlen(s, n));
    record::before_op();
    read(pc, d, dl + 1);
    read(pc, s, if sl < n { sl + 1 } else { sl });
    write(pc, d + dl, sl + 1);
    call(R::strncat, d, s, n)
}

unsafe extern "C" fn strcmp_imp(a: usize, b: usize, _: usize, pc: usize) -> usize {
    let r = call(R::strcmp, a, b, 0);
    let k = cmp_len(a, b, usize::MAX);
    read(pc, a, k);
    read(pc, b, k);
    r
}

unsafe extern "C" fn strncmp_imp(a: usize, b: usize, n: usize, pc: usize) -> usize {
    let r = call(R::strncmp, a, b, n);
    let k = cmp_len(a, b, n);
    read(pc, a, k);
    read(pc, b, k);
    r
}

unsafe extern "C" fn strchr_imp(s: usize, c: usize, _: usize, pc: usize) -> usize {
    let r = call(R::strchr, s, c, 0);
    read(pc, s, if r != 0 { r - s + 1 } else { real_strlen(s) + 1 });
    r
}

unsafe extern "C" fn strrchr_imp(s: usize, c: usize, _: usize, pc: usize) -> usize {
    let r = call(R::strrchr, s, c, 0);
    read(pc, s, real_strlen(s) + 1);
    r
}

/// `strdup`/`strndup`: an allocation plus a copy.
unsafe fn dup(s: usize, len: usize, read_len: usize, pc: usize, fp: usize) -> usize {
    let p = crate::real::__libc_malloc(len + 1) as usize;
    if p == 0 {
        return 0;
    }
    call(R::memcpy, p, s, len);
    *((p + len) as *mut u8) = 0;
    if crate::state::ts().guard.get() == 0 {
        record::alloc(AllocKind::Malloc, pc as u64, fp, p as u64, (len + 1) as u64);
        read(pc, s, read_len);
        write(pc, p, len + 1);
    }
    p
}

unsafe extern "C" fn strdup_imp(s: usize, _: usize, _: usize, pc: usize, fp: usize) -> usize {
    let n = real_strlen(s);
    dup(s, n, n + 1, pc, fp)
}

unsafe extern "C" fn strndup_imp(s: usize, max: usize, _: usize, pc: usize, fp: usize) -> usize {
    let n = real_strnlen(s, max);
    dup(s, n, (n + 1).min(max), pc, fp)
}

macro_rules! str_entry {
    ($name:ident($($a:ident: $t:ty),*) -> $r:ty => $imp:path) => {
        entry!("C" fn $name = stringify!($name); ($($a: $t),*) -> $r;
            ["mov rcx, qword ptr [rsp]"] => $imp);
    };
}

str_entry!(memcpy(d: *mut c_void, s: *const c_void, n: usize) -> *mut c_void => memcpy_imp);
str_entry!(memmove(d: *mut c_void, s: *const c_void, n: usize) -> *mut c_void => memmove_imp);
str_entry!(memset(d: *mut c_void, c: c_int, n: usize) -> *mut c_void => memset_imp);
str_entry!(memcmp(a: *const c_void, b: *const c_void, n: usize) -> c_int => memcmp_imp);
str_entry!(bcmp(a: *const c_void, b: *const c_void, n: usize) -> c_int => bcmp_imp);
str_entry!(strlen(s: *const c_char) -> usize => strlen_imp);
str_entry!(strnlen(s: *const c_char, n: usize) -> usize => strnlen_imp);
str_entry!(strcpy(d: *mut c_char, s: *const c_char) -> *mut c_char => strcpy_imp);
str_entry!(strncpy(d: *mut c_char, s: *const c_char, n: usize) -> *mut c_char => strncpy_imp);
str_entry!(strcat(d: *mut c_char, s: *const c_char) -> *mut c_char => strcat_imp);
str_entry!(strncat(d: *mut c_char, s: *const c_char, n: usize) -> *mut c_char => strncat_imp);
str_entry!(strcmp(a: *const c_char, b: *const c_char) -> c_int => strcmp_imp);
str_entry!(strncmp(a: *const c_char, b: *const c_char, n: usize) -> c_int => strncmp_imp);
str_entry!(strchr(s: *const c_char, c: c_int) -> *mut c_char => strchr_imp);
str_entry!(strrchr(s: *const c_char, c: c_int) -> *mut c_char => strrchr_imp);

entry!("C" fn strdup = "strdup"; (s: *const c_char) -> *mut c_char;
    ["mov rcx, qword ptr [rsp]", "mov r8, rbp"] => strdup_imp);
entry!("C" fn strndup = "strndup"; (s: *const c_char, n: usize) -> *mut c_char;
    ["mov rcx, qword ptr [rsp]", "mov r8, rbp"] => strndup_imp);
