//! Naming every access of a trace on several cores, with the same result as one
//! serial [`Attributor`](crate::Attributor) pass.
//!
//! Chunks decode independently, but a name can depend on what came before an access
//! in its thread: the frames open (stack locals), the thread's stack and thread
//! pointer, and which heap blocks are live at that event index. So:
//!
//! 1. every chunk is read in parallel for its allocations and frees and a summary of
//!    its effect on the open frames (what it pops from the frames open before it,
//!    what it leaves open);
//! 2. serially, per thread in chunk order, the heap index is built exactly as the
//!    serial pass builds it and the summaries are chained into each chunk's starting
//!    state (open frames, stack, thread pointer);
//! 3. every chunk is attributed in parallel from its starting state. A small
//!    direct-mapped cache per worker maps (pc, address) to a label while the
//!    answer provably stays the same (globals always; stack names until a frame
//!    changes; heap names over the event range where the block lookup cannot
//!    change), so repeated accesses cost one probe. By whole variables a heap
//!    address where every block ever there has one name (`heap::Regions`) is named
//!    without a block search, and the answer is kept for the rest of its page.
//!    Labels are built once per distinct name key per worker and merged at the end.

use crate::heap::{Block, LastBlock, Regions};
use crate::{
    function_start, global_label, heap_base, heap_label, heap_single, mapping_label, prefetch,
    stack_label, static_tls_layout, tls_label, BlockLabels, DenseTable, Error, FastMap,
    Granularity, HeapIndex, HeapShape, Interner, Kind, Label, Maps, ModulePages, OpenFrame,
    ThreadState, BIG_BLOCK, NOT_GLOBAL, UNSEEN,
};
use memlens_format::codec::Columns;
use memlens_format::{Addr, ChunkDecoder, Event, Pc, StreamChunk, ThreadId, TraceReader};
use memlens_symbols::{HeapType, Symbolizer};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

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
    fn add_pc(&mut self, pc: Pc, n: u64) {
        match self.pcs.iter_mut().find(|(p, _)| *p == pc) {
            Some(e) => e.1 += n,
            None => self.pcs.push((pc, n)),
        }
    }

    fn add_thread(&mut self, t: ThreadId) {
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
pub type SiteNamer<'a> = &'a dyn Fn(Pc) -> String;

/// Names every access of `r` in one serial pass of an [`Attributor`](crate::Attributor):
/// the reference [`attribute_trace`] must agree with.
pub fn attribute_trace_serial(
    r: &TraceReader,
    sym: &Symbolizer,
    maps: Option<Maps>,
    site_namer: SiteNamer<'_>,
    g: Granularity,
) -> Result<Attribution, Error> {
    serial_with(r, sym, maps, site_namer, HeapIndex::from_trace(r)?, g)
}

/// Heap bytes in large blocks above which [`attribute_trace_auto`] stays serial:
/// every worker of the parallel pass names each field of a large block it touches
/// again (a 32 MiB hash table of structs: millions of names per worker).
const PARALLEL_MAX_BIG_HEAP: u64 = 16 << 20;

/// Names every access of `r` the faster way for this trace: chunk-parallel on
/// `threads` workers unless there is one worker only or (by field) large heap
/// blocks would have every worker name millions of the same fields; serial
/// otherwise. The result is the same either way.
pub fn attribute_trace_auto(
    r: &TraceReader,
    sym: &Symbolizer,
    maps: Option<Maps>,
    site_namer: SiteNamer<'_>,
    threads: usize,
    g: Granularity,
) -> Result<Attribution, Error> {
    let parallel = threads > 1 && r.stream_chunks().len() > 1;
    if parallel && g == Granularity::Variable {
        // whole blocks have one name each: no need to look at the heap first
        return attribute_trace(r, sym, maps, site_namer, threads, g);
    }
    let heap = HeapIndex::from_trace(r)?;
    let big: u64 = heap.blocks().iter().map(|b| b.end - b.start).filter(|&n| n >= BIG_BLOCK).sum();
    if parallel && big <= PARALLEL_MAX_BIG_HEAP {
        return attribute_trace(r, sym, maps, site_namer, threads, g);
    }
    serial_with(r, sym, maps, site_namer, heap, g)
}

fn serial_with(
    r: &TraceReader,
    sym: &Symbolizer,
    maps: Option<Maps>,
    site_namer: SiteNamer<'_>,
    heap: HeapIndex,
    g: Granularity,
) -> Result<Attribution, Error> {
    let mut a = crate::Attributor::new(sym, heap, maps);
    a.set_site_namer(site_namer);
    a.set_granularity(g);
    let mut acc = Accum::default();
    let mut batch: Vec<(Event, u64)> = Vec::with_capacity(BATCH);
    for s in r.streams() {
        let t = s.thread;
        let mut it = r.events(t);
        loop {
            // in batches, so that the label tables of the next accesses are
            // fetched while the current ones are named
            batch.clear();
            while batch.len() < BATCH {
                match it.next() {
                    Some(ev) => batch.push((ev?, it.index())),
                    None => break,
                }
            }
            if batch.is_empty() {
                break;
            }
            for (ev, _) in &batch {
                if let Event::Access { addr, .. } | Event::Rmw { addr, .. } = ev {
                    a.prefetch(*addr);
                }
            }
            for (ev, i) in &batch {
                let (pc, addr) = match ev {
                    Event::Access { pc, addr, .. }
                    | Event::Range { pc, addr, .. }
                    | Event::Rmw { pc, addr, .. } => (*pc, *addr),
                    _ => {
                        a.observe(t, ev);
                        continue;
                    }
                };
                let id = a.attribute(t, *i, pc, addr);
                let (l, st) = ev.loads_stores();
                let (br, bw) = ev.bytes_read_written();
                acc.push(Pending { id, pc, l, st, br, bw }, t);
            }
        }
        acc.flush(t);
    }
    Ok(acc.finish(a.into_labels()))
}

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
struct Accum {
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
struct Pending {
    id: u32,
    pc: Pc,
    l: u64,
    st: u64,
    br: u64,
    bw: u64,
}

const BATCH: usize = 512;
/// Labels up to which accesses are counted at once (their counters: 1 MiB at most).
const DIRECT_LABELS: usize = 8192;
const SPILL_BITS: u32 = 12;
const AHEAD: usize = 8;

impl Accum {
    /// Counts `p`, an access of thread `t`, at the latest by the next `flush`.
    #[inline(always)]
    fn push(&mut self, p: Pending, t: ThreadId) {
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
    fn flush(&mut self, t: ThreadId) {
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
    fn finish(mut self, labels: Vec<Label>) -> Attribution {
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

impl HeapIndex {
    /// Every block of a trace: a pass over the chunks that hold allocations or frees,
    /// stream by stream.
    pub fn from_trace(r: &TraceReader) -> Result<HeapIndex, Error> {
        let mut h = HeapIndex::default();
        for s in r.streams() {
            let mut it = r.events_where(s.thread, |c| c.counts.allocs > 0 || c.counts.frees > 0);
            while let Some(ev) = it.next() {
                let i = it.index();
                match ev? {
                    Event::Alloc { pc, addr, size, stack, .. } => {
                        h.add_block(s.thread, i, addr, size, pc, stack)
                    }
                    Event::Realloc { pc, old, new, size, stack } => {
                        h.free(s.thread, i, old);
                        h.add_block(s.thread, i, new, size, pc, stack);
                    }
                    Event::Free { addr, .. } => h.free(s.thread, i, addr),
                    _ => {}
                }
            }
        }
        h.finish();
        Ok(h)
    }
}

// ---------------------------------------------------------------- pass 1

/// An allocation or free, with its index in the stream.
enum HeapEv {
    Alloc { index: u64, addr: Addr, size: u64, pc: Pc, stack: Vec<Pc> },
    Realloc { index: u64, old: Addr, new: Addr, size: u64, pc: Pc, stack: Vec<Pc> },
    Free { index: u64, addr: Addr },
}

/// What a chunk does to the frames open before it, while none of its own is open.
#[derive(Clone, Copy)]
enum PrefixOp {
    /// An entry with this frame pointer: pops frames below it.
    PopBelow(u64),
    /// An exit of an unknown function: pops one frame.
    Pop,
    /// An exit of the function starting here: closes its innermost frame, if open.
    Close(u64),
}

/// A frame event replayed as is.
enum RawFrame {
    Enter(OpenFrame),
    Exit(u64),
}

/// Pass 1's summary of one chunk.
#[derive(Default)]
struct ChunkPre {
    heap: Vec<HeapEv>,
    /// Applied first, to the frames open at the chunk's start.
    ops: Vec<PrefixOp>,
    /// Then pushed.
    local: Vec<OpenFrame>,
    /// Then replayed: from the first exit whose effect depends on the frames open
    /// before the chunk while some of the chunk's own are open.
    raw: Vec<RawFrame>,
    /// `ThreadStart`: the last stack range set and the last thread pointer.
    stack: Option<(u64, u64)>,
    tls: Option<u64>,
    /// The chunk has a `ThreadStart` or `FuncEnter` (the serial pass creates the
    /// thread's state at the first one).
    creates: bool,
}

impl ChunkPre {
    fn enter(&mut self, f: OpenFrame) {
        if !self.raw.is_empty() {
            self.raw.push(RawFrame::Enter(f));
            return;
        }
        while self.local.last().is_some_and(|o| o.rbp != 0 && f.rbp != 0 && o.rbp < f.rbp) {
            self.local.pop();
        }
        if self.local.is_empty() && f.rbp != 0 {
            self.ops.push(PrefixOp::PopBelow(f.rbp));
        }
        self.local.push(f);
    }

    fn exit(&mut self, func: u64) {
        if !self.raw.is_empty() {
            self.raw.push(RawFrame::Exit(func));
        } else if func == 0 {
            if self.local.pop().is_none() {
                self.ops.push(PrefixOp::Pop);
            }
        } else if let Some(i) = self.local.iter().rposition(|o| o.func == func) {
            self.local.truncate(i);
        } else if self.local.is_empty() {
            self.ops.push(PrefixOp::Close(func));
        } else {
            // closes an earlier frame (and all of ours) only if one is open: replay
            self.raw.push(RawFrame::Exit(func));
        }
    }

    /// Applies the chunk to a thread's state.
    fn apply(&self, st: &mut ThreadState) {
        for op in &self.ops {
            match *op {
                PrefixOp::PopBelow(rbp) => {
                    while st.frames.last().is_some_and(|o| o.rbp != 0 && o.rbp < rbp) {
                        st.frames.pop();
                    }
                }
                PrefixOp::Pop => {
                    st.frames.pop();
                }
                PrefixOp::Close(f) => st.exit(f),
            }
        }
        st.framed |= self.local.iter().any(|o| o.rbp != 0);
        st.frames.extend_from_slice(&self.local);
        for r in &self.raw {
            match *r {
                RawFrame::Enter(f) => st.enter(f),
                RawFrame::Exit(f) => st.exit(f),
            }
        }
        if let Some(s) = self.stack {
            st.stack = Some(s);
        }
        if let Some(t) = self.tls {
            st.tls = t;
        }
    }
}

/// Per-worker cache of function starts: direct-mapped, since every function entry
/// and exit of the trace asks (a hash map lookup each was 6% of naming sort).
struct FnStarts(Vec<(u64, u64)>);

const FN_STARTS_BITS: u32 = 12;

impl Default for FnStarts {
    fn default() -> Self {
        FnStarts(vec![(0, 0); 1 << FN_STARTS_BITS])
    }
}

impl FnStarts {
    #[inline]
    fn get(&mut self, sym: &Symbolizer, pc: Pc) -> u64 {
        if pc.0 == 0 {
            return 0;
        }
        let h = (pc.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - FN_STARTS_BITS)) as usize;
        let e = &mut self.0[h];
        if e.0 != pc.0 {
            *e = (pc.0, function_start(sym, pc));
        }
        e.1
    }
}

fn pre_chunk(
    dec: &mut ChunkDecoder,
    r: &TraceReader,
    c: &StreamChunk,
    sym: &Symbolizer,
    fs: &mut FnStarts,
) -> Result<ChunkPre, Error> {
    let mut p = ChunkPre::default();
    // accesses are stepped over, not decoded
    dec.skeleton(r, c, |i, ev| {
        let index = c.first_index + i;
        match &ev {
            Event::FuncEnter { pc, call_site, frame } => {
                p.creates = true;
                let func = fs.get(sym, *pc);
                p.enter(OpenFrame { pc: *pc, rbp: frame.0, func, call_site: *call_site });
            }
            Event::FuncExit { pc } => {
                let func = fs.get(sym, *pc);
                p.exit(func);
            }
            Event::ThreadStart { stack_lo, stack_hi, tls, .. } => {
                p.creates = true;
                if stack_hi.0 > stack_lo.0 {
                    p.stack = Some((stack_lo.0, stack_hi.0));
                }
                p.tls = Some(tls.0);
            }
            Event::Alloc { pc, addr, size, stack, .. } => p.heap.push(HeapEv::Alloc {
                index,
                addr: *addr,
                size: *size,
                pc: *pc,
                stack: stack.clone(),
            }),
            Event::Realloc { pc, old, new, size, stack } => p.heap.push(HeapEv::Realloc {
                index,
                old: *old,
                new: *new,
                size: *size,
                pc: *pc,
                stack: stack.clone(),
            }),
            Event::Free { addr, .. } => p.heap.push(HeapEv::Free { index, addr: *addr }),
            _ => {}
        }
    })?;
    Ok(p)
}

/// Runs `f` over every chunk of `work` on `threads` workers, each with its own
/// state from `init`; returns the states. Stops at the first error.
fn for_chunks<W: Send>(
    work: &[StreamChunk],
    threads: usize,
    init: impl Fn() -> W + Sync,
    f: impl Fn(&mut W, &mut ChunkDecoder, usize, &StreamChunk) -> Result<(), Error> + Sync,
) -> Result<Vec<W>, Error> {
    let threads = threads.max(1).min(work.len().max(1));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let results: Vec<Result<W, Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (next, failed, init, f) = (&next, &failed, &init, &f);
                scope.spawn(move || {
                    let mut w = init();
                    let mut dec = ChunkDecoder::new();
                    while !failed.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(c) = work.get(i) else { break };
                        if let Err(e) = f(&mut w, &mut dec, i, c) {
                            failed.store(true, Ordering::Relaxed);
                            return Err(e);
                        }
                    }
                    Ok(w)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("attribution worker panicked")).collect()
    });
    results.into_iter().collect()
}

// ---------------------------------------------------------------- pass 2

/// Heap blocks grouped by what their names depend on: (site, call stack).
pub(crate) struct HeapClasses {
    of_block: Vec<u32>,
    classes: Vec<(Arc<str>, Option<HeapType>)>,
}

impl HeapClasses {
    pub(crate) fn new(
        heap: &HeapIndex,
        sym: &Symbolizer,
        site_namer: Option<SiteNamer<'_>>,
    ) -> HeapClasses {
        let mut ids: FastMap<(Pc, &[Pc]), u32> = FastMap::default();
        let mut bases: FastMap<Pc, Arc<str>> = FastMap::default();
        let mut classes = Vec::new();
        let of_block = heap
            .blocks()
            .iter()
            .map(|b| {
                *ids.entry((b.site, &b.stack[..])).or_insert_with(|| {
                    let base = bases
                        .entry(b.site)
                        .or_insert_with(|| heap_base(site_namer, b.site))
                        .clone();
                    classes.push((base, sym.heap_type(b.site, &b.stack)));
                    (classes.len() - 1) as u32
                })
            })
            .collect();
        HeapClasses { of_block, classes }
    }
}

/// [`Granularity::Variable`]: the whole-block name of every heap block, by key,
/// and the address ranges where all blocks ever there share one (see [`Regions`]).
pub(crate) struct CoarseHeap {
    pub(crate) regions: Regions,
    pub(crate) labels: Vec<Label>,
}

impl CoarseHeap {
    pub(crate) fn new(heap: &HeapIndex, classes: &HeapClasses) -> CoarseHeap {
        let mut keys = Interner { coarse: true, ..Interner::default() };
        let mut by: FastMap<(u32, HeapShape), Option<u32>> = FastMap::default();
        let regions = Regions::new(heap, |bi| {
            let class = classes.of_block[bi];
            let (base, ty) = &classes.classes[class as usize];
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
        let (lo, hi, key) = self.regions.find(addr)?;
        let k = key as usize;
        if ids.len() <= k {
            ids.resize(self.labels.len().max(k + 1), UNSEEN);
        }
        if ids[k] == UNSEEN {
            ids[k] = labels.intern(self.labels[k].clone());
        }
        Some((lo, hi, ids[k]))
    }
}

/// What the workers share.
struct Shared<'a> {
    sym: &'a Symbolizer,
    heap: &'a HeapIndex,
    classes: &'a HeapClasses,
    maps: Option<&'a Maps>,
    static_tls: &'a [(u32, u64, u64)],
    coarse: Option<&'a CoarseHeap>,
    /// Lowest offset below the thread pointer of the static TLS blocks.
    tls_reach: u64,
}

/// One chunk's starting point.
struct ChunkStart {
    state: ThreadState,
    /// The serial pass has a state for the thread already.
    exists: bool,
    /// Position of the thread's stream (threads of earlier streams: `earlier[..pos]`).
    pos: usize,
}

/// The answer does not depend on the thread's state.
const ALWAYS: u8 = 0;
/// Valid while the thread's stack range, thread pointer and existence are unchanged.
const THREAD: u8 = 1;
/// Valid while, in addition, no frame was entered or left.
const FRAME: u8 = 2;

#[derive(Clone, Copy)]
struct Entry {
    pc: u64,
    addr: u64,
    label: u32,
    dep: u8,
    epoch: u64,
    /// Event indices over which the answer holds.
    from: u64,
    to: u64,
}

const EMPTY: Entry =
    Entry { pc: u64::MAX, addr: u64::MAX, label: u32::MAX, dep: 0, epoch: 0, from: 0, to: 0 };

/// 4096 entries (192 KiB): the cache stays in L2; at 16384 a third of naming sqlite
/// was the miss on the probe.
const CACHE_BITS: u32 = 12;

/// A heap range of one page (see [`Regions`]) whose accesses all get `label`
/// while the thread epoch is `epoch`: a strided loop over a large block costs
/// one miss per page instead of one per address.
#[derive(Clone, Copy)]
struct PageEntry {
    page: u64,
    lo: u64,
    hi: u64,
    epoch: u64,
    label: u32,
}

const PAGE_BITS: u32 = 8;

struct Worker<'a> {
    sh: &'a Shared<'a>,
    labels: Interner,
    acc: Accum,
    cache: Vec<Entry>,
    /// Label per byte address of the writable module segments, where most globals are.
    dense: DenseTable,
    globals: FastMap<u64, Option<u32>>,
    stack_names: FastMap<(Pc, i64, Pc, Pc), u32>,
    tls_names: FastMap<(u64, u64), Option<u32>>,
    heap_names: FastMap<(u32, HeapShape, u64), u32>,
    block_labels: BlockLabels,
    /// Labels of large blocks' offsets (see `Attributor`'s).
    heap_dense: DenseTable,
    block_seg: Vec<u32>,
    /// Mapping names, valid for `mapping_epoch`.
    mapping_names: FastMap<u64, u32>,
    mapping_epoch: u64,
    fs: FnStarts,
    epochs: u64,
    module_pages: ModulePages,
    last_block: LastBlock,
    /// Per key of `Shared::coarse`: the label id (`UNSEEN`: none yet).
    region_ids: Vec<u32>,
    pages: Vec<PageEntry>,
}

/// The state of the chunk being attributed.
struct Cursor<'c> {
    thread: ThreadId,
    st: ThreadState,
    exists: bool,
    earlier: &'c [(ThreadId, Option<(u64, u64)>)],
    tepoch: u64,
    fepoch: u64,
}

impl<'a> Worker<'a> {
    fn new(sh: &'a Shared<'a>, g: Granularity) -> Worker<'a> {
        Worker {
            sh,
            labels: Interner { coarse: g == Granularity::Variable, ..Interner::default() },
            block_labels: BlockLabels::default(),
            acc: Accum::default(),
            cache: vec![EMPTY; 1 << CACHE_BITS],
            dense: DenseTable::new(sh.sym),
            globals: FastMap::default(),
            stack_names: FastMap::default(),
            tls_names: FastMap::default(),
            heap_names: FastMap::default(),
            heap_dense: DenseTable::empty(),
            block_seg: Vec::new(),
            mapping_names: FastMap::default(),
            mapping_epoch: u64::MAX,
            fs: FnStarts::default(),
            epochs: 0,
            module_pages: ModulePages::default(),
            last_block: LastBlock::default(),
            region_ids: Vec::new(),
            pages: vec![
                PageEntry { page: u64::MAX, lo: 0, hi: 0, epoch: 0, label: 0 };
                1 << PAGE_BITS
            ],
        }
    }

    fn epoch(&mut self) -> u64 {
        self.epochs += 1;
        self.epochs
    }

    fn intern(&mut self, l: Label) -> u32 {
        self.labels.intern(l)
    }

    fn chunk(
        &mut self,
        dec: &mut ChunkDecoder,
        r: &TraceReader,
        c: &StreamChunk,
        start: &ChunkStart,
        earlier: &[(ThreadId, Option<(u64, u64)>)],
    ) -> Result<(), Error> {
        let e = self.epoch();
        let mut cur = Cursor {
            thread: c.thread,
            st: start.state.clone(),
            exists: start.exists,
            earlier: &earlier[..start.pos],
            tepoch: e,
            fepoch: e,
        };
        let sym = self.sh.sym;
        // loads, stores and ranges come as columns, the rest (calls, threads,
        // atomics) beside them; `seq` is the event's index in the stream
        dec.for_columns(r, c, |cols| {
            let mut other = cols.other.iter().peekable();
            for i in 0..=cols.len() {
                let next = cols.seq.get(i).copied().unwrap_or(u64::MAX);
                while let Some((index, ev)) = other.next_if(|(s, _)| *s < next) {
                    match *ev {
                        Event::Rmw { pc, addr, size, op, .. } => {
                            let w = u64::from(op.stores());
                            let n = u64::from(size);
                            let id = match self.dense.get(addr.0) {
                                Some((_, _, id)) if id != UNSEEN && id != NOT_GLOBAL => id,
                                _ => self.label(&cur, *index, pc, addr),
                            };
                            let p = Pending { id, pc, l: 1, st: w, br: n, bw: w * n };
                            self.acc.push(p, cur.thread);
                        }
                        Event::FuncEnter { pc, call_site, frame } => {
                            let func = self.fs.get(sym, pc);
                            cur.st.enter(OpenFrame { pc, rbp: frame.0, func, call_site });
                            if !cur.exists {
                                cur.exists = true;
                                cur.tepoch = self.epoch();
                            }
                            cur.fepoch = self.epoch();
                        }
                        Event::FuncExit { pc } => {
                            let func = self.fs.get(sym, pc);
                            if cur.exists {
                                cur.st.exit(func);
                            }
                            cur.fepoch = self.epoch();
                        }
                        Event::ThreadStart { stack_lo, stack_hi, tls, .. } => {
                            cur.st.start(stack_lo.0, stack_hi.0, tls.0);
                            cur.exists = true;
                            cur.tepoch = self.epoch();
                            cur.fepoch = cur.tepoch;
                        }
                        _ => {}
                    }
                }
                if i == cols.len() {
                    break;
                }
                let (pc, addr, n) = (Pc(cols.pc[i]), Addr(cols.addr[i]), cols.size[i]);
                let w = cols.kind[i] & Columns::WRITE != 0;
                let (l, st) = (u64::from(!w), u64::from(w));
                let (br, bw) = if w { (0, n) } else { (n, 0) };
                let id = match self.dense.get(addr.0) {
                    Some((_, _, id)) if id != UNSEEN && id != NOT_GLOBAL => id,
                    _ => self.label(&cur, next, pc, addr),
                };
                self.acc.push(Pending { id, pc, l, st, br, bw }, cur.thread);
            }
        })?;
        self.acc.flush(c.thread);
        Ok(())
    }

    /// The label of an access: one probe when cached and still valid.
    #[inline(always)]
    fn label(&mut self, cur: &Cursor<'_>, index: u64, pc: Pc, addr: Addr) -> u32 {
        let h = ((pc.0.rotate_left(29) ^ addr.0).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            >> (64 - CACHE_BITS)) as usize;
        let e = self.cache[h];
        if e.pc == pc.0
            && e.addr == addr.0
            && e.label != u32::MAX
            && index >= e.from
            && index < e.to
            && match e.dep {
                ALWAYS => true,
                THREAD => e.epoch == cur.tepoch,
                _ => e.epoch == cur.fepoch,
            }
        {
            return e.label;
        }
        let page = addr.0 >> 12;
        let p = &self.pages[(page as usize) & ((1 << PAGE_BITS) - 1)];
        if p.page == page && addr.0 >= p.lo && addr.0 < p.hi && p.epoch == cur.tepoch {
            return p.label;
        }
        self.miss(cur, index, pc, addr, h)
    }

    #[inline(never)]
    fn miss(&mut self, cur: &Cursor<'_>, index: u64, pc: Pc, addr: Addr, h: usize) -> u32 {
        let (label, dep, span) = self.resolve(cur, index, pc, addr);
        let epoch = match dep {
            ALWAYS => 0,
            THREAD => cur.tepoch,
            _ => cur.fepoch,
        };
        self.cache[h] =
            Entry { pc: pc.0, addr: addr.0, label, dep, epoch, from: span.start, to: span.end };
        label
    }

    /// Remembers that the part of `addr`'s page in heap range `[lo, hi)` is named
    /// `id`, if nothing resolve looks at before the heap can differ within it: no
    /// module, nor the thread's stack or static TLS, touches the page.
    fn note_page(&mut self, cur: &Cursor<'_>, addr: Addr, lo: u64, hi: u64, id: u32) {
        let page = addr.0 >> 12;
        let (first, last) = (page << 12, (page << 12) | 0xfff);
        let st = &cur.st;
        if st.stack.is_some_and(|(s, e)| s <= last && e > first)
            || (st.tls != 0 && st.tls.saturating_sub(self.sh.tls_reach) <= last && st.tls > first)
            || self.sh.sym.module_of(Addr(first)).is_some()
            || self.sh.sym.module_of(Addr(last)).is_some()
        {
            return;
        }
        self.pages[(page as usize) & ((1 << PAGE_BITS) - 1)] = PageEntry {
            page,
            lo: lo.max(first),
            hi: hi.min(last + 1),
            epoch: cur.tepoch,
            label: id,
        };
    }

    /// The same decisions as [`Attributor::attribute`](crate::Attributor::attribute),
    /// with what the answer depends on.
    fn resolve(
        &mut self,
        cur: &Cursor<'_>,
        index: u64,
        pc: Pc,
        addr: Addr,
    ) -> (u32, u8, std::ops::Range<u64>) {
        let sh = self.sh;
        let all = 0..u64::MAX;
        if let Some((k, at, mut id)) = self.dense.get(addr.0) {
            if id == UNSEEN {
                id = global_label(sh.sym, addr).map_or(NOT_GLOBAL, |l| self.intern(l));
                self.dense.set(k, at, id);
            }
            if id != NOT_GLOBAL {
                return (id, ALWAYS, all);
            }
        } else if self.module_pages.contains(sh.sym, addr) {
            let id = match self.globals.get(&addr.0) {
                Some(&id) => id,
                None => {
                    let id = global_label(sh.sym, addr).map(|l| self.intern(l));
                    self.globals.insert(addr.0, id);
                    id
                }
            };
            if let Some(id) = id {
                return (id, ALWAYS, all);
            }
        }
        let st = &cur.st;
        let dep = if st.in_stack(addr.0) {
            if let Some(i) = st.owner(addr.0) {
                let (fpc, rbp) = (st.frames[i].pc, st.frames[i].rbp);
                let callee_site = st.frames.get(i + 1).map(|o| o.call_site);
                let key =
                    (fpc, addr.0 as i64 - (rbp + 16) as i64, pc, callee_site.unwrap_or(Pc(0)));
                let id = match self.stack_names.get(&key) {
                    Some(&id) => id,
                    None => {
                        let id = self.intern(stack_label(sh.sym, fpc, rbp, pc, callee_site, addr));
                        self.stack_names.insert(key, id);
                        id
                    }
                };
                return (id, FRAME, all);
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
                    let id = tls_label(sh.sym, sh.static_tls, st.tls, addr).map(|l| self.intern(l));
                    self.tls_names.insert(key, id);
                    id
                }
            };
            if let Some(id) = id {
                return (id, dep, all);
            }
        }
        if let Some(ch) = sh.coarse {
            if let Some((lo, hi, id)) = ch.find(addr.0, &mut self.region_ids, &mut self.labels) {
                if dep == THREAD {
                    self.note_page(cur, addr, lo, hi, id);
                }
                return (id, dep, all);
            }
        }
        let (found, span) = self.last_block.find(sh.heap, addr, cur.thread, index, true);
        if let Some((bi, off)) = found {
            let class = sh.classes.of_block[bi];
            let (base, ty) = &sh.classes.classes[class as usize];
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
                if let Some(id) = id {
                    return (id, dep, span);
                }
            }
            let mut seg = usize::MAX;
            if b.end - b.start >= BIG_BLOCK {
                if self.block_seg.len() <= bi {
                    self.block_seg.resize(sh.heap.blocks().len().max(bi + 1), u32::MAX);
                }
                if self.block_seg[bi] == u32::MAX {
                    self.block_seg[bi] = self.heap_dense.add(b.end - b.start) as u32;
                }
                seg = self.block_seg[bi] as usize;
                let id = self.heap_dense.get_in(seg, off);
                if id != UNSEEN {
                    return (id, dep, span);
                }
            }
            let key = (class, single, off);
            let id = match self.heap_names.get(&key) {
                Some(&id) => id,
                None => {
                    let id = self.intern(heap_label(base, ty, single, off));
                    self.heap_names.insert(key, id);
                    id
                }
            };
            if seg != usize::MAX {
                self.heap_dense.set(seg, off, id);
            }
            return (id, dep, span);
        }
        // the threads the serial pass knows at this point, in its map's order
        if self.mapping_epoch != cur.tepoch {
            self.mapping_names.clear();
            self.mapping_epoch = cur.tepoch;
        }
        let id = match self.mapping_names.get(&addr.0) {
            Some(&id) => id,
            None => {
                let mut threads: FastMap<ThreadId, Option<(u64, u64)>> = FastMap::default();
                for &(t, s) in cur.earlier {
                    threads.insert(t, s);
                }
                if cur.exists {
                    threads.insert(cur.thread, st.stack);
                }
                let l = mapping_label(threads.iter().map(|(t, s)| (*t, *s)), sh.sym, sh.maps, addr);
                let id = self.intern(l);
                self.mapping_names.insert(addr.0, id);
                id
            }
        };
        (id, dep, span)
    }
}

