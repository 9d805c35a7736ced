//! The diff of two traces (`memlens view A.trace B.trace`, as cg_diff and
//! heaptrack --diff): per source line, function and variable, the loads and stores
//! of each trace and the difference B − A in accesses. Everything comes from the
//! two traces' indexes: lines and functions from `meta.json`'s `source` (the
//! per-line metrics the single-trace viewer shows), variables from
//! `variables.json` (every variable, named by the namer of `report --by variable`).

use crate::guard::{asset, page, serve_app};
use crate::profile::Profile;
use crate::serve::{bad, bad_request, heavy, json_bytes, num, read_source, Params};
use crate::treediff::TreeDiff;
use crate::{Error, Index, ServeOptions};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use memlens_analysis::heap::HeapReport;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use tokio::sync::Semaphore;

const DIFF_HTML: &str = include_str!("../assets/diff.html");
const DIFF_JS: &str = include_str!("../assets/diff.js");
const DIFF_CSS: &str = include_str!("../assets/diff.css");
const STYLE_CSS: &str = include_str!("../assets/style.css");

pub use memlens_analysis::calltree::Cost;

/// `b − a`, saturating at i64's range.
fn minus(a: u64, b: u64) -> i64 {
    (i128::from(b) - i128::from(a)).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// One row of a diff table: what a line, function or variable did in A and in B.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiffRow {
    /// `file:line`, the function or the variable.
    pub name: String,
    /// Source file (line rows).
    pub file: Option<String>,
    /// Source line (line rows).
    pub line: Option<u64>,
    /// Function (line and function rows).
    pub function: Option<String>,
    /// In A.
    pub a: Cost,
    /// In B.
    pub b: Cost,
}

impl DiffRow {
    /// Accesses (loads + stores) in B minus those in A.
    pub fn delta(&self) -> i64 {
        minus(self.a.accesses(), self.b.accesses())
    }

    /// `costs`: the row has bytes and misses (lines, functions and files; the
    /// variables table counts accesses only).
    fn to_json(&self, costs: bool) -> Value {
        let mut o = Map::new();
        o.insert("name".into(), json!(self.name));
        if let Some(f) = &self.file {
            o.insert("file".into(), json!(f));
        }
        if let Some(l) = self.line {
            o.insert("line".into(), json!(l));
        }
        if let Some(f) = &self.function {
            o.insert("function".into(), json!(f));
        }
        let (a, b) = (&self.a, &self.b);
        o.insert("a_loads".into(), json!(a.loads));
        o.insert("a_stores".into(), json!(a.stores));
        o.insert("b_loads".into(), json!(b.loads));
        o.insert("b_stores".into(), json!(b.stores));
        o.insert("delta".into(), json!(self.delta()));
        if costs {
            o.insert("a_bytes".into(), json!(a.bytes));
            o.insert("b_bytes".into(), json!(b.bytes));
            o.insert("delta_bytes".into(), json!(minus(a.bytes, b.bytes)));
            o.insert("a_misses".into(), json!(a.misses));
            o.insert("b_misses".into(), json!(b.misses));
            o.insert("delta_misses".into(), json!(minus(a.misses, b.misses)));
        }
        Value::Object(o)
    }
}

/// What the blocks allocated at one site did in one trace (`analyze heap`'s
/// columns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapCost {
    /// Blocks allocated.
    pub blocks: u64,
    /// Bytes allocated.
    pub bytes: u64,
    /// The site's largest number of bytes live at once.
    pub peak: u64,
    /// Bytes still live at exit (leaked).
    pub leaked: u64,
}

impl HeapCost {
    fn add(&mut self, o: &HeapCost) {
        memlens_analysis::add_fields!(self, o; blocks, bytes, peak, leaked);
    }

    fn to_json(self) -> Value {
        json!({"blocks": self.blocks, "bytes": self.bytes, "peak": self.peak,
            "leaked": self.leaked})
    }
}

/// One allocation site in A and in B (heaptrack --diff).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeapRow {
    /// `file:line (function)`, as `analyze heap` names the site.
    pub site: String,
    /// Source file of the allocation.
    pub file: String,
    /// Its line.
    pub line: u64,
    /// The allocating function.
    pub function: String,
    /// In A.
    pub a: HeapCost,
    /// In B.
    pub b: HeapCost,
}

