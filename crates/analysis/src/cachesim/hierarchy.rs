//! The cache hierarchy: private levels per core, shared levels, inclusion, write
//! policies and MESI coherence between the cores' private levels.
//!
//! A demand access walks down from the first level until a level holds the line, then
//! fills the levels it missed on the way back up (exclusive levels excepted: they only
//! take victims of the level above). Victims go to the next level when it is
//! exclusive, are written back when dirty, and an inclusive level's victims are
//! invalidated above it. When a request leaves a core's private levels, the other
//! cores' private levels are snooped: a load downgrades their copies to shared (a
//! modified copy is written back first), a store or a fill for a store invalidates
//! them. A store to a shared copy upgrades it the same way.

use super::cache::{Cache, DIRTY, EXCL};
use super::config::{CacheConfig, Inclusion, WritePolicy};
use super::stats::LevelStats;
use crate::Error;

#[derive(Clone)]
struct Level {
    name: String,
    caches: Vec<Cache>,
    stats: Vec<LevelStats>,
    shared: bool,
    write_back: bool,
    write_allocate: bool,
    inclusion: Inclusion,
    line_bits: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Req {
    /// A load.
    Read,
    /// A store whose data lands at this level.
    Write,
    /// A fill on behalf of a store at a level above (counted as a store).
    Rfo,
}

#[derive(Clone, Copy, Debug)]
struct Resp {
    /// The level that held the line (levels() = memory).
    level: usize,
    /// The line came up dirty out of an exclusive level.
    dirty: bool,
    /// The requesting core may hold the line exclusively.
    excl: bool,
}

/// A simulated cache hierarchy. Use it directly for address streams, or through the
/// [`CacheSim`](super::CacheSim) kernel for traces.
#[derive(Clone)]
pub struct Hierarchy {
    levels: Vec<Level>,
    cores: usize,
    shared_from: usize,
    coherent: bool,
    writeback_fill: bool,
}

impl Hierarchy {
    /// Builds the hierarchy of a configuration.
    pub fn new(cfg: &CacheConfig) -> Result<Hierarchy, Error> {
        cfg.validate()?;
        let cores = cfg.cores.max(1);
        let shared_from = cfg.first_shared();
        let mut levels = Vec::new();
        for (i, l) in cfg.levels.iter().enumerate() {
            let shared = i >= shared_from;
            let n = if shared { 1 } else { cores };
            let sets = l.geometry.sets() as usize;
            let mut caches = Vec::with_capacity(n);
            for _ in 0..n {
                caches.push(Cache::new(
                    l.geometry,
                    l.policy.build(sets, l.geometry.assoc as usize)?,
                )?);
            }
            levels.push(Level {
                name: l.name.clone(),
                caches,
                stats: vec![LevelStats::default(); n],
                shared,
                write_back: l.write == WritePolicy::WriteBack,
                write_allocate: l.write_allocate,
                inclusion: if i == 0 { Inclusion::NonInclusive } else { l.inclusion },
                line_bits: l.geometry.line.trailing_zeros(),
            });
        }
        Ok(Hierarchy {
            levels,
            cores,
            shared_from,
            coherent: cores > 1 && shared_from > 0,
            writeback_fill: cfg.writeback_fill,
        })
    }

    /// Number of levels; [`access`](Self::access) returns this for memory.
    pub fn levels(&self) -> usize {
        self.levels.len()
    }

    /// Name of a level.
    pub fn name(&self, level: usize) -> &str {
        &self.levels[level].name
    }

    /// Number of simulated cores.
    pub fn cores(&self) -> usize {
        self.cores
    }

    /// Line size of the first level: accesses are split at these boundaries.
    pub fn line_size(&self) -> u64 {
        1 << self.levels[0].line_bits
    }

    /// Whether a level is shared by all cores.
    pub fn is_shared(&self, level: usize) -> bool {
        self.levels[level].shared
    }

    /// Counters of one level: one entry per core for private levels, one for shared.
    pub fn stats(&self, level: usize) -> &[LevelStats] {
        &self.levels[level].stats
    }

    /// Counters of one level summed over its instances.
    pub fn total(&self, level: usize) -> LevelStats {
        let mut t = LevelStats::default();
        for s in &self.levels[level].stats {
            t += s;
        }
        t
    }

    /// Whether core `core`'s view of `level` holds the line of `addr` (for tests and
    /// tools).
    pub fn contains(&self, level: usize, core: usize, addr: u64) -> bool {
        let l = &self.levels[level];
        l.caches[if l.shared { 0 } else { core }].contains(addr >> l.line_bits)
    }

    #[inline]
    fn inst(&self, level: usize, core: usize) -> usize {
        if self.levels[level].shared {
            0
        } else {
            core
        }
    }

