//! One cache: geometry, tags and line states. Replacement is delegated to a
//! [`ReplacementPolicy`]; statistics live in [`LevelStats`](super::LevelStats), kept by
//! the hierarchy.

use super::policy::{AnyPolicy, Outcome, ReplacementPolicy};
use crate::Error;

/// Line state bit: the line holds data newer than the level below (MESI M).
pub const DIRTY: u8 = 1;
/// Line state bit: this core owns the line exclusively (MESI E or M). Only private
/// levels of a multi-core hierarchy use it.
pub const EXCL: u8 = 2;

/// Size, associativity and line size of a cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Total bytes.
    pub size: u64,
    /// Ways per set.
    pub assoc: u32,
    /// Bytes per line (a power of two).
    pub line: u32,
}

impl Geometry {
    /// Number of sets (`size / (assoc * line)`).
    pub fn sets(&self) -> u64 {
        self.size / (u64::from(self.assoc) * u64::from(self.line))
    }

    /// Checks the geometry is simulable.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |why: &str| {
            Err(Error::Config(format!(
                "cache {}B/{}-way/{}B lines: {why}",
                self.size, self.assoc, self.line
            )))
        };
        if self.line == 0 || !self.line.is_power_of_two() {
            return bad("the line size must be a power of two");
        }
        if self.assoc == 0 {
            return bad("the associativity must be at least 1");
        }
        let per_set = u64::from(self.assoc) * u64::from(self.line);
        if self.size == 0 || !self.size.is_multiple_of(per_set) {
            return bad("the size must be a multiple of associativity times line size");
        }
        if self.sets() > 1 << 32 {
            return bad("too many sets");
        }
        Ok(())
    }
}

#[inline(always)]
fn scan<const N: usize>(ways: &[u64], key: u64) -> u64 {
    let Ok(w) = <&[u64; N]>::try_from(ways) else { return 0 };
    let mut m = 0u64;
    for (i, e) in w.iter().enumerate() {
        m |= u64::from(e & KEY_MASK == key) << i;
    }
    m
}

/// Where a line sits: set and way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Set index.
    pub set: usize,
    /// Way within the set.
    pub way: usize,
}

/// A set-associative cache of line numbers (address >> line bits).
///
/// Each way is one `u64`: the line number in the low 56 bits (user-space addresses
/// fit), a valid bit and the state bits on top, so a lookup reads one array.
#[derive(Clone, Debug)]
pub struct Cache<P: ReplacementPolicy = AnyPolicy> {
    geometry: Geometry,
    line_bits: u32,
    sets: u64,
    pow2: bool,
    set_mask: u64,
    assoc: usize,
    ways: Vec<u64>,
    // the most recently used way of each set, checked first; a hit on it needs no
    // policy update when the policy says so
    mru: Vec<u8>,
    mru_hit_noop: bool,
    policy: P,
}

const LINE_MASK: u64 = (1 << 56) - 1;
const VALID: u64 = 1 << 63;
const KEY_MASK: u64 = VALID | LINE_MASK;
const STATE_SHIFT: u32 = 56;

impl<P: ReplacementPolicy> Cache<P> {
    /// An empty cache.
    pub fn new(geometry: Geometry, policy: P) -> Result<Cache<P>, Error> {
        geometry.validate()?;
        let sets = geometry.sets();
        let assoc = geometry.assoc as usize;
        Ok(Cache {
            geometry,
            line_bits: geometry.line.trailing_zeros(),
            sets,
            pow2: sets.is_power_of_two(),
            set_mask: sets - 1,
            assoc,
            ways: vec![0; sets as usize * assoc],
            mru: vec![0; sets as usize],
            mru_hit_noop: policy.mru_hit_is_noop() && assoc <= 256,
            policy,
        })
    }

    /// The geometry.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// log2 of the line size.
    #[inline]
    pub fn line_bits(&self) -> u32 {
        self.line_bits
    }

    #[inline]
    fn set_of(&self, line: u64) -> usize {
        if self.pow2 {
            (line & self.set_mask) as usize
        } else {
            (line % self.sets) as usize
        }
    }

