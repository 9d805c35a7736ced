//! The call tree of a diff (`memlens view A B`, as heaptrack --diff and
//! KCachegrind's comparison show it): both traces' top-down trees merged by call
//! path (the names of the functions from the root down), each node with its calls,
//! inclusive and exclusive costs in A and in B. A path only one trace took is
//! there with zeros on the other side. Children come largest |Δ inclusive
//! accesses| first, so the path that changed most opens first.

use crate::profile::Profile;
use memlens_analysis::calltree::Cost;
use serde_json::{json, Value};
use std::collections::HashMap;

/// Rows per answer at most (the caption says how many more there are).
const MAX_ROWS: usize = 2000;

/// What one call path did in one trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PathCost {
    pub calls: u64,
    pub incl: Cost,
    pub excl: Cost,
}

impl PathCost {
    fn add(&mut self, calls: u64, incl: &Cost, excl: &Cost) {
        self.calls += calls;
        self.incl.add(incl);
        self.excl.add(excl);
    }
}

#[derive(Clone, Debug, Default)]
struct DNode {
    parent: u32,
    name: String,
    a: PathCost,
    b: PathCost,
}

/// The two trees merged by call path; node 0 is the root (outside any function).
/// Keeps each side's function ids by name for the inverted tree.
#[derive(Clone, Debug, Default)]
pub(crate) struct TreeDiff {
    nodes: Vec<DNode>,
    children: Vec<Vec<u32>>,
    misses: bool,
    /// Per side: the tree, its names, and name → function id.
    sides: [Side; 2],
}

#[derive(Clone, Debug, Default)]
struct Side {
    tree: memlens_analysis::calltree::CallTreeReport,
    names: Vec<String>,
    ids: HashMap<String, u64>,
}

impl Side {
    fn of(p: &Profile) -> Side {
        let tree = p.tree().clone();
        let n = tree.nodes.iter().map(|n| n.func).max().map_or(1, |m| m as usize + 1);
        let names: Vec<String> = (0..n as u64).map(|f| p.name(f).to_string()).collect();
        let ids = names.iter().enumerate().skip(1).map(|(i, s)| (s.clone(), i as u64)).collect();
        Side { tree, names, ids }
    }

    /// The inverted tree of this side under `path` (names: a function, its
    /// caller, ...), by caller name: calls and exclusive cost of the path's first
    /// function along it; at the top level each function's calls, exclusive and
    /// inclusive cost. Empty when the side has no such path.
    fn bottom_up(&self, path: &[String]) -> HashMap<String, (u64, Cost, Option<Cost>)> {
        let mut ids = Vec::with_capacity(path.len());
        for n in path {
            // a name this side never called (or the root, which calls nothing)
            let Some(&i) = self.ids.get(n) else { return HashMap::new() };
            ids.push(i);
        }
        let all = if path.is_empty() { self.tree.functions() } else { Default::default() };
        let mut out: HashMap<String, (u64, Cost, Option<Cost>)> = HashMap::new();
        for e in self.tree.bottom_up(&ids) {
            let name = if e.func == 0 {
                ROOT.to_string()
            } else {
                self.names.get(e.func as usize).cloned().unwrap_or_else(|| "?".into())
            };
            let f = all.get(&e.func);
            let r = out.entry(name).or_default();
            r.0 += f.map_or(e.calls, |f| f.0);
            r.1.add(&e.cost);
            if let Some(f) = f {
                r.2.get_or_insert_with(Cost::default).add(&f.1);
            }
        }
        out
    }
}

/// The root's name, as the profile names it.
const ROOT: &str = "(outside any function)";