impl HeapRow {
    /// Bytes allocated in B minus those in A.
    pub fn delta(&self) -> i64 {
        minus(self.a.bytes, self.b.bytes)
    }

    fn to_json(&self) -> Value {
        let (a, b) = (&self.a, &self.b);
        json!({"name": self.site, "file": self.file, "line": self.line,
            "function": self.function, "a_blocks": a.blocks, "a_bytes": a.bytes,
            "a_peak": a.peak, "a_leaked": a.leaked, "b_blocks": b.blocks, "b_bytes": b.bytes,
            "b_peak": b.peak, "b_leaked": b.leaked, "delta": self.delta(),
            "delta_peak": minus(a.peak, b.peak), "delta_leaked": minus(a.leaked, b.leaked)})
    }
}

/// The index file with every allocation site's heap figures (`meta.json`'s heap
/// tables keep only the top ones).
pub(crate) const HEAP_FILE: &str = "heapsites.json";

/// The contents of [`HEAP_FILE`]: the peak of bytes live and every site's row.
pub(crate) fn heap_json(namer: &dyn memlens_analysis::Namer, h: &HeapReport) -> Value {
    let sites: Vec<Value> = h
        .sites
        .iter()
        .map(|s| {
            let c = namer.code(s.pc);
            json!({"site": format!("{} ({})", c.location(), c.function), "file": c.file,
                "line": c.line, "function": c.function, "blocks": s.blocks, "bytes": s.bytes,
                "max_live_bytes": s.max_live_bytes, "live_bytes_at_end": s.live_bytes_at_end})
        })
        .collect();
    json!({"max_live_bytes": h.max_live_bytes, "sites": sites})
}

/// Which table of a [`Diff`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffTable {
    /// Per source line (file, line and function, as `report --by line`).
    Lines,
    /// Per function.
    Functions,
    /// Per variable (`report --by variable`'s names).
    Variables,
    /// Per source file.
    Files,
}

/// The totals of one trace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiffTotals {
    /// The trace as named on the command line.
    pub trace: String,
    /// Events.
    pub events: u64,
    /// Memory operations (an atomic read-modify-write is one).
    pub ops: u64,
    /// Loads, stores, bytes and simulated misses of every source line.
    pub cost: Cost,
    /// Threads that accessed memory.
    pub threads: u64,
    /// A cache simulation annotated the index (misses are counted).
    pub cachesim: bool,
    /// Blocks and bytes allocated, bytes leaked over every site; `peak`: the most
    /// bytes live at once in the whole heap.
    pub heap: HeapCost,
}

/// Two traces compared, every table sorted by |delta|, largest first.
#[derive(Clone, Debug, Default)]
pub struct Diff {
    a: DiffTotals,
    b: DiffTotals,
    lines: Vec<DiffRow>,
    functions: Vec<DiffRow>,
    variables: Vec<DiffRow>,
    files: Vec<DiffRow>,
    heap: Vec<HeapRow>,
    tree: TreeDiff,
}

/// One trace's index as the diff reads it: `meta.json`, the rows of
/// `variables.json` and `heapsites.json`.
#[derive(Clone, Copy, Debug)]
pub struct IndexParts<'a> {
    /// The trace as the page names it.
    pub label: &'a str,
    /// `meta.json`.
    pub meta: &'a Value,
    /// `variables.json`'s rows.
    pub vars: &'a [Value],
    /// `heapsites.json`.
    pub heap: &'a Value,
}

type LineKey = (String, u64, String);

/// What one trace's index says, keyed for the merge.
struct Side {
    totals: DiffTotals,
    lines: BTreeMap<LineKey, Cost>,
    variables: BTreeMap<String, Cost>,
    /// Per site: (file, line, function) and its figures.
    heap: BTreeMap<String, (LineKey, HeapCost)>,
}

fn damaged(what: &str, why: &str) -> Error {
    Error::BadIndex(format!("damaged index {what} ({why}; memlens view --reindex rebuilds it)"))
}

fn u64_of(v: &Value, k: &str, what: &str) -> Result<u64, Error> {
    v[k].as_u64().ok_or_else(|| damaged(what, &format!("no number {k}")))
}

