//! Guest preload library of `memlens record --dbi`.
//!
//! Loaded into the traced program only (`qemu-x86_64 -E LD_PRELOAD=...`), never into
//! QEMU itself. It interposes the malloc family and C++ `operator new/delete`, does
//! the real work with glibc's exported `__libc_*` functions, and tells the memlens
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

const MALLOC: u64 = 0;
const CALLOC: u64 = 1;
const ALIGNED: u64 = 3;
const NEW: u64 = 4;
const NEW_ARRAY: u64 = 5;
const FREE: u64 = 0;
const DELETE: u64 = 1;
const DELETE_ARRAY: u64 = 2;

#[inline(always)]
fn tell(op: u64, a: u64, b: u64, pc: u64, c: u64, sp: u64) {
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
}

/// Trampoline: the return address goes to `$reg`, the stack pointer to `$sp`, then
/// jump to the implementation.
macro_rules! entry {
    ($name:ident = $sym:literal; ($($a:ident: $t:ty),*) $(-> $r:ty)?;
     $reg:literal, $sp:literal => $imp:path) => {
        /// The C library function of the same name, observed.
        ///
        /// # Safety
        /// The same contract as the C library function it stands for.
        #[unsafe(naked)]
        #[unsafe(export_name = $sym)]
        pub unsafe extern "C" fn $name($($a: $t),*) $(-> $r)? {
            naked_asm!(
                concat!("mov ", $reg, ", qword ptr [rsp]"),
                concat!("mov ", $sp, ", rsp"),
                "jmp {f}",
                f = sym $imp
            )
        }
    };
}

entry!(malloc = "malloc"; (size: usize) -> *mut c_void; "rsi", "rdx" => malloc_imp);
entry!(calloc = "calloc"; (n: usize, size: usize) -> *mut c_void; "rdx", "rcx" => calloc_imp);
entry!(realloc = "realloc"; (p: *mut c_void, size: usize) -> *mut c_void;
    "rdx", "rcx" => realloc_imp);
entry!(free = "free"; (p: *mut c_void); "rsi", "rdx" => free_imp);
entry!(memalign = "memalign"; (align: usize, size: usize) -> *mut c_void;
    "rdx", "rcx" => memalign_imp);
entry!(aligned_alloc = "aligned_alloc"; (align: usize, size: usize) -> *mut c_void;
    "rdx", "rcx" => memalign_imp);
entry!(posix_memalign = "posix_memalign";
    (out: *mut *mut c_void, align: usize, size: usize) -> c_int; "rcx", "r8" => posix_memalign_imp);
entry!(op_new = "_Znwm"; (size: usize) -> *mut c_void; "rsi", "rdx" => new_imp);
entry!(op_new_array = "_Znam"; (size: usize) -> *mut c_void; "rsi", "rdx" => new_array_imp);
entry!(op_new_nothrow = "_ZnwmRKSt9nothrow_t"; (size: usize, nt: *const c_void) -> *mut c_void;
    "rsi", "rdx" => new_imp);
entry!(op_new_array_nothrow = "_ZnamRKSt9nothrow_t"; (size: usize, nt: *const c_void) -> *mut c_void;
    "rsi", "rdx" => new_array_imp);
entry!(op_delete = "_ZdlPv"; (p: *mut c_void); "rsi", "rdx" => delete_imp);
entry!(op_delete_sized = "_ZdlPvm"; (p: *mut c_void, size: usize); "rsi", "rdx" => delete_imp);
entry!(op_delete_array = "_ZdaPv"; (p: *mut c_void); "rsi", "rdx" => delete_array_imp);
entry!(op_delete_array_sized = "_ZdaPvm"; (p: *mut c_void, size: usize);
    "rsi", "rdx" => delete_array_imp);

unsafe extern "C" fn malloc_imp(size: usize, pc: u64, sp: u64) -> *mut c_void {
    let p = __libc_malloc(size);
    if !p.is_null() {
        tell(OP_ALLOC + MALLOC, p as u64, size as u64, pc, 0, sp);
    }
    p
}

unsafe extern "C" fn calloc_imp(n: usize, size: usize, pc: u64, sp: u64) -> *mut c_void {
    let p = __libc_calloc(n, size);
    if !p.is_null() {
        tell(OP_ALLOC + CALLOC, p as u64, n.wrapping_mul(size) as u64, pc, 0, sp);
    }
    p
}

unsafe extern "C" fn realloc_imp(old: *mut c_void, size: usize, pc: u64, sp: u64) -> *mut c_void {
    let p = __libc_realloc(old, size);
    if !p.is_null() || size == 0 {
        tell(OP_REALLOC, p as u64, size as u64, pc, old as u64, sp);
    }
    p
}

unsafe extern "C" fn free_imp(p: *mut c_void, pc: u64, sp: u64) {
    if !p.is_null() {
        tell(OP_FREE + FREE, p as u64, 0, pc, 0, sp);
    }
    __libc_free(p)
}

unsafe extern "C" fn memalign_imp(align: usize, size: usize, pc: u64, sp: u64) -> *mut c_void {
    let p = __libc_memalign(align, size);
    if !p.is_null() {
        tell(OP_ALLOC + ALIGNED, p as u64, size as u64, pc, 0, sp);
    }
    p
}

unsafe extern "C" fn posix_memalign_imp(
    out: *mut *mut c_void,
    align: usize,
    size: usize,
    pc: u64,
    sp: u64,
) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(core::mem::size_of::<usize>()) {
        return libc::EINVAL;
    }
    let p = __libc_memalign(align, size);
    if p.is_null() {
        return libc::ENOMEM;
    }
    *out = p;
    tell(OP_ALLOC + ALIGNED, p as u64, size as u64, pc, 0, sp);
    0
}

/// `operator new` without the new-handler loop: a failed allocation aborts
/// (`bad_alloc` cannot be thrown from here).
unsafe fn new_common(size: usize, kind: u64, pc: u64, sp: u64) -> *mut c_void {
    let p = __libc_malloc(size.max(1));
    if p.is_null() {
        libc::abort();
    }
    tell(OP_ALLOC + kind, p as u64, size as u64, pc, 0, sp);
    p
}

unsafe extern "C" fn new_imp(size: usize, pc: u64, sp: u64) -> *mut c_void {
    new_common(size, NEW, pc, sp)
}

unsafe extern "C" fn new_array_imp(size: usize, pc: u64, sp: u64) -> *mut c_void {
    new_common(size, NEW_ARRAY, pc, sp)
}

unsafe extern "C" fn delete_imp(p: *mut c_void, pc: u64, sp: u64) {
    if !p.is_null() {
        tell(OP_FREE + DELETE, p as u64, 0, pc, 0, sp);
    }
    __libc_free(p)
}

unsafe extern "C" fn delete_array_imp(p: *mut c_void, pc: u64, sp: u64) {
    if !p.is_null() {
        tell(OP_FREE + DELETE_ARRAY, p as u64, 0, pc, 0, sp);
    }
    __libc_free(p)
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

extern "C" fn init() {
    report_modules();
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
    let real = libc::dlsym(libc::RTLD_NEXT, c"dlopen".as_ptr());
    if real.is_null() {
        return core::ptr::null_mut();
    }
    let real: DlopenFn = core::mem::transmute(real);
    let h = real(file, mode);
    if !h.is_null() {
        report_modules();
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
