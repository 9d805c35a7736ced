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
use crate::pre::{for_chunks, pre_chunk, ChunkPre, FnStarts, HeapEv};
use crate::resolve::{Access, CoarseHeap, HeapClasses, Resolver, Shared, ALWAYS, THREAD};
use crate::{
    static_tls_layout, Attribution, Error, FastMap, Granularity, HeapIndex, Interner, LabelCounts,
    Naming, OpenFrame, ThreadState, NOT_GLOBAL, UNSEEN,
};
use memlens_format::codec::Columns;
use memlens_format::{Addr, ChunkDecoder, Event, Pc, StreamChunk, ThreadId, TraceReader};

/// One chunk's starting point.
struct ChunkStart {
    state: ThreadState,
    /// The serial pass has a state for the thread already.
    exists: bool,
    /// Position of the thread's stream (threads of earlier streams: `earlier[..pos]`).
    pos: usize,
}

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

/// 4096 pages (160 KiB): a column walk over a matrix touches a new page every
/// access (matmul 700: 957 pages a matrix); at 256 every access missed and was
/// resolved in full, two thirds of naming it.
const PAGE_BITS: u32 = 12;

struct Worker<'a> {
    sh: &'a Shared<'a>,
    res: Resolver,
    acc: Accum,
    cache: Vec<Entry>,
    fs: FnStarts,
    epochs: u64,
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
            res: Resolver::new(sh.sym, g, true),
            acc: Accum::default(),
            cache: vec![EMPTY; 1 << CACHE_BITS],
            fs: FnStarts::default(),
            epochs: 0,
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
                            let id = match self.res.dense.get(addr.0) {
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
                let id = match self.res.dense.get(addr.0) {
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
        // the page table first: a walk over a large block (a sort's array) misses
        // the (pc, address) cache every time, and stays on one entry here
        let page = addr.0 >> 12;
        let p = &self.pages[(page as usize) & ((1 << PAGE_BITS) - 1)];
        if p.page == page && addr.0 >= p.lo && addr.0 < p.hi && p.epoch == cur.tepoch {
            return p.label;
        }
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
        self.miss(cur, index, pc, addr, h)
    }

    #[inline(never)]
    fn miss(&mut self, cur: &Cursor<'_>, index: u64, pc: Pc, addr: Addr, h: usize) -> u32 {
        let a = Access { thread: cur.thread, st: &cur.st, index, pc, addr, tepoch: cur.tepoch };
        let r = self.res.resolve(self.sh, &a, || {
            let mut threads: FastMap<ThreadId, Option<(u64, u64)>> = FastMap::default();
            for &(t, s) in cur.earlier {
                threads.insert(t, s);
            }
            if cur.exists {
                threads.insert(cur.thread, cur.st.stack);
            }
            threads
        });
        if let (Some((lo, hi)), THREAD) = (r.region, r.dep) {
            self.note_page(cur, addr, lo, hi, r.id);
        }
        let (label, dep, span) = (r.id, r.dep, r.span);
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
}

/// Names every access of `r` on `threads` worker threads. The result equals
/// [`attribute_trace_serial`](crate::attribute_trace_serial)'s.
pub fn attribute_trace(n: Naming<'_>, threads: usize) -> Result<Attribution, Error> {
    let Naming { trace: r, sym, maps, site_namer, granularity: g, alloc_fns } = n;
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
    let mut heap = HeapIndex::with_alloc_fns(alloc_fns.clone());
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
    let classes = HeapClasses::new(&heap, Some(site_namer));
    let static_tls = static_tls_layout(sym);
    let coarse = (g == Granularity::Variable).then(|| CoarseHeap::new(sym, &heap, &classes));
    let sh = Shared {
        sym,
        heap: &heap,
        classes: &classes,
        maps: maps.as_ref(),
        static_tls: &static_tls,
        coarse: coarse.as_ref(),
        tls_reach: Shared::tls_reach(&static_tls),
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
        let part = w.acc.finish(w.res.labels.labels);
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
