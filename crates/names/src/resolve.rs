//! The one resolver from a data address to its label. The serial
//! [`Attributor`](crate::Attributor) and every worker of the parallel pass (`par`)
//! call [`Resolver::resolve`], so both name every access the same way; the parallel
//! pass also uses what it returns about how long the answer holds.
//!
//! The order of the decisions: a global of a module (a dense table over the writable
//! segments, a cache elsewhere in modules), a local of the frame owning a stack
//! address, a static thread-local, (by whole variables) a heap range where every
//! block ever there has one name, the heap block live at the access, and last the
//! mapping the address falls in.

use crate::heap::{Block, LastBlock, Regions};
use crate::{
    global_label, heap_base, heap_label, heap_single, mapping_label, stack_label, tls_label,
    BlockLabels, DenseTable, FastMap, Granularity, HeapIndex, HeapShape, Interner, Kind, Label,
    Maps, ModulePages, SiteNamer, ThreadState, BIG_BLOCK, NOT_GLOBAL, UNSEEN,
};
use memlens_format::{Addr, Pc, ThreadId};
use memlens_symbols::{DataKind, HeapType, Symbolizer};
use std::ops::Range;
use std::sync::{Arc, OnceLock};

/// The answer does not depend on the thread's state.
pub(crate) const ALWAYS: u8 = 0;
/// Valid while the thread's stack range, thread pointer and existence are unchanged.
pub(crate) const THREAD: u8 = 1;
/// Valid while, in addition, no frame was entered or left.
pub(crate) const FRAME: u8 = 2;

/// Heap blocks grouped by what their names depend on: (site, call stack).
pub(crate) struct HeapClasses {
    of_block: Vec<u32>,
    /// Per class: its base name, one of its blocks, and its element type, read at
    /// first use (reading it parses DWARF and source lines).
    classes: Vec<(Arc<str>, usize, OnceLock<Option<HeapType>>)>,
}

impl HeapClasses {
    pub(crate) fn new(heap: &HeapIndex, site_namer: Option<SiteNamer<'_>>) -> HeapClasses {
        let mut ids: FastMap<(Pc, &[Pc]), u32> = FastMap::default();
        let mut bases: FastMap<Pc, Arc<str>> = FastMap::default();
        let mut classes = Vec::new();
        let of_block = heap
            .blocks()
            .iter()
            .enumerate()
            .map(|(bi, b)| {
                *ids.entry((b.site, &b.stack[..])).or_insert_with(|| {
                    let base = bases
                        .entry(b.site)
                        .or_insert_with(|| heap_base(site_namer, b.site))
                        .clone();
                    classes.push((base, bi, OnceLock::new()));
                    (classes.len() - 1) as u32
                })
            })
            .collect();
        HeapClasses { of_block, classes }
    }

    /// Block `bi`'s class, base name and element type.
    fn of(
        &self,
        sym: &Symbolizer,
        heap: &HeapIndex,
        bi: usize,
    ) -> (u32, &Arc<str>, &Option<HeapType>) {
        let class = self.of_block[bi];
        let (base, rep, ty) = &self.classes[class as usize];
        let ty = ty.get_or_init(|| {
            let b = &heap.blocks()[*rep];
            sym.heap_type(b.site, &b.stack)
        });
        (class, base, ty)
    }
}

/// [`Granularity::Variable`]: the whole-block name of every heap block, by key,
/// and the address ranges where all blocks ever there share one (see [`Regions`]).
pub(crate) struct CoarseHeap {
    regions: Regions,
    labels: Vec<Label>,
}

impl CoarseHeap {
    pub(crate) fn new(sym: &Symbolizer, heap: &HeapIndex, classes: &HeapClasses) -> CoarseHeap {
        let mut keys = Interner { coarse: true, ..Interner::default() };
        let mut by: FastMap<(u32, HeapShape), Option<u32>> = FastMap::default();
        let regions = Regions::new(heap, |bi| {
            let (class, base, ty) = classes.of(sym, heap, bi);
            let shape = heap_single(ty, &heap.blocks()[bi]);
            *by.entry((class, shape)).or_insert_with(|| {
                if matches!(shape, HeapShape::DynamicTls(_)) {
                    return None;
                }
                let l = heap_label(base, ty, shape, 0);
                (l.kind == Kind::Heap).then(|| keys.intern(l))
            })
        });
        CoarseHeap { regions, labels: keys.labels }
    }

