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

/// `fn(obj)` that acquires `obj` when it returns 0.
macro_rules! acquire1 {
    ($($name:ident),*) => {$(
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub unsafe extern "C" fn $name(o: *mut c_void) -> c_int {
            let Some(f) = f1(R::$name) else { return libc::EINVAL };
            order::before_blocking();
            let rc = order::parked(|| f(o));
            if rc == 0 {
                order::acquire(o as u64);
            }
            rc
        }
    )*};
}

/// `fn(obj, timeout)` that acquires `obj` when it returns 0.
macro_rules! acquire2 {
    ($($name:ident),*) => {$(
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub unsafe extern "C" fn $name(o: *mut c_void, t: *mut c_void) -> c_int {
            let Some(f) = f2(R::$name) else { return libc::EINVAL };
            order::before_blocking();
            let rc = order::parked(|| f(o, t));
            if rc == 0 {
                order::acquire(o as u64);
            }
            rc
        }
    )*};
}

/// `fn(obj)` that releases `obj` first.
macro_rules! release1 {
    ($($name:ident),*) => {$(
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub unsafe extern "C" fn $name(o: *mut c_void) -> c_int {
            let Some(f) = f1(R::$name) else { return libc::EINVAL };
            record::settle();
            order::release(o as u64);
            f(o)
        }
    )*};
}

acquire1!(
    pthread_mutex_lock,
    pthread_mutex_trylock,
    pthread_rwlock_rdlock,
    pthread_rwlock_tryrdlock,
    pthread_rwlock_wrlock,
    pthread_rwlock_trywrlock,
    pthread_spin_lock,
    pthread_spin_trylock,
    sem_trywait
);
acquire2!(pthread_mutex_timedlock, pthread_rwlock_timedrdlock, pthread_rwlock_timedwrlock);
release1!(
    pthread_mutex_unlock,
    pthread_rwlock_unlock,
    pthread_spin_unlock,
    pthread_cond_signal,
    pthread_cond_broadcast,
    sem_post
);

/// `sem_wait` (-1/errno convention; acquires on 0).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn sem_wait(s: *mut c_void) -> c_int {
    let Some(f) = f1(R::sem_wait) else { return -1 };
    order::before_blocking();
    let rc = order::parked(|| f(s));
    if rc == 0 {
        order::acquire(s as u64);
    }
    rc
}

/// `sem_timedwait`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn sem_timedwait(s: *mut c_void, t: *mut c_void) -> c_int {
    let Some(f) = f2(R::sem_timedwait) else { return -1 };
    order::before_blocking();
    let rc = order::parked(|| f(s, t));
    if rc == 0 {
        order::acquire(s as u64);
    }
    rc
}

/// `pthread_cond_wait`: gives the mutex up (release), then takes the mutex and the
/// condition's clock.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn pthread_cond_wait(c: *mut c_void, m: *mut c_void) -> c_int {
    let Some(f) = f2(R::pthread_cond_wait) else { return libc::EINVAL };
    record::settle();
    order::release(m as u64);
    let rc = order::parked(|| f(c, m));
    order::acquire(c as u64);
    order::acquire(m as u64);
    rc
}

/// `pthread_cond_timedwait`: as `pthread_cond_wait` (the mutex is held again on
/// timeout too).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn pthread_cond_timedwait(
    c: *mut c_void,
    m: *mut c_void,
    t: *mut c_void,
) -> c_int {
    let p = real::get(R::pthread_cond_timedwait);
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

/// `pthread_barrier_wait`: release on arrival, acquire on leaving.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn pthread_barrier_wait(b: *mut c_void) -> c_int {
    let Some(f) = f1(R::pthread_barrier_wait) else { return libc::EINVAL };
    record::settle();
    order::release(b as u64);
    let rc = order::parked(|| f(b));
    order::acquire(b as u64);
    rc
}

/// `pthread_join`: takes the joined thread's final clock.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn pthread_join(t: libc::pthread_t, ret: *mut *mut c_void) -> c_int {
    let p = real::get(R::pthread_join);
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