fn str_of<'v>(v: &'v Value, k: &str, what: &str) -> Result<&'v str, Error> {
    v[k].as_str().ok_or_else(|| damaged(what, &format!("no text {k}")))
}

impl Side {
    /// Reads what the diff needs from an index; `what` names the index in errors.
    fn read(ix: IndexParts, what: &str) -> Result<Side, Error> {
        let mut lines: BTreeMap<LineKey, Cost> = BTreeMap::new();
        let source = ix.meta["source"].as_array().ok_or_else(|| damaged(what, "no source"))?;
        let mut cost = Cost::default();
        for r in source {
            let key = (
                str_of(r, "file", what)?.to_string(),
                u64_of(r, "line", what)?,
                str_of(r, "function", what)?.to_string(),
            );
            let c = Cost {
                loads: u64_of(r, "loads", what)?,
                stores: u64_of(r, "stores", what)?,
                // indexes of tests without them count 0
                bytes: r["bytes"].as_u64().unwrap_or(0),
                misses: r["misses"].as_u64().unwrap_or(0),
            };
            lines.entry(key).or_default().add(&c);
            cost.add(&c);
        }
        let mut variables: BTreeMap<String, Cost> = BTreeMap::new();
        for r in ix.vars {
            let c = Cost {
                loads: u64_of(r, "loads", what)?,
                stores: u64_of(r, "stores", what)?,
                ..Cost::default()
            };
            variables.entry(str_of(r, "variable", what)?.to_string()).or_default().add(&c);
        }
        let mut heap: BTreeMap<String, (LineKey, HeapCost)> = BTreeMap::new();
        let mut heap_total = HeapCost::default();
        let sites = ix.heap["sites"].as_array().ok_or_else(|| damaged(what, "no heap sites"))?;
        for r in sites {
            let key = (
                str_of(r, "file", what)?.to_string(),
                u64_of(r, "line", what)?,
                str_of(r, "function", what)?.to_string(),
            );
            let c = HeapCost {
                blocks: u64_of(r, "blocks", what)?,
                bytes: u64_of(r, "bytes", what)?,
                peak: u64_of(r, "max_live_bytes", what)?,
                leaked: u64_of(r, "live_bytes_at_end", what)?,
            };
            let e = heap.entry(str_of(r, "site", what)?.to_string()).or_insert((key, c));
            if e.1 != c {
                e.1.add(&c);
            }
            heap_total.add(&c);
        }
        // sites peak at different times: the whole heap's peak is its own figure
        heap_total.peak = u64_of(ix.heap, "max_live_bytes", what)?;
        let totals = DiffTotals {
            trace: ix.label.to_string(),
            events: u64_of(ix.meta, "events", what)?,
            ops: u64_of(ix.meta, "ops", what)?,
            cost,
            threads: ix.meta["threads"].as_array().map_or(0, |t| t.len() as u64),
            cachesim: ix.meta["cachesim"].as_bool().unwrap_or(false),
            heap: heap_total,
        };
        Ok(Side { totals, lines, variables, heap })
    }
}
/// Merges the two sides' rows by key: keys in either side, zero where absent.
fn merge<K: Ord + Clone>(
    a: &BTreeMap<K, Cost>,
    b: &BTreeMap<K, Cost>,
    mut row: impl FnMut(&K) -> DiffRow,
) -> Vec<DiffRow> {
    let mut keys: Vec<&K> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out: Vec<DiffRow> = keys
        .into_iter()
        .map(|k| {
            let (a, b) =
                (a.get(k).copied().unwrap_or_default(), b.get(k).copied().unwrap_or_default());
            DiffRow { a, b, ..row(k) }
        })
        .collect();
    // Largest change first; ties by name, then file, line and function (stable output).
    out.sort_by(|x, y| {
        y.delta()
            .unsigned_abs()
            .cmp(&x.delta().unsigned_abs())
            .then_with(|| x.name.cmp(&y.name))
            .then_with(|| (&x.file, x.line, &x.function).cmp(&(&y.file, y.line, &y.function)))
    });
    out
}

/// Sums line rows by another key.
fn roll_up<K: Ord>(
    lines: &BTreeMap<LineKey, Cost>,
    key: impl Fn(&LineKey) -> K,
) -> BTreeMap<K, Cost> {
    let mut out: BTreeMap<K, Cost> = BTreeMap::new();
    for (k, c) in lines {
        out.entry(key(k)).or_default().add(c);
    }
    out
}