    /// Simulates one access by `core` to the line holding `addr` (the caller splits
    /// accesses at line boundaries). Returns the level that served it, or
    /// [`levels()`](Self::levels) for memory.
    #[inline(always)]
    pub fn access(&mut self, core: usize, addr: u64, write: bool) -> usize {
        let coherent = self.coherent;
        let l0 = &mut self.levels[0];
        let inst = if l0.shared { 0 } else { core };
        let cache = &mut l0.caches[inst];
        if let Some(slot) = cache.find(addr >> l0.line_bits) {
            if !write {
                cache.touch(slot);
                l0.stats[inst].reads += 1;
                return 0;
            }
            let st = cache.state(slot);
            if l0.write_back && (!coherent || l0.shared || st & EXCL != 0) {
                cache.touch(slot);
                cache.set_state(slot, st | DIRTY | EXCL);
                l0.stats[inst].writes += 1;
                return 0;
            }
        }
        self.slow(core, addr, write)
    }

    /// Everything but a first-level hit, kept out of line so that the hit path
    /// stays small enough to inline into callers.
    #[inline(never)]
    fn slow(&mut self, core: usize, addr: u64, write: bool) -> usize {
        self.go(0, core, addr, if write { Req::Write } else { Req::Read }).level
    }

    fn go(&mut self, i: usize, core: usize, addr: u64, req: Req) -> Resp {
        let n = self.levels.len();
        if self.coherent && i == self.shared_from {
            // leaving the core's private levels
            let others = self.snoop(core, addr, req != Req::Read);
            let excl = !others || req != Req::Read;
            if i == n {
                return Resp { level: n, dirty: false, excl };
            }
            let r = self.go_level(i, core, addr, req);
            return Resp { excl, ..r };
        }
        if i == n {
            return Resp { level: n, dirty: false, excl: true };
        }
        self.go_level(i, core, addr, req)
    }

    fn go_level(&mut self, i: usize, core: usize, addr: u64, req: Req) -> Resp {
        let inst = self.inst(i, core);
        let coherent = self.coherent;
        let lv = &mut self.levels[i];
        let line = addr >> lv.line_bits;
        let write = req != Req::Read;
        let exclusive_here = i > 0 && lv.inclusion == Inclusion::Exclusive;
        lv.stats[inst].access(write);
        if let Some(slot) = lv.caches[inst].find(line) {
            lv.caches[inst].touch(slot);
            let mut st = lv.caches[inst].state(slot);
            if req == Req::Read {
                if exclusive_here {
                    lv.caches[inst].invalidate_slot(slot);
                    return Resp {
                        level: i,
                        dirty: st & DIRTY != 0,
                        excl: st & EXCL != 0 || !coherent,
                    };
                }
                return Resp { level: i, dirty: false, excl: st & EXCL != 0 || !coherent };
            }
            // a store or a fill for one: this core needs ownership
            if coherent && !lv.shared && st & EXCL == 0 {
                self.snoop(core, addr, true);
                st |= EXCL;
            }
            let lv = &mut self.levels[i];
            if req == Req::Rfo {
                if exclusive_here {
                    lv.caches[inst].invalidate_slot(slot);
                    return Resp { level: i, dirty: st & DIRTY != 0, excl: true };
                }
                lv.caches[inst].set_state(slot, st);
                return Resp { level: i, dirty: false, excl: true };
            }
            if lv.write_back {
                lv.caches[inst].set_state(slot, st | DIRTY);
            } else {
                lv.caches[inst].set_state(slot, st);
                self.go(i + 1, core, addr, Req::Write);
            }
            return Resp { level: i, dirty: false, excl: true };
        }
        lv.stats[inst].miss(write);
        if req == Req::Write && !lv.write_allocate {
            // no-write-allocate: the store goes on down, nothing is kept here
            return self.go(i + 1, core, addr, Req::Write);
        }
        let r = self.go(i + 1, core, addr, if req == Req::Read { Req::Read } else { Req::Rfo });
        if exclusive_here {
            // exclusive levels are filled with the victims of the level above only
            return r;
        }
        let write_back = self.levels[i].write_back;
        let mut st = if r.excl { EXCL } else { 0 };
        if r.dirty {
            st |= DIRTY;
        }
        if req == Req::Write && write_back {
            st |= DIRTY | EXCL;
        }
        self.fill(i, core, addr, st);
        if req == Req::Write && !write_back {
            self.go(i + 1, core, addr, Req::Write);
        }
        Resp { dirty: false, ..r }
    }

    /// Installs a line at level `i`, dealing with the victim.
    fn fill(&mut self, i: usize, core: usize, addr: u64, st: u8) {
        let inst = self.inst(i, core);
        let lv = &mut self.levels[i];
        let bits = lv.line_bits;
        if let Some((vline, vst)) = lv.caches[inst].insert(addr >> bits, st) {
            self.evicted(i, inst, core, vline << bits, vst);
        }
    }

