//! The call tree of a range of the run (`/api/calltree?x0=&x1=`, merged operations
//! `x0..x1` as on the page's order axis): the kernel of the index's whole-run tree
//! ([`memlens_analysis::calltree::CallTree`]) fed the trace in the same merged order,
//! counting only the accesses inside the range and the calls entered in it.
//!
//! Before the range the kernel still follows every thread's entries and exits (the
//! one call-stack rule, [`memlens_format::CallStack`]), so an access at the range's
//! start counts on the calls open then; the walk stops at the first access past the
//! range, so chunks after it are never read. A one-thread trace is read chunk by
//! chunk in its own order (the merged one), and a chunk none of whose accesses is
//! in the range only for its other events (calls, threads, heap), its accesses
//! stepped over by the decoder's skeleton walk. Several threads go through
//! [`Merged`], which decodes the chunks before the range too: a chunk has no
//! merged position (it depends on every thread's earlier events). Paths with neither cost nor
//! calls in the range are left out.

use crate::profile::Profile;
use crate::Error;
use memlens_analysis::cachesim::Annotation;
use memlens_analysis::calltree::{CallTree, CallTreeReport, Cost};
use memlens_analysis::{Kernel, Merged, Namer};
use memlens_format::{ChunkDecoder, Event, ThreadId, TraceReader};
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
    if let [s] = r.streams() {
        // one thread: its own order is the merged one, chunk by chunk
        let mut dec = ChunkDecoder::new();
        let mut before = true;
        let mut skel: Vec<(u64, Event)> = Vec::new();
        for c in r.stream_chunks() {
            if before {
                // calls, threads and heap events only (accesses stepped over):
                // enough while none of the chunk's accesses is in the range
                skel.clear();
                let n = dec.skeleton(r, &c, |i, e| skel.push((i, e))).map_err(fmt)?;
                let accesses = n - skel.len() as u64;
                if walk.op + accesses <= x0 {
                    walk.skipped(s.thread, &skel, accesses);
                    continue;
                }
                before = false;
            }
            let mut past = false;
            dec.decode(r, &c, |evs| {
                for ev in evs {
                    if !past && !walk.step(s.thread, ev) {
                        past = true;
                    }
                }
            })
            .map_err(fmt)?;
            if past {
                break;
            }
        }
    } else {
        for ev in Merged::new(r)? {
            let ev = ev?;
            if !walk.step(ev.thread, &ev.event) {
                break;
            }
        }
    }
    Ok(prune(tree.finish()))
}

fn fmt(e: memlens_format::Error) -> Error {
    memlens_analysis::Error::from(e).into()
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

    /// A chunk of thread `t` none of whose `accesses` is in the range, as its
    /// other events `skel` (each with its number in the chunk).
    fn skipped(&mut self, t: ThreadId, skel: &[(u64, Event)], accesses: u64) {
        for (k, (i, ev)) in skel.iter().enumerate() {
            // the events before it that are not in `skel` are accesses
            self.at(self.op + (i - k as u64));
            self.tree.process(t, ev);
        }
        // all before the range: not counted, whatever the last event was
        self.tree.set_counting(false);
        self.tree.skip_accesses(t, accesses);
        self.tree.set_counting(self.counting);
        self.op += accesses;
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

    /// One thread in many small chunks of calls, exits, accesses, ranges, atomics,
    /// fences and allocations: a chunk boundary falls everywhere.
    fn chunked_trace() -> PathBuf {
        use memlens_format::{AccessKind, Addr, AllocKind, EventBuffer, Pc, RmwOp, TraceWriter};
        let path =
            std::env::temp_dir().join(format!("view-rangetree-{}.trace", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        let mut w = TraceWriter::new(f, 1, 1).unwrap();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut depth = 0u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for chunk in 0..80 {
            let mut buf = EventBuffer::new();
            for _ in 0..next() % 12 {
                let x = next();
                let pc = Pc(0x1000 + 0x100 * ((x >> 20) % 4));
                let addr = Addr(0x10000 + 8 * ((x >> 30) % 64));
                buf.push(&match (x >> 40) % 10 {
                    0 | 1 if depth < 5 => {
                        depth += 1;
                        Event::FuncEnter { pc, call_site: Pc(0), frame: Addr(0x7000 - depth) }
                    }
                    2 | 3 if depth > 0 => {
                        depth -= 1;
                        Event::FuncExit { pc: Pc(0) }
                    }
                    4 => Event::Range { pc, addr, len: 24, kind: AccessKind::Write },
                    5 => Event::Rmw { pc, addr, size: 8, op: RmwOp::FetchAdd, value: None },
                    6 => Event::Fence { pc, order: 5 },
                    7 => Event::Alloc { pc, addr, size: 8, kind: AllocKind::Malloc, stack: vec![] },
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
            w.write_events(0, &mut buf, chunk == 79).unwrap();
        }
        w.finish(|_| {}).unwrap();
        path
    }

    /// The tree of every range of a chunked one-thread trace equals the tree of a
    /// walk that decodes every event, however the range meets the chunks.
    #[test]
    fn stepping_over_the_chunks_before_a_range_changes_no_tree() {
        let path = chunked_trace();
        let r = TraceReader::open(&path).unwrap();
        assert!(r.stream_chunks().len() >= 30);
        let t = r.streams()[0].thread;
        let events: Vec<Event> = r.events(t).map(|e| e.unwrap()).collect();
        let n = events.iter().filter(|e| e.is_access()).count() as u64;
        assert!(n > 60, "{n} accesses");
        let namer = memlens_analysis::NoNames;
        for x0 in 0..n {
            for x1 in [x0 + 1, x0 + 7, n] {
                let mut tree = CallTree::new(&namer);
                let mut walk = Walk { tree: &mut tree, op: 0, counting: true, x0, x1 };
                for ev in &events {
                    if !walk.step(t, ev) {
                        break;
                    }
                }
                let want = prune(tree.finish());
                let got = range_tree(&r, &namer, None, x0, x1).unwrap();
                assert_eq!(got, want, "range {x0}..{x1}");
            }
        }
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn the_trace_of_an_index_directory() {
        assert_eq!(trace_of(Path::new("/a/t.trace.mlview")), Some(PathBuf::from("/a/t.trace")));
        assert_eq!(trace_of(Path::new("/a/other")), None);
    }
}
