//! The tables attribution looks labels up in: the label interner, dense per-byte
//! tables for module segments and large heap blocks, and small per-page caches.

use crate::{Kind, Label, LabelId};
use memlens_format::Addr;
use memlens_symbols::Symbolizer;

pub(crate) use memlens_analysis::prefetch_line as prefetch;

/// Labels by id, each distinct label once. The labels are kept once, in the
/// vector; the table holds ids (millions of heap fields: no second copy of each name).
#[derive(Default)]
pub(crate) struct Interner {
    pub(crate) labels: Vec<Label>,
    pub(crate) ids: hashbrown::HashTable<LabelId>,
    /// [`Granularity::Variable`]: labels lose their member/index path.
    pub(crate) coarse: bool,
}

impl Interner {
    fn hash(l: &Label) -> u64 {
        use std::hash::BuildHasher;
        rustc_hash::FxBuildHasher.hash_one(l)
    }

    /// The id of `l`, new if it was not seen before.
    pub(crate) fn intern(&mut self, mut l: Label) -> LabelId {
        if self.coarse {
            l.path.clear();
        }
        let h = Self::hash(&l);
        let labels = &self.labels;
        if let Some(&id) = self.ids.find(h, |&id| labels[id as usize] == l) {
            return id;
        }
        let id = self.labels.len() as LabelId;
        self.labels.push(l);
        let labels = &self.labels;
        self.ids.insert_unique(h, id, |&id| Self::hash(&labels[id as usize]));
        id
    }

    pub(crate) fn get(&self, id: LabelId) -> &Label {
        &self.labels[id as usize]
    }
}

/// Label per byte address of the modules' writable segments, in pages allocated on
/// first touch (segments include the runtime's large buffers, never touched by the
/// program).
pub(crate) struct DenseTable {
    segs: Vec<DenseSeg>,
    /// Pages of labels, handed out to segments as they are touched.
    pool: Vec<u32>,
    /// The segment hit last.
    last: usize,
    /// The addresses between two segments around the last one in none: heap
    /// and stack accesses ask on every access, and a search of every segment
    /// was a tenth of naming a heap-heavy trace.
    gap: std::ops::Range<u64>,
}

struct DenseSeg {
    range: std::ops::Range<u64>,
    /// Per page: its offset in the pool, or `NO_PAGE`.
    dir: Vec<u32>,
}

const DENSE_PAGE_BITS: u32 = 12;
const DENSE_PAGE_MASK: u64 = (1 << DENSE_PAGE_BITS) - 1;
const NO_PAGE: u32 = u32::MAX;
/// Heap blocks from this size on get a dense label table.
pub(crate) const BIG_BLOCK: u64 = 4096;
const MODULE_PAGES: usize = 1024;
/// Segments up to this size get a dense table.
const DENSE_MAX: u64 = 1 << 32;

impl DenseTable {
    pub(crate) fn new(sym: &Symbolizer) -> DenseTable {
        let segs = sym
            .modules()
            .iter()
            .flat_map(|m| {
                m.segments
                    .iter()
                    .filter(|s| s.flags & 2 != 0 && s.memsz > 0 && s.memsz <= DENSE_MAX)
                    .map(move |s| {
                        let a = s.vaddr.wrapping_add(m.bias);
                        a..a.saturating_add(s.memsz)
                    })
            })
            .map(|range| {
                let pages = ((range.end - range.start) >> DENSE_PAGE_BITS) + 1;
                DenseSeg { range, dir: vec![NO_PAGE; pages as usize] }
            })
            .collect();
        DenseTable { segs, pool: Vec::new(), last: 0, gap: 0..0 }
    }

    /// A table without segments, for [`DenseTable::add`].
    pub(crate) fn empty() -> DenseTable {
        DenseTable { segs: Vec::new(), pool: Vec::new(), last: 0, gap: 0..0 }
    }

    /// A segment for offsets `0..len`; its index.
    pub(crate) fn add(&mut self, len: u64) -> usize {
        let pages = (len >> DENSE_PAGE_BITS) + 1;
        self.segs.push(DenseSeg { range: 0..len, dir: vec![NO_PAGE; pages as usize] });
        self.gap = 0..0;
        self.segs.len() - 1
    }

    /// The entry of offset `at` of segment `k`.
    #[inline]
    pub(crate) fn get_in(&self, k: usize, at: u64) -> u32 {
        let page = self.segs[k].dir[(at >> DENSE_PAGE_BITS) as usize];
        if page == NO_PAGE {
            return UNSEEN;
        }
        self.pool[page as usize + (at & DENSE_PAGE_MASK) as usize]
    }

    /// `None` when `a` is in no writable segment, else where its entry is and the
    /// entry (`UNSEEN`, `NOT_GLOBAL` or a label id).
    #[inline]
    pub(crate) fn get(&mut self, a: u64) -> Option<(usize, u64, u32)> {
        let k = if self.segs.get(self.last).is_some_and(|d| d.range.contains(&a)) {
            self.last
        } else if self.gap.contains(&a) {
            return None;
        } else {
            let Some(k) = self.segs.iter().position(|d| d.range.contains(&a)) else {
                self.gap = self.gap_around(a);
                return None;
            };
            self.last = k;
            k
        };
        let at = a - self.segs[k].range.start;
        let page = self.segs[k].dir[(at >> DENSE_PAGE_BITS) as usize];
        if page == NO_PAGE {
            return Some((k, at, UNSEEN));
        }
        Some((k, at, self.pool[page as usize + (at & DENSE_PAGE_MASK) as usize]))
    }

