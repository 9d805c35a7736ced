//! The call tree and the heap over time: written into the index after the build's
//! pass (`calltree.json`, `heap.json`) from the analysis kernels
//! ([`memlens_analysis::calltree`], [`memlens_analysis::heap`]), so the viewer shows
//! the numbers `memlens report` and `memlens analyze heap` print; answered by
//! `/api/calltree` and `/api/heap`.

use crate::Error;
use memlens_analysis::calltree::{CallTreeReport, Cost, Node};
use memlens_analysis::heap::HeapReport;
use memlens_analysis::Namer;
use memlens_format::Pc;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;

/// Rows per answer at most (the rest are summed into nothing: the page says so).
const MAX_ROWS: usize = 2000;

/// Writes `calltree.json` and `heap.json`; returns the bytes written. Functions are
/// named once and keyed by name (as `report --by function` groups them); id 0 is
/// the root, "outside any function".
pub(crate) fn write(
    dir: &Path,
    namer: &dyn Namer,
    tree: &CallTreeReport,
    heap: &HeapReport,
    bucket: u64,
) -> Result<u64, Error> {
    let mut names = vec!["(outside any function)".to_string()];
    let mut ids: HashMap<String, u64> = HashMap::new();
    let mut of_func: HashMap<u64, u64> = HashMap::new();
    let mut nodes = Vec::with_capacity(tree.nodes.len());
    for (i, n) in tree.nodes.iter().enumerate() {
        let id = if i == 0 {
            0
        } else {
            *of_func.entry(n.func).or_insert_with(|| {
                let name = namer.function(n.pc).function;
                *ids.entry(name.clone()).or_insert_with(|| {
                    names.push(name);
                    names.len() as u64 - 1
                })
            })
        };
        let c = &n.exclusive;
        nodes.push(json!([n.parent, id, n.calls, c.loads, c.stores, c.bytes, c.misses]));
    }
    let t = json!({"has_misses": tree.has_misses, "functions": names, "nodes": nodes});
    let timeline: Vec<Value> = heap
        .timeline
        .iter()
        .map(|b| {
            json!([
                b.bucket,
                b.max_live,
                b.live_end,
                b.alloc_bytes,
                b.free_bytes,
                b.allocs,
                b.frees
            ])
        })
        .collect();
    let h = json!({"bucket": bucket, "ops": heap.ops, "peak_bytes": heap.max_live_bytes,
        "peak_op": heap.peak_op, "peak_event": heap.peak_event, "timeline": timeline});
    let mut total = 0;
    for (name, v) in [("calltree.json", t), ("heap.json", h)] {
        let p = dir.join(name);
        let b = serde_json::to_vec(&v).map_err(|e| Error::Io(e.to_string()))?;
        std::fs::write(&p, &b)
            .map_err(|e| Error::Io(format!("cannot write {}: {e}", p.display())))?;
        total += b.len() as u64;
    }
    Ok(total)
}

/// The heap over time as stored.
#[derive(Default)]
struct HeapLine {
    bucket: u64,
    peak_bytes: u64,
    peak_op: u64,
    peak_event: u64,
    /// `[bucket, max live, live at end, bytes allocated, bytes freed, allocations, frees]`
    timeline: Vec<[u64; 7]>,
}

/// The call tree and the heap over time of an opened index.
#[derive(Default)]
pub(crate) struct Profile {
    tree: CallTreeReport,
    names: Vec<String>,
    heap: HeapLine,
}

fn cost(c: &Cost, misses: bool) -> Value {
    if misses {
        json!([c.loads, c.stores, c.bytes, c.misses])
    } else {
        json!([c.loads, c.stores, c.bytes])
    }
}