    /// The range of [`Regions`] holding `addr` and its name as an id of `labels`;
    /// `ids` keeps the id of each key interned so far (`UNSEEN`: none yet).
    pub(crate) fn find(
        &self,
        addr: u64,
        ids: &mut Vec<u32>,
        labels: &mut Interner,
    ) -> Option<(u64, u64, u32)> {
        let r = self.regions.find(addr)?;
        Some(self.id_of(r, ids, labels))
    }

    /// The numbers of the ranges meeting `[lo, hi)` (see `Regions::meeting`).
    pub(crate) fn meeting(&self, lo: u64, hi: u64) -> (usize, usize) {
        self.regions.meeting(lo, hi)
    }

    /// [`CoarseHeap::find`] among ranges `r0..r1` from [`CoarseHeap::meeting`].
    pub(crate) fn find_in(
        &self,
        addr: u64,
        (r0, r1): (usize, usize),
        ids: &mut Vec<u32>,
        labels: &mut Interner,
    ) -> Option<(u64, u64, u32)> {
        let r = self.regions.find_in(addr, r0, r1)?;
        Some(self.id_of(r, ids, labels))
    }

    fn id_of(
        &self,
        (lo, hi, key): (u64, u64, u32),
        ids: &mut Vec<u32>,
        labels: &mut Interner,
    ) -> (u64, u64, u32) {
        let k = key as usize;
        if ids.len() <= k {
            ids.resize(self.labels.len().max(k + 1), UNSEEN);
        }
        if ids[k] == UNSEEN {
            ids[k] = labels.intern(self.labels[k].clone());
        }
        (lo, hi, ids[k])
    }
}

/// What resolving reads and never changes.
pub(crate) struct Shared<'a> {
    pub(crate) sym: &'a Symbolizer,
    pub(crate) heap: &'a HeapIndex,
    pub(crate) classes: &'a HeapClasses,
    pub(crate) maps: Option<&'a Maps>,
    /// Static TLS blocks of the modules loaded at start-up: (module id, offset below
    /// the thread pointer, size).
    pub(crate) static_tls: &'a [(u32, u64, u64)],
    /// [`Granularity::Variable`] only.
    pub(crate) coarse: Option<&'a CoarseHeap>,
    /// Lowest offset below the thread pointer of the static TLS blocks.
    pub(crate) tls_reach: u64,
}

impl Shared<'_> {
    pub(crate) fn tls_reach(static_tls: &[(u32, u64, u64)]) -> u64 {
        static_tls.iter().map(|&(_, off, _)| off).max().unwrap_or(0)
    }

    /// By whole variables ([`Granularity::Variable`]), whether every address from
    /// `lo` to `hi` has one name for a thread in state `st`, whatever the event:
    /// all in one global variable, or in one heap range named alike whatever the
    /// block (`CoarseHeap`) with no module, stack or static TLS of the thread in
    /// between (what `resolve` looks at before it). A loop's run is then named
    /// by its first access.
    pub(crate) fn one_name(&self, st: &ThreadState, res: &mut Resolver, lo: u64, hi: u64) -> bool {
        if !res.labels.coarse {
            return false;
        }
        let sym = self.sym;
        if sym.any_module_in(Addr(lo), Addr(hi)) {
            // a global's bytes are one variable whatever the address in it
            let (Some(a), Some(b)) = (sym.data_name(Addr(lo)), sym.data_name(Addr(hi))) else {
                return false;
            };
            a.kind == DataKind::Global
                && b.kind == DataKind::Global
                && a.module_id == b.module_id
                && a.base == b.base
                && lo.wrapping_sub(a.offset) == hi.wrapping_sub(b.offset)
        } else {
            let Some(coarse) = self.coarse else { return false };
            let stack = st.stack.is_some_and(|(s, e)| s <= hi && e > lo);
            let tls = st.tls != 0 && st.tls.saturating_sub(self.tls_reach) <= hi && st.tls > lo;
            !stack
                && !tls
                && coarse
                    .find(lo, &mut res.region_ids, &mut res.labels)
                    .is_some_and(|(rlo, rhi, _)| rlo <= lo && hi < rhi)
        }
    }
}

/// One access to name: by `thread` (in state `st`) as its event `index`.
pub(crate) struct Access<'c> {
    pub(crate) thread: ThreadId,
    pub(crate) st: &'c ThreadState,
    pub(crate) index: u64,
    pub(crate) pc: Pc,
    pub(crate) addr: Addr,
    /// Changes whenever the set of threads or their stacks may have: mapping names
    /// (which look at every thread's stack) are kept while it stays the same.
    pub(crate) tepoch: u64,
}

