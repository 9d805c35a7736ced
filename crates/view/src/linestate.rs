//! The index builder's per-cache-line state, laid out for the per-access path: a
//! line's id comes from a page table (no hash probe per line), everything an access
//! updates sits in one 64-byte record, and a level's touched lines are a sparse set
//! indexed by line id (no hashing when a bucket is handed up).

use crate::fx::FxMap;

/// Accumulated accesses to one line within the current bucket of one level. The
/// address of the last access is the line's address + `off`.
#[derive(Clone, Copy, Default)]
pub(crate) struct Touch {
    pub(crate) loads: u32,
    pub(crate) stores: u32,
    pub(crate) pc: u32,
    pub(crate) off: u8,
}

impl Touch {
    /// Folds a later touch into this one: counts add up, the last access wins.
    #[inline]
    pub(crate) fn fold(&mut self, later: &Touch) {
        self.loads = self.loads.saturating_add(later.loads);
        self.stores = self.stores.saturating_add(later.stores);
        self.pc = later.pc;
        self.off = later.off;
    }
}

/// What an access reads and writes of its line, in one cache line of the host (the
/// name of the line and its totals live apart: they are read only when a bucket or
/// the index is written).
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
pub(crate) struct LineStat {
    pub(crate) threads: u64,
    /// Insertion counter when last touched.
    pub(crate) stamp: u64,
    /// Bytes of the line touched since it entered.
    pub(crate) mask: u64,
    /// The variable (id + 1) last counted in it by the per-variable table.
    pub(crate) var_memo: u32,
    /// Its touch in the current finest bucket, valid while `t0_live`.
    pub(crate) t0: Touch,
    /// In the working set.
    pub(crate) live: bool,
    /// Last thread that touched it (255: none).
    pub(crate) thread: u8,
    pub(crate) t0_live: bool,
}

/// Lines per page of the id table: 16 lines of 64 bytes = 1 KiB of address space,
/// one host cache line of ids (a program touching one line per page costs 64 bytes
/// per line, as its `LineStat`).
const PAGE: u64 = 16;
/// Slots of the direct-mapped page cache (a power of two).
const PAGE_CACHE: usize = 4096;

/// Cache line number → dense line id, in the order lines were first seen.
pub(crate) struct LineIds {
    pages: FxMap<u64, u32>,
    /// Page k's ids at `k * PAGE..`: id + 1, 0 when the line was not seen yet.
    ids: Vec<u32>,
    cache: Vec<(u64, u32)>,
}

impl Default for LineIds {
    fn default() -> Self {
        LineIds { pages: FxMap::default(), ids: Vec::new(), cache: vec![(u64::MAX, 0); PAGE_CACHE] }
    }
}

impl LineIds {
    /// The slot holding line `line`'s id + 1 (0: new; the caller fills it in).
    #[inline]
    pub(crate) fn slot(&mut self, line: u64) -> &mut u32 {
        let page = line / PAGE;
        let c = page as usize & (PAGE_CACHE - 1);
        let k = if self.cache[c].0 == page {
            self.cache[c].1
        } else {
            let k = match self.pages.get(&page) {
                Some(&k) => k,
                None => {
                    let k = (self.ids.len() as u64 / PAGE) as u32;
                    self.pages.insert(page, k);
                    self.ids.resize(self.ids.len() + PAGE as usize, 0);
                    k
                }
            };
            self.cache[c] = (page, k);
            k
        };
        &mut self.ids[(k as u64 * PAGE + line % PAGE) as usize]
    }
}

impl LineIds {
    /// Line `line`'s id, if it was seen and its page is in the page cache
    /// (nothing is added, no map is searched: a prefetch's lookup, which must
    /// not wait on a miss of its own).
    #[inline]
    pub(crate) fn cached(&self, line: u64) -> Option<u32> {
        let page = line / PAGE;
        let c = &self.cache[page as usize & (PAGE_CACHE - 1)];
        if c.0 != page {
            return None;
        }
        self.ids[(c.1 as u64 * PAGE + line % PAGE) as usize].checked_sub(1)
    }
}

/// The lines touched in a level's current bucket: a sparse set over line ids.
#[derive(Default)]
pub(crate) struct TouchSet {
    /// Per line id: its place in `list` (valid only when `list` there holds it).
    slot: Vec<u32>,
    pub(crate) list: Vec<(u32, Touch)>,
}

impl TouchSet {
    /// Folds `t` into line `id`'s touch (a new line starts from `t`).
    #[inline]
    pub(crate) fn fold(&mut self, id: u32, t: &Touch) {
        let i = id as usize;
        if i >= self.slot.len() {
            self.slot.resize((i + 1).next_power_of_two(), u32::MAX);
        }
        let s = self.slot[i] as usize;
        match self.list.get_mut(s) {
            Some(e) if e.0 == id => e.1.fold(t),
            _ => {
                self.slot[i] = self.list.len() as u32;
                self.list.push((id, *t));
            }
        }
    }
}

/// Memory operations per thread id: a vector for the usual small ids, a map beyond.
#[derive(Default)]
pub(crate) struct ThreadOps {
    small: Vec<u64>,
    big: FxMap<u32, u64>,
}

/// Thread ids counted in the vector.
const SMALL_THREADS: u32 = 4096;

impl ThreadOps {
    #[inline]
    pub(crate) fn add(&mut self, t: u32, n: u64) {
        if t < SMALL_THREADS {
            let i = t as usize;
            if i >= self.small.len() {
                self.small.resize(i + 1, 0);
            }
            self.small[i] += n;
        } else {
            *self.big.entry(t).or_insert(0) += n;
        }
    }

    pub(crate) fn get(&self, t: u32) -> u64 {
        match self.small.get(t as usize) {
            Some(&n) => n,
            None => self.big.get(&t).copied().unwrap_or(0),
        }
    }

    /// Every thread with at least one operation, by id.
    pub(crate) fn sorted(&self) -> Vec<(u32, u64)> {
        let mut v: Vec<(u32, u64)> = (self.small.iter().enumerate())
            .filter(|(_, &n)| n > 0)
            .map(|(t, &n)| (t as u32, n))
            .chain(self.big.iter().map(|(&t, &n)| (t, n)))
            .collect();
        v.sort_unstable();
        v
    }
}