impl Profile {
    /// Reads `calltree.json` and `heap.json` from `dir`.
    pub(crate) fn open(dir: &Path) -> Result<Profile, Error> {
        let bad = |what: &str| {
            Error::BadIndex(format!(
                "damaged index {} ({what}; memlens view --reindex rebuilds it)",
                dir.display()
            ))
        };
        let read = |name: &str| -> Result<Value, Error> {
            let p = dir.join(name);
            let b = std::fs::read(&p)
                .map_err(|e| Error::BadIndex(format!("cannot read {}: {e}", p.display())))?;
            serde_json::from_slice(&b).map_err(|_| bad(name))
        };
        let t = read("calltree.json")?;
        let names: Vec<String> = t["functions"]
            .as_array()
            .ok_or_else(|| bad("calltree.json"))?
            .iter()
            .map(|v| v.as_str().unwrap_or("").to_string())
            .collect();
        let mut nodes = Vec::new();
        for (i, n) in t["nodes"].as_array().ok_or_else(|| bad("calltree.json"))?.iter().enumerate()
        {
            let v: Vec<u64> = n
                .as_array()
                .map_or(Vec::new(), |a| a.iter().map(|x| x.as_u64().unwrap_or(u64::MAX)).collect());
            // a parent before its child, a known function: anything else is damage
            let ok = v.len() == 7
                && (i == 0 || (v[0] as usize) < i)
                && (v[1] as usize) < names.len()
                && v.iter().all(|&x| x != u64::MAX);
            if !ok {
                return Err(bad("calltree.json"));
            }
            nodes.push(Node {
                parent: v[0] as u32,
                func: v[1],
                pc: Pc(0),
                calls: v[2],
                exclusive: Cost { loads: v[3], stores: v[4], bytes: v[5], misses: v[6] },
                inclusive: Cost::default(),
            });
        }
        let tree = CallTreeReport::from_nodes(nodes, t["has_misses"] == true);
        let h = read("heap.json")?;
        let g = |k: &str| h[k].as_u64().ok_or_else(|| bad("heap.json"));
        let mut timeline = Vec::new();
        for r in h["timeline"].as_array().ok_or_else(|| bad("heap.json"))? {
            let v: Vec<u64> = r
                .as_array()
                .map_or(Vec::new(), |a| a.iter().map(|x| x.as_u64().unwrap_or(u64::MAX)).collect());
            let rec: [u64; 7] = v.try_into().map_err(|_| bad("heap.json"))?;
            if rec.contains(&u64::MAX) || timeline.last().is_some_and(|l: &[u64; 7]| l[0] >= rec[0])
            {
                return Err(bad("heap.json"));
            }
            timeline.push(rec);
        }
        let heap = HeapLine {
            bucket: g("bucket")?.max(1),
            peak_bytes: g("peak_bytes")?,
            peak_op: g("peak_op")?,
            peak_event: g("peak_event")?,
            timeline,
        };
        Ok(Profile { tree, names, heap })
    }

    /// The profile of another tree of the same trace (a range's, see
    /// [`crate::rangetree`]): its nodes named by `namer` and keyed by this
    /// profile's function ids, so rows of both name functions alike.
    pub(crate) fn for_tree(&self, tree: CallTreeReport, namer: &dyn Namer) -> Profile {
        let mut names = self.names.clone();
        let mut ids: HashMap<String, u64> =
            names.iter().enumerate().skip(1).map(|(i, n)| (n.clone(), i as u64)).collect();
        let mut of_func: HashMap<u64, u64> = HashMap::new();
        let mut nodes = tree.nodes;
        for n in nodes.iter_mut().skip(1) {
            n.func = *of_func.entry(n.func).or_insert_with(|| {
                let name = namer.function(n.pc).function;
                *ids.entry(name.clone()).or_insert_with(|| {
                    names.push(name);
                    names.len() as u64 - 1
                })
            });
        }
        let tree = CallTreeReport::from_nodes(nodes, tree.has_misses);
        Profile { tree, names, heap: HeapLine::default() }
    }

    /// The name of function id `f` (0: outside any function).
    pub(crate) fn name(&self, f: u64) -> &str {
        self.names.get(f as usize).map_or("?", String::as_str)
    }

    /// A profile of `tree` whose function ids index `names` (no heap).
    #[cfg(test)]
    pub(crate) fn of(tree: CallTreeReport, names: &[&str]) -> Profile {
        let names = names.iter().map(|n| n.to_string()).collect();
        Profile { tree, names, heap: HeapLine::default() }
    }

    /// The call tree (function ids index [`Profile::name`]).
    pub(crate) fn tree(&self) -> &CallTreeReport {
        &self.tree
    }

