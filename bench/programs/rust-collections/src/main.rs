//! Rust collections workload: word-frequency counting in a HashMap, an ordered
//! index in a BTreeMap with range queries, and sorting a Vec of records.
//! usage: rust-collections [n]
use std::collections::{BTreeMap, HashMap};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[derive(Clone)]
struct Record {
    key: u64,
    score: u32,
    name: [u8; 8],
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(300_000);
    let mut rng = Rng(0x5eed);

    // HashMap: counts of n keys drawn from a skewed set of n/8 keys.
    let mut counts: HashMap<u64, u32> = HashMap::new();
    for _ in 0..n {
        let r = rng.next();
        let k = (r % (n as u64 / 8 + 1)) & (r >> 40);
        *counts.entry(k).or_insert(0) += 1;
    }

    // BTreeMap: n inserts, then n/4 range queries of 16 entries.
    let mut index: BTreeMap<u64, usize> = BTreeMap::new();
    for i in 0..n {
        index.insert(rng.next() >> 16, i);
    }
    let mut range_sum = 0usize;
    for _ in 0..n / 4 {
        let from = rng.next() >> 16;
        range_sum = range_sum.wrapping_add(index.range(from..).take(16).map(|(_, v)| *v).sum::<usize>());
    }

    // Vec sort: n records by (score, key), then by name.
    let mut recs: Vec<Record> = (0..n)
        .map(|_| {
            let r = rng.next();
            Record { key: r, score: (r >> 50) as u32, name: (r.rotate_left(17)).to_le_bytes() }
        })
        .collect();
    recs.sort_by(|a, b| (a.score, a.key).cmp(&(b.score, b.key)));
    let first = recs[0].key;
    recs.sort_unstable_by(|a, b| a.name.cmp(&b.name));

    let mut check: u64 = counts.len() as u64;
    check = check.wrapping_mul(31).wrapping_add(range_sum as u64);
    check = check.wrapping_mul(31).wrapping_add(first);
    check = check.wrapping_mul(31).wrapping_add(recs[n / 2].key);
    println!("rust-collections n={n} checksum={check}");
}
