//! The call tree, as KCachegrind and heaptrack show it: every distinct call path
//! (main → build → make_node) is a node with the calls made along it and the loads,
//! stores, bytes (and cache misses, given a cachesim annotation) done while it was
//! the innermost frame (exclusive) or anywhere below it (inclusive).
//!
//! Calls nest by the one call-stack rule every reader shares
//! ([`memlens_format::CallStack`]: longjmp and unmatched exits), so the tree agrees
//! with the flame chart, the stack locals' names and the exports. Accesses made
//! outside every frame count on the root. Counting follows `memlens report`: an
//! access or range is one load or store, an RMW one load and (unless it failed) one
//! store.
//!
//! [`CallTreeReport`] answers the three views: the top-down tree
//! ([`CallTreeReport::children`]), the inverted one ([`CallTreeReport::bottom_up`]:
//! each function's exclusive cost split by its callers, their callers, ...) and one
//! function's callers and callees ([`CallTreeReport::function`]), where a recursive
//! function's cost counts once (its outermost activations), as KCachegrind does.

use crate::cachesim::Annotation;
use crate::fxhash::FxHashMap;
use crate::names::Namer;
use crate::Kernel;
use memlens_format::{AccessKind, CallStack, Event, Pc, StackFrame, ThreadId};
use std::collections::HashMap;

/// Loads, stores, bytes and misses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    /// Loads (an RMW counts one).
    pub loads: u64,
    /// Stores (an RMW that stored counts one).
    pub stores: u64,
    /// Bytes loaded and stored.
    pub bytes: u64,
    /// Accesses not served by the first cache level (0 without an annotation).
    pub misses: u64,
}

impl Cost {
    /// Adds `o`.
    pub fn add(&mut self, o: &Cost) {
        crate::add_fields!(self, o; loads, stores, bytes, misses);
    }

    /// Loads and stores.
    pub fn accesses(&self) -> u64 {
        self.loads + self.stores
    }
}

/// One call path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    /// Parent node (the root, node 0, is its own parent).
    pub parent: u32,
    /// The function: its start address when known, else its entry address.
    pub func: u64,
    /// An entry address of the function (for naming).
    pub pc: Pc,
    /// Calls along this path.
    pub calls: u64,
    /// Done while this was the innermost frame.
    pub exclusive: Cost,
    /// Done in this node and every node below it.
    pub inclusive: Cost,
}

/// An open call: its node in the tree.
#[derive(Clone, Copy)]
struct Frame {
    node: u32,
    fp: u64,
    fstart: u64,
}

impl StackFrame for Frame {
    fn frame_pointer(&self) -> u64 {
        self.fp
    }
    fn function(&self) -> u64 {
        self.fstart
    }
}

/// The call-tree kernel. Feed it in the merged order (`drive_merged`) or stream by
/// stream: each thread has its own stack, the tree is shared.
pub struct CallTree<'n> {
    namer: &'n dyn Namer,
    annotation: Option<&'n Annotation>,
    starts: FxHashMap<Pc, u64>,
    stacks: HashMap<ThreadId, CallStack<Frame>>,
    /// The node of the last thread that accessed memory: accesses skip the stack
    /// lookup until that thread (or any other) enters or leaves a function.
    cur: Option<(ThreadId, u32)>,
    accesses: HashMap<ThreadId, u64>,
    nodes: Vec<Node>,
    children: FxHashMap<(u32, u64), u32>,
    counting: bool,
}

impl<'n> CallTree<'n> {
    /// A kernel matching exits to entries by `namer`'s function starts.
    pub fn new(namer: &'n dyn Namer) -> Self {
        CallTree {
            namer,
            annotation: None,
            starts: FxHashMap::default(),
            stacks: HashMap::new(),
            cur: None,
            accesses: HashMap::new(),
            nodes: vec![Node::default()],
            children: FxHashMap::default(),
            counting: true,
        }
    }

    /// Counts misses from a cachesim annotation (`analyze cachesim --annotate`).
    pub fn with_annotation(mut self, a: Option<&'n Annotation>) -> Self {
        self.annotation = a;
        self
    }

