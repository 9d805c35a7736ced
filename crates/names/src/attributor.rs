//! The serial attributor: follows each thread's frames and names one access at a time
//! through the one [`Resolver`](crate::resolve::Resolver), behind the label cache
//! the parallel pass uses (`cache`).

use crate::cache::{Epochs, LabelCache};
use crate::pre::FnStarts;
use crate::resolve::{Access, CoarseHeap, HeapClasses, Resolver, Shared};
use crate::{
    static_tls_layout, FastMap, Granularity, HeapIndex, Label, LabelId, Maps, OpenFrame,
    ThreadState, NOT_GLOBAL, UNSEEN,
};
use memlens_format::{Addr, Event, Pc, ThreadId};
use memlens_symbols::Symbolizer;

/// Attributes accesses to labels. Feed it every event of a stream in order with
/// [`Attributor::observe`] (it follows function frames), and ask for accesses with
/// [`Attributor::attribute`].
pub struct Attributor<'s> {
    ctx: Context<'s>,
    threads: FastMap<ThreadId, ThreadState>,
    /// Bumped whenever a thread appears or starts (see [`Access::tepoch`]).
    threads_epoch: u64,
    /// The state of a thread not seen yet.
    no_thread: ThreadState,
    res: Resolver,
    /// `None`: every access resolved in full (the reference the tests compare with).
    cache: Option<LabelCache>,
    /// Per thread, its cache epochs and the `threads_epoch` they were taken at
    /// (older ones are replaced at its next access).
    epochs: FastMap<ThreadId, (Epochs, u64)>,
    /// The last epoch handed out.
    epoch: u64,
    /// The thread named last and its entry of `epochs` (kept in step with it).
    current: Option<(ThreadId, Epochs, u64)>,
    fn_starts: FnStarts,
}

/// What an access is named against: the symbols, heap blocks, memory map and TLS
/// layout, and the tables built from them at the first access.
struct Context<'s> {
    sym: &'s Symbolizer,
    heap: HeapIndex,
    maps: Option<Maps>,
    site_namer: Option<Box<dyn Fn(Pc) -> String + Send + Sync + 's>>,
    /// Static TLS blocks of the modules loaded at start-up: (module id, offset below
    /// the thread pointer, size).
    static_tls: Vec<(u32, u64, u64)>,
    tls_reach: u64,
    /// Built at the first access (after [`Attributor::set_site_namer`]).
    classes: Option<HeapClasses>,
    /// [`Granularity::Variable`]: built at the first access.
    coarse_heap: Option<CoarseHeap>,
}

impl Context<'_> {
    /// The resolver's view, building the heap classes and (`coarse`: by whole
    /// variables) the coarse heap first if they are not yet.
    fn shared(&mut self, coarse: bool) -> Shared<'_> {
        let classes = self.classes.get_or_insert_with(|| {
            HeapClasses::new(
                &self.heap,
                self.site_namer.as_deref().map(|f| f as crate::SiteNamer<'_>),
            )
        });
        if coarse && self.coarse_heap.is_none() {
            self.coarse_heap = Some(CoarseHeap::new(self.sym, &self.heap, classes));
        }
        Shared {
            sym: self.sym,
            heap: &self.heap,
            classes,
            maps: self.maps.as_ref(),
            static_tls: &self.static_tls,
            coarse: self.coarse_heap.as_ref(),
            tls_reach: self.tls_reach,
        }
    }
}

