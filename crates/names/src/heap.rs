//! Every heap block of a trace, for naming heap addresses.

use crate::FastMap;
use memlens_format::{Addr, Pc, ThreadId};

/// One allocated block.
#[derive(Clone, Debug)]
pub struct Block {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Allocation call site.
    pub site: Pc,
    /// Callers of the allocation, innermost first.
    pub stack: Vec<Pc>,
    /// Thread that allocated it.
    pub thread: ThreadId,
    /// Event index of the allocation in that thread.
    pub born: u64,
    /// Event index of the free in that thread, if freed by it.
    pub died: Option<u64>,
}

/// Blocks by start address. Without a global order between threads, an address
/// that several blocks covered over time is given to the block that was live at
/// that point of the accessing thread's own stream when there is one, else to the
/// most recent block at that address.
#[derive(Default)]
pub struct HeapIndex {
    blocks: Vec<Block>,
    /// While building: the newest block starting at an address, and for each block
    /// the previous one at its start (`u32::MAX`: none).
    newest: FastMap<u64, u32>,
    prev: Vec<u32>,
    live: FastMap<(ThreadId, u64), usize>,
    widest: u64,
    /// After [`HeapIndex::finish`]: distinct starts, ascending; the blocks of start
    /// `starts[j]` are `members[groups[j]..groups[j + 1]]` in allocation order;
    /// `max_end[j]` is the largest end of the blocks of starts `0..=j`, so a search
    /// going down stops as soon as nothing lower can cover the address.
    starts: Vec<u64>,
    groups: Vec<u32>,
    members: Vec<u32>,
    /// After `finish`: per block, overlapped by no other block.
    exclusive: Vec<bool>,
    max_end: Vec<u64>,
}

/// How many distinct block starts below an address are looked at.
const WINDOW: usize = 64;

impl HeapIndex {
    /// Records an allocation (first pass).
    pub fn add_block(
        &mut self,
        thread: ThreadId,
        index: u64,
        addr: Addr,
        size: u64,
        site: Pc,
        stack: Vec<Pc>,
    ) {
        if addr.0 == 0 {
            return;
        }
        let i = self.blocks.len();
        self.blocks.push(Block {
            start: addr.0,
            end: addr.0.saturating_add(size.max(1)),
            site,
            stack,
            thread,
            born: index,
            died: None,
        });
        let prev = self.newest.insert(addr.0, i as u32).unwrap_or(u32::MAX);
        self.prev.push(prev);
        self.live.insert((thread, addr.0), i);
        self.widest = self.widest.max(size.max(1));
    }

    /// Records a free (first pass).
    pub fn free(&mut self, thread: ThreadId, index: u64, addr: Addr) {
        if let Some(i) = self.live.remove(&(thread, addr.0)) {
            self.blocks[i].died = Some(index);
        } else if let Some(&newest) = self.newest.get(&addr.0) {
            // freed by another thread: close the newest open block there
            let mut j = newest;
            while j != u32::MAX {
                let b = &mut self.blocks[j as usize];
                if b.died.is_none() {
                    b.died = Some(u64::MAX - 1);
                    // its own entry in `live`, unless a newer block took the key
                    let key = (b.thread, b.start);
                    if self.live.get(&key) == Some(&(j as usize)) {
                        self.live.remove(&key);
                    }
                    break;
                }
                j = self.prev[j as usize];
            }
        }
    }

    /// Ends the first pass.
    pub fn finish(&mut self) {
        self.live = FastMap::default();
        let mut starts: Vec<u64> = self.newest.keys().copied().collect();
        starts.sort_unstable();
        let mut groups = Vec::with_capacity(starts.len() + 1);
        let mut members = Vec::with_capacity(self.blocks.len());
        let mut max_end = Vec::with_capacity(starts.len());
        let mut top = 0u64;
        for &s in &starts {
            groups.push(members.len() as u32);
            let from = members.len();
            let mut j = self.newest[&s];
            while j != u32::MAX {
                members.push(j);
                top = top.max(self.blocks[j as usize].end);
                j = self.prev[j as usize];
            }
            members[from..].reverse();
            max_end.push(top);
        }
        groups.push(members.len() as u32);
        // A block no other block ever overlaps is the only candidate for every
        // address in it, whatever the thread and event: lookups can skip the search.
        self.exclusive = vec![false; self.blocks.len()];
        for j in 0..starts.len() {
            let g = &members[groups[j] as usize..groups[j + 1] as usize];
            if let [i] = *g {
                let b = &self.blocks[i as usize];
                let before = j == 0 || max_end[j - 1] <= b.start;
                let after = starts.get(j + 1).is_none_or(|&s| s >= b.end);
                self.exclusive[i as usize] = before && after;
            }
        }
        self.starts = starts;
        self.groups = groups;
        self.members = members;
        self.max_end = max_end;
        self.newest = FastMap::default();
        self.prev = Vec::new();
    }

    /// Whether block `i` is overlapped by no other block (then it is what
    /// [`HeapIndex::find`] answers for every address in it, at any event).
    pub fn exclusive(&self, i: usize) -> bool {
        self.exclusive.get(i).copied().unwrap_or(false)
    }

    /// Every block.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// The block holding `addr` for an access by `thread` at its event `index`, and
    /// the offset in it.
    pub fn find(&self, addr: Addr, thread: ThreadId, index: u64) -> Option<(usize, u64)> {
        self.search(addr, thread, index, false).0
    }