    /// Whether accesses add to the costs and entries to the calls (on by default).
    /// Off, the kernel still follows every thread's calls (and its place in the
    /// annotation), so the tree of a range of the trace starts from the calls open
    /// at the range's start (the viewer's `/api/calltree?x0=&x1=`).
    pub fn set_counting(&mut self, on: bool) {
        self.counting = on;
    }

    /// Steps over `n` accesses of thread `t` that are not to be counted, without
    /// their events (what [`CallTree::process`] of each would do with counting
    /// off: move the thread's place in the annotation).
    pub fn skip_accesses(&mut self, t: ThreadId, n: u64) {
        if self.annotation.is_some() {
            *self.accesses.entry(t).or_insert(0) += n;
        }
    }

    fn fstart(&mut self, pc: Pc) -> u64 {
        let namer = self.namer;
        *self.starts.entry(pc).or_insert_with(|| namer.function_start(pc).map_or(0, |s| s.0))
    }

    fn child(&mut self, parent: u32, func: u64, pc: Pc) -> u32 {
        let n = self.nodes.len() as u32;
        let id = *self.children.entry((parent, func)).or_insert(n);
        if id == n {
            self.nodes.push(Node { parent, func, pc, ..Node::default() });
        }
        id
    }

    fn access(&mut self, t: ThreadId, loads: u64, stores: u64, bytes: u64) {
        let node = match self.cur {
            Some((c, n)) if c == t => n,
            _ => {
                let n = self.stacks.get(&t).and_then(|s| s.last()).map_or(0, |f| f.node);
                self.cur = Some((t, n));
                n
            }
        };
        let mut misses = 0;
        if let Some(a) = self.annotation {
            let k = self.accesses.entry(t).or_insert(0);
            misses = u64::from(a.thread(t).and_then(|s| s.get(*k)).is_some_and(|l| l > 0));
            *k += 1;
        }
        if !self.counting {
            return;
        }
        let c = &mut self.nodes[node as usize].exclusive;
        c.loads += loads;
        c.stores += stores;
        c.bytes += bytes;
        c.misses += misses;
    }
}

impl Kernel for CallTree<'_> {
    type Output = CallTreeReport;

    fn process(&mut self, t: ThreadId, ev: &Event) {
        match *ev {
            Event::Access { size, kind, .. } => {
                let w = u64::from(kind == AccessKind::Write);
                self.access(t, 1 - w, w, u64::from(size));
            }
            Event::Range { len, kind, .. } => {
                let w = u64::from(kind == AccessKind::Write);
                self.access(t, 1 - w, w, len);
            }
            Event::Rmw { size, op, .. } => {
                let w = u64::from(op.stores());
                self.access(t, 1, w, u64::from(size) * (1 + w));
            }
            Event::FuncEnter { pc, frame, .. } => {
                self.cur = None;
                let fstart = self.fstart(pc);
                let st = self.stacks.entry(t).or_default();
                // frames a longjmp left close first: the new call's parent is what remains
                st.unwind_below(frame.0, |_, _| {});
                let parent = st.last().map_or(0, |f| f.node);
                let node = self.child(parent, if fstart != 0 { fstart } else { pc.0 }, pc);
                self.nodes[node as usize].calls += u64::from(self.counting);
                let st = self.stacks.entry(t).or_default();
                st.enter(Frame { node, fp: frame.0, fstart }, |_, _| {});
            }
            Event::FuncExit { pc } => {
                self.cur = None;
                let fstart = if pc.0 == 0 { 0 } else { self.fstart(pc) };
                if let Some(st) = self.stacks.get_mut(&t) {
                    st.exit(fstart, |_, _| {});
                }
            }
            _ => {}
        }
    }

    /// A run's accesses add to the open frame at once (one by one with an
    /// annotation, whose misses are per access).
    fn process_run(&mut self, t: ThreadId, body: &[Event], deltas: &[u64], reps: u64) {
        if self.annotation.is_some() {
            return crate::expand_run(body, deltas, reps, |evs| self.process_batch(t, evs));
        }
        for ev in body {
            let (loads, stores, bytes) = match *ev {
                Event::Access { size, kind, .. } => {
                    let w = u64::from(kind == AccessKind::Write);
                    (1 - w, w, u64::from(size))
                }
                Event::Range { len, kind, .. } => {
                    let w = u64::from(kind == AccessKind::Write);
                    (1 - w, w, len)
                }
                _ => {
                    self.process(t, ev);
                    continue;
                }
            };
            self.access(t, loads * reps, stores * reps, bytes * reps);
        }
    }

    fn named_runs(&self) -> bool {
        true
    }

    fn wants_runs(&self) -> bool {
        true
    }

    fn finish(self) -> CallTreeReport {
        CallTreeReport::from_nodes(self.nodes, self.annotation.is_some())
    }
}

