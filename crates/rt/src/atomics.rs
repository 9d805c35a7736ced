//! `__tsan_atomic{8,16,32,64,128}_*`: the TSan pass replaces each atomic instruction
//! with one of these calls, so the runtime performs the operation itself (with
//! `core::sync::atomic`, or `cmpxchg16b` for 128 bits) and records one event: an
//! atomic access for load/store, an `Rmw` for read-modify-writes and successful
//! compare-exchanges, `Rmw { op: CasFailed }` for a failed one.
//!
//! Memory orders arrive as C11 `memory_order` values (gcc may set high bits, hence
//! `mo & 7`). Orders a Rust operation cannot take (a release load, an acquire store)
//! are strengthened to `SeqCst`; a failure order is weakened to what Rust allows.

use crate::{order, record};
use core::sync::atomic::{
    compiler_fence, fence, AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering::*,
};
use memlens_format::codec::access_tag;
use memlens_format::AccessKind::{Read, Write};
use memlens_format::RmwOp;

use core::sync::atomic::Ordering;

/// The order `mo` asks for.
pub(crate) fn order(mo: i32) -> Ordering {
    match mo & 7 {
        0 => Relaxed,
        1 | 2 => Acquire,
        3 => Release,
        4 => AcqRel,
        _ => SeqCst,
    }
}

fn load_order(mo: i32) -> Ordering {
    match order(mo) {
        Release | AcqRel => SeqCst,
        o => o,
    }
}

fn store_order(mo: i32) -> Ordering {
    match order(mo) {
        Acquire | AcqRel => SeqCst,
        o => o,
    }
}

fn fail_order(fmo: i32) -> Ordering {
    match order(fmo) {
        Release => Relaxed,
        AcqRel => Acquire,
        o => o,
    }
}

/// `atomic_thread_fence(mo)`.
pub(crate) fn thread_fence(mo: i32) {
    match order(mo) {
        Relaxed => {}
        o => fence(o),
    }
}

/// `atomic_signal_fence(mo)`.
pub(crate) fn signal_fence(mo: i32) {
    match order(mo) {
        Relaxed => {}
        o => compiler_fence(o),
    }
}

macro_rules! rmw_op {
    ($bits:literal, $imp:ident, $ent:ident, $sfx:literal, $op:ident, $method:ident) => {
        unsafe extern "C" fn $imp(a: *mut T, v: T, mo: i32, pc: usize) -> T {
            let (old, t) = order::atomic_rmw(a as u64, || at(a).$method(v, order(mo)));
            record::clocked_rmw(t, RmwOp::$op, LG, pc as u64, a as u64, old as u64);
            old
        }
        entry!("C" fn $ent = concat!("__tsan_atomic", $bits, $sfx); (a: *mut T, v: T, mo: i32) -> T;
            ["mov rcx, qword ptr [rsp]"] => $imp);
    };
}

