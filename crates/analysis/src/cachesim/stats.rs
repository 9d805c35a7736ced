//! Counters of one cache (one level of one core, or a shared level).

use std::ops::AddAssign;

/// What happened at one cache.
///
/// Demand accesses are loads and stores arriving from the level above (or from the
/// core): each line touched by a trace access at the first level; misses, stores
/// passed through and fills for stores further down. Write-back traffic and victim
/// fills are not demand accesses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LevelStats {
    /// Demand loads.
    pub reads: u64,
    /// Demand stores (including fills on behalf of a store above).
    pub writes: u64,
    /// Loads that missed.
    pub read_misses: u64,
    /// Stores that missed.
    pub write_misses: u64,
    /// Lines invalidated by another core's store (MESI).
    pub invalidations: u64,
    /// Lines invalidated because an inclusive level below evicted them.
    pub back_invalidations: u64,
    /// Dirty lines written out of this cache (evicted, or flushed for another core).
    pub writebacks: u64,
}

impl LevelStats {
    /// Demand accesses.
    pub fn accesses(&self) -> u64 {
        self.reads + self.writes
    }

    /// Demand misses.
    pub fn misses(&self) -> u64 {
        self.read_misses + self.write_misses
    }

    /// Demand hits.
    pub fn hits(&self) -> u64 {
        self.accesses() - self.misses()
    }

    /// Misses per access (0 when there were none).
    pub fn miss_ratio(&self) -> f64 {
        crate::table::ratio(self.misses(), self.accesses())
    }

    #[inline]
    pub(crate) fn access(&mut self, write: bool) {
        if write {
            self.writes += 1;
        } else {
            self.reads += 1;
        }
    }

    #[inline]
    pub(crate) fn miss(&mut self, write: bool) {
        if write {
            self.write_misses += 1;
        } else {
            self.read_misses += 1;
        }
    }
}

impl AddAssign<&LevelStats> for LevelStats {
    fn add_assign(&mut self, o: &LevelStats) {
        crate::add_fields!(self, o; reads, writes, read_misses, write_misses, invalidations,
            back_invalidations, writebacks);
    }
}
