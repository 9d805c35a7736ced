//! The call tree of a range of the run (`/api/calltree?x0=&x1=`, merged operations
//! `x0..x1` as on the page's order axis): the kernel of the index's whole-run tree
//! ([`memlens_analysis::calltree::CallTree`]) fed the trace in the same merged order,
//! counting only the accesses inside the range and the calls entered in it.
//!
//! Before the range the kernel still follows every thread's entries and exits (the
//! one call-stack rule, [`memlens_format::CallStack`]), so an access at the range's
//! start counts on the calls open then; the walk stops at the first access past the
//! range, so chunks after it are never read. The merge is [`Merged`]'s, by (clock,
//! thread, index), but until the range starts each stream is read as its chunks'
//! skeletons: calls, thread and heap events decoded, the accesses between them
//! stepped over as runs (a thread's accesses at one clock are contiguous in the
//! merged order, so a run before the range is skipped whole). At the run where the
//! range starts, every stream goes on event by event from where it stands. Paths
//! with neither cost nor calls in the range are left out.

use crate::profile::Profile;
use crate::Error;
use memlens_analysis::cachesim::Annotation;
use memlens_analysis::calltree::{CallTree, CallTreeReport, Cost};
#[cfg(doc)]
use memlens_analysis::Merged;
use memlens_analysis::{Kernel, Namer};
use memlens_format::{ChunkDecoder, Event, StreamChunk, StreamEvents, ThreadId, TraceReader};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The tree of the merged operations `x0..x1` of `r`.
pub(crate) fn range_tree(
    r: &TraceReader,
    namer: &dyn Namer,
    annotation: Option<&Annotation>,
    x0: u64,
    x1: u64,
) -> Result<CallTreeReport, Error> {
    let mut tree = CallTree::new(namer).with_annotation(annotation);
    let mut walk = Walk { tree: &mut tree, op: 0, counting: true, x0, x1 };
    let mut srcs: Vec<Src> = r.streams().iter().map(|s| Src::new(r, s.thread)).collect();
    let mut dec = ChunkDecoder::new();
    // the merge of [`Merged`]: by (clock, thread, index) of each stream's head
    let mut heap = BinaryHeap::new();
    for (i, s) in srcs.iter_mut().enumerate() {
        if let Some(k) = s.head(r, &mut dec)? {
            heap.push(Reverse((k, i)));
        }
    }
    while let Some(Reverse((_, i))) = heap.pop() {
        let s = &mut srcs[i];
        let (clock, index, item) = s.items.pop_front().expect("a queued stream has a head");
        match item {
            Item::Ev(ev) => {
                if !walk.step(s.thread, &ev) {
                    break;
                }
            }
            // a thread's accesses at one clock are contiguous in the merged order
            Item::Run(n) if walk.op + n <= x0 => walk.skip(s.thread, n),
            Item::Run(n) => {
                // the range starts in this run: every stream event by event from
                // where it stands (the heads' keys do not change)
                s.items.push_front((clock, index, Item::Run(n)));
                for s in srcs.iter_mut() {
                    s.whole(r)?;
                    // queued again at the same key (the merge holds the others')
                    s.head(r, &mut dec)?;
                }
            }
        }
        let s = &mut srcs[i];
        if let Some(k) = s.head(r, &mut dec)? {
            heap.push(Reverse((k, i)));
        }
    }
    Ok(prune(tree.finish()))
}

fn fmt(e: memlens_format::Error) -> Error {
    memlens_analysis::Error::from(e).into()
}

/// A queued piece of a stream, with its clock and its first event's index.
enum Item {
    /// This many accesses, stepped over by the skeleton walk.
    Run(u64),
    /// Any other event (or, event by event, an access).
    Ev(Event),
}

/// One stream of the walk: its chunks' skeletons (calls, threads, heap events
/// and runs of accesses between them) until the range is near, then its events.
struct Src<'r> {
    thread: ThreadId,
    chunks: Vec<StreamChunk>,
    /// The next chunk to walk (skeletons).
    next: usize,
    items: VecDeque<(u64, u64, Item)>,
    /// The clock after the last event queued ([`Merged`]'s rule: the largest seen).
    clock: u64,
    /// Event by event: the stream and the index of its next event.
    events: Option<(StreamEvents<'r>, u64)>,
}