    fn evicted(&mut self, i: usize, inst: usize, core: usize, vaddr: u64, mut vst: u8) {
        let n = self.levels.len();
        if i > 0 && self.levels[i].inclusion == Inclusion::Inclusive {
            // back-invalidate the copies above
            let bits = self.levels[i].line_bits;
            let cores = if self.levels[i].shared { 0..self.cores } else { core..core + 1 };
            for j in 0..i {
                let lj = &mut self.levels[j];
                let span = 1u64 << (bits - lj.line_bits);
                let insts = if lj.shared { 0..1 } else { cores.clone() };
                for c in insts {
                    for k in 0..span {
                        if let Some(s) = lj.caches[c].invalidate((vaddr >> lj.line_bits) + k) {
                            lj.stats[c].back_invalidations += 1;
                            vst |= s & DIRTY;
                        }
                    }
                }
            }
        }
        if i + 1 < n && self.levels[i + 1].inclusion == Inclusion::Exclusive {
            // the victim moves down into the exclusive level, clean or dirty
            self.fill(i + 1, core, vaddr, vst & (DIRTY | EXCL));
            return;
        }
        if vst & DIRTY != 0 {
            self.levels[i].stats[inst].writebacks += 1;
            if self.writeback_fill && i + 1 < n {
                self.writeback(i + 1, core, vaddr);
            }
        }
    }

    /// A dirty line arrives at level `j` from above.
    fn writeback(&mut self, j: usize, core: usize, addr: u64) {
        let n = self.levels.len();
        let inst = self.inst(j, core);
        let lv = &mut self.levels[j];
        let line = addr >> lv.line_bits;
        if let Some(slot) = lv.caches[inst].find(line) {
            lv.caches[inst].touch(slot);
            if lv.write_back {
                let st = lv.caches[inst].state(slot);
                lv.caches[inst].set_state(slot, st | DIRTY);
                return;
            }
        } else if lv.write_back {
            self.fill(j, core, addr, DIRTY);
            return;
        }
        if j + 1 < n {
            self.writeback(j + 1, core, addr);
        }
    }

