//! The interposed entry points, one table for both recorders.
//!
//! [`alloc_entry_points!`](crate::alloc_entry_points) and
//! [`sync_entry_points!`](crate::sync_entry_points) call a macro of the caller with
//! the whole table; `memlens-rt` and `memlens-dbi-preload` each pass one that
//! defines their interposer for every row, so both interpose exactly the same
//! symbols (a row a recorder cannot implement fails to compile there). The
//! implementations differ only in what they do with an event: the runtime encodes
//! it, the preload tells the QEMU plugin.
//! The implementations that only check arguments and hand on to another one
//! (`reallocarray`, `aligned_alloc`) are the same in both and come from
//! [`forwarding_alloc_imps!`](crate::forwarding_alloc_imps).
//!
//! Allocation rows: `ABI fn rust_name = "symbol", Role, implementation; (args) -> ret;`.
//! Every allocation interposer passes its first three arguments (padded) plus the
//! call site and a stack position to `implementation`, so one signature fits all.
//!
//! Synchronisation rows: `symbol = "version", class;` (`""`: the default version).
//! The class fixes the signature and when the call synchronises:
//!
//! | class | signature | orders |
//! |---|---|---|
//! | `acquire` | `fn(obj) -> c_int` | after the call, when it returns 0 |
//! | `acquire_timed` | `fn(obj, timeout) -> c_int` | after, on 0 |
//! | `sem_acquire` / `sem_acquire_timed` | as above, `-1`/`errno` convention | after, on 0 |
//! | `release` | `fn(obj) -> c_int` | before the call |
//! | `cond_wait` / `cond_timedwait` | `fn(cond, mutex[, timeout])` | before (mutex given up) and after |
//! | `barrier` | `fn(barrier) -> c_int` | before (arrival) and after (leaving) |
//! | `join` | `fn(pthread_t, *mut *mut void) -> c_int` | after, on 0 |

/// Calls `$m!` with every interposed allocation entry point (see the module docs).
#[macro_export]
macro_rules! alloc_entry_points {
    ($m:ident) => {
        $m! {
            "C" fn malloc = "malloc", Alloc, malloc_imp; (size: usize) -> *mut c_void;
            "C" fn calloc = "calloc", Alloc, calloc_imp; (n: usize, size: usize) -> *mut c_void;
            "C" fn realloc = "realloc", Realloc, realloc_imp;
                (p: *mut c_void, size: usize) -> *mut c_void;
            "C" fn reallocarray = "reallocarray", Realloc, reallocarray_imp;
                (p: *mut c_void, n: usize, size: usize) -> *mut c_void;
            "C" fn free = "free", Free, free_imp; (p: *mut c_void);
            "C" fn posix_memalign = "posix_memalign", Alloc, posix_memalign_imp;
                (out: *mut *mut c_void, align: usize, size: usize) -> i32;
            "C" fn aligned_alloc = "aligned_alloc", Alloc, aligned_alloc_imp;
                (align: usize, size: usize) -> *mut c_void;
            "C" fn memalign = "memalign", Alloc, memalign_imp;
                (align: usize, size: usize) -> *mut c_void;
            "C" fn valloc = "valloc", Alloc, valloc_imp; (size: usize) -> *mut c_void;
            "C" fn pvalloc = "pvalloc", Alloc, pvalloc_imp; (size: usize) -> *mut c_void;
            // operator new: variant V of `NEW_VARIANTS`
            "C-unwind" fn op_new = "_Znwm", Alloc, new_imp::<0>; (size: usize) -> *mut c_void;
            "C-unwind" fn op_new_array = "_Znam", Alloc, new_imp::<1>; (size: usize) -> *mut c_void;
            "C-unwind" fn op_new_nothrow = "_ZnwmRKSt9nothrow_t", Alloc, new_imp::<2>;
                (size: usize, nt: usize) -> *mut c_void;
            "C-unwind" fn op_new_array_nothrow = "_ZnamRKSt9nothrow_t", Alloc, new_imp::<3>;
                (size: usize, nt: usize) -> *mut c_void;
            "C-unwind" fn op_new_aligned = "_ZnwmSt11align_val_t", Alloc, new_imp::<4>;
                (size: usize, align: usize) -> *mut c_void;
            "C-unwind" fn op_new_array_aligned = "_ZnamSt11align_val_t", Alloc, new_imp::<5>;
                (size: usize, align: usize) -> *mut c_void;
            "C-unwind" fn op_new_aligned_nothrow = "_ZnwmSt11align_val_tRKSt9nothrow_t", Alloc,
                new_imp::<6>; (size: usize, align: usize, nt: usize) -> *mut c_void;
            "C-unwind" fn op_new_array_aligned_nothrow = "_ZnamSt11align_val_tRKSt9nothrow_t",
                Alloc, new_imp::<7>; (size: usize, align: usize, nt: usize) -> *mut c_void;
            // operator delete: variant V of `DELETE_VARIANTS`
            "C-unwind" fn op_delete = "_ZdlPv", Free, delete_imp::<0>; (p: *mut c_void);
            "C-unwind" fn op_delete_array = "_ZdaPv", Free, delete_imp::<1>; (p: *mut c_void);
            "C-unwind" fn op_delete_sized = "_ZdlPvm", Free, delete_imp::<2>;
                (p: *mut c_void, n: usize);
            "C-unwind" fn op_delete_array_sized = "_ZdaPvm", Free, delete_imp::<3>;
                (p: *mut c_void, n: usize);
            "C-unwind" fn op_delete_aligned = "_ZdlPvSt11align_val_t", Free, delete_imp::<4>;
                (p: *mut c_void, a: usize);
            "C-unwind" fn op_delete_array_aligned = "_ZdaPvSt11align_val_t", Free, delete_imp::<5>;
                (p: *mut c_void, a: usize);
            "C-unwind" fn op_delete_sized_aligned = "_ZdlPvmSt11align_val_t", Free, delete_imp::<6>;
                (p: *mut c_void, n: usize, a: usize);
            "C-unwind" fn op_delete_array_sized_aligned = "_ZdaPvmSt11align_val_t", Free,
                delete_imp::<7>; (p: *mut c_void, n: usize, a: usize);
            "C-unwind" fn op_delete_nothrow = "_ZdlPvRKSt9nothrow_t", Free, delete_imp::<8>;
                (p: *mut c_void, nt: usize);
            "C-unwind" fn op_delete_array_nothrow = "_ZdaPvRKSt9nothrow_t", Free, delete_imp::<9>;
                (p: *mut c_void, nt: usize);
            "C-unwind" fn op_delete_aligned_nothrow = "_ZdlPvSt11align_val_tRKSt9nothrow_t", Free,
                delete_imp::<10>; (p: *mut c_void, a: usize, nt: usize);
            "C-unwind" fn op_delete_array_aligned_nothrow = "_ZdaPvSt11align_val_tRKSt9nothrow_t",
                Free, delete_imp::<11>; (p: *mut c_void, a: usize, nt: usize);
        }
    };
}

