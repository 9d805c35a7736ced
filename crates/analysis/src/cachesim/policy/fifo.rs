//! First in, first out.

use super::{Outcome, ReplacementPolicy};

/// FIFO: the victim is the way filled longest ago; hits change nothing.
#[derive(Clone, Debug)]
pub struct Fifo {
    assoc: usize,
    filled: Vec<u32>,
    clock: u32,
}

impl Fifo {
    /// For `sets` sets of `assoc` ways.
    pub fn new(sets: usize, assoc: usize) -> Fifo {
        Fifo { assoc, filled: vec![0; sets * assoc], clock: 0 }
    }
}

impl ReplacementPolicy for Fifo {
    #[inline]
    fn on_access(&mut self, set: usize, way: usize, outcome: Outcome) {
        if outcome == Outcome::Fill {
            if self.clock == u32::MAX {
                self.clock = super::renumber(&mut self.filled, self.assoc);
            }
            self.clock += 1;
            self.filled[set * self.assoc + way] = self.clock;
        }
    }

    fn on_invalidate(&mut self, set: usize, way: usize) {
        self.filled[set * self.assoc + way] = 0;
    }

    fn mru_hit_is_noop(&self) -> bool {
        true
    }

    fn victim(&mut self, set: usize) -> usize {
        let s = &self.filled[set * self.assoc..(set + 1) * self.assoc];
        let mut best = 0;
        for (w, &t) in s.iter().enumerate() {
            if t < s[best] {
                best = w;
            }
        }
        best
    }
}
