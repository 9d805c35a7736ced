//! Rust naming test for memlens: heap element types of Box<T> and Vec<T>.
use std::hint::black_box;
use std::ptr::write_volatile;

#[derive(Clone, Copy, Default)]
struct Point {
    x: i64,
    y: i64,
}

#[inline(never)]
fn boxed() -> i64 {
    let mut b = Box::new(Point { x: 1, y: 2 }); // @box
    unsafe { write_volatile(&raw mut b.y, 5) }; // @box-store
    let b = black_box(b);
    b.x + b.y
}

#[inline(never)]
fn vector(n: usize) -> i64 {
    let mut v: Vec<Point> = Vec::with_capacity(n); // @vec
    for i in 0..n {
        v.push(Point { x: i as i64, y: 0 });
    }
    for p in v.iter_mut() {
        unsafe { write_volatile(&raw mut p.y, 3) }; // @vec-store
    }
    let v = black_box(v);
    v.iter().map(|p| p.x + p.y).sum()
}

fn main() {
    println!("{} {}", boxed(), vector(black_box(8)));
}
