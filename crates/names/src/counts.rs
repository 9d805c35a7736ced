//! Counting accesses per label: the hot-path accumulator both passes share and
//! the [`Attribution`] they produce.

use crate::{prefetch, FastMap, Label};
use memlens_format::{Pc, ThreadId};

/// Counters of one label.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelCounts {
    /// Loads (an RMW counts as one load and, if it stored, one store).
    pub loads: u64,
    /// Stores.
    pub stores: u64,
    /// Bytes loaded.
    pub bytes_read: u64,
    /// Bytes stored.
    pub bytes_written: u64,
    /// Threads (sorted, distinct).
    pub threads: Vec<ThreadId>,
    /// Loads and stores per code address (distinct addresses, in no order).
    pub pcs: Vec<(Pc, u64)>,
}

impl LabelCounts {
    pub(crate) fn add_pc(&mut self, pc: Pc, n: u64) {
        match self.pcs.iter_mut().find(|(p, _)| *p == pc) {
            Some(e) => e.1 += n,
            None => self.pcs.push((pc, n)),
        }
    }

    pub(crate) fn add_thread(&mut self, t: ThreadId) {
        if self.threads.last() != Some(&t) {
            if let Err(p) = self.threads.binary_search(&t) {
                self.threads.insert(p, t);
            }
        }
    }
}

/// Every access of a trace, counted per label.
#[derive(Debug, Default)]
pub struct Attribution {
    /// The labels, in no particular order.
    pub labels: Vec<Label>,
    /// Counters, parallel to `labels`; every label was accessed at least once.
    pub counts: Vec<LabelCounts>,
    /// The heap blocks the accesses were named against.
    pub heap: crate::HeapIndex,
}

impl Attribution {
    /// Sorted by label (kind, name, site), for comparing two attributions.
    pub fn sorted(&self) -> Vec<(&Label, &LabelCounts)> {
        let mut v: Vec<_> = self.labels.iter().zip(&self.counts).collect();
        v.sort_by(|a, b| {
            (a.0.kind, &*a.0.base, &a.0.path, a.0.site.as_deref()).cmp(&(
                b.0.kind,
                &*b.0.base,
                &b.0.path,
                b.0.site.as_deref(),
            ))
        });
        v
    }
}

/// What names heap blocks after their allocation site (`counts.c:37 allocs`).
pub type SiteNamer<'a> = &'a (dyn Fn(Pc) -> String + Sync);

/// Per-label counters on the hot path: the first `INLINE_PCS` code addresses of a
/// label are counted inline, the rest in a map.
#[derive(Clone, Copy, Default)]
#[repr(align(64))]
struct Hot {
    loads: u64,
    stores: u64,
    bytes_read: u64,
    bytes_written: u64,
    pc: [u64; INLINE_PCS],
    n: [u64; INLINE_PCS],
}

/// A global array element is typically reached from a loop's unrolled loads and a
/// read-modify-write elsewhere: four code addresses.
const INLINE_PCS: usize = 6;

/// Accumulates accesses per label id: a few array updates per access, no hashing
/// unless a label is reached from more than `INLINE_PCS` code addresses.
#[derive(Default)]
pub(crate) struct Accum {
    hot: Vec<Hot>,
    /// Per label: 1 + the thread that touched it last (0: none yet).
    last: Vec<u32>,
    threads: Vec<Vec<ThreadId>>,
    more: FastMap<(u32, u64), u64>,
    /// Direct-mapped counts in front of `more`: with whole-variable names a heap
    /// site's label is reached from hundreds of code addresses, and a hash map
    /// entry per access was a seventh of naming sqlite.
    spill: Vec<(u32, u64, u64)>,
    /// Accesses not yet added: adding in batches lets the counters of the next
    /// accesses be prefetched (random accesses to a large array miss the cache
    /// on every counter otherwise).
    pending: Vec<Pending>,
}

/// One access waiting to be counted.
#[derive(Clone, Copy)]
pub(crate) struct Pending {
    pub(crate) id: u32,
    pub(crate) pc: Pc,
    pub(crate) l: u64,
    pub(crate) st: u64,
    pub(crate) br: u64,
    pub(crate) bw: u64,
}

pub(crate) const BATCH: usize = 512;
/// Labels up to which accesses are counted at once (their counters: 1 MiB at most).
const DIRECT_LABELS: usize = 8192;
const SPILL_BITS: u32 = 12;
const AHEAD: usize = 8;

