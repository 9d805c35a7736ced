//! Random replacement from a seeded generator.

use super::{Outcome, ReplacementPolicy};

/// Random: the victim is a uniformly drawn way (xorshift64*, seeded, so runs repeat).
#[derive(Clone, Debug)]
pub struct Random {
    assoc: u64,
    state: u64,
}

impl Random {
    /// For sets of `assoc` ways, with a seed.
    pub fn new(assoc: usize, seed: u64) -> Random {
        // splitmix the seed so that 0 and small seeds give a good state
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Random { assoc: assoc as u64, state: (z ^ (z >> 31)) | 1 }
    }

    fn next(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

impl ReplacementPolicy for Random {
    #[inline]
    fn on_access(&mut self, _set: usize, _way: usize, _outcome: Outcome) {}

    fn mru_hit_is_noop(&self) -> bool {
        true
    }

    fn victim(&mut self, _set: usize) -> usize {
        ((self.next() >> 32) % self.assoc) as usize
    }
}
