//! Guest preload library of `memlens record --dbi`.
//!
//! Loaded into the traced program only (`qemu-x86_64 -E LD_PRELOAD=...`), never into
//! QEMU itself. It interposes the malloc family and C++ `operator new/delete` (every
//! row of `memlens-contract`'s allocation table, as the compiled-path runtime does),
//! does the real work with glibc's exported `__libc_*` functions, and tells the memlens
//! plugin what happened with a system call that does not exist
//! ([`MAGIC`], rejected with `ENOSYS` by QEMU and by the kernel): the plugin sees it
//! with its syscall callback in the calling vCPU, so the event lands at the right
//! place of that thread's stream. Each entry point is a naked trampoline that puts
//! the return address (the call site) and the stack pointer (where that return
//! address lies, which lets the plugin cut its shadow call stack there) into spare
//! argument registers.
//!
//! It also defines the annotation API of `memlens.h` (`memlens_roi_begin/end`,
//! `memlens_register_thread`, `memlens_thread_name`, `memlens_trace_on/off`) for
//! programs that call it through a shared library (a no-op stub library at build
//! time): the preload wins and tells the plugin.
//!
//! At load time, and after every `dlopen`, it also reports the loaded modules
//! (`dl_iterate_phdr`): load bias plus a pointer to the path, which the plugin reads
//! from guest memory.
//!
//! It reports each thread's stack bounds and thread pointer (`pthread_getattr_np`,
//! as the compiled path does) and, once a second thread exists, tells the plugin
//! about pthread synchronisation (every row of `memlens-contract`'s sync table:
//! mutexes, condition variables, barriers, rwlocks, spinlocks, semaphores, join) so
//! it can stamp its clock.
//!
//! Protocol: `syscall(MAGIC, op, a, b, pc, c, sp)`, see the `OP_*` constants.

use core::arch::naked_asm;
use libc::{c_char, c_int, c_void, dl_phdr_info};

/// System call number used to talk to the plugin ("ML").
pub const MAGIC: u64 = 0x4d4c;
/// `op` 0..=7: an allocation of `AllocKind` op: `a` = block, `b` = size.
pub const OP_ALLOC: u64 = 0;
/// `op` 16 + `FreeKind`: a free of block `a`.
pub const OP_FREE: u64 = 16;
/// `op` 32: a realloc: `a` = new block, `b` = size, `c` = old block.
pub const OP_REALLOC: u64 = 32;
/// `op` 48: a module: `a` = load bias, `b` = path pointer, `c` = path length.
pub const OP_MODULE: u64 = 48;
/// `op` 64: `memlens_register_thread(a)`.
pub const OP_REGISTER_THREAD: u64 = 64;
/// `op` 65: `memlens_thread_name`: `b` = name pointer, `c` = length.
pub const OP_THREAD_NAME: u64 = 65;
/// `op` 66 / 67: region of interest begins / ends.
pub const OP_ROI_BEGIN: u64 = 66;
/// See [`OP_ROI_BEGIN`].
pub const OP_ROI_END: u64 = 67;
/// `op` 68 / 69: `memlens_trace_on` / `memlens_trace_off`.
pub const OP_TRACE_ON: u64 = 68;
/// See [`OP_TRACE_ON`].
pub const OP_TRACE_OFF: u64 = 69;
/// `op` 70: a pthread synchronisation point (the plugin stamps its clock).
pub const OP_SYNC: u64 = 70;
/// `op` 71: this thread's stack `[a, b)` and thread pointer `c`.
pub const OP_STACK: u64 = 71;
/// `op` 72: this library's own work begins (`a` = 1) or ends (`a` = 0) in this
/// thread: the plugin records none of its accesses.
pub const OP_OWN: u64 = 72;

// `AllocKind` / `FreeKind` wire values of the trace format.
const MALLOC: u64 = 0;
const CALLOC: u64 = 1;
const ALIGNED: u64 = 3;
const NEW: u64 = 4;
const NEW_ARRAY: u64 = 5;
const FREE: u64 = 0;
const DELETE: u64 = 1;
const DELETE_ARRAY: u64 = 2;