    /// Node `node` of the top-down tree and its children.
    pub(crate) fn top_down(&self, node: u32) -> Result<Value, String> {
        let m = self.tree.has_misses;
        let row = |i: u32| {
            let n = &self.tree.nodes[i as usize];
            json!({"node": i, "function": n.func, "name": self.name(n.func), "calls": n.calls,
                "children": self.tree.children(i).len(),
                "incl": cost(&n.inclusive, m), "excl": cost(&n.exclusive, m)})
        };
        if node as usize >= self.tree.nodes.len() {
            return Err(format!("no node {node} (the tree has {})", self.tree.nodes.len()));
        }
        let mut kids: Vec<u32> = self.tree.children(node).to_vec();
        let n = &self.tree.nodes;
        let weight = |i: &u32| {
            let c = &n[*i as usize].inclusive;
            std::cmp::Reverse(c.loads + c.stores)
        };
        kids.sort_by_key(weight);
        let more = kids.len().saturating_sub(MAX_ROWS);
        kids.truncate(MAX_ROWS);
        Ok(json!({"view": "top", "misses": m, "self": row(node),
            "rows": kids.into_iter().map(row).collect::<Vec<_>>(), "more": more}))
    }

    /// The inverted tree under `path` (function ids: a function, its caller, ...).
    /// Top-level rows carry each function's inclusive cost too.
    pub(crate) fn bottom_up(&self, path: &[u64]) -> Value {
        let m = self.tree.has_misses;
        let all = if path.is_empty() { self.tree.functions() } else { HashMap::new() };
        let mut edges = self.tree.bottom_up(path);
        let more = edges.len().saturating_sub(MAX_ROWS);
        edges.truncate(MAX_ROWS);
        let rows: Vec<Value> = edges
            .iter()
            .map(|e| {
                let incl = all.get(&e.func).map(|f| cost(&f.1, m));
                let calls = all.get(&e.func).map_or(e.calls, |f| f.0);
                json!({"function": e.func, "name": self.name(e.func), "calls": calls,
                    "excl": cost(&e.cost, m), "incl": incl, "root": e.func == 0})
            })
            .collect();
        json!({"view": "bottom", "misses": m, "path": path, "rows": rows, "more": more})
    }

    /// Function `f` with its callers and callees.
    pub(crate) fn function(&self, f: u64) -> Result<Value, String> {
        if f == 0 || f as usize >= self.names.len() {
            return Err(format!("no function {f}"));
        }
        let m = self.tree.has_misses;
        let fc = self.tree.function(f);
        let edges = |v: &[memlens_analysis::calltree::Edge]| -> Vec<Value> {
            v.iter()
                .take(MAX_ROWS)
                .map(|e| {
                    json!({"function": e.func, "name": self.name(e.func), "calls": e.calls,
                        "incl": cost(&e.cost, m)})
                })
                .collect()
        };
        Ok(json!({"view": "function", "misses": m, "function": f, "name": self.name(f),
            "calls": fc.calls, "incl": cost(&fc.inclusive, m), "excl": cost(&fc.exclusive, m),
            "callers": edges(&fc.callers), "callees": edges(&fc.callees)}))
    }

    /// The heap over `x0..x1` in `n` bins: of memory operations, or of CLOCK_MONOTONIC
    /// ns when `clock` (merged operation → ns, sorted) is given. Each bin: `[x0, x1,
    /// most bytes live, bytes live at its end, bytes allocated, bytes freed,
    /// allocations, frees]`.
    pub(crate) fn heap(&self, clock: Option<&[(u64, u64)]>, x0: u64, x1: u64, n: usize) -> Value {
        let n = n.clamp(1, 4096);
        let x1 = x1.max(x0 + 1);
        let h = &self.heap;
        let at = |op: u64| clock.map_or(op, |c| op_to_ns(c, op));
        let w = (x1 - x0) as f64 / n as f64;
        let mut bins: Vec<[u64; 8]> = (0..n)
            .map(|k| {
                let a = x0 + (k as f64 * w) as u64;
                let b = if k + 1 == n { x1 } else { x0 + ((k + 1) as f64 * w) as u64 };
                [a, b, 0, 0, 0, 0, 0, 0]
            })
            .collect();
        let mut live = 0u64;
        let mut k = 0usize;
        let mut started = false;
        for r in &h.timeline {
            let x = at(r[0] * h.bucket);
            if x >= x1 {
                break;
            }
            if x < x0 {
                live = r[2];
                continue;
            }
            // bins before this record carry the live bytes forward
            let target = (((x - x0) as f64 / w) as usize).min(n - 1);
            while k < target {
                if !started {
                    bins[k][2] = live;
                }
                bins[k][3] = live;
                bins[k][2] = bins[k][2].max(live);
                k += 1;
                started = false;
            }
            let b = &mut bins[k];
            if !started {
                b[2] = live;
                started = true;
            }
            b[2] = b[2].max(r[1]);
            live = r[2];
            b[3] = live;
            for (d, v) in b[4..].iter_mut().zip(&r[3..]) {
                *d += v;
            }
        }
        while k < n {
            if !started {
                bins[k][2] = live;
            }
            bins[k][2] = bins[k][2].max(live);
            bins[k][3] = live;
            k += 1;
            started = false;
        }
        let mut peak = json!({"bytes": h.peak_bytes, "op": h.peak_op, "event": h.peak_event});
        if let Some(c) = clock {
            peak["ns"] = json!(op_to_ns(c, h.peak_op));
        }
        json!({"axis": if clock.is_some() { "time" } else { "order" }, "x0": x0, "x1": x1,
            "bucket": h.bucket, "bins": bins, "peak": peak})
    }
}