/// A label and what it depends on.
pub(crate) struct Resolved {
    pub(crate) id: u32,
    /// [`ALWAYS`], [`THREAD`] or [`FRAME`].
    pub(crate) dep: u8,
    /// Event indices of the thread over which the heap lookup gives the same block.
    pub(crate) span: Range<u64>,
    /// By whole variables: the heap range named `id` whatever the event index.
    pub(crate) region: Option<(u64, u64)>,
    /// A stack address: the number of the frame owning it (the name holds while
    /// that frame and the next inner one's call site stay, and no inner frame
    /// comes to own it: see `LabelCache`).
    pub(crate) owner: Option<usize>,
}

/// The labels found so far and the caches that find them again.
pub(crate) struct Resolver {
    pub(crate) labels: Interner,
    /// Label per byte address of the writable module segments, where most globals are.
    pub(crate) dense: DenseTable,
    globals: FastMap<u64, Option<u32>>,
    /// Direct-mapped: (page, whether it lies in a module).
    module_pages: ModulePages,
    stack_names: FastMap<(Pc, i64, Pc, Pc), u32>,
    tls_names: FastMap<(u64, u64), Option<u32>>,
    heap_names: FastMap<(u32, HeapShape, u64), u32>,
    block_labels: BlockLabels,
    /// Labels of large blocks' offsets, one segment per block: a table instead of
    /// `heap_names` for the blocks that hold millions of distinct fields.
    heap_dense: DenseTable,
    /// Per block: its segment in `heap_dense` (`u32::MAX`: none yet).
    block_seg: Vec<u32>,
    /// Whether large blocks get `heap_dense` (4 bytes per byte of each page
    /// touched): not for a namer asked once per address.
    pub(crate) heap_dense_on: bool,
    last_block: LastBlock,
    /// Per key of `Shared::coarse`: the label id (`UNSEEN`: none yet).
    pub(crate) region_ids: Vec<u32>,
    /// Mapping names, valid for `mapping_epoch`.
    mapping_names: FastMap<u64, u32>,
    mapping_epoch: u64,
    /// Compute [`Resolved::span`] (the parallel pass's cache needs it).
    spans: bool,
}

impl Resolver {
    pub(crate) fn new(sym: &Symbolizer, g: Granularity, spans: bool) -> Resolver {
        Resolver {
            labels: Interner { coarse: g == Granularity::Variable, ..Interner::default() },
            dense: DenseTable::new(sym),
            globals: FastMap::default(),
            module_pages: ModulePages::default(),
            stack_names: FastMap::default(),
            tls_names: FastMap::default(),
            heap_names: FastMap::default(),
            block_labels: BlockLabels::default(),
            heap_dense: DenseTable::empty(),
            block_seg: Vec::new(),
            heap_dense_on: true,
            last_block: LastBlock::default(),
            region_ids: Vec::new(),
            mapping_names: FastMap::default(),
            mapping_epoch: u64::MAX,
            spans,
        }
    }

    /// A resolver set up as this one, holding no labels yet.
    pub(crate) fn fresh(&self, sym: &Symbolizer) -> Resolver {
        let g = if self.labels.coarse { Granularity::Variable } else { Granularity::Field };
        Resolver { heap_dense_on: self.heap_dense_on, ..Resolver::new(sym, g, self.spans) }
    }