    /// The addresses from the end of the last segment below `a` to the start of
    /// the first above it (`a` is in none).
    #[cold]
    fn gap_around(&self, a: u64) -> std::ops::Range<u64> {
        let below = self.segs.iter().map(|d| d.range.end).filter(|&e| e <= a).max();
        let above = self.segs.iter().map(|d| d.range.start).filter(|&s| s > a).min();
        below.unwrap_or(0)..above.unwrap_or(u64::MAX)
    }

    /// Prefetches the entry of `a`, if it has one: the next accesses of a batch
    /// are looked up while the current ones are counted.
    #[inline]
    pub(crate) fn prefetch(&self, a: u64) {
        let Some(d) = self.segs.get(self.last).filter(|d| d.range.contains(&a)) else {
            return;
        };
        let at = a - d.range.start;
        let page = d.dir[(at >> DENSE_PAGE_BITS) as usize];
        if page != NO_PAGE {
            prefetch(&self.pool[page as usize + (at & DENSE_PAGE_MASK) as usize]);
        }
    }

    /// Sets the entry `get` found.
    pub(crate) fn set(&mut self, k: usize, at: u64, id: u32) {
        let p = (at >> DENSE_PAGE_BITS) as usize;
        if self.segs[k].dir[p] == NO_PAGE {
            self.segs[k].dir[p] = self.pool.len() as u32;
            self.pool.resize(self.pool.len() + (1 << DENSE_PAGE_BITS), UNSEEN);
        }
        let page = self.segs[k].dir[p] as usize;
        self.pool[page + (at & DENSE_PAGE_MASK) as usize] = id;
    }
}

/// Whether an address lies in a module, cached per page when the whole page
/// answers alike (a module may end mid-page): heap accesses ask on nearly every
/// access or cache miss.
pub(crate) struct ModulePages(Vec<(u64, bool)>);

impl Default for ModulePages {
    fn default() -> Self {
        ModulePages(vec![(u64::MAX, false); MODULE_PAGES])
    }
}

impl ModulePages {
    #[inline]
    pub(crate) fn contains(&mut self, sym: &Symbolizer, addr: Addr) -> bool {
        let page = addr.0 >> 12;
        let slot = (page as usize) & (MODULE_PAGES - 1);
        let (p, inside) = self.0[slot];
        if p == page {
            return inside;
        }
        let first = sym.module_of(Addr(page << 12)).is_some();
        let last = sym.module_of(Addr((page << 12) | 0xfff)).is_some();
        if first != last {
            return sym.module_of(addr).is_some();
        }
        self.0[slot] = (page, first);
        first
    }
}

/// [`Granularity::Variable`]: one label per heap block, named at its first access,
/// unless its bytes have names of their own (a dynamic TLS block).
#[derive(Default)]
pub(crate) struct BlockLabels(Vec<LabelId>);

impl BlockLabels {
    /// Block `bi`'s label (`Some(None)`: its bytes are named apart), `None` before
    /// it is named.
    #[inline]
    pub(crate) fn get(&self, bi: usize) -> Option<Option<LabelId>> {
        match self.0.get(bi) {
            None | Some(&UNSEEN) => None,
            Some(&NOT_GLOBAL) => Some(None),
            Some(&id) => Some(Some(id)),
        }
    }

    /// Names block `bi` (one of `blocks`) after `l`, its label at some offset.
    pub(crate) fn set(
        &mut self,
        bi: usize,
        blocks: usize,
        l: Label,
        labels: &mut Interner,
    ) -> Option<LabelId> {
        if self.0.len() <= bi {
            self.0.resize(blocks.max(bi + 1), UNSEEN);
        }
        let id = if l.kind == Kind::Heap { labels.intern(l) } else { NOT_GLOBAL };
        self.0[bi] = id;
        (id != NOT_GLOBAL).then_some(id)
    }
}

/// Dense global tables: not looked up yet, and not a global variable.
pub(crate) const UNSEEN: u32 = u32::MAX;
pub(crate) const NOT_GLOBAL: u32 = u32::MAX - 1;

#[cfg(test)]
mod tests {
    use super::*;

    /// Addresses between segments are in none, before and after the gap around
    /// them is remembered, and a segment added later is found in the old gap.
    #[test]
    fn dense_table_finds_segments_around_a_remembered_gap() {
        let mut t = DenseTable::empty();
        t.segs.push(DenseSeg { range: 0x1000..0x2000, dir: vec![NO_PAGE; 2] });
        t.segs.push(DenseSeg { range: 0x9000..0xa000, dir: vec![NO_PAGE; 2] });
        assert_eq!(t.get(0x1800).map(|x| x.0), Some(0));
        for a in [0x5000, 0x2000, 0x8fff, 0x5000] {
            assert_eq!(t.get(a), None, "{a:#x}");
        }
        assert_eq!(t.gap, 0x2000..0x9000);
        assert_eq!(t.get(0x9000).map(|x| x.0), Some(1));
        assert_eq!(t.get(0x1fff).map(|x| x.0), Some(0));
        assert_eq!(t.get(0xa000), None);
        assert_eq!(t.gap, 0xa000..u64::MAX);
        assert_eq!(t.get(0x10), None);
        assert_eq!(t.gap, 0..0x1000);
        let k = t.add(0x100);
        assert_eq!(t.get(0x10).map(|x| (x.0, x.1)), Some((k, 0x10)));
    }
}