macro_rules! family {
    ($m:ident, $bits:literal, $t:ty, $at:ty, $lg:literal) => {
        mod $m {
            use super::*;
            type T = $t;
            const LG: u8 = $lg;
            const AR: u8 = access_tag(Read, true, LG);
            const AW: u8 = access_tag(Write, true, LG);

            #[inline(always)]
            unsafe fn at<'a>(a: *mut T) -> &'a $at {
                <$at>::from_ptr(a)
            }

            unsafe extern "C" fn load(a: *mut T, mo: i32, pc: usize) -> T {
                let (v, t) = order::atomic(a as u64, || at(a).load(load_order(mo)));
                record::clocked_atomic_access::<AR>(t, pc as u64, a as u64, v as u64);
                v
            }

            unsafe extern "C" fn store(a: *mut T, v: T, mo: i32, pc: usize) {
                let ((), t) = order::atomic(a as u64, || at(a).store(v, store_order(mo)));
                record::clocked_atomic_access::<AW>(t, pc as u64, a as u64, v as u64);
            }

            unsafe extern "C" fn cas(
                a: *mut T,
                c: *mut T,
                v: T,
                mo: i32,
                fmo: i32,
                pc: usize,
            ) -> i32 {
                let want = *c;
                let (r, t) = order::atomic_rmw(a as u64, || {
                    at(a).compare_exchange(want, v, order(mo), fail_order(fmo))
                });
                match r {
                    Ok(old) => {
                        record::clocked_rmw(t, RmwOp::Cas, LG, pc as u64, a as u64, old as u64);
                        1
                    }
                    Err(cur) => {
                        *c = cur;
                        let op = order::failed_op();
                        record::clocked_rmw(t, op, LG, pc as u64, a as u64, cur as u64);
                        0
                    }
                }
            }

            unsafe extern "C" fn cas_val(
                a: *mut T,
                c: T,
                v: T,
                mo: i32,
                fmo: i32,
                pc: usize,
            ) -> T {
                let (r, t) = order::atomic_rmw(a as u64, || {
                    at(a).compare_exchange(c, v, order(mo), fail_order(fmo))
                });
                match r {
                    Ok(old) => {
                        record::clocked_rmw(t, RmwOp::Cas, LG, pc as u64, a as u64, old as u64);
                        old
                    }
                    Err(cur) => {
                        let op = order::failed_op();
                        record::clocked_rmw(t, op, LG, pc as u64, a as u64, cur as u64);
                        cur
                    }
                }
            }

            entry!("C" fn e_load = concat!("__tsan_atomic", $bits, "_load");
                (a: *mut T, mo: i32) -> T; ["mov rdx, qword ptr [rsp]"] => load);
            entry!("C" fn e_store = concat!("__tsan_atomic", $bits, "_store");
                (a: *mut T, v: T, mo: i32); ["mov rcx, qword ptr [rsp]"] => store);
            rmw_op!($bits, xchg, e_xchg, "_exchange", Exchange, swap);
            rmw_op!($bits, add, e_add, "_fetch_add", FetchAdd, fetch_add);
            rmw_op!($bits, sub, e_sub, "_fetch_sub", FetchSub, fetch_sub);
            rmw_op!($bits, and, e_and, "_fetch_and", FetchAnd, fetch_and);
            rmw_op!($bits, or, e_or, "_fetch_or", FetchOr, fetch_or);
            rmw_op!($bits, xor, e_xor, "_fetch_xor", FetchXor, fetch_xor);
            rmw_op!($bits, nand, e_nand, "_fetch_nand", FetchNand, fetch_nand);
            entry!("C" fn e_cas_strong = concat!("__tsan_atomic", $bits, "_compare_exchange_strong");
                (a: *mut T, c: *mut T, v: T, mo: i32, fmo: i32) -> i32;
                ["mov r9, qword ptr [rsp]"] => cas);
            entry!("C" fn e_cas_weak = concat!("__tsan_atomic", $bits, "_compare_exchange_weak");
                (a: *mut T, c: *mut T, v: T, mo: i32, fmo: i32) -> i32;
                ["mov r9, qword ptr [rsp]"] => cas);
            entry!("C" fn e_cas_val = concat!("__tsan_atomic", $bits, "_compare_exchange_val");
                (a: *mut T, c: T, v: T, mo: i32, fmo: i32) -> T;
                ["mov r9, qword ptr [rsp]"] => cas_val);
        }
    };
}

family!(a8, "8", u8, AtomicU8, 0);
family!(a16, "16", u16, AtomicU16, 1);
family!(a32, "32", u32, AtomicU32, 2);
family!(a64, "64", u64, AtomicU64, 3);

/// 128-bit atomics (gcc and clang both emit them for `_Atomic __int128`), done with
/// `lock cmpxchg16b`. A load is a compare-exchange of 0 with 0, so it needs writable
/// memory. `__int128` arguments travel as two registers (low half first) and results
/// come back in rax:rdx, which the `Pair` struct reproduces.
mod a128 {
    use super::*;

    const LG: u8 = 4;
    const AR: u8 = access_tag(Read, true, LG);
    const AW: u8 = access_tag(Write, true, LG);

    #[repr(C)]
    pub(crate) struct Pair {
        lo: u64,
        hi: u64,
    }

    fn pair(v: u128) -> Pair {
        Pair { lo: v as u64, hi: (v >> 64) as u64 }
    }

    fn join(lo: u64, hi: u64) -> u128 {
        (u128::from(hi) << 64) | u128::from(lo)
    }

    /// Returns the previous value; the swap happened iff it equals `old`.
    #[inline(always)]
    unsafe fn cas16(p: *mut u128, old: u128, new: u128) -> u128 {
        let (mut lo, mut hi) = (old as u64, (old >> 64) as u64);
        // rbx is reserved by LLVM: swap the new low half in and out around the insn.
        core::arch::asm!(
            "xchg {nlo}, rbx",
            "lock cmpxchg16b xmmword ptr [{p}]",
            "mov rbx, {nlo}",
            p = in(reg) p,
            nlo = inout(reg) new as u64 => _,
            in("rcx") (new >> 64) as u64,
            inout("rax") lo,
            inout("rdx") hi,
            options(nostack),
        );
        join(lo, hi)
    }

    unsafe fn update(a: *mut u128, f: impl Fn(u128) -> u128) -> u128 {
        let mut cur = cas16(a, 0, 0);
        loop {
            let prev = cas16(a, cur, f(cur));
            if prev == cur {
                return cur;
            }
            cur = prev;
        }
    }

    unsafe extern "C" fn load(a: *mut u128, _mo: i32, pc: usize) -> Pair {
        let (v, t) = order::atomic(a as u64, || cas16(a, 0, 0));
        record::clocked(t);
        record::atomic_access::<AR>(pc as u64, a as u64, v as u64);
        pair(v)
    }

    unsafe extern "C" fn store(a: *mut u128, lo: u64, hi: u64, _mo: i32, pc: usize) {
        let (_, t) = order::atomic(a as u64, || update(a, |_| join(lo, hi)));
        record::clocked(t);
        record::atomic_access::<AW>(pc as u64, a as u64, lo);
    }