std::thread_local! {
    /// This library is doing its own work (`pthread_getattr_np`, `dlsym`): the
    /// allocations libc makes for it are not the program's.
    static OWN: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Runs `f` as this library's own work: no allocation, free or access of it (in
/// libc, under `--dbi-filter all`) is recorded.
fn own<R>(f: impl FnOnce() -> R) -> R {
    let was = OWN.with(|o| o.replace(true));
    if !was {
        tell(OP_OWN, 1, 0, 0, 0, 0);
    }
    let r = f();
    if !was {
        tell(OP_OWN, 0, 0, 0, 0, 0);
    }
    OWN.with(|o| o.set(was));
    r
}

#[inline(always)]
fn tell(op: u64, a: u64, b: u64, pc: u64, c: u64, sp: u64) {
    if op < OP_MODULE && OWN.with(|o| o.get()) {
        return;
    }
    // SAFETY: an unknown system call only returns -ENOSYS; rcx and r11 are clobbered.
    unsafe {
        core::arch::asm!("syscall",
            inlateout("rax") MAGIC => _, in("rdi") op, in("rsi") a, in("rdx") b,
            in("r10") pc, in("r8") c, in("r9") sp, out("rcx") _, out("r11") _,
            options(nostack, preserves_flags));
    }
}

extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_free(p: *mut c_void);
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
    fn __libc_valloc(size: usize) -> *mut c_void;
    fn __libc_pvalloc(size: usize) -> *mut c_void;
}

/// One allocation interposer of `memlens-contract`'s table: a trampoline that
/// puts the return address (the call site) into rcx and the stack pointer into r8,
/// after the first three arguments (as in the compiled path), then jumps to the
/// implementation.
macro_rules! alloc_entries {
    ($($abi:literal fn $name:ident = $sym:literal, $role:ident, $imp:path;
       ($($a:ident: $t:ty),*) $(-> $r:ty)?;)*) => {$(
        /// The C library / C++ runtime function of the same symbol, observed.
        ///
        /// # Safety
        /// The same contract as the function it stands for.
        #[unsafe(naked)]
        #[unsafe(export_name = $sym)]
        pub unsafe extern $abi fn $name($($a: $t),*) $(-> $r)? {
            naked_asm!("mov rcx, qword ptr [rsp]", "mov r8, rsp", "jmp {f}", f = sym $imp)
        }
    )*};
}

memlens_contract::alloc_entry_points!(alloc_entries);
memlens_contract::forwarding_alloc_imps!(u64);

/// A new block `p` of `size` bytes (if any).
fn allocated(kind: u64, p: *mut c_void, size: usize, pc: u64, sp: u64) -> usize {
    if !p.is_null() {
        tell(OP_ALLOC + kind, p as u64, size as u64, pc, 0, sp);
    }
    p as usize
}

unsafe extern "C" fn malloc_imp(size: usize, _: usize, _: usize, pc: u64, sp: u64) -> usize {
    allocated(MALLOC, __libc_malloc(size), size, pc, sp)
}

unsafe extern "C" fn calloc_imp(n: usize, size: usize, _: usize, pc: u64, sp: u64) -> usize {
    allocated(CALLOC, __libc_calloc(n, size), n.wrapping_mul(size), pc, sp)
}

unsafe extern "C" fn realloc_imp(old: usize, size: usize, _: usize, pc: u64, sp: u64) -> usize {
    let p = __libc_realloc(old as *mut c_void, size);
    // A failed realloc leaves the old block alone; realloc(p, 0) frees it.
    if !p.is_null() || (old != 0 && size == 0) {
        tell(OP_REALLOC, p as u64, size as u64, pc, old as u64, sp);
    }
    p as usize
}

unsafe extern "C" fn free_imp(p: usize, _: usize, _: usize, pc: u64, sp: u64) {
    if p != 0 {
        tell(OP_FREE + FREE, p as u64, 0, pc, 0, sp);
    }
    __libc_free(p as *mut c_void)
}

unsafe extern "C" fn posix_memalign_imp(
    out: usize,
    align: usize,
    size: usize,
    pc: u64,
    sp: u64,
) -> c_int {
    if !valid_align(align) {
        return libc::EINVAL;
    }
    let p = __libc_memalign(align, size);
    if p.is_null() {
        return libc::ENOMEM;
    }
    *(out as *mut *mut c_void) = p;
    allocated(ALIGNED, p, size, pc, sp);
    0
}

unsafe extern "C" fn memalign_imp(align: usize, size: usize, _: usize, pc: u64, sp: u64) -> usize {
    allocated(ALIGNED, __libc_memalign(align, size), size, pc, sp)
}

unsafe extern "C" fn valloc_imp(size: usize, _: usize, _: usize, pc: u64, sp: u64) -> usize {
    allocated(ALIGNED, __libc_valloc(size), size, pc, sp)
}

unsafe extern "C" fn pvalloc_imp(size: usize, _: usize, _: usize, pc: u64, sp: u64) -> usize {
    allocated(ALIGNED, __libc_pvalloc(size), size, pc, sp)
}