/// A function's cost seen from one caller or callee.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Edge {
    /// The other function (0: the root, outside every function).
    pub func: u64,
    /// Calls along the edge.
    pub calls: u64,
    /// The callee's inclusive cost along the edge (outermost activations only).
    pub cost: Cost,
}

/// One function over the whole tree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FunctionCost {
    /// Its calls.
    pub calls: u64,
    /// Done in it or below it, each access once however deep the recursion.
    pub inclusive: Cost,
    /// Done in it.
    pub exclusive: Cost,
    /// Who called it, with its cost when they did.
    pub callers: Vec<Edge>,
    /// What it called, with their cost.
    pub callees: Vec<Edge>,
}

/// The finished tree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallTreeReport {
    /// Node 0 is the root; a node's parent always comes before it.
    pub nodes: Vec<Node>,
    /// Misses were counted (an annotation was given).
    pub has_misses: bool,
    children: Vec<Vec<u32>>,
}

impl CallTreeReport {
    /// The tree of `nodes` (parents before children; exclusive costs and calls set),
    /// with the inclusive costs summed.
    pub fn from_nodes(mut nodes: Vec<Node>, has_misses: bool) -> CallTreeReport {
        if nodes.is_empty() {
            nodes.push(Node::default());
        }
        let mut children = vec![Vec::new(); nodes.len()];
        for n in nodes.iter_mut() {
            n.inclusive = n.exclusive;
        }
        for i in (1..nodes.len()).rev() {
            let p = (nodes[i].parent as usize).min(i - 1);
            let c = nodes[i].inclusive;
            nodes[p].inclusive.add(&c);
            children[p].push(i as u32);
        }
        for c in children.iter_mut() {
            c.reverse();
        }
        CallTreeReport { nodes, has_misses, children }
    }

    /// The children of `node` (none for an unknown node).
    pub fn children(&self, node: u32) -> &[u32] {
        self.children.get(node as usize).map_or(&[], Vec::as_slice)
    }

    /// The inverted tree under the path `path` (a function, its caller, the caller's
    /// caller, ...; empty: the top level): each next caller (0: the root) with the
    /// exclusive cost of the path's first function along it, and the calls of the
    /// path's last node. At the top level, each function's total exclusive cost.
    pub fn bottom_up(&self, path: &[u64]) -> Vec<Edge> {
        let mut out: FxHashMap<u64, Edge> = FxHashMap::default();
        for (i, n) in self.nodes.iter().enumerate().skip(1) {
            if n.exclusive == Cost::default() || n.func != *path.first().unwrap_or(&n.func) {
                continue;
            }
            // walk up along the path
            let mut at = i;
            let mut ok = true;
            for &f in path.iter().skip(1) {
                if at == 0 {
                    ok = false;
                    break;
                }
                at = self.nodes[at].parent as usize;
                if at == 0 || self.nodes[at].func != f {
                    ok = false;
                    break;
                }
            }
            if !ok {
                continue;
            }
            let key = if path.is_empty() {
                n.func
            } else if at == 0 {
                continue;
            } else {
                let p = self.nodes[at].parent as usize;
                if p == 0 {
                    0
                } else {
                    self.nodes[p].func
                }
            };
            let e = out.entry(key).or_insert_with(|| Edge { func: key, ..Edge::default() });
            e.cost.add(&n.exclusive);
            e.calls += self.nodes[if path.is_empty() { i } else { at }].calls;
        }
        let mut v: Vec<Edge> = out.into_values().collect();
        v.sort_by_key(|e| (std::cmp::Reverse(e.cost.loads + e.cost.stores), e.func));
        v
    }