    /// Like [`HeapIndex::find`], with the range of `thread`'s event indices around
    /// `index` over which the answer for `addr` stays the same (it changes only where
    /// a block of `thread` covering `addr` is allocated or freed).
    pub fn find_with_span(
        &self,
        addr: Addr,
        thread: ThreadId,
        index: u64,
    ) -> (Option<(usize, u64)>, std::ops::Range<u64>) {
        self.search(addr, thread, index, true)
    }

    /// Candidates are the blocks covering `addr` among the [`WINDOW`] nearest distinct
    /// starts at or below it; the first (newest start, then newest block) live block of
    /// the accessing thread wins, else the first block of another thread, else the
    /// first of the accessing thread.
    fn search(
        &self,
        addr: Addr,
        thread: ThreadId,
        index: u64,
        span: bool,
    ) -> (Option<(usize, u64)>, std::ops::Range<u64>) {
        let a = addr.0;
        let lo = a.saturating_sub(self.widest.saturating_sub(1));
        let k = self.starts.partition_point(|&s| s <= a);
        let mut best: Option<(usize, u8)> = None;
        let mut found: Option<usize> = None;
        let (mut from, mut to) = (0u64, u64::MAX);
        for j in (k.saturating_sub(WINDOW)..k).rev() {
            if self.starts[j] < lo || self.max_end[j] <= a {
                break;
            }
            let g = &self.members[self.groups[j] as usize..self.groups[j + 1] as usize];
            for &i in g.iter().rev() {
                let i = i as usize;
                let b = &self.blocks[i];
                if a >= b.end {
                    continue;
                }
                let rank = if b.thread == thread {
                    let died = b.died.unwrap_or(u64::MAX);
                    if span {
                        // the rank of this block is constant between these indices
                        if index < b.born {
                            to = to.min(b.born);
                        } else if index >= died {
                            from = from.max(died);
                        } else {
                            from = from.max(b.born);
                            to = to.min(died);
                        }
                    }
                    if index >= b.born && index < died {
                        3
                    } else {
                        1
                    }
                } else {
                    2
                };
                if found.is_none() {
                    if best.is_none_or(|(_, r)| rank > r) {
                        best = Some((i, rank));
                    }
                    if rank == 3 {
                        found = Some(i);
                        if !span {
                            break;
                        }
                    }
                }
            }
            if found.is_some() && !span {
                break;
            }
        }
        let i = found.or(best.map(|(i, _)| i));
        (i.map(|i| (i, a - self.blocks[i].start)), from..to)
    }
}

/// The last block a lookup found that no other block overlaps: a lookup inside it
/// needs no search (see [`HeapIndex::exclusive`]). One per attributor.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LastBlock {
    start: u64,
    end: u64,
    index: usize,
}

impl LastBlock {
    /// [`HeapIndex::find_with_span`] (`span`: with the event range, else
    /// [`HeapIndex::find`]'s answer and the whole range).
    #[inline]
    pub(crate) fn find(
        &mut self,
        heap: &HeapIndex,
        addr: Addr,
        thread: ThreadId,
        index: u64,
        span: bool,
    ) -> (Option<(usize, u64)>, std::ops::Range<u64>) {
        if addr.0 >= self.start && addr.0 < self.end {
            return (Some((self.index, addr.0 - self.start)), 0..u64::MAX);
        }
        let r = heap.search(addr, thread, index, span);
        if let Some((bi, _)) = r.0 {
            if heap.exclusive(bi) {
                let b = &heap.blocks[bi];
                *self = LastBlock { start: b.start, end: b.end, index: bi };
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuse_is_resolved_by_lifetime_in_the_same_thread() {
        let mut h = HeapIndex::default();
        let t = ThreadId(0);
        h.add_block(t, 1, Addr(0x1000), 32, Pc(0xa), vec![]);
        h.free(t, 5, Addr(0x1000));
        h.add_block(t, 6, Addr(0x1000), 16, Pc(0xb), vec![]);
        h.finish();
        assert_eq!(h.find(Addr(0x1008), t, 3), Some((0, 8)));
        assert_eq!(h.find(Addr(0x1008), t, 7), Some((1, 8)));
        assert_eq!(h.find(Addr(0x1018), t, 3), Some((0, 0x18)));
        assert_eq!(h.find(Addr(0x2000), t, 3), None);
        assert_eq!(h.find_with_span(Addr(0x1008), t, 3), (Some((0, 8)), 1..5));
        assert_eq!(h.find_with_span(Addr(0x1008), t, 9), (Some((1, 8)), 6..u64::MAX));
        assert_eq!(h.find_with_span(Addr(0x1018), t, 9).1, 5..u64::MAX);
        // the reused start overlaps: neither block is exclusive
        assert!(!h.exclusive(0) && !h.exclusive(1));
    }

    #[test]
    fn blocks_nobody_overlaps_are_exclusive() {
        let mut h = HeapIndex::default();
        let t = ThreadId(0);
        h.add_block(t, 1, Addr(0x1000), 32, Pc(0xa), vec![]);
        h.add_block(t, 2, Addr(0x2000), 64, Pc(0xa), vec![]);
        // an mmap region with a block inside it
        h.add_block(t, 3, Addr(0x10000), 0x1000, Pc(0xb), vec![]);
        h.add_block(t, 4, Addr(0x10100), 16, Pc(0xc), vec![]);
        h.finish();
        assert!(h.exclusive(0) && h.exclusive(1));
        assert!(!h.exclusive(2) && !h.exclusive(3));
        for a in [0x1000, 0x101f] {
            assert_eq!(h.find(Addr(a), ThreadId(7), 99), Some((0, a - 0x1000)));
        }
    }
}
