//! A Rust program whose `#[no_mangle]` functions `record --trace-calls` traces
//! (calls.rs `functions_of_rust_programs_are_traced`).

#[no_mangle]
#[inline(never)]
pub extern "C" fn rs_mix(a: i64, b: i64, c: i64) -> i64 {
    a * 100 + b * 10 + c
}

#[no_mangle]
#[inline(never)]
pub fn rs_sum(n: u64) -> u64 {
    (1..=n).map(std::hint::black_box).sum()
}

fn main() {
    let n: i64 = std::env::args().nth(1).map_or(3, |s| s.parse().unwrap());
    let m = rs_mix(n, n + 1, -n);
    let s = rs_sum(n as u64);
    println!("mix {m} sum {s}");
}