    /// Every function's calls, inclusive cost (each recursion counted once) and
    /// exclusive cost, in one pass over the tree.
    pub fn functions(&self) -> HashMap<u64, (u64, Cost, Cost)> {
        let mut out: HashMap<u64, (u64, Cost, Cost)> = HashMap::new();
        let mut open: FxHashMap<u64, usize> = FxHashMap::default();
        let mut stack: Vec<(u32, bool)> =
            self.children(0).iter().rev().map(|&c| (c, false)).collect();
        while let Some((i, leaving)) = stack.pop() {
            let n = &self.nodes[i as usize];
            let o = open.entry(n.func).or_insert(0);
            if leaving {
                *o -= 1;
                continue;
            }
            let e = out.entry(n.func).or_default();
            e.0 += n.calls;
            if *o == 0 {
                e.1.add(&n.inclusive);
            }
            e.2.add(&n.exclusive);
            *o += 1;
            stack.push((i, true));
            for &c in self.children(i).iter().rev() {
                stack.push((c, false));
            }
        }
        out
    }

    /// Function `func` over the whole tree: its own and inclusive cost (each
    /// recursion counted once), its callers and its callees.
    pub fn function(&self, func: u64) -> FunctionCost {
        let mut f = FunctionCost::default();
        let mut callers: FxHashMap<u64, Edge> = FxHashMap::default();
        let mut callees: FxHashMap<u64, Edge> = FxHashMap::default();
        // depth-first, with the open activations of `func` and of each edge
        let mut open_f = 0usize;
        let mut open_edge: FxHashMap<(u64, u64), usize> = FxHashMap::default();
        let mut stack: Vec<(u32, bool)> = vec![(0, false)];
        while let Some((i, leaving)) = stack.pop() {
            let n = &self.nodes[i as usize];
            let pf = if i == 0 || n.parent == 0 { 0 } else { self.nodes[n.parent as usize].func };
            let is_f = i != 0 && n.func == func;
            let is_callee = i != 0 && pf == func;
            let edge = (pf, n.func);
            if leaving {
                if is_f {
                    open_f -= 1;
                }
                if is_f || is_callee {
                    *open_edge.get_mut(&edge).expect("opened") -= 1;
                }
                continue;
            }
            if is_f {
                f.calls += n.calls;
                f.exclusive.add(&n.exclusive);
                if open_f == 0 {
                    f.inclusive.add(&n.inclusive);
                }
                open_f += 1;
            }
            if is_f || is_callee {
                // an edge counts its outermost activations only (recursion)
                let o = open_edge.entry(edge).or_insert(0);
                let first = *o == 0;
                *o += 1;
                let add = |map: &mut FxHashMap<u64, Edge>, key: u64| {
                    let e = map.entry(key).or_insert_with(|| Edge { func: key, ..Edge::default() });
                    e.calls += n.calls;
                    if first {
                        e.cost.add(&n.inclusive);
                    }
                };
                if is_f {
                    add(&mut callers, pf);
                }
                if is_callee {
                    add(&mut callees, n.func);
                }
            }
            stack.push((i, true));
            for &c in self.children(i).iter().rev() {
                stack.push((c, false));
            }
        }
        let sorted = |m: FxHashMap<u64, Edge>| {
            let mut v: Vec<Edge> = m.into_values().collect();
            v.sort_by_key(|e| (std::cmp::Reverse(e.cost.loads + e.cost.stores), e.func));
            v
        };
        f.callers = sorted(callers);
        f.callees = sorted(callees);
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use crate::{drive_merged, NoNames};
    use memlens_format::Addr;

    fn enter(pc: u64, fp: u64) -> Event {
        Event::FuncEnter { pc: Pc(pc), call_site: Pc(0), frame: Addr(fp) }
    }
    fn exit(pc: u64) -> Event {
        Event::FuncExit { pc: Pc(pc) }
    }

    #[test]
    fn top_down_bottom_up_and_callers_callees() {
        // main(0x100) → a(0x200) → b(0x300); main → b; a → a (recursion) → b
        let evs = vec![
            rd(0x1, 0x10, 4), // outside every frame: the root
            enter(0x100, 1000),
            wr(0x1, 0x10, 8),
            enter(0x200, 900),
            rd(0x1, 0x10, 4),
            enter(0x300, 800),
            rd(0x1, 0x10, 2),
            rd(0x1, 0x10, 2),
            exit(0x300),
            enter(0x200, 850),
            enter(0x300, 800),
            wr(0x1, 0x10, 4),
            exit(0x300),
            exit(0x200),
            exit(0x200),
            enter(0x300, 950),
            rmw(0x1, 0x10, 8),
            exit(0x300),
            exit(0x100),
        ];
        let r = drive_merged(&trace(&[(0, evs)]), CallTree::new(&NoNames), |_| {}).unwrap();
        let n = &r.nodes;
        assert_eq!(n[0].exclusive.loads, 1);
        assert_eq!((n[0].inclusive.loads, n[0].inclusive.stores), (1 + 1 + 2 + 1, 1 + 1 + 1));
        assert_eq!(n[0].inclusive.bytes, 4 + 8 + 4 + 2 + 2 + 4 + 16);
        let main = r.children(0)[0];
        assert_eq!((n[main as usize].func, n[main as usize].calls), (0x100, 1));
        let kids: Vec<u64> = r.children(main).iter().map(|&c| n[c as usize].func).collect();
        assert_eq!(kids, [0x200, 0x300]);
        // bottom-up: b's own cost, split by callers a (twice: direct, and via a→a) and main
        let top = r.bottom_up(&[]);
        let b = top.iter().find(|e| e.func == 0x300).unwrap();
        assert_eq!((b.cost.loads, b.cost.stores, b.calls), (3, 2, 3));
        let by_caller = r.bottom_up(&[0x300]);
        let via_a = by_caller.iter().find(|e| e.func == 0x200).unwrap();
        assert_eq!((via_a.cost.loads, via_a.cost.stores, via_a.calls), (2, 1, 2));
        let via_main = by_caller.iter().find(|e| e.func == 0x100).unwrap();
        assert_eq!((via_main.cost.loads, via_main.cost.stores), (1, 1));
        // b ← a ← (a or main)
        let up2 = r.bottom_up(&[0x300, 0x200]);
        let fs: Vec<(u64, u64)> =
            up2.iter().map(|e| (e.func, e.cost.loads + e.cost.stores)).collect();
        assert_eq!(fs, [(0x100, 2), (0x200, 1)]);
        // a: inclusive counts the recursion once
        let a = r.function(0x200);
        let all = r.functions();
        assert_eq!(all[&0x200], (a.calls, a.inclusive, a.exclusive));
        assert_eq!(all[&0x100].1, n[main as usize].inclusive);
        assert_eq!(a.calls, 2);
        assert_eq!((a.inclusive.loads, a.inclusive.stores), (3, 1));
        assert_eq!((a.exclusive.loads, a.exclusive.stores), (1, 0));
        assert_eq!(a.callers.iter().map(|e| e.func).collect::<Vec<_>>(), [0x100, 0x200]);
        assert_eq!(a.callers[0].cost.loads + a.callers[0].cost.stores, 4);
        let cb = a.callees.iter().find(|e| e.func == 0x300).unwrap();
        assert_eq!((cb.calls, cb.cost.loads + cb.cost.stores), (2, 3));
        // the root's total is the sum of every node's own cost
        let mut s = Cost::default();
        n.iter().for_each(|x| s.add(&x.exclusive));
        assert_eq!(s, n[0].inclusive);
    }

    #[test]
    fn a_longjmp_reparents_the_next_call() {
        // main → a → b, longjmp back into main, which calls c: c is main's child
        let evs = vec![
            enter(0x100, 1000),
            enter(0x200, 900),
            enter(0x300, 800),
            enter(0x400, 990),
            rd(0x1, 0x10, 4),
            exit(0x400),
            exit(0x100),
        ];
        let r = drive_merged(&trace(&[(0, evs)]), CallTree::new(&NoNames), |_| {}).unwrap();
        let main = r.children(0)[0];
        let kids: Vec<u64> = r.children(main).iter().map(|&c| r.nodes[c as usize].func).collect();
        assert_eq!(kids, [0x200, 0x400]);
        assert_eq!(r.nodes[r.children(main)[1] as usize].exclusive.loads, 1);
    }
}
