//! The trace descriptor, kept out of the program's way: it lives at a high number
//! (at the soft `RLIMIT_NOFILE` when the hard limit allows, else just below it),
//! close-on-exec, and the interposed `close`, `dup`, `dup2`, `dup3`, `fcntl`,
//! `close_range` and `closefrom` treat it as not open: the program gets `EBADF`
//! for it, its ranges skip it, and a `dup2`/`dup3` onto its number first moves the
//! trace elsewhere. Raw `syscall(SYS_close, ...)` is not seen.

use crate::real::{self, R};
use crate::session::session;
use libc::{c_int, c_uint};

/// Highest number the trace descriptor is placed near: a higher one would make the
/// kernel allocate a descriptor table that large.
const CAP: u64 = 1 << 16;

/// The current trace descriptor, or -1.
#[inline]
fn traced_fd() -> c_int {
    session().map_or(-1, |s| s.fd())
}

#[inline]
fn set_errno(e: c_int) {
    // SAFETY: this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

fn rlimit() -> libc::rlimit {
    let mut r = libc::rlimit { rlim_cur: 1024, rlim_max: 1024 };
    // SAFETY: valid out-pointer.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    r
}

fn dupfd_cloexec(fd: c_int, min: u64) -> c_int {
    // SAFETY: plain syscall; a failure returns -1.
    unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, min as c_int) as c_int }
}

/// Closes a descriptor of the runtime's (never through the interposer).
pub(crate) fn close_raw(fd: c_int) {
    if fd >= 0 {
        // SAFETY: plain syscall on a descriptor the runtime owns.
        unsafe { libc::syscall(libc::SYS_close, fd) };
    }
}

/// A close-on-exec copy of `fd` at a high number (see the module docs), `fd`
/// closed; `fd` itself when no higher number can be had.
pub(crate) fn move_high(fd: c_int) -> c_int {
    let r = rlimit();
    let soft = r.rlim_cur;
    let mut new = -1;
    if soft < r.rlim_max && soft < CAP {
        // Above the program's own limit: raise the soft limit for the copy only (a
        // descriptor stays valid when the limit is lowered again).
        let raised = libc::rlimit { rlim_cur: (soft + 64).min(r.rlim_max), rlim_max: r.rlim_max };
        // SAFETY: valid rlimit structs.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            new = dupfd_cloexec(fd, soft);
            // SAFETY: as above.
            unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) };
        }
    }
    if new < 0 {
        new = dupfd_cloexec(fd, soft.min(CAP).saturating_sub(64).max(3));
    }
    if new < 0 {
        return fd;
    }
    close_raw(fd);
    new
}

/// Moves the trace off `busy` before the program puts its own file there (when no
/// other number can be had the trace is given up, see
/// [`crate::session::Session::relocate`]).
fn evict(busy: c_int) {
    if let Some(s) = session() {
        // A vfork child shares the session but not the descriptor table: the
        // parent's trace stays where it is.
        if s.fd() == busy && s.pid == crate::sys::getpid() {
            s.relocate(|fd| {
                let new = move_high(fd);
                if new != fd {
                    return new;
                }
                // no high number free: any other one will do
                let low = dupfd_cloexec(fd, 3);
                if low >= 0 {
                    close_raw(fd);
                }
                low
            });
        }
    }
}

type F1 = unsafe extern "C" fn(c_int) -> c_int;
type F2 = unsafe extern "C" fn(c_int, c_int) -> c_int;
type F3 = unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
type Fcntl = unsafe extern "C" fn(c_int, c_int, usize) -> c_int;
type CloseRange = unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int;

/// `close`: `EBADF` for the trace descriptor.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if fd >= 0 && fd == traced_fd() {
        set_errno(libc::EBADF);
        return -1;
    }
    match real::get(R::close) {
        0 => libc::syscall(libc::SYS_close, fd) as c_int,
        f => core::mem::transmute::<usize, F1>(f)(fd),
    }
}

/// `dup`: `EBADF` for the trace descriptor.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    if fd >= 0 && fd == traced_fd() {
        set_errno(libc::EBADF);
        return -1;
    }
    match real::get(R::dup) {
        0 => libc::syscall(libc::SYS_dup, fd) as c_int,
        f => core::mem::transmute::<usize, F1>(f)(fd),
    }
}

/// `dup2`: the trace moves away from `new` first; `old` being the trace is `EBADF`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    let t = traced_fd();
    if t >= 0 && old == t {
        set_errno(libc::EBADF);
        return -1;
    }
    if t >= 0 && new == t {
        evict(new);
    }
    match real::get(R::dup2) {
        // dup2 is dup3 without flags, except for old == new
        0 if old == new => {
            if libc::syscall(libc::SYS_fcntl, old, libc::F_GETFD) < 0 {
                -1
            } else {
                old
            }
        }
        0 => libc::syscall(libc::SYS_dup3, old, new, 0) as c_int,
        f => core::mem::transmute::<usize, F2>(f)(old, new),
    }
}

/// `dup3`: as [`dup2`].
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    let t = traced_fd();
    if t >= 0 && old == t {
        set_errno(libc::EBADF);
        return -1;
    }
    if t >= 0 && new == t && old != new {
        evict(new);
    }
    match real::get(R::dup3) {
        0 => libc::syscall(libc::SYS_dup3, old, new, flags) as c_int,
        f => core::mem::transmute::<usize, F3>(f)(old, new, flags),
    }
}

unsafe fn fcntl_as(r: R, fd: c_int, cmd: c_int, arg: usize) -> c_int {
    if fd >= 0 && fd == traced_fd() {
        set_errno(libc::EBADF);
        return -1;
    }
    match real::get(r) {
        0 => libc::syscall(libc::SYS_fcntl, fd, cmd, arg) as c_int,
        f => core::mem::transmute::<usize, Fcntl>(f)(fd, cmd, arg),
    }
}

/// `fcntl`: `EBADF` for the trace descriptor (every argument `fcntl` takes is an
/// integer or a pointer, passed on as one register).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    fcntl_as(R::fcntl, fd, cmd, arg)
}

/// `fcntl64`: as [`fcntl`].
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    fcntl_as(R::fcntl64, fd, cmd, arg)
}

unsafe fn real_close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    match real::get(R::close_range) {
        0 => libc::syscall(libc::SYS_close_range, first, last, flags) as c_int,
        f => core::mem::transmute::<usize, CloseRange>(f)(first, last, flags),
    }
}

/// `close_range`: the range minus the trace descriptor.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let t = traced_fd();
    if t < 0 || first > last || (t as c_uint) < first || (t as c_uint) > last {
        return real_close_range(first, last, flags);
    }
    let t = t as c_uint;
    let mut rc = 0;
    if t > first {
        rc = real_close_range(first, t - 1, flags);
    }
    if rc == 0 && t < last {
        rc = real_close_range(t + 1, last, flags);
    }
    rc
}

/// `closefrom`: every descriptor from `low` but the trace's.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn closefrom(low: c_int) {
    let t = traced_fd();
    if t < 0 || t < low {
        match real::get(R::closefrom) {
            0 => {
                close_range(low.max(0) as c_uint, c_uint::MAX, 0);
            }
            f => core::mem::transmute::<usize, unsafe extern "C" fn(c_int)>(f)(low),
        }
        return;
    }
    if close_range(low.max(0) as c_uint, c_uint::MAX, 0) != 0 {
        // no close_range (old kernel): one by one below the limit
        let top = rlimit().rlim_cur.min(CAP) as c_int;
        for fd in low.max(0)..top {
            if fd != t {
                close(fd);
            }
        }
    }
}