/// `operator new` variant `V` (`memlens_contract::entry::NEW_VARIANTS`), without the
/// new-handler loop: a failed throwing allocation aborts (`bad_alloc` cannot be
/// thrown from here).
unsafe extern "C" fn new_imp<const V: usize>(
    size: usize,
    a1: usize,
    _: usize,
    pc: u64,
    sp: u64,
) -> usize {
    let v = memlens_contract::entry::NEW_VARIANTS[V];
    let p = if v.aligned { __libc_memalign(a1, size.max(1)) } else { __libc_malloc(size.max(1)) };
    if p.is_null() && !v.nothrow {
        libc::abort();
    }
    allocated(if v.array { NEW_ARRAY } else { NEW }, p, size, pc, sp)
}

/// `operator delete` variant `V` (sized, aligned and nothrow ones included).
unsafe extern "C" fn delete_imp<const V: usize>(p: usize, _: usize, _: usize, pc: u64, sp: u64) {
    if p != 0 {
        let kind = if memlens_contract::entry::delete_is_array(V) { DELETE_ARRAY } else { DELETE };
        tell(OP_FREE + kind, p as u64, 0, pc, 0, sp);
    }
    __libc_free(p as *mut c_void)
}

unsafe extern "C" fn visit(info: *mut dl_phdr_info, _size: usize, _: *mut c_void) -> c_int {
    let info = &*info;
    if !info.dlpi_name.is_null() {
        let len = libc::strlen(info.dlpi_name);
        if len > 0 {
            tell(OP_MODULE, info.dlpi_addr, info.dlpi_name as u64, 0, len as u64, 0);
        }
    }
    0
}

fn report_modules() {
    // SAFETY: the callback only reads what the loader hands it.
    unsafe { libc::dl_iterate_phdr(Some(visit), core::ptr::null_mut()) };
}

/// Tells the plugin the calling thread's stack bounds and thread pointer.
fn report_stack() {
    // SAFETY: pthread_getattr_np fills `attr`, which is destroyed after use; the
    // thread pointer is the first word of the TCB (x86-64 TLS ABI).
    unsafe {
        let mut attr: libc::pthread_attr_t = core::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return;
        }
        let (mut addr, mut size) = (core::ptr::null_mut(), 0usize);
        let ok = libc::pthread_attr_getstack(&attr, &mut addr, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        let tp: u64;
        core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
        if ok {
            tell(OP_STACK, addr as u64, addr as u64 + size as u64, 0, tp, 0);
        }
    }
}

extern "C" fn init() {
    own(|| {
        report_modules();
        report_stack();
    });
}

// pthread synchronisation: the plugin stamps a clock before each release and after
// each acquire, so that `dump --merged` orders the threads' events consistently with
// them. Until a second thread exists nothing can be ordered: no system call then.

/// A second thread was created (stays set).
static THREADED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

#[inline(always)]
fn sync_point() {
    if THREADED.load(core::sync::atomic::Ordering::Relaxed) {
        tell(OP_SYNC, 0, 0, 0, 0, 0);
    }
}

/// The next definition of `name` (glibc's) of symbol version `ver` (`""`: the
/// default one), looked up once.
macro_rules! real {
    ($name:expr, $ver:literal, $ty:ty) => {{
        static P: core::sync::atomic::AtomicPtr<c_void> =
            core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());
        let mut p = P.load(core::sync::atomic::Ordering::Relaxed);
        if p.is_null() {
            let name = concat!($name, "\0").as_ptr() as *const c_char;
            p = own(|| {
                if $ver.is_empty() {
                    libc::dlsym(libc::RTLD_NEXT, name)
                } else {
                    libc::dlvsym(
                        libc::RTLD_NEXT,
                        name,
                        concat!($ver, "\0").as_ptr() as *const c_char,
                    )
                }
            });
            P.store(p, core::sync::atomic::Ordering::Relaxed);
        }
        core::mem::transmute::<*mut c_void, $ty>(p)
    }};
}