/// Calls `$m!` with every interposed synchronisation entry point (see the module
/// docs), after the tokens given after `$m,` if any.
#[macro_export]
macro_rules! sync_entry_points {
    ($m:ident $(, $($before:tt)*)?) => {
        $m! {
            $($($before)*)?
            pthread_mutex_lock = "", acquire;
            pthread_mutex_trylock = "", acquire;
            pthread_mutex_timedlock = "", acquire_timed;
            pthread_mutex_unlock = "", release;
            pthread_rwlock_rdlock = "", acquire;
            pthread_rwlock_tryrdlock = "", acquire;
            pthread_rwlock_timedrdlock = "", acquire_timed;
            pthread_rwlock_wrlock = "", acquire;
            pthread_rwlock_trywrlock = "", acquire;
            pthread_rwlock_timedwrlock = "", acquire_timed;
            pthread_rwlock_unlock = "", release;
            pthread_spin_lock = "", acquire;
            pthread_spin_trylock = "", acquire;
            pthread_spin_unlock = "", release;
            // `dlsym` could find the pre-2.3.2 condition variables: ask for the current ones.
            pthread_cond_wait = "GLIBC_2.3.2", cond_wait;
            pthread_cond_timedwait = "GLIBC_2.3.2", cond_timedwait;
            pthread_cond_signal = "GLIBC_2.3.2", release;
            pthread_cond_broadcast = "GLIBC_2.3.2", release;
            pthread_barrier_wait = "", barrier;
            sem_wait = "", sem_acquire;
            sem_trywait = "", sem_acquire;
            sem_timedwait = "", sem_acquire_timed;
            sem_post = "", release;
            pthread_join = "", join;
        }
    };
}

/// What an entry point does to the heap or to the order of threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Returns a new block.
    Alloc,
    /// Releases a block.
    Free,
    /// Moves or resizes a block.
    Realloc,
    /// Synchronises after the call (lock, wait, join).
    Acquire,
    /// Synchronises before the call (unlock, post, signal).
    Release,
    /// Both (condition waits, barriers).
    Both,
}