/// Names every access of `r` on `threads` worker threads. The result equals
/// [`attribute_trace_serial`]'s.
pub fn attribute_trace(
    r: &TraceReader,
    sym: &Symbolizer,
    maps: Option<Maps>,
    site_namer: SiteNamer<'_>,
    threads: usize,
    g: Granularity,
) -> Result<Attribution, Error> {
    let work = r.stream_chunks();
    // pass 1: heap events and frame summaries per chunk
    let pres = for_chunks(
        &work,
        threads,
        || (Vec::new(), FnStarts::default()),
        |(out, fs): &mut (Vec<(usize, ChunkPre)>, FnStarts), dec, i, c| {
            out.push((i, pre_chunk(dec, r, c, sym, fs)?));
            Ok(())
        },
    )?;
    let mut pre: Vec<Option<ChunkPre>> = (0..work.len()).map(|_| None).collect();
    for (v, _) in pres {
        for (i, p) in v {
            pre[i] = Some(p);
        }
    }
    // serially, stream by stream: the heap index and each chunk's starting state
    let mut heap = HeapIndex::default();
    let mut starts: Vec<ChunkStart> = Vec::with_capacity(work.len());
    let mut earlier: Vec<(ThreadId, Option<(u64, u64)>)> = Vec::new();
    let mut pos = 0usize;
    let mut i = 0usize;
    while i < work.len() {
        let t = work[i].thread;
        let mut st = ThreadState::default();
        let mut exists = false;
        while i < work.len() && work[i].thread == t {
            let p = pre[i].take().expect("every chunk was read");
            starts.push(ChunkStart { state: st.clone(), exists, pos });
            p.apply(&mut st);
            exists |= p.creates;
            for h in p.heap {
                match h {
                    HeapEv::Alloc { index, addr, size, pc, stack } => {
                        heap.add_block(t, index, addr, size, pc, stack)
                    }
                    HeapEv::Realloc { index, old, new, size, pc, stack } => {
                        heap.free(t, index, old);
                        heap.add_block(t, index, new, size, pc, stack);
                    }
                    HeapEv::Free { index, addr } => heap.free(t, index, addr),
                }
            }
            i += 1;
        }
        if exists {
            earlier.push((t, st.stack));
            pos = earlier.len();
        }
    }
    heap.finish();
    let classes = HeapClasses::new(&heap, sym, Some(site_namer));
    let static_tls = static_tls_layout(sym);
    let coarse = (g == Granularity::Variable).then(|| CoarseHeap::new(&heap, &classes));
    let sh = Shared {
        sym,
        heap: &heap,
        classes: &classes,
        maps: maps.as_ref(),
        static_tls: &static_tls,
        coarse: coarse.as_ref(),
        tls_reach: static_tls.iter().map(|&(_, off, _)| off).max().unwrap_or(0),
    };
    // pass 2: attribution
    let workers = for_chunks(
        &work,
        threads,
        || Worker::new(&sh, g),
        |w, dec, i, c| w.chunk(dec, r, c, &starts[i], &earlier),
    )?;
    // merge
    let mut out = Attribution::default();
    let mut ids = Interner { coarse: g == Granularity::Variable, ..Interner::default() };
    for w in workers {
        let part = w.acc.finish(w.labels.labels);
        for (l, p) in part.labels.into_iter().zip(part.counts) {
            let at = ids.intern(l) as usize;
            if at == out.counts.len() {
                out.counts.push(LabelCounts::default());
            }
            let c = &mut out.counts[at];
            c.loads += p.loads;
            c.stores += p.stores;
            c.bytes_read += p.bytes_read;
            c.bytes_written += p.bytes_written;
            for t in p.threads {
                c.add_thread(t);
            }
            for (pc, n) in p.pcs {
                c.add_pc(pc, n);
            }
        }
    }
    out.labels = ids.labels;
    // labels interned but never counted (none expected) are dropped
    let keep: Vec<bool> = out.counts.iter().map(|c| !c.pcs.is_empty()).collect();
    if keep.iter().any(|k| !k) {
        let (mut labels, mut counts) = (Vec::new(), Vec::new());
        for ((l, c), k) in out.labels.into_iter().zip(out.counts).zip(keep) {
            if k {
                labels.push(l);
                counts.push(c);
            }
        }
        out = Attribution { labels, counts };
    }
    Ok(out)
}
