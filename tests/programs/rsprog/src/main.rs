//! Rust test program for memlens: exact volatile counts, atomics, Box and Vec,
//! and threads.
use std::ptr::{read_volatile, write_volatile};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

static mut GLOBAL: u64 = 0;
static COUNTER: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn stores(n: u64) {
    for i in 0..n {
        unsafe { write_volatile(&raw mut GLOBAL, i) }; // @store
    }
}

#[inline(never)]
fn loads(n: u64) -> u64 {
    let mut s = 0;
    for _ in 0..n {
        s += unsafe { read_volatile(&raw const GLOBAL) }; // @load
    }
    s
}

#[inline(never)]
fn boxed() -> u64 {
    let b = Box::new([7u64; 16]); // @box
    let v: Vec<u64> = (0..100).collect(); // @vec
    b[3] + v[50]
}

fn main() {
    stores(1000);
    let s = loads(1000);
    let shared = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    COUNTER.fetch_add(1, Ordering::SeqCst); // @rmw
                    shared.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    println!("s={s} boxed={} counter={}", boxed(), COUNTER.load(Ordering::SeqCst));
}
