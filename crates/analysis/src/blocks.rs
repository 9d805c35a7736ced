//! Live heap blocks by address (an interval map), and allocation-site interning;
//! shared by the heap and layout kernels.

use memlens_format::Pc;
use std::collections::{BTreeMap, HashMap};
use std::ops::{Bound, Range};

/// Allocation functions (`--alloc-fn`, as valgrind's massif takes them): wrappers
/// such as `xmalloc` whose callers, not themselves, are the allocation sites. Held
/// as their code, in return-address ranges (`start + 1 .. end + 1`: the call
/// stacks of allocations are return addresses).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocFns(Vec<Range<Pc>>);

impl AllocFns {
    /// The functions whose code is `ranges` (return-address ranges, any order).
    pub fn new(mut ranges: Vec<Range<Pc>>) -> AllocFns {
        ranges.sort_by_key(|r| r.start);
        // merged, so the one range starting at or before a pc decides
        let mut out: Vec<Range<Pc>> = Vec::with_capacity(ranges.len());
        for r in ranges.into_iter().filter(|r| r.start < r.end) {
            match out.last_mut() {
                Some(l) if r.start <= l.end => l.end = l.end.max(r.end),
                _ => out.push(r),
            }
        }
        AllocFns(out)
    }

    /// No allocation function: every site is where it was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the return address `pc` is inside an allocation function.
    pub fn contains(&self, pc: Pc) -> bool {
        let i = self.0.partition_point(|r| r.start <= pc);
        i > 0 && pc < self.0[i - 1].end
    }

    /// The allocation site of a block allocated at `pc` with callers `stack`
    /// (innermost first): the first frame outside every allocation function, and
    /// the callers above it. When every frame is inside one (or the stack was not
    /// recorded deep enough), the site stays as recorded.
    pub fn site<'s>(&self, pc: Pc, stack: &'s [Pc]) -> (Pc, &'s [Pc]) {
        if self.0.is_empty() || !self.contains(pc) {
            return (pc, stack);
        }
        match stack.iter().position(|&f| !self.contains(f)) {
            Some(i) => (stack[i], &stack[i + 1..]),
            None => (pc, stack),
        }
    }
}

/// Live blocks `[start, end)` carrying a value each.
#[derive(Clone, Debug)]
pub(crate) struct Blocks<T> {
    by_start: BTreeMap<u64, u32>,
    slots: Vec<Option<(u64, u64, T)>>,
    free: Vec<u32>,
    /// The blocks found last, (start, end, slot), `(0, 0, _)` when empty: a loop
    /// over a few arrays (a matrix product's three) finds each here instead of in
    /// the tree.
    recent: [(u64, u64, u32); RECENT],
    /// The entry of `recent` that answered last (tried first).
    hit: usize,
}

/// Entries of [`Blocks::recent`].
const RECENT: usize = 4;

impl<T> Default for Blocks<T> {
    fn default() -> Blocks<T> {
        Blocks {
            by_start: BTreeMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            recent: [(0, 0, 0); RECENT],
            hit: 0,
        }
    }
}

impl<T> Blocks<T> {
    /// Adds a block; returns the block that started at the same address, if any.
    pub fn insert(&mut self, start: u64, size: u64, v: T) -> Option<(u64, T)> {
        let old = self.remove(start);
        // a block over one never freed answers from the tree, as it did before
        self.recent = [(0, 0, 0); RECENT];
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some((start, start.saturating_add(size), v));
                s
            }
            None => {
                self.slots.push(Some((start, start.saturating_add(size), v)));
                (self.slots.len() - 1) as u32
            }
        };
        self.by_start.insert(start, slot);
        old
    }

    /// Removes the block starting at `start`; returns its size and value.
    pub fn remove(&mut self, start: u64) -> Option<(u64, T)> {
        let slot = self.by_start.remove(&start)?;
        for r in self.recent.iter_mut().filter(|r| r.2 == slot) {
            *r = (0, 0, 0);
        }
        self.free.push(slot);
        let (s, e, v) = self.slots[slot as usize].take()?;
        Some((e - s, v))
    }

    /// The block holding `addr`: its start, end and value.
    #[inline]
    pub fn find(&mut self, addr: u64) -> Option<(u64, u64, &mut T)> {
        let (s, e, slot) = self.recent[self.hit];
        let slot = if addr >= s && addr < e {
            slot
        } else if let Some(i) = self.recent.iter().position(|&(s, e, _)| addr >= s && addr < e) {
            self.hit = i;
            self.recent[i].2
        } else {
            let (_, &slot) = self.by_start.range(..=addr).next_back()?;
            let (s, e, _) = self.slots[slot as usize].as_ref()?;
            if addr >= *e {
                return None;
            }
            // kept up to the next block's start: where blocks overlap (a free
            // missed) the tree answers with the one starting last
            let after = (Bound::Excluded(addr), Bound::Unbounded);
            let upto = self.by_start.range(after).next().map_or(*e, |(&n, _)| n.min(*e));
            self.hit = (self.hit + 1) % RECENT;
            self.recent[self.hit] = (*s, upto, slot);
            slot
        };
        self.slots[slot as usize].as_mut().map(|(s, e, v)| (*s, *e, v))
    }

    /// True when [`Blocks::find`] answers no block for any address in `lo..=hi`:
    /// none starts in that range and the one starting last before it ends by `lo`.
    pub fn none_in(&self, lo: u64, hi: u64) -> bool {
        if self.by_start.range(lo..=hi).next().is_some() {
            return false;
        }
        match self.by_start.range(..lo).next_back() {
            None => true,
            Some((_, &slot)) => self.slots[slot as usize].as_ref().is_none_or(|b| b.1 <= lo),
        }
    }

    /// Removes every block.
    pub fn drain(&mut self) -> Vec<(u64, u64, T)> {
        self.by_start.clear();
        self.free.clear();
        self.recent = [(0, 0, 0); RECENT];
        std::mem::take(&mut self.slots)
            .into_iter()
            .flatten()
            .map(|(s, e, v)| (s, e - s, v))
            .collect()
    }
}