impl<'r> Src<'r> {
    fn new(r: &TraceReader, thread: ThreadId) -> Src<'r> {
        let chunks = r.stream_chunks().into_iter().filter(|c| c.thread == thread).collect();
        Src { thread, chunks, next: 0, items: VecDeque::new(), clock: 0, events: None }
    }

    /// The merge key of the first queued item, reading more when none is.
    fn head(
        &mut self,
        r: &'r TraceReader,
        dec: &mut ChunkDecoder,
    ) -> Result<Option<(u64, u32, u64)>, Error> {
        while self.items.is_empty() {
            if let Some((events, index)) = &mut self.events {
                let Some(ev) = events.next() else { break };
                let ev = ev.map_err(fmt)?;
                if let Event::Clock(t) = ev {
                    self.clock = self.clock.max(t);
                }
                self.items.push_back((self.clock, *index, Item::Ev(ev)));
                *index += 1;
                continue;
            }
            let Some(c) = self.chunks.get(self.next) else { break };
            self.next += 1;
            let (mut after, first) = (0u64, c.first_index);
            let (items, clock) = (&mut self.items, &mut self.clock);
            let n = dec
                .skeleton(r, c, |i, ev| {
                    if i > after {
                        items.push_back((*clock, first + after, Item::Run(i - after)));
                    }
                    if let Event::Clock(t) = ev {
                        *clock = (*clock).max(t);
                    }
                    items.push_back((*clock, first + i, Item::Ev(ev)));
                    after = i + 1;
                })
                .map_err(fmt)?;
            if n > after {
                self.items.push_back((self.clock, first + after, Item::Run(n - after)));
            }
        }
        Ok(self.items.front().map(|&(clock, index, _)| (clock, self.thread.0, index)))
    }

    /// From the first queued item on, event by event.
    fn whole(&mut self, r: &'r TraceReader) -> Result<(), Error> {
        if self.events.is_some() {
            return Ok(());
        }
        let (pos, index) = match self.items.front() {
            Some(&(clock, index, _)) => {
                self.clock = clock;
                (self.next - 1, index)
            }
            None => (self.next, self.chunks.get(self.next).map_or(0, |c| c.first_index)),
        };
        self.items.clear();
        let mut events = r.events_from(self.thread, pos);
        // the events of the chunk before the first queued one were walked already
        let skip = self.chunks.get(pos).map_or(0, |c| index - c.first_index);
        for _ in 0..skip {
            if let Some(Err(e)) = events.next() {
                return Err(fmt(e));
            }
        }
        self.events = Some((events, index));
        Ok(())
    }
}

/// The merged order's walk: `op` accesses so far, counting while inside `x0..x1`.
struct Walk<'t, 'n> {
    tree: &'t mut CallTree<'n>,
    op: u64,
    counting: bool,
    x0: u64,
    x1: u64,
}

impl Walk<'_, '_> {
    /// Where an event at `op` (accesses before it) belongs.
    fn at(&mut self, op: u64) {
        // an entry at `op` comes before access `op`: it belongs where that access does
        let inside = self.x0 <= op && op < self.x1;
        if inside != self.counting {
            self.tree.set_counting(inside);
            self.counting = inside;
        }
    }

    /// One event in the merged order; false once past the range.
    fn step(&mut self, t: ThreadId, ev: &Event) -> bool {
        let access = ev.is_access();
        if access && self.op >= self.x1 {
            return false;
        }
        self.at(self.op);
        self.tree.process(t, ev);
        self.op += u64::from(access);
        true
    }

    /// `n` accesses of thread `t`, all before the range, stepped over.
    fn skip(&mut self, t: ThreadId, n: u64) {
        self.tree.skip_accesses(t, n);
        self.op += n;
    }
}

/// Leaves out the paths with no cost and no calls in the range (entered and left
/// before it, or entered after it), keeping the parents of every path kept.
pub(crate) fn prune(t: CallTreeReport) -> CallTreeReport {
    let n = t.nodes.len();
    let mut keep = vec![false; n];
    if n > 0 {
        keep[0] = true;
    }
    // children come after their parents: one pass from the end marks the paths
    for i in (1..n).rev() {
        let nd = &t.nodes[i];
        if keep[i] || nd.calls > 0 || nd.inclusive != Cost::default() {
            keep[i] = true;
            keep[nd.parent as usize] = true;
        }
    }
    let mut id = vec![0u32; n];
    let mut nodes = Vec::new();
    for (i, nd) in t.nodes.into_iter().enumerate() {
        if keep[i] {
            id[i] = nodes.len() as u32;
            let mut nd = nd;
            nd.parent = if i == 0 { 0 } else { id[nd.parent as usize] };
            nodes.push(nd);
        }
    }
    CallTreeReport::from_nodes(nodes, t.has_misses)
}

