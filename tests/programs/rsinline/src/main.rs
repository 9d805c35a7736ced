//! A Rust program whose generic library calls are inlined after rustc instruments
//! them, so many entries run in their caller's frame (rust.rs
//! `inlined_entries_nest_in_their_callers_frame`): BTreeMap inserts that split
//! nodes (an inlined allocation inside the split), HashMap counting, a sort.
use std::collections::{BTreeMap, HashMap};

fn main() {
    let n: u64 = std::env::args().nth(1).map_or(5000, |s| s.parse().unwrap());
    let mut x = 0x5eed_u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut index = BTreeMap::new();
    let mut counts: HashMap<u64, u32> = HashMap::new();
    for i in 0..n {
        let k = next();
        index.insert(k >> 16, i);
        *counts.entry(k % 97).or_insert(0) += 1;
    }
    let mut v: Vec<u64> = index.keys().copied().collect();
    v.sort_unstable_by(|a, b| b.cmp(a));
    println!("rsinline {} {} {}", index.len(), counts.len(), v[0] & 0xff);
}