/// The time of merged operation `op`, linear between the stamps around it.
pub(crate) fn op_to_ns(c: &[(u64, u64)], op: u64) -> u64 {
    let i = c.partition_point(|s| s.0 <= op);
    match (i.checked_sub(1).and_then(|j| c.get(j)), c.get(i)) {
        (Some(a), Some(b)) if b.0 > a.0 => {
            a.1 + ((op - a.0) as f64 / (b.0 - a.0) as f64 * (b.1 - a.1) as f64) as u64
        }
        (Some(a), _) => a.1,
        (None, Some(b)) => b.1,
        (None, None) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damaged_files_are_refused_with_one_line() {
        let dir = std::env::temp_dir().join(format!("memlens-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let heap = r#"{"bucket":1,"ops":2,"peak_bytes":8,"peak_op":0,"peak_event":0,"timeline":[[0,8,8,8,0,1,0]]}"#;
        std::fs::write(dir.join("heap.json"), heap).unwrap();
        // a node whose parent comes after it, and a function id out of range
        for nodes in ["[[0,0,0,0,0,0,0],[2,1,1,0,0,0,0]]", "[[0,0,0,0,0,0,0],[0,7,1,0,0,0,0]]"] {
            let t = format!(r#"{{"has_misses":false,"functions":["(root)","f"],"nodes":{nodes}}}"#);
            std::fs::write(dir.join("calltree.json"), t).unwrap();
            let e = Profile::open(&dir).err().expect("damaged").to_string();
            assert!(e.contains("calltree.json") && e.contains("--reindex"), "{e}");
        }
        let t = r#"{"has_misses":false,"functions":["(root)","f"],"nodes":[[0,0,0,1,0,8,0],[0,1,2,3,4,40,0]]}"#;
        std::fs::write(dir.join("calltree.json"), t).unwrap();
        let p = Profile::open(&dir).unwrap();
        let v = p.top_down(0).unwrap();
        assert_eq!(v["self"]["incl"], json!([4, 4, 48]));
        assert_eq!(v["rows"][0]["name"], "f");
        assert!(p.top_down(5).is_err() && p.function(0).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn heap_bins_carry_the_live_bytes_and_map_operations_to_time() {
        let p = Profile {
            heap: HeapLine {
                bucket: 10,
                peak_bytes: 48,
                peak_op: 25,
                peak_event: 30,
                timeline: vec![
                    [0, 16, 16, 16, 0, 1, 0],
                    [2, 48, 40, 32, 8, 1, 1],
                    [9, 40, 0, 0, 40, 0, 2],
                ],
            },
            ..Profile::default()
        };
        let v = p.heap(None, 0, 100, 5);
        let bins: Vec<Vec<u64>> = serde_json::from_value(v["bins"].clone()).unwrap();
        assert_eq!(bins[0], [0, 20, 16, 16, 16, 0, 1, 0]);
        assert_eq!(bins[1], [20, 40, 48, 40, 32, 8, 1, 1]);
        assert_eq!(bins[2], [40, 60, 40, 40, 0, 0, 0, 0]);
        assert_eq!(bins[4], [80, 100, 40, 0, 0, 40, 0, 2]);
        assert_eq!(v["peak"]["bytes"], 48);
        // op 25 between stamps (20 ops → 1000 ns, 30 → 2000 ns)
        let clock = [(0, 0), (20, 1000), (30, 2000), (100, 9000)];
        assert_eq!(op_to_ns(&clock, 25), 1500);
        let v = p.heap(Some(&clock), 0, 9000, 3);
        assert_eq!(v["peak"]["ns"], 1500);
        let bins: Vec<Vec<u64>> = serde_json::from_value(v["bins"].clone()).unwrap();
        assert_eq!(bins[0][2..4], [48, 40]);
        assert_eq!(bins[2][2..4], [40, 0]);
    }
}