/// Where the page opens a function: the first line it accessed memory on in the
/// file where it accessed most (both traces together).
fn homes(
    a: &BTreeMap<LineKey, Cost>,
    b: &BTreeMap<LineKey, Cost>,
) -> BTreeMap<String, (String, u64)> {
    // per (function, file): accesses, first line
    let mut per: BTreeMap<(&str, &str), (u64, u64)> = BTreeMap::new();
    for ((file, line, function), c) in a.iter().chain(b) {
        let e = per.entry((function, file)).or_insert((0, *line));
        e.0 += c.accesses();
        e.1 = e.1.min(*line);
    }
    let mut out: BTreeMap<String, (String, u64, u64)> = BTreeMap::new();
    for ((function, file), (n, line)) in per {
        let e = out.entry(function.to_string()).or_insert((file.to_string(), line, n));
        // the first file (by name) wins a tie
        if n > e.2 {
            *e = (file.to_string(), line, n);
        }
    }
    out.into_iter().map(|(f, (file, line, _))| (f, (file, line))).collect()
}

/// The allocation sites of both sides, largest |Δ bytes| first (ties: |Δ peak|,
/// then the site).
fn merge_heap(
    a: &BTreeMap<String, (LineKey, HeapCost)>,
    b: &BTreeMap<String, (LineKey, HeapCost)>,
) -> Vec<HeapRow> {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out: Vec<HeapRow> = keys
        .into_iter()
        .map(|k| {
            let (ka, ca) = a.get(k).cloned().unwrap_or_default();
            let (kb, cb) = b.get(k).cloned().unwrap_or_default();
            let (file, line, function) = if a.contains_key(k) { ka } else { kb };
            HeapRow { site: k.clone(), file, line, function, a: ca, b: cb }
        })
        .collect();
    out.sort_by(|x, y| {
        let peak = |r: &HeapRow| minus(r.a.peak, r.b.peak).unsigned_abs();
        y.delta()
            .unsigned_abs()
            .cmp(&x.delta().unsigned_abs())
            .then_with(|| peak(y).cmp(&peak(x)))
            .then_with(|| x.site.cmp(&y.site))
    });
    out
}

impl Diff {
    /// Compares the indexes of traces `a` and `b` (`TRACE.mlview/`, built and
    /// current: see [`crate::build`] and [`crate::is_fresh`]).
    pub fn open(a: &Path, b: &Path) -> Result<Diff, Error> {
        let side = |t: &Path| -> Result<(Side, Index), Error> {
            let dir = crate::index_dir(t);
            let ix = Index::open(&dir)?;
            let vars = crate::vars::read_all(&dir)?;
            let heap = crate::vars::read_json(&dir, HEAP_FILE)?;
            let label = t.display().to_string();
            let parts = IndexParts { label: &label, meta: ix.meta(), vars: &vars, heap: &heap };
            Ok((Side::read(parts, &dir.display().to_string())?, ix))
        };
        let ((sa, ia), (sb, ib)) = (side(a)?, side(b)?);
        let tree = TreeDiff::new(ia.profile(), ib.profile());
        Ok(Diff::from_sides(sa, sb, tree))
    }

    /// Compares two indexes given as their parts (no call trees: the tree diff
    /// has its root only).
    pub fn from_parts(a: IndexParts, b: IndexParts) -> Result<Diff, Error> {
        let tree = TreeDiff::new(&Profile::default(), &Profile::default());
        Ok(Diff::from_sides(Side::read(a, "A")?, Side::read(b, "B")?, tree))
    }