/// What a range's tree is computed from: the trace beside the index, its code
/// names and its cachesim annotation; the last answer is kept (the page expands
/// the rows of one range node by node).
#[derive(Default)]
pub(crate) struct Ranges {
    source: Option<Source>,
    last: Option<((u64, u64), Arc<Profile>)>,
}

struct Source {
    reader: TraceReader,
    names: memlens_names::Names,
    annotation: Option<Annotation>,
}

/// The trace an index directory `TRACE.mlview` belongs to.
fn trace_of(dir: &Path) -> Option<PathBuf> {
    let s = dir.as_os_str().to_str()?;
    s.strip_suffix(".mlview").map(PathBuf::from)
}

impl Ranges {
    /// The profile of the merged operations `x0..x1` (the index's function ids).
    pub(crate) fn profile(
        &mut self,
        index: &crate::Index,
        x0: u64,
        x1: u64,
    ) -> Result<Arc<Profile>, String> {
        if let Some((k, p)) = &self.last {
            if *k == (x0, x1) {
                return Ok(p.clone());
            }
        }
        if self.source.is_none() {
            self.source = Some(open(index.dir())?);
        }
        let Some(src) = &self.source else { return Err("no trace".into()) };
        let namer = memlens_names::CodeNamer(&src.names);
        let tree = range_tree(&src.reader, &namer, src.annotation.as_ref(), x0, x1)
            .map_err(|e| e.to_string())?;
        let p = Arc::new(index.profile().for_tree(tree, &namer));
        self.last = Some(((x0, x1), p.clone()));
        Ok(p)
    }
}

