//! Masked, expanding/compressing and gather/scatter accesses: the calls that
//! memlens's LLVM pass (crates/pass) inserts where clang's TSan pass records
//! nothing. Each takes the address, the active lanes and the element size; the
//! code address is the return address, as for every other callback.
//!
//! A contiguous masked access is recorded as one range per run of consecutive
//! active lanes (an all-active 32-byte `vmaskmov` is one 32-byte access, like the
//! unmasked load); a gather or scatter as one access per active lane.

use crate::record;

/// `mask`: bit `i` set when lane `i` is active.
unsafe extern "C" fn imp_masked<const WRITE: bool>(addr: usize, mask: u64, elem: u64, pc: usize) {
    let mut m = mask;
    while m != 0 {
        let first = m.trailing_zeros() as u64;
        let run = (m >> first).trailing_ones() as u64;
        record::range(WRITE, pc as u64, addr as u64 + first * elem, run * elem, true);
        if first + run >= 64 {
            break;
        }
        m &= !(((1u64 << run) - 1) << first);
    }
}

/// `mask`: active lanes of an expanding load or compressing store, whose elements
/// are packed one after another from `addr`.
unsafe extern "C" fn imp_packed<const WRITE: bool>(addr: usize, mask: u64, elem: u64, pc: usize) {
    record::range(WRITE, pc as u64, addr as u64, u64::from(mask.count_ones()) * elem, true);
}

/// One lane of a gather or scatter.
unsafe extern "C" fn imp_lane<const WRITE: bool>(addr: usize, active: u64, elem: u64, pc: usize) {
    if active != 0 {
        record::range(WRITE, pc as u64, addr as u64, elem, true);
    }
}

entry!("C" fn __memlens_masked_read = "__memlens_masked_read"; (addr: usize, mask: u64, elem: u64);
    ["mov rcx, qword ptr [rsp]"] => imp_masked::<false>);
entry!("C" fn __memlens_masked_write = "__memlens_masked_write"; (addr: usize, mask: u64, elem: u64);
    ["mov rcx, qword ptr [rsp]"] => imp_masked::<true>);
entry!("C" fn __memlens_packed_read = "__memlens_packed_read"; (addr: usize, mask: u64, elem: u64);
    ["mov rcx, qword ptr [rsp]"] => imp_packed::<false>);
entry!("C" fn __memlens_packed_write = "__memlens_packed_write"; (addr: usize, mask: u64, elem: u64);
    ["mov rcx, qword ptr [rsp]"] => imp_packed::<true>);
entry!("C" fn __memlens_lane_read = "__memlens_lane_read"; (addr: usize, active: u64, elem: u64);
    ["mov rcx, qword ptr [rsp]"] => imp_lane::<false>);
entry!("C" fn __memlens_lane_write = "__memlens_lane_write"; (addr: usize, active: u64, elem: u64);
    ["mov rcx, qword ptr [rsp]"] => imp_lane::<true>);
