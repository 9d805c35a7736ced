//! Values mode: the program's signal handlers run inside a wrapper that sets the
//! interrupted thread's pending store aside (`record::settle`). A signal can arrive
//! between a store's callback and the store itself (a write fault, with the
//! handler making the page writable, is the common case); the handler's first
//! event would otherwise read the location before the store and record the old
//! value. After the handler its own last store is written, and the interrupted
//! one is read at the thread's next event as usual.
//!
//! `sigaction` and `signal` are interposed; `sigaction` reports the program's own
//! handler and flags back. Outside values mode both only forward.

use crate::real::{self, R};
use crate::state::{ts, Pending, VALUES};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};
use libc::{c_int, c_void};

const NSIG: usize = 65;

/// The program's handler per signal (0: none wrapped).
static USER: [AtomicUsize; NSIG] = [const { AtomicUsize::new(0) }; NSIG];
/// Whether it takes three arguments (`SA_SIGINFO`).
static INFO: [AtomicBool; NSIG] = [const { AtomicBool::new(false) }; NSIG];

type Act = unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;

unsafe extern "C" fn wrapper(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    let i = sig as usize;
    let h = USER.get(i).map_or(0, |u| u.load(Acquire));
    if h == 0 || h == libc::SIG_DFL || h == libc::SIG_IGN {
        return;
    }
    let st = ts();
    let saved = st.pend.replace(Pending::NONE);
    if INFO[i].load(Acquire) {
        type H = unsafe extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void);
        core::mem::transmute::<usize, H>(h)(sig, info, ctx);
    } else {
        core::mem::transmute::<usize, unsafe extern "C" fn(c_int)>(h)(sig);
    }
    if saved.tag != 0 {
        // the handler's own last store is done: write it before putting ours back
        crate::record::settle();
        if st.pend.get().tag == 0 {
            st.pend.set(saved);
        }
    }
}

/// `sigaction`: in values mode a handler is installed wrapped (see the module docs).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> c_int {
    let f = real::get(R::sigaction);
    if f == 0 {
        *libc::__errno_location() = libc::ENOSYS;
        return -1;
    }
    let real = core::mem::transmute::<usize, Act>(f);
    let i = sig as usize;
    if !VALUES.load(Relaxed) || i == 0 || i >= NSIG {
        return real(sig, act, old);
    }
    let prev = (USER[i].load(Acquire), INFO[i].load(Acquire));
    let mut mine: libc::sigaction;
    let mut act = act;
    if !act.is_null() {
        let h = (*act).sa_sigaction;
        if h != libc::SIG_DFL
            && h != libc::SIG_IGN
            && h != crate::process::on_signal as *const () as usize
        {
            mine = *act;
            USER[i].store(h, Release);
            INFO[i].store((*act).sa_flags & libc::SA_SIGINFO != 0, Release);
            mine.sa_sigaction = wrapper as *const () as usize;
            mine.sa_flags |= libc::SA_SIGINFO;
            act = &mine;
        }
    }
    let rc = real(sig, act, old);
    if rc != 0 {
        USER[i].store(prev.0, Release);
        INFO[i].store(prev.1, Release);
    } else if !old.is_null() && (*old).sa_sigaction == wrapper as *const () as usize {
        (*old).sa_sigaction = prev.0;
        if !prev.1 {
            (*old).sa_flags &= !libc::SA_SIGINFO;
        }
    }
    rc
}

/// `signal`: BSD semantics as glibc's (restarting, the signal blocked in its
/// handler), through [`sigaction`].
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn signal(sig: c_int, h: libc::sighandler_t) -> libc::sighandler_t {
    let mut sa: libc::sigaction = core::mem::zeroed();
    sa.sa_sigaction = h;
    sa.sa_flags = libc::SA_RESTART;
    libc::sigemptyset(&mut sa.sa_mask);
    libc::sigaddset(&mut sa.sa_mask, sig);
    let mut old: libc::sigaction = core::mem::zeroed();
    if sigaction(sig, &sa, &mut old) != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}
