//! Allocation interposers: the malloc family, C++ `operator new/delete`, and the
//! entry points for user allocators described in an `alloc.in` file.
//!
//! Defined in the program itself, these win over libc's at link time (and, being
//! exported, for every shared library too). The real work goes to glibc's exported
//! `__libc_*` functions, or for `operator new/delete` to libstdc++'s own (found with
//! `dlsym(RTLD_NEXT)`, called with the guard held so their inner `malloc` is not
//! recorded twice, and so `bad_alloc` and the new-handler behave as usual). Each
//! trampoline passes the call site (return address) and the caller's frame pointer,
//! the start of the recorded call stack.
//!
//! Allocations made by the runtime itself (guard held) are never recorded; on the
//! fatal-signal path they come from a static arena, since the crash may have
//! happened inside malloc.

use crate::real::{self, __libc_calloc, __libc_free, __libc_malloc, __libc_memalign, R};
use crate::state::{ts, Guard};
use crate::{liveheap, record};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering::*};
use libc::c_void;
use memlens_format::{AllocKind, FreeKind};

const ARENA_SIZE: usize = 8 << 20;

#[repr(C, align(4096))]
struct Arena(UnsafeCell<[u8; ARENA_SIZE]>);
// SAFETY: disjoint blocks are handed out by an atomic bump pointer.
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena(UnsafeCell::new([0; ARENA_SIZE]));
static ARENA_TOP: AtomicUsize = AtomicUsize::new(0);

fn arena_base() -> usize {
    ARENA.0.get() as usize
}

fn in_arena(p: usize) -> bool {
    p.wrapping_sub(arena_base()) < ARENA_SIZE
}

/// Bump allocation with a 16-byte size header; never freed.
fn arena_alloc(size: usize, align: usize) -> usize {
    let align = align.clamp(16, 4096);
    let mut top = ARENA_TOP.load(Relaxed);
    loop {
        let start = (arena_base() + top + 16).next_multiple_of(align);
        let end = start + size;
        if end > arena_base() + ARENA_SIZE {
            return 0;
        }
        match ARENA_TOP.compare_exchange(top, end - arena_base(), Relaxed, Relaxed) {
            Ok(_) => {
                // SAFETY: `start - 16 .. end` is ours now.
                unsafe { *((start - 8) as *mut usize) = size };
                return start;
            }
            Err(t) => top = t,
        }
    }
}

/// Allocation for runtime-internal use (guard held).
fn internal(size: usize, align: usize) -> usize {
    if ts().crash.get() {
        return arena_alloc(size, align);
    }
    // SAFETY: plain glibc allocation.
    unsafe {
        if align <= 16 {
            __libc_malloc(size) as usize
        } else {
            __libc_memalign(align, size) as usize
        }
    }
}

#[inline(always)]
fn guarded() -> bool {
    ts().guard.get() != 0
}

/// A new block `p` (0: none) of `size` bytes made at call site `pc`: told to the
/// live heap and recorded. Returns `p`.
#[inline(always)]
fn allocated(kind: AllocKind, p: usize, size: usize, pc: usize, fp: usize) -> usize {
    if p != 0 {
        if liveheap::on() {
            liveheap::alloc(pc as u64, p as u64, size as u64);
        }
        record::alloc(kind, pc as u64, fp, p as u64, size as u64);
    }
    p
}

/// malloc-family trampolines: arguments in rdi, rsi, rdx; call site into rcx and
/// the caller's frame pointer into r8.
macro_rules! alloc_entry {
    ($abi:literal fn $name:ident = $sym:expr; ($($a:ident: $t:ty),*) $(-> $r:ty)? => $imp:path) => {
        entry!($abi fn $name = $sym; ($($a: $t),*) $(-> $r)?;
            ["mov rcx, qword ptr [rsp]", "mov r8, rbp"] => $imp);
    };
}

unsafe extern "C" fn malloc_imp(size: usize, _: usize, _: usize, pc: usize, fp: usize) -> usize {
    if guarded() {
        return internal(size, 16);
    }
    allocated(AllocKind::Malloc, __libc_malloc(size) as usize, size, pc, fp)
}

unsafe extern "C" fn calloc_imp(n: usize, size: usize, _: usize, pc: usize, fp: usize) -> usize {
    if guarded() {
        if ts().crash.get() {
            // Arena memory starts zeroed and is never reused.
            return n.checked_mul(size).map_or(0, |b| arena_alloc(b, 16));
        }
        return __libc_calloc(n, size) as usize;
    }
    allocated(AllocKind::Calloc, __libc_calloc(n, size) as usize, n.wrapping_mul(size), pc, fp)
}