fn open(dir: &Path) -> Result<Source, String> {
    let trace = trace_of(dir).ok_or_else(|| format!("no trace beside {}", dir.display()))?;
    if !crate::is_fresh(&trace, dir) {
        return Err(format!(
            "{} changed since it was indexed: restart memlens view for the call tree of a range",
            trace.display()
        ));
    }
    let reader = TraceReader::open(&trace).map_err(|e| format!("{}: {e}", trace.display()))?;
    let names = memlens_names::Names::new(&reader.meta().modules);
    let annotation = match std::fs::File::open(crate::annotation_path(&trace)) {
        Ok(f) => {
            Some(Annotation::read_from(std::io::BufReader::new(f)).map_err(|e| e.to_string())?)
        }
        Err(_) => None,
    };
    Ok(Source { reader, names, annotation })
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlens_analysis::calltree::Node;

    fn node(parent: u32, func: u64, calls: u64, loads: u64) -> Node {
        Node {
            parent,
            func,
            calls,
            exclusive: Cost { loads, ..Cost::default() },
            ..Node::default()
        }
    }

    #[test]
    fn prune_keeps_paths_with_cost_or_calls_and_their_parents() {
        // root → a (open at the start, no cost of its own) → b (cost); root → c
        // (nothing in the range) → e (nothing); root → d (called, no cost)
        let nodes = vec![
            node(0, 0, 0, 1),
            node(0, 10, 0, 0),
            node(1, 11, 0, 5),
            node(0, 12, 0, 0),
            node(0, 13, 1, 0),
            node(3, 14, 0, 0),
        ];
        let t = prune(CallTreeReport::from_nodes(nodes, false));
        let kept: Vec<(u32, u64, u64)> =
            t.nodes.iter().map(|n| (n.parent, n.func, n.inclusive.loads)).collect();
        assert_eq!(kept, [(0, 0, 6), (0, 10, 5), (1, 11, 5), (0, 13, 0)]);
        assert_eq!(t.children(0), [1, 3]);
    }

    /// `threads` threads in many small chunks of calls, exits, accesses, ranges,
    /// atomics, fences, allocations and (with several threads) clocks: a chunk
    /// boundary falls everywhere, and the merge interleaves the threads.
    fn chunked_trace(name: &str, threads: u32) -> PathBuf {
        use memlens_format::{AccessKind, Addr, AllocKind, EventBuffer, Pc, RmwOp, TraceWriter};
        let path = std::env::temp_dir()
            .join(format!("view-rangetree-{name}-{}.trace", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        let mut w = TraceWriter::new(f, 1, 1).unwrap();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut depth = vec![0u64; threads as usize];
        let mut clock = vec![0u64; threads as usize];
        for chunk in 0..80 {
            for t in 0..threads {
                let (depth, clock) = (&mut depth[t as usize], &mut clock[t as usize]);
                let mut buf = EventBuffer::new();
                for _ in 0..next() % 12 {
                    let x = next();
                    let pc = Pc(0x1000 + 0x100 * ((x >> 20) % 4));
                    let addr = Addr(0x10000 + 8 * ((x >> 30) % 64));
                    buf.push(&match (x >> 40) % 11 {
                        0 | 1 if *depth < 5 => {
                            *depth += 1;
                            Event::FuncEnter { pc, call_site: Pc(0), frame: Addr(0x7000 - *depth) }
                        }
                        2 | 3 if *depth > 0 => {
                            *depth -= 1;
                            Event::FuncExit { pc: Pc(0) }
                        }
                        4 => Event::Range { pc, addr, len: 24, kind: AccessKind::Write },
                        5 => Event::Rmw { pc, addr, size: 8, op: RmwOp::FetchAdd, value: None },
                        6 => Event::Fence { pc, order: 5 },
                        7 => Event::Alloc {
                            pc,
                            addr,
                            size: 8,
                            kind: AllocKind::Malloc,
                            stack: vec![],
                        },
                        8 if threads > 1 => {
                            *clock += 1 + (x >> 50) % 3;
                            Event::Clock(*clock)
                        }
                        _ => Event::Access {
                            pc,
                            addr,
                            size: 8,
                            kind: AccessKind::Read,
                            atomic: false,
                            value: None,
                        },
                    });
                }
                w.write_events(t, &mut buf, chunk == 79).unwrap();
            }
        }
        w.finish(|_| {}).unwrap();
        path
    }

    /// The tree of every range of a chunked trace of one or three threads equals
    /// the tree of the merged walk that decodes every event ([`Merged`]), however
    /// the range meets the chunks and the runs of accesses.
    #[test]
    fn stepping_over_the_accesses_before_a_range_changes_no_tree() {
        for (name, threads) in [("one", 1), ("three", 3)] {
            let path = chunked_trace(name, threads);
            let r = TraceReader::open(&path).unwrap();
            assert_eq!(r.streams().len(), threads as usize);
            assert!(r.stream_chunks().len() >= 30 * threads as usize);
            let events: Vec<(ThreadId, Event)> = memlens_analysis::Merged::new(&r)
                .unwrap()
                .map(|e| e.map(|e| (e.thread, e.event)).unwrap())
                .collect();
            let n = events.iter().filter(|e| e.1.is_access()).count() as u64;
            assert!(n > 60 * u64::from(threads), "{n} accesses");
            if threads > 1 {
                // the merge interleaves the threads: not one after the other
                let switches = events.windows(2).filter(|w| w[0].0 != w[1].0).count();
                assert!(switches > 20, "{switches} switches between threads");
            }
            let namer = memlens_analysis::NoNames;
            for x0 in 0..n {
                for x1 in [x0 + 1, x0 + 7, n] {
                    let mut tree = CallTree::new(&namer);
                    let mut walk = Walk { tree: &mut tree, op: 0, counting: true, x0, x1 };
                    for (t, ev) in &events {
                        if !walk.step(*t, ev) {
                            break;
                        }
                    }
                    let want = prune(tree.finish());
                    let got = range_tree(&r, &namer, None, x0, x1).unwrap();
                    assert_eq!(got, want, "{name}: range {x0}..{x1}");
                }
            }
            let _ = std::fs::remove_file(&path);
        }
    }

    #[test]
    fn the_trace_of_an_index_directory() {
        assert_eq!(trace_of(Path::new("/a/t.trace.mlview")), Some(PathBuf::from("/a/t.trace")));
        assert_eq!(trace_of(Path::new("/a/other")), None);
    }
}
