//! Tree pseudo-LRU.

use super::{Outcome, ReplacementPolicy};
use crate::Error;

/// Tree-PLRU: a binary tree of `assoc - 1` bits per set. A use points every node on
/// the way's path away from it; the victim is found by following the bits.
#[derive(Clone, Debug)]
pub struct TreePlru {
    depth: u32,
    // bit k (1-based heap index) of a set's word is node k
    bits: Vec<u64>,
}

impl TreePlru {
    /// For `sets` sets of `assoc` ways; `assoc` must be a power of two up to 64.
    pub fn new(sets: usize, assoc: usize) -> Result<TreePlru, Error> {
        if !assoc.is_power_of_two() || assoc > 64 {
            return Err(Error::Config(format!(
                "tree-PLRU needs a power-of-two associativity up to 64, not {assoc}"
            )));
        }
        Ok(TreePlru { depth: assoc.trailing_zeros(), bits: vec![0; sets] })
    }
}

impl ReplacementPolicy for TreePlru {
    #[inline]
    fn on_access(&mut self, set: usize, way: usize, _outcome: Outcome) {
        let mut word = self.bits[set];
        let mut node = 1usize;
        for level in (0..self.depth).rev() {
            let dir = (way >> level) & 1;
            // point away from the used half
            if dir == 0 {
                word |= 1 << node;
            } else {
                word &= !(1 << node);
            }
            node = 2 * node + dir;
        }
        self.bits[set] = word;
    }

    fn mru_hit_is_noop(&self) -> bool {
        true
    }

    fn victim(&mut self, set: usize) -> usize {
        let word = self.bits[set];
        let mut node = 1usize;
        let mut way = 0usize;
        for _ in 0..self.depth {
            let dir = ((word >> node) & 1) as usize;
            way = (way << 1) | dir;
            node = 2 * node + dir;
        }
        way
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_way_sequence() {
        let mut p = TreePlru::new(1, 4).unwrap();
        for w in 0..4 {
            p.on_access(0, w, Outcome::Fill);
        }
        // after 0,1,2,3: root points left (3 was right), left node points to 0
        assert_eq!(p.victim(0), 0);
        p.on_access(0, 0, Outcome::Hit);
        // root points right; right node points away from 3 -> 2
        assert_eq!(p.victim(0), 2);
        p.on_access(0, 2, Outcome::Fill);
        // root left; left node points away from 0 -> 1
        assert_eq!(p.victim(0), 1);
    }
}
