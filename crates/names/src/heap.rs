//! Every heap block of a trace, for naming heap addresses.

use memlens_format::{Addr, Pc, ThreadId};
use std::collections::BTreeMap;

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
    by_start: BTreeMap<u64, Vec<usize>>,
    live: BTreeMap<(ThreadId, u64), usize>,
    widest: u64,
}

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
        self.by_start.entry(addr.0).or_default().push(i);
        self.live.insert((thread, addr.0), i);
        self.widest = self.widest.max(size.max(1));
    }

    /// Records a free (first pass).
    pub fn free(&mut self, thread: ThreadId, index: u64, addr: Addr) {
        if let Some(i) = self.live.remove(&(thread, addr.0)) {
            self.blocks[i].died = Some(index);
        } else if let Some(v) = self.by_start.get(&addr.0) {
            // freed by another thread: close the newest open block there
            if let Some(&i) = v.iter().rev().find(|&&i| self.blocks[i].died.is_none()) {
                self.blocks[i].died = Some(u64::MAX - 1);
                self.live.retain(|_, &mut j| j != i);
            }
        }
    }

    /// Ends the first pass.
    pub fn finish(&mut self) {
        self.live.clear();
    }

    /// Every block.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// The block holding `addr` for an access by `thread` at its event `index`, and
    /// the offset in it.
    pub fn find(&self, addr: Addr, thread: ThreadId, index: u64) -> Option<(usize, u64)> {
        let lo = addr.0.saturating_sub(self.widest.saturating_sub(1));
        let mut best: Option<(usize, u8)> = None;
        for (_, v) in self.by_start.range(lo..=addr.0).rev().take(64) {
            for &i in v.iter().rev() {
                let b = &self.blocks[i];
                if addr.0 >= b.end {
                    continue;
                }
                let rank = if b.thread == thread {
                    if index >= b.born && b.died.is_none_or(|d| index < d) {
                        3
                    } else {
                        1
                    }
                } else {
                    2
                };
                if best.is_none_or(|(_, r)| rank > r) {
                    best = Some((i, rank));
                }
                if rank == 3 {
                    return Some((i, addr.0 - b.start));
                }
            }
        }
        best.map(|(i, _)| (i, addr.0 - self.blocks[i].start))
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
    }
}