    fn from_sides(a: Side, b: Side, tree: TreeDiff) -> Diff {
        let lines = merge(&a.lines, &b.lines, |(file, line, function)| DiffRow {
            name: format!("{file}:{line}"),
            file: Some(file.clone()),
            line: Some(*line),
            function: Some(function.clone()),
            ..DiffRow::default()
        });
        let by_fn = |k: &LineKey| k.2.clone();
        let homes = homes(&a.lines, &b.lines);
        let functions = merge(&roll_up(&a.lines, by_fn), &roll_up(&b.lines, by_fn), |f| {
            let home = homes.get(f);
            DiffRow {
                name: f.clone(),
                file: home.map(|h| h.0.clone()),
                line: home.map(|h| h.1),
                function: Some(f.clone()),
                ..DiffRow::default()
            }
        });
        let by_file = |k: &LineKey| k.0.clone();
        let files = merge(&roll_up(&a.lines, by_file), &roll_up(&b.lines, by_file), |f| DiffRow {
            name: f.clone(),
            file: Some(f.clone()),
            ..DiffRow::default()
        });
        let variables = merge(&a.variables, &b.variables, |v| DiffRow {
            name: v.clone(),
            ..DiffRow::default()
        });
        let heap = merge_heap(&a.heap, &b.heap);
        Diff { a: a.totals, b: b.totals, lines, functions, variables, files, heap, tree }
    }

    /// The totals of A and B.
    pub fn totals(&self) -> (&DiffTotals, &DiffTotals) {
        (&self.a, &self.b)
    }

    /// A table's rows, largest |delta| first.
    pub fn rows(&self, t: DiffTable) -> &[DiffRow] {
        match t {
            DiffTable::Lines => &self.lines,
            DiffTable::Functions => &self.functions,
            DiffTable::Variables => &self.variables,
            DiffTable::Files => &self.files,
        }
    }

    /// Node `node` of the merged call tree and its children (`/api/diff/calltree`).
    pub fn call_tree(&self, node: u32) -> Result<Value, String> {
        self.tree.node(node)
    }

    /// Both inverted call trees under `path` (a function, its caller, ... by name),
    /// merged by name (`/api/diff/bottomup`).
    pub fn bottom_up(&self, path: &[String]) -> Value {
        self.tree.bottom_up(path)
    }

    /// The allocation sites, largest |Δ bytes allocated| first.
    pub fn heap_rows(&self) -> &[HeapRow] {
        &self.heap
    }

    /// `/api/diff/summary`: each trace's totals, their deltas (B − A) and the
    /// source files (per file: A, B, delta).
    pub fn summary(&self) -> Value {
        let side = |t: &DiffTotals| {
            let c = &t.cost;
            json!({"trace": t.trace, "events": t.events, "ops": t.ops, "loads": c.loads,
                "stores": c.stores, "accesses": c.accesses(), "bytes": c.bytes,
                "misses": c.misses, "cachesim": t.cachesim, "threads": t.threads,
                "heap": t.heap.to_json()})
        };
        let (a, b) = (&self.a, &self.b);
        let (ca, cb, ha, hb) = (&a.cost, &b.cost, &a.heap, &b.heap);
        json!({
            "a": side(a),
            "b": side(b),
            "delta": {"events": minus(a.events, b.events), "ops": minus(a.ops, b.ops),
                "loads": minus(ca.loads, cb.loads), "stores": minus(ca.stores, cb.stores),
                "accesses": minus(ca.accesses(), cb.accesses()),
                "bytes": minus(ca.bytes, cb.bytes), "misses": minus(ca.misses, cb.misses),
                "threads": minus(a.threads, b.threads),
                "heap": {"blocks": minus(ha.blocks, hb.blocks), "bytes": minus(ha.bytes, hb.bytes),
                    "peak": minus(ha.peak, hb.peak), "leaked": minus(ha.leaked, hb.leaked)}},
            "files": self.files.iter().map(|r| r.to_json(true)).collect::<Vec<_>>(),
            "rows": {"lines": self.lines.len(), "functions": self.functions.len(),
                "variables": self.variables.len(), "heap": self.heap.len(),
                "calltree": self.tree.len()},
        })
    }

    /// A table as JSON: `{"total": rows in the table (or in `file`), "rows": the
    /// first `limit`}`; `file` keeps the line rows of one source file.
    pub fn table(&self, t: DiffTable, limit: usize, file: Option<&str>) -> Value {
        let all = self.rows(t);
        let keep = |r: &&DiffRow| file.is_none_or(|f| r.file.as_deref() == Some(f));
        let total = all.iter().filter(keep).count();
        let costs = t != DiffTable::Variables;
        let rows: Vec<Value> =
            all.iter().filter(keep).take(limit).map(|r| r.to_json(costs)).collect();
        json!({"total": total, "rows": rows})
    }

