//! The serial attributor: follows each thread's frames and names one access at a time.

use crate::heap;
use crate::{
    function_start, global_label, heap_base, heap_label, heap_single, mapping_label, par,
    stack_label, static_tls_layout, tls_label, BlockLabels, DenseTable, FastMap, Granularity,
    HeapIndex, Interner, Label, LabelId, Maps, ModulePages, OpenFrame, ThreadState, BIG_BLOCK,
    NOT_GLOBAL, UNSEEN,
};
use memlens_format::{Addr, Event, Pc, ThreadId};
use memlens_symbols::{HeapType, Symbolizer};
use std::sync::Arc;

/// Attributes accesses to labels. Feed it every event of a stream in order with
/// [`Attributor::observe`] (it follows function frames), and ask for accesses with
/// [`Attributor::attribute`].
pub struct Attributor<'s> {
    sym: &'s Symbolizer,
    heap: HeapIndex,
    maps: Option<Maps>,
    threads: FastMap<ThreadId, ThreadState>,
    labels: Interner,
    global_cache: FastMap<u64, Option<LabelId>>,
    stack_cache: FastMap<(Pc, i64, Pc, Pc), LabelId>,
    last_block: heap::LastBlock,
    block_labels: BlockLabels,
    heap_ids: FastMap<(usize, u64), LabelId>,
    /// Labels of large blocks' offsets, one segment per block: a table instead of
    /// `heap_ids` for the blocks that hold millions of distinct fields.
    heap_dense: DenseTable,
    /// Direct-mapped: (page, whether it lies in a module).
    module_pages: ModulePages,
    /// Per block: its segment in `heap_dense` (`u32::MAX`: none yet).
    block_seg: Vec<u32>,
    fn_starts: FastMap<Pc, u64>,
    heap_sites: FastMap<usize, (Arc<str>, Option<HeapType>)>,
    heap_types: FastMap<(Pc, Vec<Pc>), Option<HeapType>>,
    site_namer: Option<Box<dyn Fn(Pc) -> String + 's>>,
    /// Static TLS blocks of the modules loaded at start-up: (module id, offset below
    /// the thread pointer, size).
    static_tls: Vec<(u32, u64, u64)>,
    /// Writable module segments where most globals are, each with a lazily filled
    /// label per byte address: one array load instead of a hash probe per access.
    dense: DenseTable,
    /// [`Granularity::Variable`]: built at the first heap lookup.
    coarse_heap: Option<par::CoarseHeap>,
    /// Per key of `coarse_heap`: the label id (`UNSEEN`: none yet).
    region_ids: Vec<LabelId>,
}