/// Defines the allocation implementations that only check their arguments and
/// hand on to another implementation of the caller, the same in both recorders:
/// `reallocarray_imp` (to `realloc_imp`), `aligned_alloc_imp` (to `memalign_imp`)
/// and `valid_align` (`posix_memalign`'s rule). `$pos` is the type the caller's
/// implementations take the call site and stack position as; `errno` is set
/// through the caller's `libc`.
#[macro_export]
macro_rules! forwarding_alloc_imps {
    ($pos:ty) => {
        unsafe extern "C" fn reallocarray_imp(
            old: usize,
            n: usize,
            size: usize,
            pc: $pos,
            sp: $pos,
        ) -> usize {
            match n.checked_mul(size) {
                Some(b) => realloc_imp(old, b, 0, pc, sp),
                None => {
                    *libc::__errno_location() = libc::ENOMEM;
                    0
                }
            }
        }

        unsafe extern "C" fn aligned_alloc_imp(
            align: usize,
            size: usize,
            _: usize,
            pc: $pos,
            sp: $pos,
        ) -> usize {
            if !align.is_power_of_two() {
                *libc::__errno_location() = libc::EINVAL;
                return 0;
            }
            memalign_imp(align, size, 0, pc, sp)
        }

        fn valid_align(align: usize) -> bool {
            align.is_power_of_two() && align.is_multiple_of(core::mem::size_of::<usize>())
        }
    };
}

/// One interposed entry point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryPoint {
    /// The symbol.
    pub symbol: &'static str,
    /// The symbol version asked of the loader (`dlvsym`), if not the default.
    pub version: Option<&'static str>,
    /// What it does.
    pub role: Role,
}

macro_rules! alloc_list {
    ($($abi:literal fn $name:ident = $sym:literal, $role:ident, $imp:path;
       ($($a:ident: $t:ty),*) $(-> $r:ty)?;)*) => {
        /// Every interposed allocation entry point, in table order.
        pub const ALLOC: &[EntryPoint] =
            &[$(EntryPoint { symbol: $sym, version: None, role: Role::$role }),*];
    };
}
alloc_entry_points!(alloc_list);

macro_rules! sync_list {
    ($($name:ident = $ver:literal, $class:ident;)*) => {
        /// Every interposed synchronisation entry point, in table order.
        pub const SYNC: &[EntryPoint] = &[$(EntryPoint {
            symbol: stringify!($name),
            version: if $ver.is_empty() { None } else { Some($ver) },
            role: sync_list!(@$class),
        }),*];
    };
    (@acquire) => { Role::Acquire };
    (@acquire_timed) => { Role::Acquire };
    (@sem_acquire) => { Role::Acquire };
    (@sem_acquire_timed) => { Role::Acquire };
    (@join) => { Role::Acquire };
    (@release) => { Role::Release };
    (@cond_wait) => { Role::Both };
    (@cond_timedwait) => { Role::Both };
    (@barrier) => { Role::Both };
}
sync_entry_points!(sync_list);

/// The symbol version to ask for `symbol` (`dlvsym`), if not the default one.
pub fn version_of(symbol: &str) -> Option<&'static str> {
    SYNC.iter().find(|e| e.symbol == symbol).and_then(|e| e.version)
}

/// One `operator new` variant (`new_imp::<V>` of the allocation table).
#[derive(Debug, Clone, Copy)]
pub struct NewVariant {
    /// `new[]`.
    pub array: bool,
    /// The second argument is a `std::align_val_t`.
    pub aligned: bool,
    /// Returns null instead of throwing `std::bad_alloc`.
    pub nothrow: bool,
}

/// `operator new` variants by `V`: bit 0 array, bit 1 nothrow, bit 2 aligned.
pub const NEW_VARIANTS: [NewVariant; 8] = {
    let mut v = [NewVariant { array: false, aligned: false, nothrow: false }; 8];
    let mut i = 0;
    while i < 8 {
        v[i] = NewVariant { array: i & 1 != 0, nothrow: i & 2 != 0, aligned: i & 4 != 0 };
        i += 1;
    }
    v
};

/// Whether `operator delete` variant `V` (`delete_imp::<V>`) is `delete[]`.
pub const fn delete_is_array(v: usize) -> bool {
    v & 1 != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_every_entry_point_once() {
        assert_eq!((ALLOC.len(), SYNC.len()), (30, 24));
        let mut all: Vec<&str> = ALLOC.iter().chain(SYNC).map(|e| e.symbol).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 54);
        assert_eq!(version_of("pthread_cond_wait"), Some("GLIBC_2.3.2"));
        assert_eq!(version_of("pthread_mutex_lock"), None);
        assert!(NEW_VARIANTS[5].array && NEW_VARIANTS[5].aligned && !NEW_VARIANTS[5].nothrow);
        assert!(delete_is_array(11) && !delete_is_array(10));
    }
}
