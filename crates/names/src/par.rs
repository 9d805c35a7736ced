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
//! 3. every chunk is attributed in parallel from its starting state, each worker
//!    through its own label cache (`cache`): each chunk starts new epochs, so
//!    only answers that hold for every thread carry over from the chunks before.
//!    Labels are built once per distinct name key per worker and merged at the end.
//!    A loop's repeated iterations come from the decoder as runs (`Columns::runs`):
//!    by whole variables, each access of the body whose addresses all lie in one
//!    global or one heap range of one name is counted once for every iteration.

use crate::cache::{Epochs, LabelCache};
use crate::counts::{Accum, Pending};
use crate::pre::{for_chunks, pre_chunk, ChunkPre, FnStarts, HeapEv};
use crate::resolve::{Access, CoarseHeap, HeapClasses, Resolver, Shared};
use crate::{
    static_tls_layout, Attribution, Error, FastMap, Granularity, HeapIndex, Interner, LabelCounts,
    Naming, OpenFrame, ThreadState, NOT_GLOBAL, UNSEEN,
};
use memlens_format::codec::{Columns, Run};
use memlens_format::{Addr, ChunkDecoder, Event, Pc, StreamChunk, ThreadId, TraceReader};

/// One chunk's starting point.
struct ChunkStart {
    state: ThreadState,
    /// The serial pass has a state for the thread already.
    exists: bool,
    /// Position of the thread's stream (threads of earlier streams: `earlier[..pos]`).
    pos: usize,
}

struct Worker<'a> {
    sh: &'a Shared<'a>,
    res: Resolver,
    acc: Accum,
    cache: LabelCache,
    fs: FnStarts,
    epochs: u64,
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
            cache: LabelCache::new(),
            fs: FnStarts::default(),
            epochs: 0,
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
        refolded: Option<&[u8]>,
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
        // atomics) beside them; `seq` is the event's index in the stream; a loop's
        // repeated iterations come as runs, after their body's rows
        dec.keep_runs(true);
        let res = dec.for_columns_of(r, c, refolded, |cols| {
            let mut other = cols.other.iter().peekable();
            let mut runs = cols.runs.iter().peekable();
            for i in 0..=cols.len() {
                // nothing happens inside a run: its accesses come before any
                // event numbered after it
                while let Some(run) = runs.next_if(|run| run.row == i) {
                    self.run(&cur, cols, run);
                }
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
        });
        dec.keep_runs(false);
        res?;
        self.acc.flush(c.thread);
        Ok(())
    }

    /// Counts run `r`'s accesses: each body row's at once when every address it
    /// goes through has one name ([`Worker::one_label`]), else one by one.
    fn run(&mut self, cur: &Cursor<'_>, cols: &Columns, r: &Run) {
        let d = cols.deltas(r);
        let reps = r.reps;
        for (j, &dj) in d.iter().enumerate() {
            let b = r.row - r.events + j;
            let (pc, a0, n) = (Pc(cols.pc[b]), cols.addr[b], cols.size[b]);
            let w = cols.kind[b] & Columns::WRITE != 0;
            let (l, st) = (u64::from(!w), u64::from(w));
            let (br, bw) = if w { (0, n) } else { (n, 0) };
            // iteration k (1..=reps) is event r.seq + (k - 1) × events + j
            let at = |k: u64| {
                (a0.wrapping_add(dj.wrapping_mul(k)), r.seq + (k - 1) * r.events as u64 + j as u64)
            };
            let (first, index) = at(1);
            let last = at(reps).0;
            if let Some(id) = self.one_label(cur, index, pc, first, last) {
                let p =
                    Pending { id, pc, l: l * reps, st: st * reps, br: br * reps, bw: bw * reps };
                self.acc.push(p, cur.thread);
                continue;
            }
            for k in 1..=reps {
                let (addr, index) = at(k);
                let id = match self.res.dense.get(addr) {
                    Some((_, _, id)) if id != UNSEEN && id != NOT_GLOBAL => id,
                    _ => self.label(cur, index, pc, Addr(addr)),
                };
                self.acc.push(Pending { id, pc, l, st, br, bw }, cur.thread);
            }
        }
    }

    /// By whole variables, the label of every access by `pc` from address `first`
    /// to `last` (a run's, in steps, event `index` the first), when the resolver
    /// gives them all one name: every address in one global variable, or in one
    /// heap range named alike whatever the block (`CoarseHeap`) with no module,
    /// stack or static TLS of the thread in between (what `resolve` looks at
    /// before it). `None`: name them one by one.
    fn one_label(
        &mut self,
        cur: &Cursor<'_>,
        index: u64,
        pc: Pc,
        first: u64,
        last: u64,
    ) -> Option<u32> {
        let (lo, hi) = (first.min(last), first.max(last));
        let same = self.sh.one_name(&cur.st, &mut self.res, lo, hi);
        same.then(|| self.label(cur, index, pc, Addr(first)))
    }

    /// The label of an access: one probe when cached and still valid.
    #[inline(always)]
    fn label(&mut self, cur: &Cursor<'_>, index: u64, pc: Pc, addr: Addr) -> u32 {
        let a = Access { thread: cur.thread, st: &cur.st, index, pc, addr, tepoch: cur.tepoch };
        let ep = Epochs { thread: cur.tepoch, frame: cur.fepoch };
        self.cache.label(&mut self.res, self.sh, &a, ep, || {
            let mut threads: FastMap<ThreadId, Option<(u64, u64)>> = FastMap::default();
            for &(t, s) in cur.earlier {
                threads.insert(t, s);
            }
            if cur.exists {
                threads.insert(cur.thread, cur.st.stack);
            }
            threads
        })
    }
}

/// Names every access of `r` on `threads` worker threads. The result equals
/// [`attribute_trace_serial`](crate::attribute_trace_serial)'s.
pub fn attribute_trace(n: Naming<'_>, threads: usize) -> Result<Attribution, Error> {
    let Naming { trace: r, sym, maps, site_namer, granularity: g, alloc_fns } = n;
    let work = r.stream_chunks();
    // pass 1: heap events and frame summaries per chunk
    let kept = std::sync::atomic::AtomicUsize::new(0);
    let pres = for_chunks(
        &work,
        threads,
        || (Vec::new(), FnStarts::default()),
        |(out, fs): &mut (Vec<(usize, ChunkPre)>, FnStarts), dec, i, c| {
            out.push((i, pre_chunk(dec, r, c, sym, fs, &kept)?));
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
    let mut refolded: Vec<Option<Vec<u8>>> = Vec::with_capacity(work.len());
    let mut earlier: Vec<(ThreadId, Option<(u64, u64)>)> = Vec::new();
    let mut pos = 0usize;
    let mut i = 0usize;
    while i < work.len() {
        let t = work[i].thread;
        let mut st = ThreadState::default();
        let mut exists = false;
        while i < work.len() && work[i].thread == t {
            let mut p = pre[i].take().expect("every chunk was read");
            starts.push(ChunkStart { state: st.clone(), exists, pos });
            refolded.push(p.refolded.take());
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
        |w, dec, i, c| w.chunk(dec, r, c, &starts[i], &earlier, refolded[i].as_deref()),
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
        let all = std::mem::take(&mut out.labels).into_iter().zip(std::mem::take(&mut out.counts));
        for ((l, c), k) in all.zip(keep) {
            if k {
                labels.push(l);
                counts.push(c);
            }
        }
        (out.labels, out.counts) = (labels, counts);
    }
    out.heap = heap;
    Ok(out)
}