impl<'s> Attributor<'s> {
    /// An attributor over a trace's symbols, heap blocks and memory map.
    pub fn new(sym: &'s Symbolizer, heap: HeapIndex, maps: Option<Maps>) -> Attributor<'s> {
        let static_tls = static_tls_layout(sym);
        Attributor {
            ctx: Context {
                sym,
                heap,
                maps,
                site_namer: None,
                tls_reach: Shared::tls_reach(&static_tls),
                static_tls,
                classes: None,
                coarse_heap: None,
            },
            threads: FastMap::default(),
            threads_epoch: 0,
            no_thread: ThreadState::default(),
            res: Resolver::new(sym, Granularity::Field, true),
            cache: Some(LabelCache::new()),
            epochs: FastMap::default(),
            epoch: 0,
            current: None,
            fn_starts: FnStarts::default(),
        }
    }

    /// How heap blocks are named: given the allocation's call site, a string such as
    /// `counts.c:37 allocs` (before the first access). Without it the site is shown
    /// as an address.
    pub fn set_site_namer(&mut self, f: impl Fn(Pc) -> String + Send + Sync + 's) {
        self.ctx.site_namer = Some(Box::new(f));
    }

    /// Sets how finely accesses are told apart (before the first one).
    pub fn set_granularity(&mut self, g: Granularity) {
        self.res.labels.coarse = g == Granularity::Variable;
    }

    /// Resolves every access in full, without the label cache (the same answers,
    /// slower: the reference the cache is tested against).
    pub fn set_uncached(&mut self) {
        self.cache = None;
    }

    /// For a namer that is asked once per address (the names in results and
    /// the viewer's index): no label cache and no per-byte label table of large
    /// heap blocks, which cost 4 bytes per byte of every page of a big hash
    /// table touched (the same answers).
    pub fn set_one_off(&mut self) {
        self.cache = None;
        self.res.heap_dense_on = false;
    }

    /// After [`Attributor::set_one_off`]: when more than `max` labels are held,
    /// starts over without them (the ids handed out before are void). A namer
    /// asked once per cache line of a big hash table held a label per element.
    pub fn forget_labels_over(&mut self, max: usize) {
        if self.cache.is_none()
            && self.ctx.coarse_heap.is_none()
            && self.res.labels.labels.len() > max
        {
            self.res = self.res.fresh(self.ctx.sym);
        }
    }

    /// The label behind an id.
    pub fn label(&self, id: LabelId) -> &Label {
        self.res.labels.get(id)
    }

    /// Every label so far.
    pub fn labels(&self) -> &[Label] {
        &self.res.labels.labels
    }

    /// Follows thread and function events.
    pub fn observe(&mut self, thread: ThreadId, ev: &Event) {
        match ev {
            Event::ThreadStart { stack_lo, stack_hi, tls, .. } => {
                self.thread(thread).start(stack_lo.0, stack_hi.0, tls.0);
                self.threads_epoch += 1;
            }
            Event::FuncEnter { pc, frame, call_site } => {
                let func = self.fn_starts.get(self.ctx.sym, *pc);
                let f = OpenFrame { pc: *pc, rbp: frame.0, func, call_site: *call_site };
                self.thread(thread).enter(f);
                self.frame_changed(thread);
            }
            Event::FuncExit { pc } => {
                let f = self.fn_starts.get(self.ctx.sym, *pc);
                if let Some(t) = self.threads.get_mut(&thread) {
                    t.exit(f);
                    self.frame_changed(thread);
                }
            }
            _ => {}
        }
    }

    /// A frame of `thread` was entered or left: its stack names may change.
    fn frame_changed(&mut self, thread: ThreadId) {
        if let Some((ep, _)) = self.epochs.get_mut(&thread) {
            self.epoch += 1;
            ep.frame = self.epoch;
            if let Some(c) = self.current.as_mut().filter(|c| c.0 == thread) {
                c.1.frame = self.epoch;
            }
        }
    }

    /// `thread`'s cache epochs, new ones when a thread appeared or started since
    /// its last access.
    #[inline]
    fn epochs_of(&mut self, thread: ThreadId) -> Epochs {
        let now = self.threads_epoch;
        if let Some((t, ep, at)) = self.current {
            if t == thread && at == now {
                return ep;
            }
        }
        let ep = match self.epochs.get(&thread) {
            Some(&(ep, at)) if at == now => ep,
            _ => {
                self.epoch += 2;
                let ep = Epochs { thread: self.epoch - 1, frame: self.epoch };
                self.epochs.insert(thread, (ep, now));
                ep
            }
        };
        self.current = Some((thread, ep, now));
        ep
    }

    fn thread(&mut self, thread: ThreadId) -> &mut ThreadState {
        if !self.threads.contains_key(&thread) {
            self.threads_epoch += 1;
        }
        self.threads.entry(thread).or_default()
    }

    /// The label of the data at `addr`, accessed by code at `pc` on `thread` as
    /// the thread's event number `index`.
    pub fn attribute(&mut self, thread: ThreadId, index: u64, pc: Pc, addr: Addr) -> LabelId {
        if let Some((_, _, id)) = self.res.dense.get(addr.0) {
            if id != UNSEEN && id != NOT_GLOBAL {
                return id;
            }
        }
        let mut ep = Epochs::default();
        let mut slot = 0;
        if self.cache.is_some() {
            ep = self.epochs_of(thread);
            if let Some(c) = &self.cache {
                let st = || self.threads.get(&thread).unwrap_or(&self.no_thread);
                match c.probe(pc.0, addr.0, index, ep, st) {
                    Ok(id) => return id,
                    Err(h) => slot = h,
                }
            }
        }
        self.resolve(thread, index, pc, addr, ep, slot)
    }

    /// By whole variables ([`Attributor::set_granularity`]), the label of every
    /// access by code at `pc` from `first` to `last` (a loop's run, the first its
    /// event `index`) when they all have one name whatever the event
    /// (`Shared::one_name`); `None`: name them one by one.
    pub fn attribute_run(
        &mut self,
        thread: ThreadId,
        index: u64,
        pc: Pc,
        first: Addr,
        last: Addr,
    ) -> Option<LabelId> {
        if !self.res.labels.coarse {
            return None;
        }
        let sh = self.ctx.shared(true);
        let st = self.threads.get(&thread).unwrap_or(&self.no_thread);
        let (lo, hi) = (first.0.min(last.0), first.0.max(last.0));
        if !sh.one_name(st, &mut self.res, lo, hi) {
            return None;
        }
        Some(self.attribute(thread, index, pc, first))
    }

    /// Names an access the cache did not answer (and keeps the answer there in
    /// `slot`).
    #[inline(never)]
    fn resolve(
        &mut self,
        thread: ThreadId,
        index: u64,
        pc: Pc,
        addr: Addr,
        ep: Epochs,
        slot: usize,
    ) -> LabelId {
        let sh = self.ctx.shared(self.res.labels.coarse);
        let st = self.threads.get(&thread).unwrap_or(&self.no_thread);
        let a = Access { thread, st, index, pc, addr, tepoch: self.threads_epoch };
        let threads = &self.threads;
        let all = || threads.iter().map(|(t, s)| (*t, s.stack));
        match &mut self.cache {
            Some(c) => c.miss(&mut self.res, &sh, &a, ep, slot, all),
            None => self.res.resolve(&sh, &a, all).id,
        }
    }

    /// Prefetches what naming an access to `addr` will read first.
    #[inline]
    pub fn prefetch(&self, addr: Addr) {
        self.res.dense.prefetch(addr.0);
    }

    /// Every label so far, by id, for the caller to keep.
    pub fn into_labels(self) -> Vec<Label> {
        self.res.labels.labels
    }

    /// The labels found (see [`Attributor::into_labels`]) and the heap index.
    pub fn into_parts(self) -> (Vec<Label>, HeapIndex) {
        (self.res.labels.labels, self.ctx.heap)
    }
}
