//! The diff of two traces (`memlens view A.trace B.trace`, as cg_diff and
//! heaptrack --diff): per source line, function and variable, the loads and stores
//! of each trace and the difference B − A in accesses. Everything comes from the
//! two traces' indexes: lines and functions from `meta.json`'s `source` (the
//! per-line metrics the single-trace viewer shows), variables from
//! `variables.json` (every variable, named by the namer of `report --by variable`).

use crate::guard::{asset, page, serve_app};
use crate::serve::{bad, bad_request, heavy, json_bytes, num, read_source, Params};
use crate::{Error, Index, ServeOptions};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use tokio::sync::Semaphore;

const DIFF_HTML: &str = include_str!("../assets/diff.html");
const DIFF_JS: &str = include_str!("../assets/diff.js");
const DIFF_CSS: &str = include_str!("../assets/diff.css");
const STYLE_CSS: &str = include_str!("../assets/style.css");

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
    /// Loads in A.
    pub a_loads: u64,
    /// Stores in A.
    pub a_stores: u64,
    /// Loads in B.
    pub b_loads: u64,
    /// Stores in B.
    pub b_stores: u64,
}

impl DiffRow {
    /// Accesses (loads + stores) in B minus those in A.
    pub fn delta(&self) -> i64 {
        let a = i128::from(self.a_loads) + i128::from(self.a_stores);
        let b = i128::from(self.b_loads) + i128::from(self.b_stores);
        (b - a).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    fn to_json(&self) -> Value {
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
        o.insert("a_loads".into(), json!(self.a_loads));
        o.insert("a_stores".into(), json!(self.a_stores));
        o.insert("b_loads".into(), json!(self.b_loads));
        o.insert("b_stores".into(), json!(self.b_stores));
        o.insert("delta".into(), json!(self.delta()));
        Value::Object(o)
    }
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
    /// Loads.
    pub loads: u64,
    /// Stores.
    pub stores: u64,
    /// Threads that accessed memory.
    pub threads: u64,
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
}

/// What one trace's index says, keyed for the merge.
struct Side {
    totals: DiffTotals,
    lines: BTreeMap<(String, u64, String), (u64, u64)>,
    variables: BTreeMap<String, (u64, u64)>,
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
    /// Reads what the diff needs from an index's `meta.json` and `variables.json`
    /// rows; `what` names the index in errors.
    fn read(label: &str, meta: &Value, vars: &[Value], what: &str) -> Result<Side, Error> {
        let mut lines: BTreeMap<(String, u64, String), (u64, u64)> = BTreeMap::new();
        let source = meta["source"].as_array().ok_or_else(|| damaged(what, "no source"))?;
        let (mut loads, mut stores) = (0, 0);
        for r in source {
            let key = (
                str_of(r, "file", what)?.to_string(),
                u64_of(r, "line", what)?,
                str_of(r, "function", what)?.to_string(),
            );
            let (l, s) = (u64_of(r, "loads", what)?, u64_of(r, "stores", what)?);
            let e = lines.entry(key).or_default();
            e.0 += l;
            e.1 += s;
            loads += l;
            stores += s;
        }
        let mut variables: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for r in vars {
            let e = variables.entry(str_of(r, "variable", what)?.to_string()).or_default();
            e.0 += u64_of(r, "loads", what)?;
            e.1 += u64_of(r, "stores", what)?;
        }
        let totals = DiffTotals {
            trace: label.to_string(),
            events: u64_of(meta, "events", what)?,
            ops: u64_of(meta, "ops", what)?,
            loads,
            stores,
            threads: meta["threads"].as_array().map_or(0, |t| t.len() as u64),
        };
        Ok(Side { totals, lines, variables })
    }
}

/// Merges the two sides' rows by key: keys in either side, zero where absent.
fn merge<K: Ord + Clone>(
    a: &BTreeMap<K, (u64, u64)>,
    b: &BTreeMap<K, (u64, u64)>,
    mut row: impl FnMut(&K) -> DiffRow,
) -> Vec<DiffRow> {
    let mut keys: Vec<&K> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out: Vec<DiffRow> = keys
        .into_iter()
        .map(|k| {
            let (al, as_) = a.get(k).copied().unwrap_or_default();
            let (bl, bs) = b.get(k).copied().unwrap_or_default();
            DiffRow { a_loads: al, a_stores: as_, b_loads: bl, b_stores: bs, ..row(k) }
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
    lines: &BTreeMap<(String, u64, String), (u64, u64)>,
    key: impl Fn(&(String, u64, String)) -> K,
) -> BTreeMap<K, (u64, u64)> {
    let mut out: BTreeMap<K, (u64, u64)> = BTreeMap::new();
    for (k, (l, s)) in lines {
        let e = out.entry(key(k)).or_default();
        e.0 += l;
        e.1 += s;
    }
    out
}

/// Where the page opens a function: the first line it accessed memory on in the
/// file where it accessed most (both traces together).
fn homes(
    a: &BTreeMap<(String, u64, String), (u64, u64)>,
    b: &BTreeMap<(String, u64, String), (u64, u64)>,
) -> BTreeMap<String, (String, u64)> {
    // per (function, file): accesses, first line
    let mut per: BTreeMap<(&str, &str), (u64, u64)> = BTreeMap::new();
    for ((file, line, function), (l, s)) in a.iter().chain(b) {
        let e = per.entry((function, file)).or_insert((0, *line));
        e.0 += l + s;
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

impl Diff {
    /// Compares the indexes of traces `a` and `b` (`TRACE.mlview/`, built and
    /// current: see [`crate::build`] and [`crate::is_fresh`]).
    pub fn open(a: &Path, b: &Path) -> Result<Diff, Error> {
        let side = |t: &Path| -> Result<Side, Error> {
            let dir = crate::index_dir(t);
            let ix = Index::open(&dir)?;
            let vars = crate::vars::read_all(&dir)?;
            Side::read(&t.display().to_string(), ix.meta(), &vars, &dir.display().to_string())
        };
        Ok(Diff::from_sides(side(a)?, side(b)?))
    }

    /// Compares two indexes given as their `meta.json` and `variables.json` rows
    /// (labelled `a_label` and `b_label`).
    pub fn from_meta(
        a_label: &str,
        a_meta: &Value,
        a_vars: &[Value],
        b_label: &str,
        b_meta: &Value,
        b_vars: &[Value],
    ) -> Result<Diff, Error> {
        Ok(Diff::from_sides(
            Side::read(a_label, a_meta, a_vars, "A")?,
            Side::read(b_label, b_meta, b_vars, "B")?,
        ))
    }

    fn from_sides(a: Side, b: Side) -> Diff {
        let lines = merge(&a.lines, &b.lines, |(file, line, function)| DiffRow {
            name: format!("{file}:{line}"),
            file: Some(file.clone()),
            line: Some(*line),
            function: Some(function.clone()),
            ..DiffRow::default()
        });
        let by_fn = |k: &(String, u64, String)| k.2.clone();
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
        let by_file = |k: &(String, u64, String)| k.0.clone();
        let files = merge(&roll_up(&a.lines, by_file), &roll_up(&b.lines, by_file), |f| DiffRow {
            name: f.clone(),
            file: Some(f.clone()),
            ..DiffRow::default()
        });
        let variables = merge(&a.variables, &b.variables, |v| DiffRow {
            name: v.clone(),
            ..DiffRow::default()
        });
        Diff { a: a.totals, b: b.totals, lines, functions, variables, files }
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

    /// `/api/diff/summary`: each trace's totals, their deltas (B − A) and the
    /// source files (per file: A, B, delta).
    pub fn summary(&self) -> Value {
        let side = |t: &DiffTotals| {
            json!({"trace": t.trace, "events": t.events, "ops": t.ops, "loads": t.loads,
                "stores": t.stores, "accesses": t.loads + t.stores, "threads": t.threads})
        };
        let d = |a: u64, b: u64| (i128::from(b) - i128::from(a)) as i64;
        let (a, b) = (&self.a, &self.b);
        json!({
            "a": side(a),
            "b": side(b),
            "delta": {"events": d(a.events, b.events), "ops": d(a.ops, b.ops),
                "loads": d(a.loads, b.loads), "stores": d(a.stores, b.stores),
                "accesses": d(a.loads + a.stores, b.loads + b.stores),
                "threads": d(a.threads, b.threads)},
            "files": self.files.iter().map(DiffRow::to_json).collect::<Vec<_>>(),
            "rows": {"lines": self.lines.len(), "functions": self.functions.len(),
                "variables": self.variables.len()},
        })
    }

    /// A table as JSON: `{"total": rows in the table (or in `file`), "rows": the
    /// first `limit`}`; `file` keeps the line rows of one source file.
    pub fn table(&self, t: DiffTable, limit: usize, file: Option<&str>) -> Value {
        let all = self.rows(t);
        let keep = |r: &&DiffRow| file.is_none_or(|f| r.file.as_deref() == Some(f));
        let total = all.iter().filter(keep).count();
        let rows: Vec<Value> = all.iter().filter(keep).take(limit).map(DiffRow::to_json).collect();
        json!({"total": total, "rows": rows})
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
        .route("/api/source", get(source))
        .with_state(state);
    serve_app(app, &token, opts.port, 2, true, ready)
}

async fn summary(State(s): State<Arc<DiffState>>) -> Response {
    heavy(&s.heavy, &s, "application/json", |s: &DiffState| Ok(vec![json_bytes(&s.diff.summary())]))
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
        json!({"file": file, "function": function, "line": line, "loads": loads, "stores": stores})
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
        let d = Diff::from_meta("A", &a, &av, "B", &b, &bv).unwrap();
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
        assert_eq!((g.a_loads, g.a_stores, g.b_loads, g.b_stores), (4, 0, 0, 0));
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
        let e = Diff::from_meta("A", &good, &[], "B", &bad, &[]).unwrap_err();
        assert!(e.to_string().contains("damaged index B"), "{e}");
        let e = Diff::from_meta("A", &good, &[json!({"loads": 1})], "B", &good, &[]).unwrap_err();
        assert!(e.to_string().contains("no text variable"), "{e}");
    }
}
