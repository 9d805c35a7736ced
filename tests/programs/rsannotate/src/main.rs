//! Rust test program for memlens-annotate: registered and named threads, and a
//! region of interest. Exact volatile store counts outside (`@out`, 2 × 100) and
//! inside (`@in`, 2 threads × 500) the region.
use memlens_annotate as memlens;
use std::ptr::write_volatile;

static mut OUTSIDE: u64 = 0;
static mut INSIDE: [u64; 2] = [0; 2];

#[inline(never)]
fn outside(n: u64) {
    for i in 0..n {
        unsafe { write_volatile(&raw mut OUTSIDE, i) }; // @out
    }
}

#[inline(never)]
fn inside(t: usize, n: u64) {
    for i in 0..n {
        unsafe { write_volatile((&raw mut INSIDE).cast::<u64>().add(t), i) }; // @in
    }
}

fn main() {
    memlens::register_thread(100);
    memlens::thread_name("boss");
    outside(100);
    {
        let _roi = memlens::Roi::begin();
        let hs: Vec<_> = (0..2)
            .map(|t| {
                std::thread::spawn(move || {
                    memlens::register_thread(10 + t as i64);
                    memlens::thread_name(&format!("worker-{t}"));
                    inside(t, 500);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }
    outside(100);
    println!("runtime={}", memlens::runtime_present());
}