/// The synchronisation interposers of `memlens-contract`'s table: each stamps
/// before (release), after (acquire) or around (both) the real call.
macro_rules! sync_entries {
    (@acquire $n:ident $v:literal) => { sync_entries!(@def $n $v; (o: P) -> c_int; acquire); };
    (@acquire_timed $n:ident $v:literal) => {
        sync_entries!(@def $n $v; (o: P, t: P) -> c_int; acquire);
    };
    (@sem_acquire $n:ident $v:literal) => { sync_entries!(@def $n $v; (o: P) -> c_int; acquire); };
    (@sem_acquire_timed $n:ident $v:literal) => {
        sync_entries!(@def $n $v; (o: P, t: P) -> c_int; acquire);
    };
    (@release $n:ident $v:literal) => { sync_entries!(@def $n $v; (o: P) -> c_int; release); };
    (@cond_wait $n:ident $v:literal) => { sync_entries!(@def $n $v; (c: P, m: P) -> c_int; both); };
    (@cond_timedwait $n:ident $v:literal) => {
        sync_entries!(@def $n $v; (c: P, m: P, t: P) -> c_int; both);
    };
    (@barrier $n:ident $v:literal) => { sync_entries!(@def $n $v; (b: P) -> c_int; both); };
    (@join $n:ident $v:literal) => {
        sync_entries!(@def $n $v; (t: libc::pthread_t, r: *mut P) -> c_int; acquire);
    };
    (@def $name:ident $ver:literal; ($($a:ident: $t:ty),*) -> $r:ty; $when:ident) => {
        /// The pthread function of the same name, with a synchronisation stamp.
        ///
        /// # Safety
        /// The same contract as the function it stands for.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            let f = real!(stringify!($name), $ver, unsafe extern "C" fn($($t),*) -> $r);
            sync_entries!(@$when f($($a),*))
        }
    };
    (@release $call:expr) => {{ sync_point(); $call }};
    (@acquire $call:expr) => {{ let r = $call; sync_point(); r }};
    (@both $call:expr) => {{ sync_point(); let r = $call; sync_point(); r }};
    ($($name:ident = $ver:literal, $class:ident;)*) => { $(sync_entries!(@$class $name $ver);)* };
}

type P = *mut c_void;
memlens_contract::sync_entry_points!(sync_entries);

/// A new thread's start: report its stack, then run the program's start routine.
unsafe extern "C" fn thread_start(arg: P) -> P {
    let (f, a) = *(arg as *mut (extern "C" fn(P) -> P, P));
    __libc_free(arg);
    own(report_stack);
    f(a)
}

/// `pthread_create`: marks the process multi-threaded and has the new thread report
/// its stack (the plugin stamps the creation itself).
///
/// # Safety
/// The same contract as `pthread_create(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_create(
    t: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    f: extern "C" fn(P) -> P,
    arg: P,
) -> c_int {
    type Create = unsafe extern "C" fn(
        *mut libc::pthread_t,
        *const libc::pthread_attr_t,
        extern "C" fn(P) -> P,
        P,
    ) -> c_int;
    let real = real!("pthread_create", "", Create);
    THREADED.store(true, core::sync::atomic::Ordering::Relaxed);
    // Not malloc: that would record an allocation the program did not make.
    let b = __libc_malloc(core::mem::size_of::<(extern "C" fn(P) -> P, P)>());
    if b.is_null() {
        return libc::EAGAIN;
    }
    (b as *mut (extern "C" fn(P) -> P, P)).write((f, arg));
    // SAFETY: thread_start has the start routine's ABI.
    let start: extern "C" fn(P) -> P =
        core::mem::transmute(thread_start as unsafe extern "C" fn(P) -> P);
    let r = real(t, attr, start, b);
    if r != 0 {
        __libc_free(b);
    }
    r
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = init;

type DlopenFn = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;

/// `dlopen`: the real one, then a fresh module report.
///
/// # Safety
/// The same contract as `dlopen(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void {
    let real = own(|| libc::dlsym(libc::RTLD_NEXT, c"dlopen".as_ptr()));
    if real.is_null() {
        return core::ptr::null_mut();
    }
    let real: DlopenFn = core::mem::transmute(real);
    let h = real(file, mode);
    if !h.is_null() {
        own(report_modules);
    }
    h
}

/// `memlens_register_thread` of `memlens.h`.
#[unsafe(no_mangle)]
pub extern "C" fn memlens_register_thread(id: libc::c_long) {
    tell(OP_REGISTER_THREAD, id as u64, 0, 0, 0, 0);
}

/// `memlens_thread_name` of `memlens.h`.
///
/// # Safety
/// `name` is null or a C string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memlens_thread_name(name: *const c_char) {
    if !name.is_null() {
        tell(OP_THREAD_NAME, 0, name as u64, 0, libc::strlen(name) as u64, 0);
    }
}

/// `memlens_roi_begin` of `memlens.h`.
#[unsafe(no_mangle)]
pub extern "C" fn memlens_roi_begin() {
    tell(OP_ROI_BEGIN, 0, 0, 0, 0, 0);
}

/// `memlens_roi_end` of `memlens.h`.
#[unsafe(no_mangle)]
pub extern "C" fn memlens_roi_end() {
    tell(OP_ROI_END, 0, 0, 0, 0, 0);
}

/// `memlens_trace_on` of `memlens.h`.
#[unsafe(no_mangle)]
pub extern "C" fn memlens_trace_on() {
    tell(OP_TRACE_ON, 0, 0, 0, 0, 0);
}

/// `memlens_trace_off` of `memlens.h`.
#[unsafe(no_mangle)]
pub extern "C" fn memlens_trace_off() {
    tell(OP_TRACE_OFF, 0, 0, 0, 0, 0);
}