/// B − A of one figure, saturating.
fn minus(a: u64, b: u64) -> i64 {
    (i128::from(b) - i128::from(a)).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

impl TreeDiff {
    /// Merges the call trees of `a` and `b`.
    pub(crate) fn new(a: &Profile, b: &Profile) -> TreeDiff {
        let mut d = TreeDiff {
            nodes: vec![DNode { name: ROOT.into(), ..DNode::default() }],
            children: vec![Vec::new()],
            misses: a.tree().has_misses || b.tree().has_misses,
            sides: [Side::of(a), Side::of(b)],
        };
        // (merged parent, name) → merged node
        let mut at: HashMap<(u32, String), u32> = HashMap::new();
        for (p, side_b) in [(a, false), (b, true)] {
            let tree = p.tree();
            // each node's merged id; parents come before their children
            let mut of: Vec<u32> = Vec::with_capacity(tree.nodes.len());
            for (i, n) in tree.nodes.iter().enumerate() {
                let id = if i == 0 {
                    0
                } else {
                    let parent = of[n.parent as usize];
                    let name = p.name(n.func).to_string();
                    *at.entry((parent, name.clone())).or_insert_with(|| {
                        d.nodes.push(DNode { parent, name, ..DNode::default() });
                        d.children.push(Vec::new());
                        d.children[parent as usize].push(d.nodes.len() as u32 - 1);
                        d.nodes.len() as u32 - 1
                    })
                };
                of.push(id);
                let m = &mut d.nodes[id as usize];
                let side = if side_b { &mut m.b } else { &mut m.a };
                side.add(n.calls, &n.inclusive, &n.exclusive);
            }
        }
        // largest change first; ties: the larger path in B, then by name
        for i in 0..d.children.len() {
            let mut kids = std::mem::take(&mut d.children[i]);
            let n = &d.nodes;
            kids.sort_by(|&x, &y| {
                let (x, y) = (&n[x as usize], &n[y as usize]);
                let dx = minus(x.a.incl.accesses(), x.b.incl.accesses()).unsigned_abs();
                let dy = minus(y.a.incl.accesses(), y.b.incl.accesses()).unsigned_abs();
                dy.cmp(&dx)
                    .then_with(|| y.b.incl.accesses().cmp(&x.b.incl.accesses()))
                    .then_with(|| x.name.cmp(&y.name))
            });
            d.children[i] = kids;
        }
        d
    }

    /// Nodes in the merged tree.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    fn row(&self, i: u32) -> Value {
        let n = &self.nodes[i as usize];
        let cost = |c: &Cost| {
            if self.misses {
                json!([c.loads, c.stores, c.bytes, c.misses])
            } else {
                json!([c.loads, c.stores, c.bytes])
            }
        };
        let (a, b) = (&n.a, &n.b);
        json!({"node": i, "name": n.name, "children": self.children[i as usize].len(),
            "a_calls": a.calls, "b_calls": b.calls, "delta_calls": minus(a.calls, b.calls),
            "a_incl": cost(&a.incl), "b_incl": cost(&b.incl),
            "a_excl": cost(&a.excl), "b_excl": cost(&b.excl),
            "delta": minus(a.incl.accesses(), b.incl.accesses()),
            "delta_excl": minus(a.excl.accesses(), b.excl.accesses()),
            "delta_bytes": minus(a.incl.bytes, b.incl.bytes)})
    }

    /// `/api/diff/bottomup?path=[...]`: the inverted trees of both sides under
    /// `path` (function names: a function, its caller, ...) merged by name. At
    /// the top level one row per function (exclusive and inclusive costs); below,
    /// one row per caller with the path's first function's exclusive cost along
    /// it. Largest |Δ exclusive accesses| first.
    pub(crate) fn bottom_up(&self, path: &[String]) -> Value {
        let [a, b] = [&self.sides[0], &self.sides[1]].map(|s| s.bottom_up(path));
        let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
        keys.sort();
        keys.dedup();
        let cost = |c: &Cost| {
            if self.misses {
                json!([c.loads, c.stores, c.bytes, c.misses])
            } else {
                json!([c.loads, c.stores, c.bytes])
            }
        };
        let mut rows: Vec<(i64, Value)> = keys
            .into_iter()
            .map(|k| {
                let (x, y) =
                    (a.get(k).cloned().unwrap_or_default(), b.get(k).cloned().unwrap_or_default());
                let d = minus(x.1.accesses(), y.1.accesses());
                let mut r = json!({"name": k, "root": k == ROOT, "a_calls": x.0, "b_calls": y.0,
                    "delta_calls": minus(x.0, y.0), "a_excl": cost(&x.1), "b_excl": cost(&y.1),
                    "delta_excl": d});
                if path.is_empty() {
                    let (ia, ib) = (x.2.unwrap_or_default(), y.2.unwrap_or_default());
                    r["a_incl"] = cost(&ia);
                    r["b_incl"] = cost(&ib);
                    r["delta"] = json!(minus(ia.accesses(), ib.accesses()));
                }
                (d, r)
            })
            .collect();
        rows.sort_by(|x, y| {
            y.0.unsigned_abs().cmp(&x.0.unsigned_abs()).then_with(|| {
                x.1["name"].as_str().unwrap_or("").cmp(y.1["name"].as_str().unwrap_or(""))
            })
        });
        let more = rows.len().saturating_sub(MAX_ROWS);
        rows.truncate(MAX_ROWS);
        json!({"misses": self.misses, "path": path,
            "rows": rows.into_iter().map(|r| r.1).collect::<Vec<_>>(), "more": more})
    }

    /// `/api/diff/calltree?node=N`: node N (with its path from the root) and its
    /// children, largest |Δ inclusive accesses| first.
    pub(crate) fn node(&self, node: u32) -> Result<Value, String> {
        if node as usize >= self.nodes.len() {
            return Err(format!("no node {node} (the tree has {})", self.nodes.len()));
        }
        let mut path = Vec::new();
        let mut at = node;
        while at != 0 {
            path.push(self.nodes[at as usize].name.as_str());
            at = self.nodes[at as usize].parent;
        }
        path.reverse();
        let kids = &self.children[node as usize];
        let rows: Vec<Value> = kids.iter().take(MAX_ROWS).map(|&k| self.row(k)).collect();
        Ok(json!({"misses": self.misses, "self": self.row(node), "path": path, "rows": rows,
            "more": kids.len().saturating_sub(MAX_ROWS)}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlens_analysis::calltree::{CallTreeReport, Node};

    fn node(parent: u32, func: u64, calls: u64, loads: u64, stores: u64) -> Node {
        let exclusive = Cost { loads, stores, bytes: 8 * (loads + stores), misses: 0 };
        Node { parent, func, calls, exclusive, ..Node::default() }
    }

    fn profile(nodes: Vec<Node>, names: &[&str]) -> Profile {
        Profile::of(CallTreeReport::from_nodes(nodes, false), names)
    }

    fn get(v: &Value, k: &str, i: usize) -> u64 {
        v[k][i].as_u64().unwrap()
    }

    #[test]
    fn paths_merge_by_name_and_the_largest_change_comes_first() {
        // A: main → scan (192 loads), main → fixed (32 + 32), and main's own 2 stores.
        let names = ["(outside any function)", "main", "scan", "fixed", "extra", "leaf"];
        let a = profile(
            vec![
                Node::default(),
                node(0, 1, 1, 0, 2),
                node(1, 2, 1, 192, 0),
                node(1, 3, 1, 32, 32),
                node(2, 5, 3, 6, 0),
            ],
            &names,
        );
        // B: ids differ (the names tell the functions apart); two ids of scan
        // (two static functions of one name) under main merge into one path; extra
        // is new, leaf under scan is gone.
        let names_b = ["(outside any function)", "extra", "scan", "main", "fixed", "scan"];
        let b = profile(
            vec![
                Node::default(),
                node(0, 3, 1, 0, 2),
                node(1, 2, 1, 600, 0),
                node(1, 5, 1, 40, 0),
                node(1, 4, 1, 32, 32),
                node(1, 1, 1, 0, 16),
            ],
            &names_b,
        );
        let d = TreeDiff::new(&a, &b);
        assert_eq!(d.len(), 6, "root, main, scan, fixed, extra, scan → leaf");
        let root = d.node(0).unwrap();
        assert_eq!(root["self"]["delta"], json!(640 + 16 - 192 - 6));
        assert_eq!(root["rows"].as_array().unwrap().len(), 1);
        let main = &root["rows"][0];
        assert_eq!(main["name"], "main");
        assert_eq!((get(main, "a_incl", 0), get(main, "b_incl", 0)), (192 + 6 + 32, 640 + 32));
        assert_eq!((get(main, "a_excl", 1), get(main, "b_excl", 1)), (2, 2));
        assert_eq!(main["delta_excl"], json!(0));
        let m = d.node(main["node"].as_u64().unwrap() as u32).unwrap();
        assert_eq!(m["path"], json!(["main"]));
        let kids: Vec<(&str, i64)> = m["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["name"].as_str().unwrap(), r["delta"].as_i64().unwrap()))
            .collect();
        assert_eq!(kids, [("scan", 640 - 198), ("extra", 16), ("fixed", 0)]);
        let scan = &m["rows"][0];
        assert_eq!((scan["a_calls"].clone(), scan["b_calls"].clone()), (json!(1), json!(2)));
        assert_eq!(scan["children"], json!(1));
        let s = d.node(scan["node"].as_u64().unwrap() as u32).unwrap();
        assert_eq!(s["path"], json!(["main", "scan"]));
        let leaf = &s["rows"][0];
        assert_eq!((leaf["name"].as_str(), leaf["a_calls"].as_u64()), (Some("leaf"), Some(3)));
        assert_eq!((get(leaf, "b_incl", 0), leaf["delta"].as_i64()), (0, Some(-6)));
        assert_eq!(m["rows"][1]["a_incl"], json!([0, 0, 0]), "extra: B only");
        assert!(d.node(6).unwrap_err().contains("no node 6"));

        // Inverted: the functions by |Δ exclusive|, then a function's callers.
        let top = d.bottom_up(&[]);
        let rows: Vec<(&str, i64, u64, u64)> = top["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let n = |k: &str| r[k].as_u64().unwrap();
                (
                    r["name"].as_str().unwrap(),
                    r["delta_excl"].as_i64().unwrap(),
                    n("a_calls"),
                    n("b_calls"),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("scan", 640 - 192, 1, 2),
                ("extra", 16, 0, 1),
                ("leaf", -6, 3, 0),
                ("fixed", 0, 1, 1),
                ("main", 0, 1, 1)
            ]
        );
        let main = top["rows"].as_array().unwrap().iter().find(|r| r["name"] == "main").unwrap();
        assert_eq!((get(main, "a_incl", 0), get(main, "b_incl", 0)), (192 + 6 + 32, 640 + 32));
        let leaf = d.bottom_up(&["leaf".into()]);
        assert_eq!(leaf["rows"].as_array().unwrap().len(), 1);
        let r = &leaf["rows"][0];
        assert_eq!(
            (r["name"].as_str(), get(r, "a_excl", 0), get(r, "b_excl", 0)),
            (Some("scan"), 6, 0)
        );
        assert!(r.get("a_incl").is_none(), "below the top: exclusive along the caller only");
        let deeper = d.bottom_up(&["leaf".into(), "scan".into()]);
        assert_eq!(deeper["rows"][0]["name"], "main");
        assert_eq!(d.bottom_up(&["nothing".into()])["rows"], json!([]));
    }
}