    /// The allocation sites as JSON: `{"total", "rows": the first `limit`}`.
    pub fn heap_table(&self, limit: usize) -> Value {
        let rows: Vec<Value> = self.heap.iter().take(limit).map(HeapRow::to_json).collect();
        json!({"total": self.heap.len(), "rows": rows})
    }
}

struct DiffState {
    diff: Diff,
    files: HashSet<String>,
    heavy: Arc<Semaphore>,
}

/// Serves the diff page and its API until the process is interrupted, with the
/// single-trace viewer's rules (127.0.0.1, the token, Host/Origin checks, the CSP).
/// `opts.sources`: the source files either trace's DWARF names. `ready` gets the
/// URL (with the token) once the socket listens.
pub fn serve_diff(diff: Diff, opts: ServeOptions, ready: impl FnOnce(&str)) -> Result<(), Error> {
    let token = crate::guard::token(opts.token)?;
    let page_token = token.clone();
    let state =
        Arc::new(DiffState { diff, files: opts.sources, heavy: Arc::new(Semaphore::new(2)) });
    let table = |t: DiffTable| {
        move |State(s): State<Arc<DiffState>>, Query(p): Params| async move {
            heavy(&s.heavy, &s, "application/json", move |s: &DiffState| {
                let limit = num(&p, "limit", u64::MAX).map_err(bad_request)?;
                let limit = usize::try_from(limit).unwrap_or(usize::MAX);
                let file = p.get("file").map(String::as_str);
                if file.is_some() && t != DiffTable::Lines {
                    return Err(bad_request("file= filters the lines table only".into()));
                }
                Ok(vec![json_bytes(&s.diff.table(t, limit, file))])
            })
            .await
        }
    };
    let app = Router::new()
        .route("/", get(move || async move { page(DIFF_HTML, &page_token) }))
        .route("/diff.js", get(|| async { asset(DIFF_JS, "text/javascript") }))
        .route("/diff.css", get(|| async { asset(DIFF_CSS, "text/css") }))
        .route("/style.css", get(|| async { asset(STYLE_CSS, "text/css") }))
        .route("/api/diff/summary", get(summary))
        .route("/api/diff/lines", get(table(DiffTable::Lines)))
        .route("/api/diff/functions", get(table(DiffTable::Functions)))
        .route("/api/diff/variables", get(table(DiffTable::Variables)))
        .route("/api/diff/heap", get(heap_table))
        .route("/api/diff/calltree", get(call_tree))
        .route("/api/diff/bottomup", get(bottom_up))
        .route("/api/source", get(source))
        .with_state(state);
    serve_app(app, &token, opts.port, 2, true, ready)
}

async fn summary(State(s): State<Arc<DiffState>>) -> Response {
    heavy(&s.heavy, &s, "application/json", |s: &DiffState| Ok(vec![json_bytes(&s.diff.summary())]))
        .await
}

async fn heap_table(State(s): State<Arc<DiffState>>, Query(p): Params) -> Response {
    heavy(&s.heavy, &s, "application/json", move |s: &DiffState| {
        let limit = num(&p, "limit", u64::MAX).map_err(bad_request)?;
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        Ok(vec![json_bytes(&s.diff.heap_table(limit))])
    })
    .await
}

/// `node=N`: node N of the merged call tree and its children.
async fn call_tree(State(s): State<Arc<DiffState>>, Query(p): Params) -> Response {
    heavy(&s.heavy, &s, "application/json", move |s: &DiffState| {
        let node = num(&p, "node", 0).map_err(bad_request)?;
        let node = u32::try_from(node).unwrap_or(u32::MAX);
        Ok(vec![json_bytes(&s.diff.call_tree(node).map_err(bad_request)?)])
    })
    .await
}

/// `path=["f","caller",...]` (a JSON array of names; none: the top level): both
/// inverted trees there.
async fn bottom_up(State(s): State<Arc<DiffState>>, Query(p): Params) -> Response {
    heavy(&s.heavy, &s, "application/json", move |s: &DiffState| {
        let path: Vec<String> = match p.get("path") {
            None => Vec::new(),
            Some(t) => serde_json::from_str(t).map_err(|_| {
                bad_request(format!("bad path: {t} (a JSON array of function names)"))
            })?,
        };
        if path.len() > 256 {
            return Err(bad_request("at most 256 functions in a path".into()));
        }
        Ok(vec![json_bytes(&s.diff.bottom_up(&path))])
    })
    .await
}

