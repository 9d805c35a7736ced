//! Atomics from four threads, a Vec and a Box: built by the integration test with
//! plain rustc, instrumented, and linked against the prebuilt runtime rlib.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

static COUNTER: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn sum(v: &[u64]) -> u64 {
    let mut s = 0;
    for x in v {
        s += *x;
    }
    s
}

fn main() {
    let shared = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    COUNTER.fetch_add(1, Ordering::Relaxed);
                }
                let _ = shared.compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let v: Vec<u64> = Vec::with_capacity(1000);
    let mut v = v;
    for i in 0..1000 {
        v.push(i);
    }
    let b = Box::new(std::hint::black_box(sum(&v)));
    println!(
        "counter={} sum={} counter_addr={:p} box_addr={:p} vec_addr={:p}",
        COUNTER.load(Ordering::SeqCst),
        *b,
        &COUNTER,
        &*b,
        v.as_ptr()
    );
}
