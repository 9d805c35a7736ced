//! Least recently used.

use super::{Outcome, ReplacementPolicy};

/// True LRU: every use stamps the way with a counter; the victim is the oldest stamp.
#[derive(Clone, Debug)]
pub struct Lru {
    assoc: usize,
    stamps: Vec<u32>,
    clock: u32,
}

impl Lru {
    /// For `sets` sets of `assoc` ways.
    pub fn new(sets: usize, assoc: usize) -> Lru {
        Lru { assoc, stamps: vec![0; sets * assoc], clock: 0 }
    }
}

impl ReplacementPolicy for Lru {
    #[inline]
    fn on_access(&mut self, set: usize, way: usize, _outcome: Outcome) {
        if self.clock == u32::MAX {
            self.clock = super::renumber(&mut self.stamps, self.assoc);
        }
        self.clock += 1;
        self.stamps[set * self.assoc + way] = self.clock;
    }

    fn on_invalidate(&mut self, set: usize, way: usize) {
        self.stamps[set * self.assoc + way] = 0;
    }

    fn mru_hit_is_noop(&self) -> bool {
        true
    }

    fn victim(&mut self, set: usize) -> usize {
        let s = &self.stamps[set * self.assoc..(set + 1) * self.assoc];
        let mut best = 0;
        for (w, &t) in s.iter().enumerate() {
            if t < s[best] {
                best = w;
            }
        }
        best
    }
}