/// Source text of a file either trace's debug information names.
async fn source(State(s): State<Arc<DiffState>>, Query(p): Params) -> Response {
    let Some(f) = p.get("file").cloned() else { return bad("missing file") };
    if !s.files.contains(&f) {
        return (StatusCode::NOT_FOUND, "not a source file of these traces").into_response();
    }
    heavy(&s.heavy, &s, "text/plain; charset=utf-8", move |_| read_source(&f)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(source: Value, events: u64, threads: usize) -> Value {
        let threads: Vec<Value> = (0..threads).map(|t| json!([t, 1])).collect();
        json!({"events": events, "ops": 0, "threads": threads, "source": source})
    }

    fn src(file: &str, function: &str, line: u64, loads: u64, stores: u64) -> Value {
        json!({"file": file, "function": function, "line": line, "loads": loads, "stores": stores,
            "bytes": 8 * (loads + stores), "misses": loads / 2})
    }

    fn no_heap() -> Value {
        json!({"max_live_bytes": 0, "sites": []})
    }

    fn diff(
        a: &Value,
        av: &[Value],
        ah: &Value,
        b: &Value,
        bv: &[Value],
        bh: &Value,
    ) -> Result<Diff, Error> {
        Diff::from_parts(
            IndexParts { label: "A", meta: a, vars: av, heap: ah },
            IndexParts { label: "B", meta: b, vars: bv, heap: bh },
        )
    }

    #[test]
    fn rows_are_merged_summed_and_sorted_by_the_size_of_the_change() {
        let a = meta(
            json!([
                src("x.c", "f", 3, 10, 5),
                src("x.c", "g", 9, 4, 0),
                src("y.c", "h", 1, 7, 7),
                src("x.c", "f", 4, 1, 0)
            ]),
            100,
            1,
        );
        let b = meta(
            json!([
                src("x.c", "f", 3, 30, 5),
                src("y.c", "h", 1, 7, 7),
                src("x.c", "k", 2, 0, 2),
                src("x.c", "f", 4, 1, 0)
            ]),
            130,
            2,
        );
        let av = [json!({"variable": "arr", "loads": 10, "stores": 5})];
        let bv = [
            json!({"variable": "arr", "loads": 30, "stores": 5}),
            json!({"variable": "only_b", "loads": 0, "stores": 2}),
        ];
        let d = diff(&a, &av, &no_heap(), &b, &bv, &no_heap()).unwrap();
        let names = |t| d.rows(t).iter().map(|r| (r.name.clone(), r.delta())).collect::<Vec<_>>();
        assert_eq!(
            names(DiffTable::Lines),
            [
                ("x.c:3".into(), 20),
                ("x.c:9".into(), -4),
                ("x.c:2".into(), 2),
                ("x.c:4".into(), 0),
                ("y.c:1".into(), 0)
            ]
        );
        assert_eq!(
            names(DiffTable::Functions),
            [("f".into(), 20), ("g".into(), -4), ("k".into(), 2), ("h".into(), 0)]
        );
        assert_eq!(names(DiffTable::Variables), [("arr".into(), 20), ("only_b".into(), 2)]);
        assert_eq!(names(DiffTable::Files), [("x.c".into(), 18), ("y.c".into(), 0)]);
        // a function opens where it accessed memory most, at its first line there
        let k = &d.rows(DiffTable::Functions)[2];
        assert_eq!((k.file.as_deref(), k.line), (Some("x.c"), Some(2)));
        let f = &d.rows(DiffTable::Functions)[0];
        assert_eq!((f.file.as_deref(), f.line), (Some("x.c"), Some(3)));
        let g = &d.rows(DiffTable::Lines)[1];
        assert_eq!((g.a.loads, g.a.stores, g.b.loads, g.b.stores), (4, 0, 0, 0));
        // bytes and misses are summed as loads and stores are: f's lines 3 and 4
        let f = &d.rows(DiffTable::Functions)[0];
        assert_eq!((f.a.bytes, f.b.bytes, f.a.misses, f.b.misses), (128, 288, 5, 15));
        let j = d.table(DiffTable::Functions, 1, None);
        assert_eq!(
            (&j["rows"][0]["delta_bytes"], &j["rows"][0]["delta_misses"]),
            (&json!(160), &json!(10))
        );
        // the variables table has no bytes or misses to show
        assert!(d.table(DiffTable::Variables, 1, None)["rows"][0].get("a_bytes").is_none());
        let s = d.summary();
        assert_eq!(s["a"]["loads"], 22);
        assert_eq!(s["b"]["loads"], 38);
        assert_eq!(s["delta"]["accesses"], 18);
        assert_eq!(s["delta"]["events"], 30);
        assert_eq!(s["delta"]["threads"], 1);
        let t = d.table(DiffTable::Lines, 1, Some("y.c"));
        assert_eq!(t["total"], 1);
        assert_eq!(t["rows"][0]["name"], "y.c:1");
        let t = d.table(DiffTable::Lines, 2, None);
        assert_eq!((t["total"].as_u64(), t["rows"].as_array().unwrap().len()), (Some(5), 2));
    }

    #[test]
    fn a_damaged_index_is_an_error_not_a_panic() {
        let bad = json!({"events": 1, "ops": 1, "source": [{"file": "x.c"}]});
        let good = meta(json!([]), 0, 0);
        let h = no_heap();
        let e = diff(&good, &[], &h, &bad, &[], &h).unwrap_err();
        assert!(e.to_string().contains("damaged index B"), "{e}");
        let e = diff(&good, &[json!({"loads": 1})], &h, &good, &[], &h).unwrap_err();
        assert!(e.to_string().contains("damaged index A (no number stores"), "{e}");
        let e = diff(&good, &[], &json!({"sites": [{"site": "x"}]}), &good, &[], &h).unwrap_err();
        assert!(e.to_string().contains("damaged index A"), "{e}");
    }

    fn site(site: &str, line: u64, blocks: u64, bytes: u64, peak: u64, leaked: u64) -> Value {
        json!({"site": site, "file": "x.c", "line": line, "function": "main", "blocks": blocks,
            "bytes": bytes, "max_live_bytes": peak, "live_bytes_at_end": leaked})
    }

    #[test]
    fn heap_sites_are_merged_by_site_and_sorted_by_the_change_in_bytes() {
        let m = meta(json!([]), 1, 1);
        let a = json!({"max_live_bytes": 700, "sites": [
            site("x.c:3 (main)", 3, 10, 640, 640, 0),
            site("x.c:9 (main)", 9, 1, 100, 100, 100),
            // a second stack of the same site: summed
            site("x.c:9 (main)", 9, 1, 50, 50, 0),
        ]});
        let b = json!({"max_live_bytes": 2000, "sites": [
            site("x.c:3 (main)", 3, 10, 640, 640, 0),
            site("x.c:9 (main)", 9, 3, 450, 300, 150),
            site("x.c:12 (main)", 12, 1, 1000, 1000, 1000),
        ]});
        let d = diff(&m, &[], &a, &m, &[], &b).unwrap();
        let rows: Vec<(&str, i64)> =
            d.heap_rows().iter().map(|r| (r.site.as_str(), r.delta())).collect();
        assert_eq!(rows, [("x.c:12 (main)", 1000), ("x.c:9 (main)", 300), ("x.c:3 (main)", 0)]);
        let r = &d.heap_rows()[1];
        assert_eq!(r.a, HeapCost { blocks: 2, bytes: 150, peak: 150, leaked: 100 });
        assert_eq!(r.b, HeapCost { blocks: 3, bytes: 450, peak: 300, leaked: 150 });
        assert_eq!(d.heap_rows()[0].a, HeapCost::default(), "a site only B has");
        let s = d.summary();
        assert_eq!(s["a"]["heap"], json!({"blocks": 12, "bytes": 790, "peak": 700, "leaked": 100}));
        assert_eq!(
            s["delta"]["heap"],
            json!({"blocks": 2, "bytes": 1300, "peak": 1300, "leaked": 1050})
        );
        assert_eq!(s["rows"]["heap"], 3);
        let t = d.heap_table(1);
        assert_eq!((t["total"].as_u64(), t["rows"][0]["b_leaked"].as_u64()), (Some(3), Some(1000)));
    }
}
