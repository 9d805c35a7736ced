//! SanitizerCoverage callbacks: `-fsanitize-coverage=…,trace-loads,trace-stores`
//! (clang) and `-C passes=sancov-module` with the sancov llvm-args (rustc). The
//! load/store callbacks take only the address; the size comes from the symbol and
//! the code address from the return address. Coverage callbacks are no-ops.

use crate::tsan::{imp_access, R0, R1, R2, R3, R4, W0, W1, W2, W3, W4};

macro_rules! cov {
    ($($name:ident = $tag:ident),* $(,)?) => {$(
        entry!("C" fn $name = stringify!($name); (addr: usize);
            ["mov rsi, qword ptr [rsp]"] => imp_access::<$tag>);
    )*};
}

cov! {
    __sanitizer_cov_load1 = R0, __sanitizer_cov_load2 = R1, __sanitizer_cov_load4 = R2,
    __sanitizer_cov_load8 = R3, __sanitizer_cov_load16 = R4,
    __sanitizer_cov_store1 = W0, __sanitizer_cov_store2 = W1, __sanitizer_cov_store4 = W2,
    __sanitizer_cov_store8 = W3, __sanitizer_cov_store16 = W4,
}

macro_rules! stubs {
    ($($name:ident($($a:ident: $t:ty),*)),* $(,)?) => {$(
        /// Coverage hook: memlens records memory accesses, not coverage.
        #[cfg_attr(not(test), unsafe(no_mangle))]
        pub extern "C" fn $name($(_: $t),*) {}
    )*};
}

stubs! {
    __sanitizer_cov_trace_pc_guard(g: *mut u32),
    __sanitizer_cov_trace_pc_guard_init(start: *mut u32, stop: *mut u32),
    __sanitizer_cov_trace_pc(),
    __sanitizer_cov_trace_pc_indir(callee: usize),
    __sanitizer_cov_8bit_counters_init(start: *mut u8, stop: *mut u8),
    __sanitizer_cov_bool_flag_init(start: *mut u8, stop: *mut u8),
    __sanitizer_cov_pcs_init(start: *const usize, stop: *const usize),
    __sanitizer_cov_trace_cmp1(a: u8, b: u8),
    __sanitizer_cov_trace_cmp2(a: u16, b: u16),
    __sanitizer_cov_trace_cmp4(a: u32, b: u32),
    __sanitizer_cov_trace_cmp8(a: u64, b: u64),
    __sanitizer_cov_trace_const_cmp1(a: u8, b: u8),
    __sanitizer_cov_trace_const_cmp2(a: u16, b: u16),
    __sanitizer_cov_trace_const_cmp4(a: u32, b: u32),
    __sanitizer_cov_trace_const_cmp8(a: u64, b: u64),
    __sanitizer_cov_trace_switch(v: u64, cases: *const u64),
    __sanitizer_cov_trace_div4(v: u32),
    __sanitizer_cov_trace_div8(v: u64),
    __sanitizer_cov_trace_gep(idx: usize),
}
