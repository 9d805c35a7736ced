//! `memlens sql` and `export --format parquet`: the numbers of SQL queries over a
//! real recorded program equal `memlens report`'s, and the Parquet files read by
//! an independent reader (pyarrow) hold the same counts.

use crate::util::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const SRC: &str = "sql_vars.c";

/// `memlens sql TRACES -e Q --format json`.
fn sql(traces: &[&Path], q: &str) -> Vec<Value> {
    let mut args = vec!["sql", "--format", "json", "-e", q];
    args.extend(traces.iter().map(|t| t.to_str().unwrap()));
    let v = json(&args);
    v.as_array().unwrap().clone()
}

/// Two columns of a result: text key → count.
fn pairs(rows: &[Value], k: &str, n: &str) -> BTreeMap<String, u64> {
    rows.iter()
        .map(|r| {
            let key = match &r[k] {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            (key, r[n].as_u64().unwrap_or_else(|| panic!("{n} in {r}")))
        })
        .collect()
}

#[test]
fn sql_variable_counts_equal_report() {
    for cc in Cc::all() {
        let t = build_and_record(cc, "sql-vars", SRC);
        let got = pairs(
            &sql(
                &[&t.trace],
                "SELECT variable(address) v, count(*) n FROM accesses GROUP BY v ORDER BY 2 DESC",
            ),
            "v",
            "n",
        );
        // stack locals need the thread's frames, which variable(address) does not
        // have (docs/sql.md): they are the `[stack...]` names here; everything else
        // is named exactly as `report` names it
        let stack = |v: &str| v.starts_with("[stack");
        let mut want: BTreeMap<String, u64> = BTreeMap::new();
        let mut want_stack = 0;
        for r in variables(&t.trace, "variable") {
            let n = r["loads"].as_u64().unwrap() + r["stores"].as_u64().unwrap();
            let v = r["variable"].as_str().unwrap();
            if r["kind"] == "stack" || stack(v) {
                want_stack += n;
            } else {
                *want.entry(v.to_string()).or_default() += n;
            }
        }
        let got_stack: u64 = got.iter().filter(|(k, _)| stack(k)).map(|(_, n)| n).sum();
        let got_named: BTreeMap<String, u64> =
            got.iter().filter(|(k, _)| !stack(k)).map(|(k, n)| (k.clone(), *n)).collect();
        assert_eq!(got_named, want, "{cc:?}");
        assert_eq!(got_stack, want_stack, "{cc:?}");
        // the program's own variables are there, with their exact counts
        assert_eq!(got["counts"], 2 * 2 * 1000, "{cc:?}: counts[] += i, two threads");
        assert!(got.contains_key("stats"), "{cc:?}: {got:?}");
        // field() splits a variable into its members
        let f = pairs(
            &sql(&[&t.trace], "SELECT field(address) f, count(*) n FROM accesses WHERE variable(address) = 'stats' GROUP BY f"),
            "f",
            "n",
        );
        assert_eq!(f.values().sum::<u64>(), got["stats"], "{cc:?}: {f:?}");
        assert!(f.keys().any(|k| k.starts_with("stats.v[")), "{cc:?}: {f:?}");
    }
}

#[test]
fn sql_line_counts_equal_report() {
    let t = build_and_record(Cc::Gcc, "sql-lines", SRC);
    let got = pairs(
        &sql(&[&t.trace], "SELECT line(pc) l, count(*) n FROM accesses GROUP BY 1"),
        "l",
        "n",
    );
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for r in report(&t.trace, "line") {
        let n = r["loads"].as_u64().unwrap() + r["stores"].as_u64().unwrap();
        let key = format!("{}:{}", r["file"].as_str().unwrap(), r["line"]);
        *want.entry(key).or_default() += n;
    }
    assert_eq!(got, want);
    let work = line_of(SRC, "work");
    let key =
        got.keys().find(|k| k.ends_with(&format!("sql_vars.c:{work}"))).expect("the worker's line");
    assert_eq!(got[key], 2 * 2 * 1000);
    // function() and a thread filter (chunks of other threads are skipped)
    let by_fn = pairs(
        &sql(
            &[&t.trace],
            "SELECT function(pc) f, count(*) n FROM accesses WHERE thread = 1 GROUP BY f",
        ),
        "f",
        "n",
    );
    assert_eq!(by_fn.get("worker"), Some(&2000), "{by_fn:?}");
    let threads = report(&t.trace, "thread");
    let t1 = threads.iter().find(|r| r["thread"] == 1).unwrap();
    let n1 = sql(&[&t.trace], "SELECT count(*) n FROM accesses WHERE thread = 1");
    assert_eq!(
        n1[0]["n"].as_u64().unwrap(),
        t1["loads"].as_u64().unwrap() + t1["stores"].as_u64().unwrap()
    );
    // kind filter: loads and stores as report counts them
    let k = pairs(
        &sql(
            &[&t.trace],
            "SELECT kind, count(*) n FROM accesses WHERE kind IN ('load', 'store') GROUP BY kind",
        ),
        "kind",
        "n",
    );
    let loads: u64 = threads.iter().map(|r| r["loads"].as_u64().unwrap()).sum();
    let stores: u64 = threads.iter().map(|r| r["stores"].as_u64().unwrap()).sum();
    assert_eq!((k["load"], k["store"]), (loads, stores));
}

#[test]
fn sql_tables_and_several_traces() {
    let a = build_and_record(Cc::Gcc, "sql-multi", SRC);
    let dir = a.dir.join("set");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&a.trace, dir.join("a.trace")).unwrap();
    let out = record(&a.exe, &dir.join("b.trace"), &[]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let per =
        pairs(&sql(&[&dir], "SELECT trace, count(*) n FROM accesses GROUP BY trace"), "trace", "n");
    for name in ["a.trace", "b.trace"] {
        let i = info(&dir.join(name));
        let want = i["loads"].as_u64().unwrap() + i["stores"].as_u64().unwrap();
        assert_eq!(per[name], want, "{name}: {per:?}");
    }
    // names with several traces take the trace column
    let v = pairs(
        &sql(&[&dir], "SELECT variable(address, trace) v, count(*) n FROM accesses WHERE trace = 'b.trace' GROUP BY v"),
        "v",
        "n",
    );
    assert_eq!(v["counts"], 4000);
    let o = run_memlens(&[
        "sql",
        "-e",
        "SELECT variable(address) FROM accesses",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("variable(address, trace)"), "{}", stderr(&o));
    // the other tables
    let th = sql(&[&a.trace], "SELECT thread, loads + stores n FROM threads ORDER BY thread");
    assert_eq!(th.len(), 2);
    let al = sql(
        &[&a.trace],
        "SELECT size, freed_seq IS NOT NULL freed FROM allocations WHERE size = 2048",
    );
    assert_eq!(al.len(), 1, "{al:?}");
    assert_eq!(al[0]["freed"], true);
    let calls = sql(
        &[&a.trace],
        "SELECT count(*) n FROM calls c WHERE kind = 'enter' AND function(pc) = 'worker'",
    );
    assert_eq!(calls[0]["n"], 2);
    let code = sql(
        &[&a.trace],
        &format!(
            "SELECT function FROM code WHERE line = {} AND file LIKE '%sql_vars.c'",
            line_of(SRC, "work")
        ),
    );
    assert!(code.iter().all(|r| r["function"] == "worker") && !code.is_empty(), "{code:?}");
    let data = sql(
        &[&a.trace],
        "SELECT \"end\" - start size FROM data WHERE variable = 'counts' AND kind = 'global'",
    );
    assert_eq!(data[0]["size"], 64 * 8);
    let cl = sql(&[&a.trace], "SELECT count(DISTINCT cache_line(address, 64)) n FROM accesses WHERE variable(address) = 'counts'");
    assert_eq!(cl[0]["n"], 8);
    // csv and table output
    let o = run_memlens(&[
        "sql",
        "--format",
        "csv",
        "-e",
        "SELECT 1 AS one, 'a,b' AS t",
        a.trace.to_str().unwrap(),
    ]);
    assert_eq!(stdout(&o), "one,t\n1,\"a,b\"\n");
    let o = run_memlens(&["sql", "-e", "SELECT 1 AS one", a.trace.to_str().unwrap()]);
    assert_eq!(stdout(&o), "one\n  1\n(1 row)\n");
}

/// `analyze counts` and `sql` agree per line (loads and stores apart), and a
/// `seq` window pushed down to the chunks (small buffers: many chunks per
/// thread) equals `analyze --window` and the same filter the engine applies alone.
#[test]
fn sql_agrees_with_analyze_and_windows_skip_chunks() {
    let dir = scratch("sql-analyze");
    let exe = build(Cc::Gcc, "manychunks.c", &dir, &[]);
    let trace = dir.join("t.trace");
    let o = Command::new(memlens())
        .args(["record", "-q", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .env("MEMLENS_BUFFER_KB", "64")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let chunks = info(&trace)["chunks"].as_u64().unwrap();
    assert!(chunks >= 20, "small buffers give many chunks per thread: {chunks}");
    let a = json(&["analyze", "counts", "--format", "json", "--top", "0", trace.to_str().unwrap()]);
    let mut want: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for r in a["by_line"].as_array().unwrap() {
        let key = format!("{}:{}", r["file"].as_str().unwrap(), r["line"]);
        let e = want.entry(key).or_default();
        e.0 += r["loads"].as_u64().unwrap();
        e.1 += r["stores"].as_u64().unwrap();
    }
    let rows = sql(
        &[&trace],
        "SELECT line(pc) l, sum(CASE WHEN kind = 'load' THEN 1 ELSE 0 END) ld, \
         sum(CASE WHEN kind = 'store' THEN 1 ELSE 0 END) st FROM accesses GROUP BY 1",
    );
    let got: BTreeMap<String, (u64, u64)> = rows
        .iter()
        .map(|r| {
            let l = r["l"].as_str().unwrap().to_string();
            (l, (r["ld"].as_u64().unwrap(), r["st"].as_u64().unwrap()))
        })
        .collect();
    assert_eq!(got, want);
    // a window of event indices of each thread: pushed down (chunks skipped) and not
    for (lo, hi) in [(0u64, 500u64), (100_000, 700_000), (1_000_000, 1_000_001)] {
        let a = json(&[
            "analyze",
            "counts",
            "--format",
            "json",
            "--window",
            &format!("{lo}..{hi}"),
            trace.to_str().unwrap(),
        ]);
        let want: u64 = a["by_thread"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["loads"].as_u64().unwrap() + r["stores"].as_u64().unwrap())
            .sum();
        let q = |w: &str| {
            sql(&[&trace], &format!("SELECT count(*) n FROM accesses WHERE {w}"))[0]["n"]
                .as_u64()
                .unwrap()
        };
        let pushed = q(&format!("seq >= {lo} AND seq < {hi}"));
        let between = q(&format!("seq BETWEEN {lo} AND {}", hi - 1));
        let engine_only = q(&format!("seq + 0 >= {lo} AND seq + 0 < {hi}"));
        assert_eq!((pushed, between, engine_only), (want, want, want), "window {lo}..{hi}");
    }
    // clocks: the merged order is (clock, thread, seq); a clock window pushed down
    // keeps exactly the rows the engine alone keeps
    let mx = sql(&[&trace], "SELECT max(clock) m FROM accesses")[0]["m"].as_u64().unwrap();
    assert!(mx > 0, "the trace is ordered (Lamport clocks)");
    let q = |w: String| {
        sql(&[&trace], &format!("SELECT count(*) n FROM accesses WHERE {w}"))[0]["n"]
            .as_u64()
            .unwrap()
    };
    let half = mx / 2;
    assert_eq!(q(format!("clock <= {half}")), q(format!("clock + 0 <= {half}")));
    assert_eq!(q(format!("clock > {half}")), q(format!("clock + 0 > {half}")));
}

#[test]
fn sql_bad_query_exits_2_with_the_tables() {
    let t = build_and_record(Cc::Gcc, "sql-bad", SRC);
    for q in ["SELECT nope FROM accesses", "SELEC 1", "SELECT * FROM nosuch"] {
        let o = run_memlens(&["sql", "-e", q, t.trace.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{q}");
        let e = stderr(&o);
        assert!(e.starts_with("memlens: error: "), "{q}: {e}");
        assert!(
            e.contains(
                "accesses(trace, thread, seq, clock, kind, size, address, pc, value, atomic)"
            ),
            "{q}: {e}"
        );
        assert!(
            e.contains("allocations(") && e.contains("code(") && e.contains("data("),
            "{q}: {e}"
        );
        assert!(!e.contains("panicked"), "{e}");
    }
    let o = run_memlens(&["sql", "-e", "SELECT nope FROM accesses", t.trace.to_str().unwrap()]);
    assert!(stderr(&o).contains("nope"), "the engine's message names the column: {}", stderr(&o));
    let o = run_memlens(&["sql", "-e", "SELECT 1", "/nonexistent/x.trace"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
}

#[test]
fn sql_damaged_trace_reads_up_to_the_damage() {
    let t = build_and_record(Cc::Gcc, "sql-damaged", SRC);
    let bytes = std::fs::read(&t.trace).unwrap();
    let cut = t.dir.join("cut.trace");
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
    let o = run_memlens(&[
        "sql",
        "--format",
        "json",
        "-e",
        "SELECT count(*) n FROM accesses",
        cut.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("memlens: warning:")).collect();
    assert_eq!(warnings.len(), 1, "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let i = info(&cut);
    assert_eq!(
        v[0]["n"].as_u64().unwrap(),
        i["loads"].as_u64().unwrap() + i["stores"].as_u64().unwrap()
    );
}

/// `memlens export --format parquet OUT TRACE`.
fn export_parquet(out: &Path, trace: &Path) -> std::process::Output {
    run_memlens(&["export", "--format", "parquet", out.to_str().unwrap(), trace.to_str().unwrap()])
}

/// A venv with pyarrow under target/ (kept between runs; .ci/run installs
/// python3-venv and python3-pip).
fn pyarrow() -> PathBuf {
    let venv = memlens().parent().unwrap().join("py-pyarrow");
    let py = venv.join("bin/python3");
    let ok = |py: &Path| {
        Command::new(py)
            .args(["-c", "import pyarrow.dataset"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !ok(&py) {
        let o = Command::new("python3").args(["-m", "venv"]).arg(&venv).output().unwrap();
        assert!(
            o.status.success(),
            "python3 -m venv (Debian: apt-get install python3-venv): {}",
            stderr(&o)
        );
        let o = Command::new(&py).args(["-m", "pip", "install", "-q", "pyarrow"]).output().unwrap();
        assert!(o.status.success(), "pip install pyarrow: {}", stderr(&o));
    }
    py
}

#[test]
fn parquet_export_read_by_pyarrow() {
    let t = build_and_record(Cc::Gcc, "sql-parquet", SRC);
    let out = t.dir.join("pq");
    let o = export_parquet(&out, &t.trace);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).starts_with("memlens: wrote "), "{}", stderr(&o));
    for table in ["accesses", "calls", "allocations", "threads", "code", "data"] {
        assert!(out.join(table).join("trace=t.trace").is_dir(), "{table}");
    }
    assert!(out.join("accesses/trace=t.trace/thread=0/part-00000.parquet").is_file());
    // a second export into the same directory is refused, nothing overwritten
    let o = export_parquet(&out, &t.trace);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("exists"), "{}", stderr(&o));
    let py = pyarrow();
    let script = r#"
import sys, json, pyarrow.dataset as ds, pyarrow.compute as pc
d = ds.dataset(sys.argv[1] + "/accesses", format="parquet", partitioning="hive")
t = d.to_table()
out = {"rows": t.num_rows, "by_thread": {}, "kinds": {}}
for r in t.group_by("thread").aggregate([("seq", "count")]).to_pylist():
    out["by_thread"][str(r["thread"])] = r["seq_count"]
for r in t.group_by("kind").aggregate([("seq", "count")]).to_pylist():
    out["kinds"][r["kind"]] = r["seq_count"]
out["threads"] = ds.dataset(sys.argv[1] + "/threads", format="parquet", partitioning="hive").to_table().num_rows
print(json.dumps(out))
"#;
    let o = Command::new(&py).args(["-c", script]).arg(&out).output().unwrap();
    assert!(o.status.success(), "pyarrow: {}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let threads = report(&t.trace, "thread");
    for r in &threads {
        let n = r["loads"].as_u64().unwrap() + r["stores"].as_u64().unwrap();
        assert_eq!(v["by_thread"][r["thread"].to_string()], n, "thread {}: {v}", r["thread"]);
    }
    let loads: u64 = threads.iter().map(|r| r["loads"].as_u64().unwrap()).sum();
    let stores: u64 = threads.iter().map(|r| r["stores"].as_u64().unwrap()).sum();
    assert_eq!(v["kinds"]["load"], loads);
    assert_eq!(v["kinds"]["store"], stores);
    assert_eq!(v["rows"], loads + stores);
    assert_eq!(v["threads"], threads.len());
    parquet_equals_sql(&py, &out, &t.trace);
    // atomic read-modify-writes and recorded values, on several threads
    let dir = scratch("sql-parquet-rmw");
    let exe = build(Cc::Gcc, "inc.c", &dir, &[]);
    let trace = dir.join("inc.trace");
    let o = Command::new(memlens())
        .args(["record", "-q", "--values", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .args(["add", "3", "3000"])
        .output()
        .unwrap();
    assert!(o.status.success(), "inc: {}", stderr(&o));
    let out = dir.join("pq");
    let o = export_parquet(&out, &trace);
    assert!(o.status.success(), "{}", stderr(&o));
    let n = parquet_equals_sql(&py, &out, &trace);
    // the 3000 increments are atomic read-modify-writes; --values recorded values
    let rmw = sql(&[&trace], "SELECT count(*) n FROM accesses WHERE kind = 'rmw' AND atomic");
    assert_eq!(rmw[0]["n"].as_u64(), Some(3000), "{rmw:?} of {n} rows");
    let values = sql(&[&trace], "SELECT count(value) n FROM accesses");
    assert!(values[0]["n"].as_u64().unwrap() >= 3000, "{values:?} of {n} rows");
}

/// A trace whose loops are runs (clang builds loops.c with its loops versioned,
/// three threads): the export writes each run's rows itself, grouped by
/// instruction (crates/sql/src/run_rows.rs), where the embedded engine decodes
/// them as rows. Every row and column read back by pyarrow equals the engine's.
#[test]
fn parquet_export_of_loop_runs_equals_sql() {
    if Cc::all().len() < 2 {
        return; // runs come from clang's pass
    }
    let dir = scratch("sql-parquet-runs");
    let exe = build(Cc::Clang, "loops.c", &dir, &["-g"]);
    let trace = dir.join("loops.trace");
    let o = record(&exe, &trace, &["2000", "3"]);
    assert!(o.status.success(), "loops: {}", stderr(&o));
    let out = dir.join("pq");
    let o = export_parquet(&out, &trace);
    assert!(o.status.success(), "{}", stderr(&o));
    let n = parquet_equals_sql(&pyarrow(), &out, &trace);
    // most of the rows are the runs' (2000 elements a loop, a dozen loops a thread)
    assert!(n > 3 * 2000 * 8, "{n} rows");
}

/// Every row and column of `OUT/accesses` as pyarrow reads it equals the embedded
/// engine's `accesses` over `trace`, and `OUT/code` its `code`. Returns the rows.
fn parquet_equals_sql(py: &Path, out: &Path, trace: &Path) -> usize {
    let script = r#"
import sys, json, pyarrow.dataset as ds
t = ds.dataset(sys.argv[1] + "/accesses", format="parquet", partitioning="hive").to_table()
cols = sys.argv[2].split(",")
rows = t.select(cols).to_pylist()
rows.sort(key=lambda r: (r["thread"], r["seq"]))
code = ds.dataset(sys.argv[1] + "/code", format="parquet", partitioning="hive").to_table()
calls = ds.dataset(sys.argv[1] + "/calls", format="parquet", partitioning="hive").to_table()
ccols = sys.argv[3].split(",")
crows = calls.select(ccols).to_pylist()
crows.sort(key=lambda r: (r["thread"], r["seq"]))
print(json.dumps({
    "rows": [[r[c] for c in cols] for r in rows],
    "calls": [[r[c] for c in ccols] for r in crows],
    "code": sorted([r["pc"], r["function"], r["line"]] for r in code.select(["pc", "function", "line"]).to_pylist()),
}))
"#;
    let cols = ["thread", "seq", "clock", "kind", "size", "address", "pc", "value", "atomic"];
    let ccols = ["thread", "seq", "clock", "kind", "pc", "call_site", "frame", "depth"];
    let o = Command::new(py)
        .args(["-c", script])
        .arg(out)
        .arg(cols.join(","))
        .arg(ccols.join(","))
        .output()
        .unwrap();
    assert!(o.status.success(), "pyarrow: {}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let q = format!("SELECT {} FROM accesses ORDER BY thread, seq", cols.join(", "));
    let want: Vec<Value> = sql(&[trace], &q)
        .iter()
        .map(|r| Value::Array(cols.iter().map(|c| r[*c].clone()).collect()))
        .collect();
    let got = v["rows"].as_array().unwrap();
    let rows = got.len();
    assert_eq!(rows, want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w);
    }
    // the calls, every column (their pages are encoded as the accesses' are)
    let q = format!("SELECT {} FROM calls ORDER BY thread, seq", ccols.join(", "));
    let want: Vec<Value> = sql(&[trace], &q)
        .iter()
        .map(|r| Value::Array(ccols.iter().map(|c| r[*c].clone()).collect()))
        .collect();
    assert!(!want.is_empty());
    assert_eq!(v["calls"].as_array().unwrap(), &want);
    // the code table, built from the pcs the export saw, equals the query's
    let want: Vec<Value> = sql(&[trace], "SELECT pc, function, line FROM code ORDER BY pc")
        .iter()
        .map(|r| serde_json::json!([r["pc"], r["function"], r["line"]]))
        .collect();
    assert!(!want.is_empty());
    assert_eq!(v["code"].as_array().unwrap(), &want);
    rows
}

/// `collect --query`: a continuous query over the traces streaming in prints a
/// result every window; once the program's trace is complete, the count equals
/// the collected trace's own; a query that does not plan fails at once (exit 2).
#[test]
fn collect_runs_a_continuous_query() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let dir = scratch("sql-collect");
    let exe = build(Cc::Gcc, SRC, &dir, &[]);
    let o = run_memlens(&[
        "collect",
        "--listen",
        "127.0.0.1:0",
        "-o",
        dir.join("bad").to_str().unwrap(),
        "--query",
        "SELECT nope FROM accesses",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nope"), "{}", stderr(&o));
    let inbox = dir.join("inbox");
    let mut child = Command::new(memlens())
        .args(["collect", "--listen", "127.0.0.1:0", "-o"])
        .arg(&inbox)
        .args(["--query", "SELECT count(*) n FROM accesses", "--every", "200ms"])
        .args(["--format", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    /// Kills the collector however the test ends.
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let err_pipe = child.stderr.take().unwrap();
    let out = child.stdout.take().unwrap();
    let _guard = Kill(child);
    let mut err = BufReader::new(err_pipe).lines();
    let first = err.next().unwrap().unwrap();
    let addr = first
        .strip_prefix("memlens: collect: listening on ")
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("{first}"))
        .to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let sink = format!("tcp://{addr}");
    let o = run_memlens(&["record", "-q", "--sink", &sink, "--", exe.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    // wait for the collector to finish the file, then for a window that saw it whole
    for l in err.by_ref() {
        if l.unwrap().contains("finished") {
            break;
        }
    }
    let got = std::fs::read_dir(&inbox).unwrap().map(|e| e.unwrap().path()).collect::<Vec<_>>();
    assert_eq!(got.len(), 1, "{got:?}");
    let i = info(&got[0]);
    let want = i["loads"].as_u64().unwrap() + i["stores"].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut windows = 0;
    let mut last = String::new();
    loop {
        assert!(Instant::now() < deadline, "no window counted {want}: {last}");
        let Ok(l) = rx.recv_timeout(Duration::from_secs(30)) else { continue };
        if l.starts_with("-- window ") {
            windows += 1;
            assert!(l.contains("traces 1,"), "{l}");
            continue;
        }
        let v: Value = serde_json::from_str(&l).unwrap_or_else(|e| panic!("{e}: {l}"));
        if v[0]["n"].as_u64() == Some(want) {
            break;
        }
        last = l;
    }
    assert!(windows >= 1);
}

/// A free TCP port on loopback (bound, then released for the process that takes it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits until something listens on `port`.
fn wait_listening(port: u16, what: &str, kids: &mut [std::process::Child]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        for k in kids.iter_mut() {
            if let Ok(Some(s)) = k.try_wait() {
                panic!("{what}: a cluster process ended early: {s}");
            }
        }
        assert!(std::time::Instant::now() < deadline, "{what} never listened on {port}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// `memlens sql --cluster`: a Ballista scheduler and two executors, each its own
/// process on 127.0.0.1, run group-bys over a dataset of four traces (scans and
/// the naming functions on the executors) with the embedded engine's results.
/// An unreachable cluster is one line naming the address.
#[test]
fn sql_on_a_ballista_cluster_equals_the_embedded_engine() {
    use std::process::Stdio;
    let a = build_and_record(Cc::Gcc, "sql-cluster", SRC);
    let set = a.dir.join("set");
    std::fs::create_dir_all(&set).unwrap();
    for i in 0..4 {
        let out = record(&a.exe, &set.join(format!("t{i}.trace")), &[]);
        assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    }
    // nothing listens: one line naming the address, exit 2
    let dead = free_port();
    let url = format!("df://127.0.0.1:{dead}");
    let o = run_memlens(&["sql", "--cluster", &url, "-e", "SELECT 1", set.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("127.0.0.1:{dead}")), "{}", stderr(&o));

    /// Kills the cluster's processes however the test ends.
    struct Kids(Vec<std::process::Child>);
    impl Drop for Kids {
        fn drop(&mut self) {
            for k in &mut self.0 {
                let _ = k.kill();
                let _ = k.wait();
            }
        }
    }
    let sched = free_port();
    let spawn = |args: &[String], log: &str| {
        Command::new(memlens())
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(a.dir.join(log)).unwrap())
            .spawn()
            .unwrap()
    };
    let mut kids = Kids(vec![spawn(
        &["cluster".into(), "scheduler".into(), "--bind".into(), format!("127.0.0.1:{sched}")],
        "scheduler.log",
    )]);
    wait_listening(sched, "scheduler", &mut kids.0);
    for e in 0..2 {
        let (flight, grpc) = (free_port(), free_port());
        let work = a.dir.join(format!("work{e}"));
        std::fs::create_dir_all(&work).unwrap();
        kids.0.push(spawn(
            &[
                "cluster".into(),
                "executor".into(),
                "--scheduler".into(),
                format!("127.0.0.1:{sched}"),
                "--bind".into(),
                format!("127.0.0.1:{flight}"),
                "--grpc-port".into(),
                grpc.to_string(),
                "--tasks".into(),
                "2".into(),
                "--work-dir".into(),
                work.display().to_string(),
            ],
            &format!("executor{e}.log"),
        ));
        wait_listening(flight, "executor", &mut kids.0);
        wait_listening(grpc, "executor", &mut kids.0);
    }
    let url = format!("df://127.0.0.1:{sched}");
    let run_with = |q: &str, cluster: bool, extra: &[&str]| -> String {
        let mut args = vec!["sql", "--format", "csv", "-e", q];
        args.extend_from_slice(extra);
        if cluster {
            args.extend(["--cluster", &url]);
        }
        args.push(set.to_str().unwrap());
        let o = run_memlens(&args);
        assert!(
            o.status.success(),
            "{:?} {q} (cluster {cluster}): {}\nscheduler: {}",
            o.status,
            stderr(&o),
            std::fs::read_to_string(a.dir.join("scheduler.log")).unwrap_or_default()
        );
        stdout(&o)
    };
    let run = |q: &str, cluster: bool| run_with(q, cluster, &[]);
    for q in [
        "SELECT trace, thread, kind, count(*) n, sum(size) b FROM accesses GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
        "SELECT trace, variable(address, trace) v, count(*) n FROM accesses GROUP BY 1, 2 ORDER BY 1, 2",
        "SELECT line(pc, trace) l, count(*) n FROM accesses WHERE kind = 'store' GROUP BY 1 ORDER BY 1",
        "SELECT c.trace, t.thread, t.name, count(*) n FROM calls c JOIN threads t ON c.trace = t.trace AND c.thread = t.thread WHERE c.kind = 'enter' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
    ] {
        let embedded = run(q, false);
        assert!(embedded.lines().count() > 2, "{q}: {embedded}");
        assert_eq!(run(q, true), embedded, "{q}");
    }
    // --alloc-fn reaches the executors: main's block is named after main's caller
    // there as here
    let q = "SELECT trace, variable(address, trace) v, count(*) n FROM accesses GROUP BY 1, 2 ORDER BY 1, 2";
    let wrapped = run_with(q, false, &["--alloc-fn", "main"]);
    assert!(wrapped.contains("__libc_start_call_main"), "{wrapped}");
    assert_ne!(wrapped, run(q, false));
    assert_eq!(run_with(q, true, &["--alloc-fn", "main"]), wrapped);
    // both executors ran tasks: each wrote shuffle files in its work directory
    for e in 0..2 {
        let work = a.dir.join(format!("work{e}"));
        let files = walk(&work);
        assert!(!files.is_empty(), "executor {e} ran no task: {work:?} is empty");
    }
}

/// Every file under `d`.
fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