    macro_rules! op128 {
        ($imp:ident, $ent:ident, $sym:literal, $op:ident, |$c:ident, $v:ident| $e:expr) => {
            unsafe extern "C" fn $imp(a: *mut u128, lo: u64, hi: u64, _mo: i32, pc: usize) -> Pair {
                let $v = join(lo, hi);
                let (old, t) = order::atomic_rmw(a as u64, || update(a, |$c| $e));
                record::clocked(t);
                record::rmw(RmwOp::$op, LG, pc as u64, a as u64, old as u64);
                pair(old)
            }
            entry!("C" fn $ent = $sym; (a: *mut u128, lo: u64, hi: u64, mo: i32) -> Pair;
                ["mov r8, qword ptr [rsp]"] => $imp);
        };
    }

    op128!(xchg, e_xchg, "__tsan_atomic128_exchange", Exchange, |_c, v| v);
    op128!(add, e_add, "__tsan_atomic128_fetch_add", FetchAdd, |c, v| c.wrapping_add(v));
    op128!(sub, e_sub, "__tsan_atomic128_fetch_sub", FetchSub, |c, v| c.wrapping_sub(v));
    op128!(and, e_and, "__tsan_atomic128_fetch_and", FetchAnd, |c, v| c & v);
    op128!(or, e_or, "__tsan_atomic128_fetch_or", FetchOr, |c, v| c | v);
    op128!(xor, e_xor, "__tsan_atomic128_fetch_xor", FetchXor, |c, v| c ^ v);
    op128!(nand, e_nand, "__tsan_atomic128_fetch_nand", FetchNand, |c, v| !(c & v));

    entry!("C" fn e_load = "__tsan_atomic128_load"; (a: *mut u128, mo: i32) -> Pair;
        ["mov rdx, qword ptr [rsp]"] => load);
    entry!("C" fn e_store = "__tsan_atomic128_store"; (a: *mut u128, lo: u64, hi: u64, mo: i32);
        ["mov r8, qword ptr [rsp]"] => store);

    /// `(a, *c, v, mo, fmo)` uses all six argument registers: the return address goes
    /// on the stack as a seventh argument.
    unsafe extern "C" fn cas(
        a: *mut u128,
        c: *mut u128,
        lo: u64,
        hi: u64,
        _mo: i32,
        _fmo: i32,
        pc: usize,
    ) -> i32 {
        let want = *c;
        let (prev, t) = order::atomic_rmw(a as u64, || cas16(a, want, join(lo, hi)));
        record::clocked(t);
        if prev == want {
            record::rmw(RmwOp::Cas, LG, pc as u64, a as u64, prev as u64);
            1
        } else {
            *c = prev;
            record::rmw(order::failed_op(), LG, pc as u64, a as u64, prev as u64);
            0
        }
    }

    /// `(a, c, v, mo | fmo)`: `fmo` already is on the stack; the trampoline pushes a
    /// copy of it and the return address as arguments seven and eight.
    #[allow(clippy::too_many_arguments)]
    unsafe extern "C" fn cas_val(
        a: *mut u128,
        clo: u64,
        chi: u64,
        vlo: u64,
        vhi: u64,
        _mo: i32,
        _fmo: i32,
        pc: usize,
    ) -> Pair {
        let want = join(clo, chi);
        let (prev, t) = order::atomic_rmw(a as u64, || cas16(a, want, join(vlo, vhi)));
        record::clocked(t);
        let op = if prev == want { RmwOp::Cas } else { order::failed_op() };
        record::rmw(op, LG, pc as u64, a as u64, prev as u64);
        pair(prev)
    }

    macro_rules! cas_entry {
        ($name:ident, $sym:literal) => {
            #[unsafe(naked)]
            #[cfg_attr(not(test), unsafe(export_name = $sym))]
            #[cfg_attr(test, allow(dead_code))]
            unsafe extern "C" fn $name(a: *mut u128, c: *mut u128, lo: u64, hi: u64, mo: i32, f: i32) -> i32 {
                // entry rsp = 8 mod 16; one push realigns for the call.
                core::arch::naked_asm!(
                    "push qword ptr [rsp]",
                    "call {f}",
                    "add rsp, 8",
                    "ret",
                    f = sym cas,
                )
            }
        };
    }
    cas_entry!(e_cas_strong, "__tsan_atomic128_compare_exchange_strong");
    cas_entry!(e_cas_weak, "__tsan_atomic128_compare_exchange_weak");

    #[unsafe(naked)]
    #[cfg_attr(not(test), unsafe(export_name = "__tsan_atomic128_compare_exchange_val"))]
    #[cfg_attr(test, allow(dead_code))]
    unsafe extern "C" fn e_cas_val(
        a: *mut u128,
        clo: u64,
        chi: u64,
        vlo: u64,
        vhi: u64,
        mo: i32,
    ) -> Pair {
        core::arch::naked_asm!(
            "sub rsp, 8",
            "push qword ptr [rsp + 8]",
            "push qword ptr [rsp + 24]",
            "call {f}",
            "add rsp, 24",
            "ret",
            f = sym cas_val,
        )
    }
}
