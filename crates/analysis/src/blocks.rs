//! Live heap blocks by address (an interval map), and allocation-site interning;
//! shared by the heap and layout kernels.

use memlens_format::Pc;
use std::collections::{BTreeMap, HashMap};

/// Live blocks `[start, end)` carrying a value each.
#[derive(Clone, Debug)]
pub(crate) struct Blocks<T> {
    by_start: BTreeMap<u64, u32>,
    slots: Vec<Option<(u64, u64, T)>>,
    free: Vec<u32>,
    // the block found last: (start, end, slot)
    last: Option<(u64, u64, u32)>,
}

impl<T> Default for Blocks<T> {
    fn default() -> Blocks<T> {
        Blocks { by_start: BTreeMap::new(), slots: Vec::new(), free: Vec::new(), last: None }
    }
}

impl<T> Blocks<T> {
    /// Adds a block; returns the block that started at the same address, if any.
    pub fn insert(&mut self, start: u64, size: u64, v: T) -> Option<(u64, T)> {
        let old = self.remove(start);
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
        if self.last.is_some_and(|l| l.2 == slot) {
            self.last = None;
        }
        self.free.push(slot);
        let (s, e, v) = self.slots[slot as usize].take()?;
        Some((e - s, v))
    }

    /// The block holding `addr`: its start, end and value.
    #[inline]
    pub fn find(&mut self, addr: u64) -> Option<(u64, u64, &mut T)> {
        let slot = match self.last {
            Some((s, e, slot)) if addr >= s && addr < e => slot,
            _ => {
                let (_, &slot) = self.by_start.range(..=addr).next_back()?;
                let (s, e, _) = self.slots[slot as usize].as_ref()?;
                if addr >= *e {
                    return None;
                }
                self.last = Some((*s, *e, slot));
                slot
            }
        };
        self.slots[slot as usize].as_mut().map(|(s, e, v)| (*s, *e, v))
    }

    /// Removes every block.
    pub fn drain(&mut self) -> Vec<(u64, u64, T)> {
        self.by_start.clear();
        self.free.clear();
        self.last = None;
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
}
