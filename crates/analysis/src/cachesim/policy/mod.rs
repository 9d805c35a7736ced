//! Replacement policies: which way of a full set to evict.
//!
//! A policy sees set and way indices only; the [`Cache`](super::Cache) owns tags and
//! fills invalid ways before it asks for a victim. Each policy lives in its own file;
//! [`AnyPolicy`] dispatches over them without a virtual call on the hot path.

mod fifo;
mod lru;
mod plru;
mod random;

pub use fifo::Fifo;
pub use lru::Lru;
pub use plru::TreePlru;
pub use random::Random;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renumber_keeps_order() {
        let mut s = vec![7, u32::MAX - 1, 0, 9, 3, 2, 1, 4];
        assert_eq!(renumber(&mut s, 4), 4);
        assert_eq!(s, [2, 4, 0, 3, 3, 2, 1, 4]);
    }
}

use crate::Error;

/// Replaces per-way stamps by their rank within each set (1..=assoc, 0 stays 0 for
/// unused ways) when a 32-bit clock runs out; returns the new clock.
fn renumber(stamps: &mut [u32], assoc: usize) -> u32 {
    let mut order: Vec<usize> = Vec::with_capacity(assoc);
    for set in stamps.chunks_mut(assoc) {
        order.clear();
        order.extend(0..set.len());
        order.sort_by_key(|&w| set[w]);
        for (rank, &w) in order.iter().enumerate() {
            if set[w] != 0 {
                set[w] = rank as u32 + 1;
            }
        }
    }
    assoc as u32
}

/// Why a policy hears about a way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The way hit.
    Hit,
    /// The way was just filled with a new line.
    Fill,
}

/// Chooses victims within a set.
pub trait ReplacementPolicy {
    /// A way was used: hit, or filled after a miss.
    fn on_access(&mut self, set: usize, way: usize, outcome: Outcome);
    /// A way's line was evicted to make room (the fill follows).
    fn on_evict(&mut self, _set: usize, _way: usize) {}
    /// A way's line was invalidated (coherence, back-invalidation, exclusive move).
    fn on_invalidate(&mut self, _set: usize, _way: usize) {}
    /// The way to evict from a full set.
    fn victim(&mut self, set: usize) -> usize;
    /// Whether a hit on the set's most recently used way (hit or filled last)
    /// leaves the policy's state as it is, so the cache may skip `on_access` for it.
    /// True for LRU, FIFO, tree-PLRU and random. Default false.
    fn mru_hit_is_noop(&self) -> bool {
        false
    }
}

/// The built-in policies by name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PolicyKind {
    /// Least recently used (true LRU, as cachegrind).
    #[default]
    Lru,
    /// First in, first out.
    Fifo,
    /// Uniformly random way, from a seeded generator (reproducible).
    Random {
        /// Generator seed.
        seed: u64,
    },
    /// Tree pseudo-LRU (associativity must be a power of two).
    TreePlru,
}

impl PolicyKind {
    /// Parses `lru`, `fifo`, `random`, `random:SEED`, `plru` / `tree-plru`.
    pub fn parse(s: &str) -> Result<PolicyKind, Error> {
        let s = s.trim().to_ascii_lowercase();
        Ok(match s.as_str() {
            "lru" => PolicyKind::Lru,
            "fifo" => PolicyKind::Fifo,
            "random" | "rand" => PolicyKind::Random { seed: 1 },
            "plru" | "tree-plru" | "treeplru" | "pseudo-lru" => PolicyKind::TreePlru,
            _ => match s
                .strip_prefix("random:")
                .and_then(|x| crate::cachesim::config::parse_u64(x).ok())
            {
                Some(seed) => PolicyKind::Random { seed },
                None => {
                    return Err(Error::Config(format!(
                    "unknown replacement policy {s:?} (expected lru, fifo, random[:seed] or plru)"
                )))
                }
            },
        })
    }

    /// The policy's short name.
    pub fn name(&self) -> String {
        match self {
            PolicyKind::Lru => "lru".into(),
            PolicyKind::Fifo => "fifo".into(),
            PolicyKind::Random { seed } => format!("random:{seed}"),
            PolicyKind::TreePlru => "plru".into(),
        }
    }

    /// A policy for a cache of `sets` sets of `assoc` ways.
    pub fn build(&self, sets: usize, assoc: usize) -> Result<AnyPolicy, Error> {
        Ok(match *self {
            PolicyKind::Lru => AnyPolicy::Lru(Lru::new(sets, assoc)),
            PolicyKind::Fifo => AnyPolicy::Fifo(Fifo::new(sets, assoc)),
            PolicyKind::Random { seed } => AnyPolicy::Random(Random::new(assoc, seed)),
            PolicyKind::TreePlru => AnyPolicy::TreePlru(TreePlru::new(sets, assoc)?),
        })
    }
}

/// One of the built-in policies.
#[derive(Clone, Debug)]
pub enum AnyPolicy {
    /// [`Lru`].
    Lru(Lru),
    /// [`Fifo`].
    Fifo(Fifo),
    /// [`Random`].
    Random(Random),
    /// [`TreePlru`].
    TreePlru(TreePlru),
}

macro_rules! dispatch {
    ($self:ident, $p:ident => $e:expr) => {
        match $self {
            AnyPolicy::Lru($p) => $e,
            AnyPolicy::Fifo($p) => $e,
            AnyPolicy::Random($p) => $e,
            AnyPolicy::TreePlru($p) => $e,
        }
    };
}

impl ReplacementPolicy for AnyPolicy {
    #[inline]
    fn on_access(&mut self, set: usize, way: usize, outcome: Outcome) {
        dispatch!(self, p => p.on_access(set, way, outcome))
    }

    #[inline]
    fn on_evict(&mut self, set: usize, way: usize) {
        dispatch!(self, p => p.on_evict(set, way))
    }

    #[inline]
    fn on_invalidate(&mut self, set: usize, way: usize) {
        dispatch!(self, p => p.on_invalidate(set, way))
    }

    #[inline]
    fn victim(&mut self, set: usize) -> usize {
        dispatch!(self, p => p.victim(set))
    }

    fn mru_hit_is_noop(&self) -> bool {
        dispatch!(self, p => p.mru_hit_is_noop())
    }
}