impl<'s> Attributor<'s> {
    /// An attributor over a trace's symbols, heap blocks and memory map.
    pub fn new(sym: &'s Symbolizer, heap: HeapIndex, maps: Option<Maps>) -> Attributor<'s> {
        let static_tls = static_tls_layout(sym);
        Attributor {
            sym,
            heap,
            maps,
            threads: FastMap::default(),
            labels: Interner::default(),
            global_cache: FastMap::default(),
            stack_cache: FastMap::default(),
            block_labels: BlockLabels::default(),
            last_block: heap::LastBlock::default(),
            heap_ids: FastMap::default(),
            heap_dense: DenseTable::empty(),
            module_pages: ModulePages::default(),
            block_seg: Vec::new(),
            fn_starts: FastMap::default(),
            heap_sites: FastMap::default(),
            heap_types: FastMap::default(),
            site_namer: None,
            static_tls,
            dense: DenseTable::new(sym),
            coarse_heap: None,
            region_ids: Vec::new(),
        }
    }

    /// How heap blocks are named: given the allocation's call site, a string such as
    /// `counts.c:37 allocs`. Without it the site is shown as an address.
    pub fn set_site_namer(&mut self, f: impl Fn(Pc) -> String + 's) {
        self.site_namer = Some(Box::new(f));
    }

    fn intern(&mut self, l: Label) -> LabelId {
        self.labels.intern(l)
    }

    /// Sets how finely accesses are told apart (before the first one).
    pub fn set_granularity(&mut self, g: Granularity) {
        self.labels.coarse = g == Granularity::Variable;
    }

    /// The label behind an id.
    pub fn label(&self, id: LabelId) -> &Label {
        self.labels.get(id)
    }

    /// Every label so far.
    pub fn labels(&self) -> &[Label] {
        &self.labels.labels
    }

    /// Follows thread and function events.
    pub fn observe(&mut self, thread: ThreadId, ev: &Event) {
        match ev {
            Event::ThreadStart { stack_lo, stack_hi, tls, .. } => {
                self.threads.entry(thread).or_default().start(stack_lo.0, stack_hi.0, tls.0);
            }
            Event::FuncEnter { pc, frame, call_site } => {
                let func = self.function_start(*pc);
                let f = OpenFrame { pc: *pc, rbp: frame.0, func, call_site: *call_site };
                self.threads.entry(thread).or_default().enter(f);
            }
            Event::FuncExit { pc } => {
                let f = if pc.0 == 0 { 0 } else { self.function_start(*pc) };
                if let Some(t) = self.threads.get_mut(&thread) {
                    t.exit(f);
                }
            }
            _ => {}
        }
    }

    /// The label of the data at `addr`, accessed by code at `pc` on `thread` as
    /// the thread's event number `index`.
    pub fn attribute(&mut self, thread: ThreadId, index: u64, pc: Pc, addr: Addr) -> LabelId {
        let dense = self.global(addr);
        if let Ok(Some(id)) = dense {
            return id;
        }
        // A stack address is in no module: the (cheaper) stack test may go first.
        if let Some(id) = self.stack(thread, pc, addr) {
            return id;
        }
        if dense.is_err() {
            if let Some(id) = self.global_slow(addr) {
                return id;
            }
        }
        if let Some(id) = self.tls(thread, addr) {
            return id;
        }
        if self.labels.coarse {
            if let Some(id) = self.region(addr) {
                return id;
            }
        }
        if let (Some((bi, off)), _) = self.last_block.find(&self.heap, addr, thread, index, false) {
            if self.labels.coarse {
                if let Some(id) = self.block_id(bi, off) {
                    return id;
                }
            }
            // Each (block, offset) is named once.
            let b = &self.heap.blocks()[bi];
            if b.end - b.start >= BIG_BLOCK {
                return self.big_block(bi, off);
            }
            if let Some(&id) = self.heap_ids.get(&(bi, off)) {
                return id;
            }
            let l = self.heap_label(bi, off);
            let id = self.intern(l);
            self.heap_ids.insert((bi, off), id);
            return id;
        }
        let l = mapping_label(
            self.threads.iter().map(|(t, s)| (*t, s.stack)),
            self.sym,
            self.maps.as_ref(),
            addr,
        );
        self.intern(l)
    }

    /// [`Granularity::Variable`]: the name of `addr` if it lies where every heap block
    /// ever there has the same whole-block name (see `heap::Regions`).
    fn region(&mut self, addr: Addr) -> Option<LabelId> {
        if self.coarse_heap.is_none() {
            let namer = self.site_namer.as_deref();
            let classes = par::HeapClasses::new(&self.heap, self.sym, namer);
            self.coarse_heap = Some(par::CoarseHeap::new(&self.heap, &classes));
        }
        let ch = self.coarse_heap.as_ref()?;
        Some(ch.find(addr.0, &mut self.region_ids, &mut self.labels)?.2)
    }

    /// [`Granularity::Variable`]: one label for all of block `bi` (named at its
    /// first access, at `off`); `None` for a block whose bytes have different
    /// names (a dynamic TLS block).
    #[inline]
    fn block_id(&mut self, bi: usize, off: u64) -> Option<LabelId> {
        if let Some(id) = self.block_labels.get(bi) {
            return id;
        }
        let l = self.heap_label(bi, off);
        self.block_labels.set(bi, self.heap.blocks().len(), l, &mut self.labels)
    }

    #[inline]
    fn big_block(&mut self, bi: usize, off: u64) -> LabelId {
        let k = match self.block_seg.get(bi) {
            Some(&k) if k != u32::MAX => k as usize,
            _ => {
                if self.block_seg.len() <= bi {
                    self.block_seg.resize(self.heap.blocks().len().max(bi + 1), u32::MAX);
                }
                let b = &self.heap.blocks()[bi];
                let k = self.heap_dense.add(b.end - b.start);
                self.block_seg[bi] = k as u32;
                k
            }
        };
        let id = self.heap_dense.get_in(k, off);
        if id != UNSEEN {
            return id;
        }
        let l = self.heap_label(bi, off);
        let id = self.intern(l);
        self.heap_dense.set(k, off, id);
        id
    }

    /// Prefetches what naming an access to `addr` will read first.
    #[inline]
    pub fn prefetch(&self, addr: Addr) {
        self.dense.prefetch(addr.0);
    }

    /// Every label so far, by id, for the caller to keep.
    pub fn into_labels(self) -> Vec<Label> {
        self.labels.labels
    }

    /// Start of the function symbol holding `pc` (0 when unknown), cached per pc.
    fn function_start(&mut self, pc: Pc) -> u64 {
        let sym = self.sym;
        *self.fn_starts.entry(pc).or_insert_with(|| function_start(sym, pc))
    }

    /// Names offset `off` of heap block `bi`: after its element type when the
    /// allocation's call chain gives one, else after its site and the offset.
    fn heap_label(&mut self, bi: usize, off: u64) -> Label {
        if !self.heap_sites.contains_key(&bi) {
            let b = &self.heap.blocks()[bi];
            let (site, stack) = (b.site, b.stack.clone());
            let base = heap_base(self.site_namer.as_deref(), site);
            let sym = self.sym;
            let ty = self
                .heap_types
                .entry((site, stack))
                .or_insert_with_key(|(site, stack)| sym.heap_type(*site, stack))
                .clone();
            self.heap_sites.insert(bi, (base, ty));
        }
        let (base, ty) = &self.heap_sites[&bi];
        let single = heap_single(ty, &self.heap.blocks()[bi]);
        heap_label(base, ty, single, off)
    }

    /// The global at `addr` if it lies in a writable segment: `Err(())` when it does
    /// not, `Ok(None)` when it does but names no variable.
    #[inline]
    fn global(&mut self, addr: Addr) -> Result<Option<LabelId>, ()> {
        let (k, at, mut id) = self.dense.get(addr.0).ok_or(())?;
        if id == UNSEEN {
            id = global_label(self.sym, addr).map_or(NOT_GLOBAL, |l| self.intern(l));
            self.dense.set(k, at, id);
        }
        Ok((id != NOT_GLOBAL).then_some(id))
    }

    fn global_slow(&mut self, addr: Addr) -> Option<LabelId> {
        // Heap and stack addresses are in no module: skip the cache for them.
        if !self.module_pages.contains(self.sym, addr) {
            return None;
        }
        if let Some(&c) = self.global_cache.get(&addr.0) {
            return c;
        }
        let id = global_label(self.sym, addr).map(|l| self.intern(l));
        self.global_cache.insert(addr.0, id);
        id
    }

    fn tls(&mut self, thread: ThreadId, addr: Addr) -> Option<LabelId> {
        let tp = self.threads.get(&thread)?.tls;
        let l = tls_label(self.sym, &self.static_tls, tp, addr)?;
        Some(self.intern(l))
    }

    fn stack(&mut self, thread: ThreadId, pc: Pc, addr: Addr) -> Option<LabelId> {
        let t = self.threads.get(&thread)?;
        if !t.in_stack(addr.0) {
            return None;
        }
        let i = t.owner(addr.0)?;
        let (fpc, rbp) = (t.frames.frames()[i].pc, t.frames.frames()[i].rbp);
        let callee_site = t.frames.frames().get(i + 1).map(|o| o.call_site);
        let key = (fpc, addr.0 as i64 - (rbp + 16) as i64, pc, callee_site.unwrap_or(Pc(0)));
        if let Some(&id) = self.stack_cache.get(&key) {
            return Some(id);
        }
        let l = stack_label(self.sym, fpc, rbp, pc, callee_site, addr);
        let id = self.intern(l);
        self.stack_cache.insert(key, id);
        Some(id)
    }
}