    /// Snoops the other cores' private levels for `addr`: a store invalidates their
    /// copies, a load downgrades them to shared. Returns whether any core held it.
    fn snoop(&mut self, core: usize, addr: u64, write: bool) -> bool {
        let mut held = false;
        let mut flushed = false;
        for j in 0..self.shared_from {
            let lj = &mut self.levels[j];
            let line = addr >> lj.line_bits;
            for c in (0..self.cores).filter(|&c| c != core) {
                let cache = &mut lj.caches[c];
                if let Some(slot) = cache.find(line) {
                    held = true;
                    let st = cache.state(slot);
                    if st & DIRTY != 0 {
                        lj.stats[c].writebacks += 1;
                        flushed = true;
                    }
                    if write {
                        cache.invalidate_slot(slot);
                        lj.stats[c].invalidations += 1;
                    } else {
                        cache.set_state(slot, 0);
                    }
                }
            }
        }
        if flushed && self.writeback_fill && self.shared_from < self.levels.len() {
            self.writeback(self.shared_from, core, addr);
        }
        held
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::LevelConfig;
    use super::super::policy::PolicyKind;
    use super::*;

    fn one(size: u64, assoc: u32) -> LevelConfig {
        LevelConfig::new("L1", size, assoc, 64)
    }

    fn run(h: &mut Hierarchy, seq: &[(u64, bool)]) -> Vec<usize> {
        seq.iter().map(|&(a, w)| h.access(0, a * 64, w)).collect()
    }

    #[test]
    fn lru_vs_fifo_two_way_conflict() {
        // one set of two ways: A B A C A
        let seq = [(0, false), (1, false), (0, false), (2, false), (0, false)];
        let mut lru = Hierarchy::new(&CacheConfig::new(vec![one(128, 2)])).unwrap();
        assert_eq!(run(&mut lru, &seq), [1, 1, 0, 1, 0]);
        assert_eq!(lru.total(0).misses(), 3);
        let mut fifo =
            Hierarchy::new(&CacheConfig::new(vec![one(128, 2).policy(PolicyKind::Fifo)])).unwrap();
        assert_eq!(run(&mut fifo, &seq), [1, 1, 0, 1, 1]);
        assert_eq!(fifo.total(0).misses(), 4);
    }

    #[test]
    fn writeback_and_write_policies() {
        // write A, read B, read C: A (dirty) is evicted from the 2-line set
        let mut h = Hierarchy::new(&CacheConfig::new(vec![
            one(128, 2),
            LevelConfig::new("LL", 4096, 4, 64),
        ]))
        .unwrap();
        run(&mut h, &[(0, true), (1, false), (2, false)]);
        assert_eq!(h.total(0).writebacks, 1);
        assert_eq!(h.total(0).write_misses, 1);
        assert_eq!(h.total(1).accesses(), 3);
        assert_eq!(h.total(1).writes, 1); // the fill for the store
                                          // the written-back line is dirty in LL and written back from there in turn
        assert!(h.contains(1, 0, 0));

        // write-through: every store reaches the next level
        let l1 = one(128, 2).write(WritePolicy::WriteThrough);
        let mut h =
            Hierarchy::new(&CacheConfig::new(vec![l1, LevelConfig::new("LL", 4096, 4, 64)]))
                .unwrap();
        assert_eq!(run(&mut h, &[(0, false), (0, true), (0, true)]), [2, 0, 0]);
        assert_eq!(h.total(1).writes, 2);
        assert_eq!(h.total(0).writebacks, 0);

        // no write-allocate: a store miss leaves nothing behind
        let l1 = one(128, 2).write_allocate(false);
        let mut h = Hierarchy::new(&CacheConfig::new(vec![l1])).unwrap();
        assert_eq!(run(&mut h, &[(0, true), (0, false), (0, false)]), [1, 1, 0]);
    }

    #[test]
    fn inclusive_back_invalidates() {
        // L1 four lines fully associative, LL two lines: A B C evicts A from LL
        let cfg = |inc| {
            CacheConfig::new(vec![one(256, 4), LevelConfig::new("LL", 128, 2, 64).inclusion(inc)])
        };
        let mut h = Hierarchy::new(&cfg(Inclusion::Inclusive)).unwrap();
        assert_eq!(run(&mut h, &[(0, false), (1, false), (2, false), (0, false)]), [2, 2, 2, 2]);
        // C evicts A from the LL, then A evicts B: each back-invalidates L1
        assert_eq!(h.total(0).back_invalidations, 2);
        let mut h = Hierarchy::new(&cfg(Inclusion::NonInclusive)).unwrap();
        assert_eq!(run(&mut h, &[(0, false), (1, false), (2, false), (0, false)]), [2, 2, 2, 0]);
    }

    #[test]
    fn exclusive_victim_cache() {
        let cfg = |inc| {
            CacheConfig::new(vec![one(64, 1), LevelConfig::new("L2", 64, 1, 64).inclusion(inc)])
        };
        let mut h = Hierarchy::new(&cfg(Inclusion::Exclusive)).unwrap();
        assert_eq!(run(&mut h, &[(0, false), (1, false), (0, false), (1, false)]), [2, 2, 1, 1]);
        // B was moved up out of L2, and A went down as L1's victim
        assert!(h.contains(1, 0, 0));
        assert!(!h.contains(1, 0, 64));
        assert!(h.contains(0, 0, 64));
        let mut h = Hierarchy::new(&cfg(Inclusion::NonInclusive)).unwrap();
        assert_eq!(run(&mut h, &[(0, false), (1, false), (0, false), (1, false)]), [2, 2, 2, 2]);
    }

    #[test]
    fn mesi_between_two_cores() {
        let cfg =
            CacheConfig::new(vec![one(4096, 4), LevelConfig::new("LL", 65536, 8, 64)]).cores(2);
        let mut h = Hierarchy::new(&cfg).unwrap();
        // core 0 writes X, core 1 reads it: core 0's modified copy is flushed
        assert_eq!(h.access(0, 0x1000, true), 2);
        assert_eq!(h.access(1, 0x1000, false), 1);
        assert_eq!(h.stats(0)[0].writebacks, 1);
        assert_eq!(h.stats(0)[0].invalidations, 0);
        // core 0 writes again: its shared copy is upgraded, core 1's invalidated
        assert_eq!(h.access(0, 0x1000, true), 0);
        assert_eq!(h.stats(0)[1].invalidations, 1);
        assert!(!h.contains(0, 1, 0x1000));
        // a second write by core 0 needs no bus traffic
        assert_eq!(h.access(0, 0x1008, true), 0);
        assert_eq!(h.stats(0)[1].invalidations, 1);
        // core 1 writes: core 0's modified copy is flushed and invalidated
        assert_eq!(h.access(1, 0x1000, true), 1);
        assert_eq!(h.stats(0)[0].invalidations, 1);
        assert_eq!(h.stats(0)[0].writebacks, 2);
        // ping-pong: each alternate write invalidates the other core
        for k in 0..10 {
            h.access(k % 2, 0x1000, true);
        }
        assert_eq!(h.stats(0)[0].invalidations + h.stats(0)[1].invalidations, 2 + 10);
    }
}
