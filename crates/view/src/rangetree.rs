//! The call tree of a range of the run (`/api/calltree?x0=&x1=`, merged operations
//! `x0..x1` as on the page's order axis): the kernel of the index's whole-run tree
//! ([`memlens_analysis::calltree::CallTree`]) fed the trace in the same merged order,
//! counting only the accesses inside the range and the calls entered in it.
//!
//! Before the range the kernel still follows every thread's entries and exits (the
//! one call-stack rule, [`memlens_format::CallStack`]), so an access at the range's
//! start counts on the calls open then; the walk stops at the first access past the
//! range, so chunks after it are never read. The trace has no merged position per
//! chunk (a position depends on every thread's earlier events), so chunks before the
//! range are decoded. A one-thread trace is read in batches in its own order (the
//! merged one); several threads go through [`Merged`]. Paths with neither cost nor
//! calls in the range are left out.

use crate::profile::Profile;
use crate::Error;
use memlens_analysis::cachesim::Annotation;
use memlens_analysis::calltree::{CallTree, CallTreeReport, Cost};
use memlens_analysis::{Kernel, Merged, Namer};
use memlens_format::reader::BATCH;
use memlens_format::{Event, ThreadId, TraceReader};
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
    let (mut op, mut counting) = (0u64, true);
    // One event in the merged order; false once past the range.
    let mut step = |t: ThreadId, ev: &Event| {
        let access = matches!(ev, Event::Access { .. } | Event::Range { .. } | Event::Rmw { .. });
        if access && op >= x1 {
            return false;
        }
        // an entry at `op` comes before access `op`: it belongs where that access does
        let inside = x0 <= op && op < x1;
        if inside != counting {
            tree.set_counting(inside);
            counting = inside;
        }
        tree.process(t, ev);
        op += u64::from(access);
        true
    };
    if let [s] = r.streams() {
        // one thread: its own order is the merged one, read in batches
        let mut events = r.events(s.thread);
        let mut batch = Vec::with_capacity(BATCH);
        'run: while events.next_batch(&mut batch, BATCH).map_err(memlens_analysis::Error::from)? > 0
        {
            for ev in &batch {
                if !step(s.thread, ev) {
                    break 'run;
                }
            }
        }
    } else {
        for ev in Merged::new(r)? {
            let ev = ev?;
            if !step(ev.thread, &ev.event) {
                break;
            }
        }
    }
    Ok(prune(tree.finish()))
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

    #[test]
    fn the_trace_of_an_index_directory() {
        assert_eq!(trace_of(Path::new("/a/t.trace.mlview")), Some(PathBuf::from("/a/t.trace")));
        assert_eq!(trace_of(Path::new("/a/other")), None);
    }
}
