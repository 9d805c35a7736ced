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

use crate::counts::{Accum, Pending};
use crate::heap::{Block, LastBlock, Regions};
use crate::pre::{for_chunks, pre_chunk, ChunkPre, FnStarts, HeapEv};
use crate::{
    global_label, heap_base, heap_label, heap_single, mapping_label, stack_label,
    static_tls_layout, tls_label, Attribution, BlockLabels, DenseTable, Error, FastMap,
    Granularity, HeapIndex, HeapShape, Interner, Kind, Label, LabelCounts, Maps, ModulePages,
    OpenFrame, SiteNamer, ThreadState, BIG_BLOCK, NOT_GLOBAL, UNSEEN,
};
use memlens_format::codec::Columns;
use memlens_format::{Addr, ChunkDecoder, Event, Pc, StreamChunk, ThreadId, TraceReader};
use memlens_symbols::{HeapType, Symbolizer};
use std::sync::Arc;

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
                let (fpc, rbp) = (st.frames.frames()[i].pc, st.frames.frames()[i].rbp);
                let callee_site = st.frames.frames().get(i + 1).map(|o| o.call_site);
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
/// [`attribute_trace_serial`](crate::attribute_trace_serial)'s.
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