    /// The label of access `a`. `threads` lists every thread known at this point
    /// with its stack, in the serial pass's order (for mapping names).
    pub(crate) fn resolve<I: IntoIterator<Item = (ThreadId, Option<(u64, u64)>)>>(
        &mut self,
        sh: &Shared<'_>,
        a: &Access<'_>,
        threads: impl FnOnce() -> I,
    ) -> Resolved {
        let (pc, addr, st) = (a.pc, a.addr, a.st);
        let all = 0..u64::MAX;
        let done = |id, dep, span| Resolved { id, dep, span, region: None, owner: None };
        if let Some((k, at, mut id)) = self.dense.get(addr.0) {
            if id == UNSEEN {
                id = global_label(sh.sym, addr).map_or(NOT_GLOBAL, |l| self.labels.intern(l));
                self.dense.set(k, at, id);
            }
            if id != NOT_GLOBAL {
                return done(id, ALWAYS, all);
            }
        } else if self.module_pages.contains(sh.sym, addr) {
            // heap and stack addresses are in no module: they skip this cache
            let id = match self.globals.get(&addr.0) {
                Some(&id) => id,
                None => {
                    let id = global_label(sh.sym, addr).map(|l| self.labels.intern(l));
                    self.globals.insert(addr.0, id);
                    id
                }
            };
            if let Some(id) = id {
                return done(id, ALWAYS, all);
            }
        }
        let dep = if st.in_stack(addr.0) {
            if let Some(i) = st.owner(addr.0) {
                let (fpc, rbp) = (st.frames.frames()[i].pc, st.frames.frames()[i].rbp);
                let callee_site = st.frames.frames().get(i + 1).map(|o| o.call_site);
                let key =
                    (fpc, addr.0 as i64 - (rbp + 16) as i64, pc, callee_site.unwrap_or(Pc(0)));
                let id = match self.stack_names.get(&key) {
                    Some(&id) => id,
                    None => {
                        let l = stack_label(sh.sym, fpc, rbp, pc, callee_site, addr);
                        let id = self.labels.intern(l);
                        self.stack_names.insert(key, id);
                        id
                    }
                };
                return Resolved { id, dep: FRAME, span: all, region: None, owner: Some(i) };
            }
            // a frame entered later may own it
            FRAME
        } else {
            THREAD
        };
        let below = st.tls.wrapping_sub(addr.0);
        if st.tls != 0
            && addr.0 < st.tls
            && sh.static_tls.iter().any(|&(_, off, size)| below <= off && below > off - size)
        {
            let key = (st.tls, addr.0);
            let id = match self.tls_names.get(&key) {
                Some(&id) => id,
                None => {
                    let l = tls_label(sh.sym, sh.static_tls, st.tls, addr);
                    let id = l.map(|l| self.labels.intern(l));
                    self.tls_names.insert(key, id);
                    id
                }
            };
            if let Some(id) = id {
                return done(id, dep, all);
            }
        }
        if let Some(ch) = sh.coarse {
            if let Some((lo, hi, id)) = ch.find(addr.0, &mut self.region_ids, &mut self.labels) {
                return Resolved { id, dep, span: all, region: Some((lo, hi)), owner: None };
            }
        }
        let (found, span) = self.last_block.find(sh.heap, addr, a.thread, a.index, self.spans);
        if let Some((bi, off)) = found {
            return done(self.heap(sh, bi, off), dep, span);
        }
        // the threads the serial pass knows at this point, in its map's order
        if self.mapping_epoch != a.tepoch {
            self.mapping_names.clear();
            self.mapping_epoch = a.tepoch;
        }
        let id = match self.mapping_names.get(&addr.0) {
            Some(&id) => id,
            None => {
                let id = self.labels.intern(mapping_label(threads(), sh.sym, sh.maps, addr));
                self.mapping_names.insert(addr.0, id);
                id
            }
        };
        done(id, dep, span)
    }

    /// Offset `off` of heap block `bi`: named after its element type when the
    /// allocation's call chain gives one, else after its site and the offset; by
    /// whole variables, one name for the block (named at its first access).
    fn heap(&mut self, sh: &Shared<'_>, bi: usize, off: u64) -> u32 {
        let (class, base, ty) = sh.classes.of(sh.sym, sh.heap, bi);
        let b: &Block = &sh.heap.blocks()[bi];
        let single = heap_single(ty, b);
        if self.labels.coarse {
            let id = match self.block_labels.get(bi) {
                Some(id) => id,
                None => {
                    let (l, n) = (heap_label(base, ty, single, off), sh.heap.blocks().len());
                    self.block_labels.set(bi, n, l, &mut self.labels)
                }
            };
            // none for a block whose bytes have different names (a dynamic TLS block)
            if let Some(id) = id {
                return id;
            }
        }
        let mut seg = usize::MAX;
        if self.heap_dense_on && b.end - b.start >= BIG_BLOCK {
            if self.block_seg.len() <= bi {
                self.block_seg.resize(sh.heap.blocks().len().max(bi + 1), u32::MAX);
            }
            if self.block_seg[bi] == u32::MAX {
                self.block_seg[bi] = self.heap_dense.add(b.end - b.start) as u32;
            }
            seg = self.block_seg[bi] as usize;
            let id = self.heap_dense.get_in(seg, off);
            if id != UNSEEN {
                return id;
            }
        }
        let key = (class, single, off);
        let id = match self.heap_names.get(&key) {
            Some(&id) => id,
            None => {
                let id = self.labels.intern(heap_label(base, ty, single, off));
                self.heap_names.insert(key, id);
                id
            }
        };
        if seg != usize::MAX {
            self.heap_dense.set(seg, off, id);
        }
        id
    }
}