unsafe extern "C" fn realloc_imp(old: usize, size: usize, _: usize, pc: usize, fp: usize) -> usize {
    if in_arena(old) {
        let n = arena_alloc(size, 16);
        if n != 0 {
            let had = *((old - 8) as *const usize);
            crate::strings::real_memcpy(n as *mut u8, old as *const u8, had.min(size));
        }
        return n;
    }
    if guarded() {
        if ts().crash.get() && old == 0 {
            return arena_alloc(size, 16);
        }
        return real::__libc_realloc(old as *mut c_void, size) as usize;
    }
    record::before_op();
    let heap = liveheap::on();
    let had = if heap { liveheap::realloc_start(old as u64) } else { None };
    let p = real::__libc_realloc(old as *mut c_void, size) as usize;
    if heap {
        liveheap::realloc_done(pc as u64, had, old as u64, p as u64, size as u64);
    }
    if p != 0 || (old != 0 && size == 0) {
        record::realloc(pc as u64, fp, old as u64, p as u64, size as u64);
    }
    p
}

unsafe extern "C" fn free_imp(p: usize, _: usize, _: usize, pc: usize, _fp: usize) -> usize {
    if p == 0 || in_arena(p) {
        return 0;
    }
    // before the address can be handed out again
    if liveheap::on() {
        liveheap::free(p as u64);
    }
    if !guarded() {
        record::free(FreeKind::Free, pc as u64, p as u64);
    }
    __libc_free(p as *mut c_void);
    0
}

unsafe extern "C" fn posix_memalign_imp(
    out: usize,
    align: usize,
    size: usize,
    pc: usize,
    fp: usize,
) -> usize {
    if !valid_align(align) {
        return libc::EINVAL as usize;
    }
    let p = if guarded() { internal(size, align) } else { __libc_memalign(align, size) as usize };
    if p == 0 {
        return libc::ENOMEM as usize;
    }
    *(out as *mut usize) = p;
    if !guarded() {
        allocated(AllocKind::Aligned, p, size, pc, fp);
    }
    0
}

unsafe extern "C" fn memalign_imp(
    align: usize,
    size: usize,
    _: usize,
    pc: usize,
    fp: usize,
) -> usize {
    if guarded() {
        return internal(size, align);
    }
    allocated(AllocKind::Aligned, __libc_memalign(align, size) as usize, size, pc, fp)
}

unsafe extern "C" fn valloc_imp(size: usize, _: usize, _: usize, pc: usize, fp: usize) -> usize {
    if guarded() {
        return internal(size, 4096);
    }
    allocated(AllocKind::Aligned, real::__libc_valloc(size) as usize, size, pc, fp)
}

unsafe extern "C" fn pvalloc_imp(size: usize, _: usize, _: usize, pc: usize, fp: usize) -> usize {
    if guarded() {
        return internal(size.next_multiple_of(4096).max(4096), 4096);
    }
    allocated(AllocKind::Aligned, real::__libc_pvalloc(size) as usize, size, pc, fp)
}

macro_rules! alloc_entries {
    ($($abi:literal fn $name:ident = $sym:literal, $role:ident, $imp:path;
       ($($a:ident: $t:ty),*) $(-> $r:ty)?;)*) => {
        $(alloc_entry!($abi fn $name = $sym; ($($a: $t),*) $(-> $r)? => $imp);)*
    };
}

// The entry points both recorders interpose (`memlens-contract`).
memlens_contract::alloc_entry_points!(alloc_entries);
memlens_contract::forwarding_alloc_imps!(usize);

type Fwd = unsafe extern "C-unwind" fn(usize, usize, usize) -> usize;

/// The real `operator new` of variant `V` (`memlens_contract::entry::NEW_VARIANTS`).
const NEW: [R; 8] = [
    R::new,
    R::new_array,
    R::new_nothrow,
    R::new_array_nothrow,
    R::new_aligned,
    R::new_array_aligned,
    R::new_aligned_nothrow,
    R::new_array_aligned_nothrow,
];

unsafe extern "C-unwind" fn new_imp<const V: usize>(
    a0: usize,
    a1: usize,
    a2: usize,
    pc: usize,
    fp: usize,
) -> usize {
    let v = memlens_contract::entry::NEW_VARIANTS[V];
    let (aligned, nothrow) = (v.aligned, v.nothrow);
    let kind = if v.array { AllocKind::NewArray } else { AllocKind::New };
    let f = real::get(NEW[V]);
    let p = {
        let _g = Guard::new();
        if f != 0 {
            core::mem::transmute::<usize, Fwd>(f)(a0, a1, a2)
        } else {
            // No libstdc++ (cannot happen in a C++ program): plain allocation.
            let p = if aligned { __libc_memalign(a1, a0) } else { __libc_malloc(a0.max(1)) };
            if p.is_null() && !nothrow {
                libc::abort();
            }
            p as usize
        }
    };
    allocated(kind, p, a0, pc, fp)
}

