//! Interposed blocking synchronisation, for the Lamport clocks of `order.rs`:
//! release-like calls (`*_unlock`, `pthread_cond_signal/broadcast`, `sem_post`,
//! the arrival at a barrier, a condition wait giving its mutex up) publish the
//! thread's clock on the object's stripe before the real call; acquire-like calls
//! (`*_lock` and successful `*_trylock`/`*_timed*`, `sem_wait`, leaving a barrier or a
//! condition wait, `pthread_join`) take it after. A thread's final clock is published
//! under its `pthread_t` at exit and taken by `pthread_join`.
//!
//! Under `--order=atomic` every interposer here first releases the stripes held
//! across the thread's last access (`order::before_blocking`, or inside
//! `order::release`), since the real call may block.
//!
//! Every release-like call first writes the thread's pending store value
//! (`record::settle`, values mode): after the release another thread may
//! overwrite it.
//!
//! Rust's `std::sync` does not go through pthread (futexes), and `std` is not
//! instrumented, so its locks order nothing; atomics in instrumented crates do.

use crate::order;
use crate::real::{self, R};
use crate::record;
use libc::{c_int, c_void};

type F1 = unsafe extern "C" fn(*mut c_void) -> c_int;
type F2 = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;

#[inline(always)]
unsafe fn f1(r: R) -> Option<F1> {
    let p = real::get(r);
    (p != 0).then(|| core::mem::transmute::<usize, F1>(p))
}

#[inline(always)]
unsafe fn f2(r: R) -> Option<F2> {
    let p = real::get(r);
    (p != 0).then(|| core::mem::transmute::<usize, F2>(p))
}

/// The interposers of `memlens-contract`'s synchronisation table, by class.
macro_rules! sync_entries {
    // `fn(obj)` that acquires `obj` when it returns 0 (`$missing` without a real one).
    (@acquire1 $name:ident $missing:expr) => {
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub unsafe extern "C" fn $name(o: *mut c_void) -> c_int {
            let Some(f) = f1(R::$name) else { return $missing };
            order::before_blocking();
            let rc = order::parked(|| f(o));
            if rc == 0 {
                order::acquire(o as u64);
            }
            rc
        }
    };
    // `fn(obj, timeout)` that acquires `obj` when it returns 0.
    (@acquire2 $name:ident $missing:expr) => {
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub unsafe extern "C" fn $name(o: *mut c_void, t: *mut c_void) -> c_int {
            let Some(f) = f2(R::$name) else { return $missing };
            order::before_blocking();
            let rc = order::parked(|| f(o, t));
            if rc == 0 {
                order::acquire(o as u64);
            }
            rc
        }
    };
    (@acquire $name:ident) => { sync_entries!(@acquire1 $name libc::EINVAL); };
    (@acquire_timed $name:ident) => { sync_entries!(@acquire2 $name libc::EINVAL); };
    (@sem_acquire $name:ident) => { sync_entries!(@acquire1 $name -1); };
    (@sem_acquire_timed $name:ident) => { sync_entries!(@acquire2 $name -1); };
    // `fn(obj)` that releases `obj` first.
    (@release $name:ident) => {
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub unsafe extern "C" fn $name(o: *mut c_void) -> c_int {
            let Some(f) = f1(R::$name) else { return libc::EINVAL };
            record::settle();
            order::release(o as u64);
            f(o)
        }
    };
    // A condition wait gives the mutex up (release), then takes the mutex and the
    // condition's clock (the mutex is held again on timeout too).
    (@cond_wait $name:ident) => {
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub unsafe extern "C" fn $name(c: *mut c_void, m: *mut c_void) -> c_int {
            let Some(f) = f2(R::$name) else { return libc::EINVAL };
            record::settle();
            order::release(m as u64);
            let rc = order::parked(|| f(c, m));
            order::acquire(c as u64);
            order::acquire(m as u64);
            rc
        }
    };
    (@cond_timedwait $name:ident) => {
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub unsafe extern "C" fn $name(c: *mut c_void, m: *mut c_void, t: *mut c_void) -> c_int {
            let p = real::get(R::$name);
            if p == 0 {
                return libc::EINVAL;
            }
            type F3 = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void) -> c_int;
            record::settle();
            order::release(m as u64);
            let rc = order::parked(|| core::mem::transmute::<usize, F3>(p)(c, m, t));
            order::acquire(c as u64);
            order::acquire(m as u64);
            rc
        }
    };
    // A barrier: release on arrival, acquire on leaving.
    (@barrier $name:ident) => {
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub unsafe extern "C" fn $name(b: *mut c_void) -> c_int {
            let Some(f) = f1(R::$name) else { return libc::EINVAL };
            record::settle();
            order::release(b as u64);
            let rc = order::parked(|| f(b));
            order::acquire(b as u64);
            rc
        }
    };
    // `pthread_join`: takes the joined thread's final clock.
    (@join $name:ident) => {
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub unsafe extern "C" fn $name(t: libc::pthread_t, ret: *mut *mut c_void) -> c_int {
            let p = real::get(R::$name);
            if p == 0 {
                return libc::EINVAL;
            }
            type Join = unsafe extern "C" fn(libc::pthread_t, *mut *mut c_void) -> c_int;
            order::before_blocking();
            let rc = order::parked(|| core::mem::transmute::<usize, Join>(p)(t, ret));
            if rc == 0 {
                order::acquire(t);
            }
            rc
        }
    };
    ($($name:ident = $ver:literal, $class:ident;)*) => { $(sync_entries!(@$class $name);)* };
}

memlens_contract::sync_entry_points!(sync_entries);