    /// The slot holding `line`, if present.
    #[inline(always)]
    pub fn find(&self, line: u64) -> Option<Slot> {
        let set = self.set_of(line);
        let base = set * self.assoc;
        let key = VALID | (line & LINE_MASK);
        let m = self.mru[set] as usize;
        if self.ways[base + m] & KEY_MASK == key {
            return Some(Slot { set, way: m });
        }
        let ways = &self.ways[base..base + self.assoc];
        // branch-free compare of every way (which way hits is unpredictable),
        // unrolled for the usual associativities
        let m = match ways.len() {
            4 => scan::<4>(ways, key),
            8 => scan::<8>(ways, key),
            16 => scan::<16>(ways, key),
            n if n <= 64 => {
                let mut m = 0u64;
                for (w, &e) in ways.iter().enumerate() {
                    m |= u64::from(e & KEY_MASK == key) << w;
                }
                m
            }
            _ => {
                return ways.iter().position(|&e| e & KEY_MASK == key).map(|way| Slot { set, way })
            }
        };
        (m != 0).then(|| Slot { set, way: m.trailing_zeros() as usize })
    }

    /// Records a hit on a slot.
    #[inline(always)]
    pub fn touch(&mut self, slot: Slot) {
        if self.mru_hit_noop && self.mru[slot.set] as usize == slot.way {
            return;
        }
        self.mru[slot.set] = slot.way as u8;
        self.policy.on_access(slot.set, slot.way, Outcome::Hit);
    }

    /// The state bits of a slot.
    #[inline]
    pub fn state(&self, slot: Slot) -> u8 {
        ((self.ways[slot.set * self.assoc + slot.way] >> STATE_SHIFT) & 0x7f) as u8
    }

    /// Sets the state bits of a slot.
    #[inline]
    pub fn set_state(&mut self, slot: Slot, st: u8) {
        let e = &mut self.ways[slot.set * self.assoc + slot.way];
        *e = (*e & KEY_MASK) | (u64::from(st & 0x7f) << STATE_SHIFT);
    }

    /// Installs `line` with state `st`; returns the evicted line and its state when
    /// the set was full. A line already present only has its state bits added.
    pub fn insert(&mut self, line: u64, st: u8) -> Option<(u64, u8)> {
        let set = self.set_of(line);
        let base = set * self.assoc;
        let key = VALID | (line & LINE_MASK);
        let mut free = None;
        for (w, &e) in self.ways[base..base + self.assoc].iter().enumerate() {
            if e & KEY_MASK == key {
                self.ways[base + w] |= u64::from(st & 0x7f) << STATE_SHIFT;
                self.touch(Slot { set, way: w });
                return None;
            }
            if e & VALID == 0 && free.is_none() {
                free = Some(w);
            }
        }
        let (way, victim) = match free {
            Some(w) => (w, None),
            None => {
                let w = self.policy.victim(set);
                self.policy.on_evict(set, w);
                let e = self.ways[base + w];
                (w, Some((e & LINE_MASK, ((e >> STATE_SHIFT) & 0x7f) as u8)))
            }
        };
        self.ways[base + way] = key | (u64::from(st & 0x7f) << STATE_SHIFT);
        self.mru[set] = way as u8;
        self.policy.on_access(set, way, Outcome::Fill);
        victim
    }

    /// Removes `line` if present, returning its state.
    pub fn invalidate(&mut self, line: u64) -> Option<u8> {
        let slot = self.find(line)?;
        Some(self.invalidate_slot(slot))
    }

    /// Removes the line in `slot`, returning its state.
    pub fn invalidate_slot(&mut self, slot: Slot) -> u8 {
        let st = self.state(slot);
        self.ways[slot.set * self.assoc + slot.way] = 0;
        self.policy.on_invalidate(slot.set, slot.way);
        st
    }

    /// Whether `line` is present.
    pub fn contains(&self, line: u64) -> bool {
        self.find(line).is_some()
    }

    /// Lines currently held.
    pub fn occupancy(&self) -> usize {
        self.ways.iter().filter(|&&e| e & VALID != 0).count()
    }
}