/// The real `operator delete` of variant `V` (the array ones are odd).
const DELETE: [R; 12] = [
    R::delete,
    R::delete_array,
    R::delete_sized,
    R::delete_array_sized,
    R::delete_aligned,
    R::delete_array_aligned,
    R::delete_sized_aligned,
    R::delete_array_sized_aligned,
    R::delete_nothrow,
    R::delete_array_nothrow,
    R::delete_aligned_nothrow,
    R::delete_array_aligned_nothrow,
];

unsafe extern "C-unwind" fn delete_imp<const V: usize>(
    a0: usize,
    a1: usize,
    a2: usize,
    pc: usize,
    _fp: usize,
) -> usize {
    if a0 == 0 {
        return 0;
    }
    let r = DELETE[V];
    let kind = if memlens_contract::entry::delete_is_array(V) {
        FreeKind::DeleteArray
    } else {
        FreeKind::Delete
    };
    if liveheap::on() {
        liveheap::free(a0 as u64);
    }
    record::free(kind, pc as u64, a0 as u64);
    let f = real::get(r);
    let _g = Guard::new();
    if f != 0 {
        core::mem::transmute::<usize, Fwd>(f)(a0, a1, a2);
    } else {
        __libc_free(a0 as *mut c_void);
    }
    0
}

unsafe extern "C" fn custom_alloc_imp(
    num_idx: i64,
    size_idx: i64,
    addr_idx: i64,
    args: *const u64,
    retval: u64,
    pc: u64,
    wrapper_fp: usize,
) {
    if args.is_null() {
        return;
    }
    let arg = |i: i64| if (0..6).contains(&i) { *args.add(i as usize) } else { 0 };
    let num = if num_idx == -1 { 1 } else { arg(num_idx) };
    let size = arg(size_idx);
    let addr = if addr_idx == -1 {
        retval
    } else {
        let slot = arg(addr_idx) as *const u64;
        if slot.is_null() {
            0
        } else {
            *slot
        }
    };
    // The generated wrapper keeps a frame pointer; the one it saved is its caller's,
    // where the call stack starts, as for malloc.
    let st = crate::state::ts();
    let on_stack = wrapper_fp >= st.stack_lo.get() && wrapper_fp + 8 <= st.stack_hi.get();
    let fp = if on_stack && wrapper_fp & 7 == 0 { *(wrapper_fp as *const usize) } else { 0 };
    allocated(AllocKind::Custom, addr as usize, num.wrapping_mul(size) as usize, pc as usize, fp);
}

/// A user allocator returned (or stored) a block: called by the wrappers the
/// compiler driver generates from an `alloc.in` description with the first six
/// arguments of `custom_alloc_imp`, `(num_idx, size_idx, addr_idx, args, retval,
/// pc)`. `args` holds the allocator's first six integer arguments; an index of -1
/// means "1 element" for `num_idx` and "the return value" for `addr_idx`. All six
/// argument registers are taken, so the trampoline passes the wrapper's frame
/// pointer as a seventh, on the stack. (The asm reads no parameter by name: they
/// are declared once, on the function it calls.)
#[unsafe(naked)]
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn __memlens_custom_alloc() {
    // entry rsp = 8 mod 16; one push realigns for the call.
    core::arch::naked_asm!("push rbp", "call {f}", "add rsp, 8", "ret", f = sym custom_alloc_imp)
}

/// A user deallocator is about to release `args[addr_idx]`.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn __memlens_custom_free(args: *const u64, addr_idx: i64, pc: u64) {
    if args.is_null() || !(0..6).contains(&addr_idx) {
        return;
    }
    let addr = *args.add(addr_idx as usize);
    if addr != 0 {
        if liveheap::on() {
            liveheap::free(addr);
        }
        record::free(FreeKind::Custom, pc, addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arena_blocks_are_aligned_disjoint_and_sized() {
        let a = arena_alloc(10, 16);
        let b = arena_alloc(100, 64);
        assert!(in_arena(a) && in_arena(b) && !in_arena(0));
        assert_eq!((a % 16, b % 64), (0, 0));
        assert!(b >= a + 10);
        // SAFETY: the size header sits just below each block.
        unsafe { assert_eq!((*((a - 8) as *const usize), *((b - 8) as *const usize)), (10, 100)) };
        assert_eq!(arena_alloc(ARENA_SIZE, 16), 0);
    }
}