impl Accum {
    /// Counts `p`, an access of thread `t`, at the latest by the next `flush`.
    #[inline(always)]
    pub(crate) fn push(&mut self, p: Pending, t: ThreadId) {
        // few labels (whole variables): their counters stay in the cache, no need
        // to batch for prefetching
        if (p.id as usize) < self.hot.len() && self.hot.len() <= DIRECT_LABELS {
            self.add(p.id, t, p.pc, p.l, p.st, p.br, p.bw);
            return;
        }
        self.pending.push(p);
        if self.pending.len() >= BATCH {
            self.flush(t);
        }
    }

    /// Counts the pending accesses, all of thread `t`.
    pub(crate) fn flush(&mut self, t: ThreadId) {
        let pending = std::mem::take(&mut self.pending);
        if let Some(max) = pending.iter().map(|p| p.id).max() {
            if max as usize >= self.hot.len() {
                self.grow(max as usize);
            }
        }
        for (j, p) in pending.iter().enumerate() {
            if let Some(q) = pending.get(j + AHEAD) {
                prefetch(&self.hot[q.id as usize]);
            }
            self.add(p.id, t, p.pc, p.l, p.st, p.br, p.bw);
        }
        self.pending = pending;
        self.pending.clear();
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn add(&mut self, id: u32, t: ThreadId, pc: Pc, l: u64, st: u64, br: u64, bw: u64) {
        let i = id as usize;
        if i >= self.hot.len() {
            self.grow(i);
        }
        let h = &mut self.hot[i];
        h.loads += l;
        h.stores += st;
        h.bytes_read += br;
        h.bytes_written += bw;
        // every access counts at least one load or store, so n == 0 is a free slot
        // (slots fill in order)
        let k = l + st;
        let mut j = 0;
        while j < INLINE_PCS && h.n[j] != 0 && h.pc[j] != pc.0 {
            j += 1;
        }
        if j < INLINE_PCS {
            h.pc[j] = pc.0;
            h.n[j] += k;
        } else {
            self.spill(id, pc.0, k);
        }
        // a thread's accesses come in runs (a stream, a chunk): search only when the
        // thread changes
        let tag = t.0.wrapping_add(1);
        if self.last[i] != tag {
            self.last[i] = tag;
            let v = &mut self.threads[i];
            if let Err(p) = v.binary_search(&t) {
                v.insert(p, t);
            }
        }
    }

    #[inline]
    fn spill(&mut self, id: u32, pc: u64, k: u64) {
        if self.spill.is_empty() {
            self.spill = vec![(0, 0, 0); 1 << SPILL_BITS];
        }
        let h = ((pc ^ u64::from(id).rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            >> (64 - SPILL_BITS)) as usize;
        let e = &mut self.spill[h];
        if e.2 != 0 && (e.0, e.1) == (id, pc) {
            e.2 += k;
            return;
        }
        let old = std::mem::replace(e, (id, pc, k));
        if old.2 != 0 {
            *self.more.entry((old.0, old.1)).or_default() += old.2;
        }
    }

    #[inline(never)]
    fn grow(&mut self, i: usize) {
        let n = (i + 1).max(self.hot.len() * 2);
        self.hot.resize(n, Hot::default());
        self.last.resize(n, 0);
        self.threads.resize(n, Vec::new());
    }

    /// The labels that were accessed, with their counters.
    pub(crate) fn finish(mut self, labels: Vec<Label>) -> Attribution {
        for (id, pc, n) in std::mem::take(&mut self.spill) {
            if n != 0 {
                *self.more.entry((id, pc)).or_default() += n;
            }
        }
        let mut labels: Vec<Option<Label>> = labels.into_iter().map(Some).collect();
        let mut out = Attribution::default();
        let mut at: Vec<u32> = vec![u32::MAX; self.hot.len()];
        for (i, (h, threads)) in self.hot.iter().zip(self.threads).enumerate() {
            if h.n[0] == 0 {
                continue;
            }
            let mut pcs = Vec::new();
            for j in 0..INLINE_PCS {
                if h.n[j] != 0 {
                    pcs.push((Pc(h.pc[j]), h.n[j]));
                }
            }
            at[i] = out.counts.len() as u32;
            out.labels.push(labels[i].take().expect("a label per id"));
            out.counts.push(LabelCounts {
                loads: h.loads,
                stores: h.stores,
                bytes_read: h.bytes_read,
                bytes_written: h.bytes_written,
                threads,
                pcs,
            });
        }
        for ((id, pc), n) in self.more {
            out.counts[at[id as usize] as usize].add_pc(Pc(pc), n);
        }
        out
    }
}