/// Allocation sites: call site plus the callers' return addresses.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sites {
    index: HashMap<(Pc, Vec<Pc>), u32>,
    pub list: Vec<(Pc, Vec<Pc>)>,
}

impl Sites {
    /// The id of a site, interning it.
    pub fn id(&mut self, pc: Pc, stack: &[Pc]) -> u32 {
        if let Some(&i) = self.index.get(&(pc, stack.to_vec())) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push((pc, stack.to_vec()));
        self.index.insert((pc, stack.to_vec()), i);
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_fns_move_the_site_to_the_first_caller_outside_them() {
        // xmalloc at 0x100..0x140, xcalloc at 0x140..0x180 (adjacent: merged), main far off
        let f = AllocFns::new(vec![Pc(0x141)..Pc(0x181), Pc(0x101)..Pc(0x141)]);
        assert_eq!(f.0, [Pc(0x101)..Pc(0x181)]);
        assert!(f.contains(Pc(0x101)) && f.contains(Pc(0x180)));
        assert!(!f.contains(Pc(0x100)) && !f.contains(Pc(0x181)));
        let stack = [Pc(0x150), Pc(0x900), Pc(0xa00)];
        // called in xmalloc, from xcalloc, from 0x900: the site is 0x900, called from 0xa00
        assert_eq!(f.site(Pc(0x120), &stack), (Pc(0x900), &stack[2..]));
        // a site outside every allocation function stays
        assert_eq!(f.site(Pc(0x900), &stack), (Pc(0x900), &stack[..]));
        // every frame inside one: as recorded
        let deep = [Pc(0x150), Pc(0x160)];
        assert_eq!(f.site(Pc(0x120), &deep), (Pc(0x120), &deep[..]));
        assert_eq!(AllocFns::default().site(Pc(0x120), &stack), (Pc(0x120), &stack[..]));
    }

    #[test]
    fn interval_lookup() {
        let mut b = Blocks::default();
        b.insert(0x1000, 0x100, 'a');
        b.insert(0x2000, 0x10, 'b');
        assert_eq!(b.find(0x10ff).map(|x| *x.2), Some('a'));
        assert_eq!(b.find(0x1100).map(|x| *x.2), None);
        assert_eq!(b.find(0x2008).map(|x| (x.0, x.1)), Some((0x2000, 0x2010)));
        assert_eq!(b.remove(0x1000), Some((0x100, 'a')));
        assert!(b.find(0x1000).is_none());
        b.insert(0x1000, 8, 'c');
        assert_eq!(b.find(0x1004).map(|x| *x.2), Some('c'));
        assert_eq!(b.drain().len(), 2);
        let mut s = Sites::default();
        assert_eq!(s.id(Pc(1), &[Pc(2)]), 0);
        assert_eq!(s.id(Pc(1), &[Pc(3)]), 1);
        assert_eq!(s.id(Pc(1), &[Pc(2)]), 0);
    }

    /// The recent-blocks memo answers as the tree would: the block starting
    /// last at or before the address, if the address is below its end (blocks
    /// freed, reused, and left overlapping by a missed free).
    #[test]
    fn the_recent_blocks_answer_as_the_tree() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut b = Blocks::default();
        let mut live: BTreeMap<u64, (u64, u32)> = BTreeMap::new();
        let mut hits = 0;
        for i in 0..200_000u32 {
            let start = 0x1000 + rnd(12) * 0x40 + rnd(2) * 0x8;
            match rnd(50) {
                0 => {
                    let size = rnd(0x80);
                    b.insert(start, size, i);
                    live.insert(start, (start + size, i));
                }
                1 => assert_eq!(b.remove(start).map(|r| r.1), live.remove(&start).map(|r| r.1)),
                _ => {
                    let addr = 0x1000 + rnd(0x340);
                    let want = live
                        .range(..=addr)
                        .next_back()
                        .filter(|(_, (end, _))| addr < *end)
                        .map(|(s, (e, v))| (*s, *e, *v));
                    let got = b.find(addr).map(|(s, e, v)| (s, e, *v));
                    assert_eq!(got, want, "step {i}, address {addr:#x}");
                    hits += usize::from(got.is_some());
                }
            }
        }
        assert!(hits > 10_000, "{hits}");
    }
}
