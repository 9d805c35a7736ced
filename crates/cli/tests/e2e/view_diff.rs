//! `memlens view A B`: the diff of two traces (docs/viewer.md, "Diff of two
//! traces"), on `diffprog.c` recorded twice with different arguments: its API
//! against the counts the program makes and against `memlens report` of each
//! trace, bad input, and the page in headless chromium.

use crate::util::*;
use crate::view::{browser_available, get_raw, serve_in_background, Browser};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SRC: &str = "diffprog.c";
/// A runs `diffprog 3 0`, B `diffprog 10 1`: scan() does 3 and 10 rounds over its
/// 64-long table, extra() runs in B only.
const A_ROUNDS: u64 = 3;
const B_ROUNDS: u64 = 10;

/// The program built once per test and recorded as A and B in a scratch directory.
fn recorded(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = scratch(name);
    let exe = build(Cc::Gcc, SRC, &dir, &[]);
    record_both(dir, &exe)
}

/// A and B of `exe` in `dir`.
fn record_both(dir: PathBuf, exe: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let a = dir.join("a.trace");
    let b = dir.join("b.trace");
    for (t, args) in
        [(&a, [A_ROUNDS.to_string(), "0".into()]), (&b, [B_ROUNDS.to_string(), "1".into()])]
    {
        let out = record(exe, t, &[&args[0], &args[1]]);
        assert!(out.status.success(), "record failed: {}", stderr(&out));
    }
    (dir, a, b)
}

fn api(port: u16, token: &str, path: &str) -> Value {
    crate::view::get_api(port, token, path)
}

type Counts = BTreeMap<String, (u64, u64)>;
/// name → ((A loads, A stores), (B loads, B stores), delta).
type Rows = BTreeMap<String, ((u64, u64), (u64, u64), i64)>;

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"))
}

/// `report --by KIND` of a trace as name → (loads, stores), rows of one name summed
/// (a variable's row per kind; a function's lines).
fn reported(trace: &Path, by: &str) -> Counts {
    let rows = if by == "variable" { variables(trace, "variable") } else { report(trace, by) };
    let mut m = Counts::new();
    for r in rows {
        let name = match by {
            "line" => format!("{}:{}:{}", r["file"].as_str().unwrap(), r["line"], r["function"]),
            "function" => r["function"].as_str().unwrap().to_string(),
            _ => r["variable"].as_str().unwrap().to_string(),
        };
        let e = m.entry(name).or_default();
        e.0 += n(&r, "loads");
        e.1 += n(&r, "stores");
    }
    m
}

/// Rows of `/api/diff/TABLE`: name → ((A loads, A stores), (B loads, B stores), delta).
fn diff_rows(rows: &[Value], line_keys: bool) -> Rows {
    rows.iter()
        .map(|r| {
            let name = if line_keys {
                format!("{}:{}:{}", r["file"].as_str().unwrap(), r["line"], r["function"])
            } else {
                r["name"].as_str().unwrap().to_string()
            };
            let d = r["delta"].as_i64().unwrap();
            (name, ((n(r, "a_loads"), n(r, "a_stores")), (n(r, "b_loads"), n(r, "b_stores")), d))
        })
        .collect()
}

/// What the diff must say, from report's rows of A and B: every name in either,
/// zero where absent, delta = B − A in accesses.
fn expected(a: &Counts, b: &Counts) -> Rows {
    let mut out = BTreeMap::new();
    for k in a.keys().chain(b.keys()) {
        let x = a.get(k).copied().unwrap_or_default();
        let y = b.get(k).copied().unwrap_or_default();
        let d = (y.0 + y.1) as i64 - (x.0 + x.1) as i64;
        out.insert(k.clone(), (x, y, d));
    }
    out
}

fn sorted_by_abs_delta(rows: &[Value]) -> bool {
    rows.windows(2)
        .all(|w| w[0]["delta"].as_i64().unwrap().abs() >= w[1]["delta"].as_i64().unwrap().abs())
}

#[test]
fn view_diff_rows_are_the_programs_changes_and_reports_differences() {
    let (_dir, a, b) = recorded("view-diff");
    let file = |rows: &[Value]| -> String {
        rows.iter().find_map(|r| r["file"].as_str().filter(|f| f.ends_with(SRC))).unwrap().into()
    };
    let (_server, port, token) = serve_in_background(&b, &[a.to_str().unwrap()], None);
    let lines = api(port, &token, "/api/diff/lines");
    let functions = api(port, &token, "/api/diff/functions");
    let vars = api(port, &token, "/api/diff/variables");
    let (lrows, frows, vrows) = (
        lines["rows"].as_array().unwrap(),
        functions["rows"].as_array().unwrap(),
        vars["rows"].as_array().unwrap(),
    );
    for (t, rows) in [(&lines, lrows), (&functions, frows), (&vars, vrows)] {
        assert_eq!(t["total"].as_u64().unwrap(), rows.len() as u64, "no limit: every row");
        assert!(sorted_by_abs_delta(rows), "largest |delta| first: {t}");
    }
    let src = file(lrows);

    // What the program does: scan() loads its table 64 times a round; extra()
    // stores 16 longs in B only; fixed() and main are the same in both runs.
    let d = diff_rows(lrows, true);
    let scan = line_of(SRC, "scan-load");
    let extra = line_of(SRC, "extra-store");
    let at = |line: u64, f: &str| d[&format!("{src}:{line}:\"{f}\"")];
    assert_eq!(at(scan, "scan"), ((64 * A_ROUNDS, 0), (64 * B_ROUNDS, 0), 64 * 7));
    assert_eq!(at(extra, "extra"), ((0, 0), (0, 16), 16));
    assert_eq!(at(line_of(SRC, "fixed-store"), "fixed"), ((0, 32), (0, 32), 0));
    assert_eq!(at(line_of(SRC, "fixed-load"), "fixed"), ((32, 0), (32, 0), 0));
    assert_eq!(lrows[0]["name"], format!("{src}:{scan}"), "the largest change first");
    let f = diff_rows(frows, false);
    assert_eq!(f["scan"], ((64 * A_ROUNDS, 0), (64 * B_ROUNDS, 0), 64 * 7));
    assert_eq!(f["extra"], ((0, 0), (0, 16), 16));
    assert_eq!(f["fixed"], ((32, 32), (32, 32), 0), "an unchanged function");
    assert_eq!(f["main"].2, 0);
    // a function row opens its source at its first line that accessed memory
    let fr = |name: &str| frows.iter().find(|r| r["name"] == name).unwrap();
    assert_eq!((fr("extra")["file"].as_str(), &fr("extra")["line"]), (Some(&*src), &json!(extra)));
    let v = diff_rows(vrows, false);
    assert_eq!(v["table"], ((64 * A_ROUNDS, 0), (64 * B_ROUNDS, 0), 64 * 7));
    assert_eq!(v["extra_buf"], ((0, 0), (0, 16), 16));
    assert_eq!(v["fixed_buf"], ((32, 32), (32, 32), 0));

    // Every row is report's: the same rows, A's and B's counts, delta = B − A.
    assert_eq!(d, expected(&reported(&a, "line"), &reported(&b, "line")), "lines vs report");
    assert_eq!(f, expected(&reported(&a, "function"), &reported(&b, "function")), "functions");
    assert_eq!(v, expected(&reported(&a, "variable"), &reported(&b, "variable")), "variables");

    // The summary: each trace's totals (as `info` counts them) and the deltas.
    let s = api(port, &token, "/api/diff/summary");
    let (ia, ib) = (info(&a), info(&b));
    for (side, i) in [("a", &ia), ("b", &ib)] {
        for k in ["events", "loads", "stores"] {
            assert_eq!(s[side][k], i[k], "{side} {k}: {s}");
        }
        assert_eq!(s[side]["threads"], 1);
    }
    assert_eq!(s["a"]["trace"], a.to_str().unwrap());
    assert_eq!(s["delta"]["loads"], json!(64 * (B_ROUNDS - A_ROUNDS)));
    assert_eq!(s["delta"]["stores"], json!(16));
    assert_eq!(s["delta"]["accesses"], json!(64 * (B_ROUNDS - A_ROUNDS) + 16));
    assert_eq!(
        s["delta"]["events"].as_i64().unwrap(),
        n(&ib, "events") as i64 - n(&ia, "events") as i64
    );
    assert_eq!(s["files"][0]["name"], src);

    // Bytes: every access of diffprog is a long; the totals are the lines' sums.
    let bytes = |r: &Value, side: &str| n(r, &format!("{side}_bytes"));
    let srow = |line: u64| lrows.iter().find(|r| r["name"] == format!("{src}:{line}")).unwrap();
    assert_eq!(
        (bytes(srow(scan), "a"), bytes(srow(scan), "b")),
        (8 * 64 * A_ROUNDS, 8 * 64 * B_ROUNDS)
    );
    assert_eq!(srow(extra)["delta_bytes"], json!(8 * 16));
    for side in ["a", "b"] {
        let sum: u64 = lrows.iter().map(|r| bytes(r, side)).sum();
        assert_eq!(s[side]["bytes"], json!(sum), "{side}: bytes are the lines' sum");
        assert_eq!(s[side]["cachesim"], json!(false));
    }

    // Allocation sites (heaptrack --diff): each trace's figures are `analyze heap`'s.
    let heap = api(port, &token, "/api/diff/heap");
    let hrows = heap["rows"].as_array().unwrap();
    assert_eq!(heap["total"].as_u64().unwrap(), hrows.len() as u64);
    assert_eq!(s["rows"]["heap"], heap["total"]);
    let site = |line: u64| format!("{src}:{line} (heap)");
    let hrow = |name: &str| {
        hrows.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("{name}: {heap}"))
    };
    let (hs, hx) =
        (hrow(&site(line_of(SRC, "heap-scan"))), hrow(&site(line_of(SRC, "heap-extra"))));
    let fig = |r: &Value, side: &str| {
        ["blocks", "bytes", "peak", "leaked"].map(|k| n(r, &format!("{side}_{k}")))
    };
    assert_eq!(fig(hs, "a"), [1, 100 * A_ROUNDS, 100 * A_ROUNDS, 0]);
    assert_eq!(fig(hs, "b"), [1, 100 * B_ROUNDS, 100 * B_ROUNDS, 0]);
    assert_eq!(fig(hx, "a"), [1, 24, 24, 0]);
    assert_eq!(fig(hx, "b"), [1, 1000, 1000, 1000]);
    assert_eq!((&hx["delta"], &hx["delta_leaked"]), (&json!(976), &json!(1000)));
    assert_eq!(
        hrows[0]["name"],
        site(line_of(SRC, "heap-extra")),
        "the largest change in bytes first"
    );
    for (side, t) in [("a", &a), ("b", &b)] {
        let h = json(&["analyze", "heap", "--top", "0", "--format", "json", t.to_str().unwrap()]);
        let mut want: BTreeMap<String, [u64; 4]> = BTreeMap::new();
        for r in h["sites"].as_array().unwrap() {
            let e = want.entry(r["site"].as_str().unwrap().to_string()).or_default();
            for (i, k) in
                ["blocks", "bytes", "max_live_bytes", "live_bytes_at_end"].iter().enumerate()
            {
                e[i] += n(r, k);
            }
        }
        let got: BTreeMap<String, [u64; 4]> = hrows
            .iter()
            .filter(|r| n(r, &format!("{side}_blocks")) > 0)
            .map(|r| (r["name"].as_str().unwrap().to_string(), fig(r, side)))
            .collect();
        assert_eq!(got, want, "{side}: the sites of analyze heap");
        let sum = h["summary"][0].clone();
        assert_eq!(s[side]["heap"]["peak"], sum["max_live_bytes"], "{side}: the heap's peak");
        assert_eq!(s[side]["heap"]["leaked"], sum["leaked_bytes"], "{side}: leaked");
        assert_eq!(s[side]["heap"]["bytes"], sum["bytes"], "{side}: bytes allocated");
    }

    // limit and file=; the source of a file the traces' DWARF names, no other.
    let top = api(port, &token, "/api/diff/functions?limit=2");
    assert_eq!(top["rows"].as_array().unwrap().len(), 2);
    assert_eq!(top["rows"][0]["name"], "scan");
    assert_eq!(top["total"], functions["total"]);
    let enc = |s: &str| s.replace('/', "%2F");
    let mine = api(port, &token, &format!("/api/diff/lines?file={}", enc(&src)));
    assert_eq!(
        mine["total"].as_u64().unwrap(),
        lrows.iter().filter(|r| r["file"] == *src).count() as u64
    );
    let host = format!("Host: 127.0.0.1:{port}\r\n");
    let get = |p: &str| {
        let (st, _, body) = get_raw(port, p, &host);
        (st, String::from_utf8_lossy(&body).into_owned())
    };
    let (st, text) = get(&format!("/api/source?file={}&token={token}", enc(&src)));
    assert_eq!(st, 200);
    assert!(text.contains("// @scan-load"));
    assert_eq!(get(&format!("/api/source?file=%2Fetc%2Fpasswd&token={token}")).0, 404);
    assert_eq!(
        get(&format!("/api/diff/lines?limit=x&token={token}")),
        (400, "bad limit: x".into())
    );
    assert_eq!(get(&format!("/api/diff/functions?file=a.c&token={token}")).0, 400);
    // the viewer's rules: the token and this server's Host
    assert_eq!(get("/api/diff/summary").0, 403);
    let (st, _, _) =
        get_raw(port, &format!("/api/diff/summary?token={token}"), "Host: evil.example:80\r\n");
    assert_eq!(st, 403);
}

/// Per call path (the names from the root down): calls, inclusive and exclusive
/// cost arrays, summed over nodes of one path.
type Paths = BTreeMap<Vec<String>, (u64, Vec<u64>, Vec<u64>)>;

fn costs(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

fn add_path(out: &mut Paths, path: Vec<String>, calls: u64, incl: Vec<u64>, excl: Vec<u64>) {
    let e = out.entry(path).or_insert((0, vec![0; incl.len()], vec![0; excl.len()]));
    e.0 += calls;
    e.1.iter_mut().zip(incl).for_each(|(x, y)| *x += y);
    e.2.iter_mut().zip(excl).for_each(|(x, y)| *x += y);
}

/// One trace's top-down tree from its own viewer (`/api/calltree`), by path.
fn single_tree(port: u16, token: &str, node: u64, path: Vec<String>, out: &mut Paths) {
    let v = api(port, token, &format!("/api/calltree?view=top&node={node}"));
    for r in v["rows"].as_array().unwrap() {
        let mut p = path.clone();
        p.push(r["name"].as_str().unwrap().to_string());
        add_path(out, p.clone(), n(r, "calls"), costs(&r["incl"]), costs(&r["excl"]));
        single_tree(port, token, n(r, "node"), p, out);
    }
}

/// The diff's merged tree (`/api/diff/calltree`), by path, for side `a` or `b`
/// (paths with nothing on that side left out); checks each answer's path, the
/// order of its rows (largest |Δ inclusive| first) and its deltas on the way.
fn diff_tree(port: u16, token: &str, node: u64, path: Vec<String>, sides: &mut [Paths; 2]) {
    let v = api(port, token, &format!("/api/diff/calltree?node={node}"));
    assert_eq!(v["path"], json!(path), "node {node}");
    let rows = v["rows"].as_array().unwrap();
    assert!(sorted_by_abs_delta(rows), "largest |Δ| first: {v}");
    for r in rows {
        let mut p = path.clone();
        p.push(r["name"].as_str().unwrap().to_string());
        let acc = |k: &str| costs(&r[k]).iter().take(2).sum::<u64>() as i64;
        assert_eq!(r["delta"].as_i64().unwrap(), acc("b_incl") - acc("a_incl"));
        assert_eq!(r["delta_excl"].as_i64().unwrap(), acc("b_excl") - acc("a_excl"));
        for (i, side) in ["a", "b"].into_iter().enumerate() {
            let calls = n(r, &format!("{side}_calls"));
            let incl = costs(&r[&format!("{side}_incl")]);
            if calls > 0 || incl.iter().any(|&x| x > 0) {
                let excl = costs(&r[&format!("{side}_excl")]);
                add_path(&mut sides[i], p.clone(), calls, incl, excl);
            }
        }
        assert_eq!(n(r, "children") > 0, {
            let c = api(port, token, &format!("/api/diff/calltree?node={}", n(r, "node")));
            !c["rows"].as_array().unwrap().is_empty()
        });
        diff_tree(port, token, n(r, "node"), p, sides);
    }
}

/// The call tree of the diff is each trace's own call tree, merged by call path:
/// every path's calls, inclusive and exclusive costs on each side are what the
/// single-trace viewer of that trace shows, and the paths the program changed
/// carry its exact counts.
#[test]
fn view_diff_call_tree_is_both_traces_trees_merged_by_path() {
    let (_dir, a, b) = recorded("view-diff-tree");
    let (_server, port, token) = serve_in_background(&b, &[a.to_str().unwrap()], None);
    let mut sides = [Paths::new(), Paths::new()];
    diff_tree(port, &token, 0, Vec::new(), &mut sides);
    // the inverted trees: at the top and under scan, each side is the trace's own
    // bottom-up view (`/api/calltree?view=bottom`), by name
    let enc = |p: &[&str]| {
        let j = serde_json::to_string(p).unwrap();
        j.bytes().map(|c| format!("%{c:02X}")).collect::<String>()
    };
    let inv = |path: &[&str]| api(port, &token, &format!("/api/diff/bottomup?path={}", enc(path)));
    let (top, under_scan) = (inv(&[]), inv(&["scan"]));
    for (i, t) in [&a, &b].into_iter().enumerate() {
        let (_single, sp, st) = serve_in_background(t, &[], None);
        let mut want = Paths::new();
        single_tree(sp, &st, 0, Vec::new(), &mut want);
        assert!(!want.is_empty());
        assert_eq!(sides[i], want, "side {i}: the trace's own tree");
        let side = ["a", "b"][i];
        let by_name = |v: &Value, calls: bool| -> BTreeMap<String, (u64, Vec<u64>)> {
            v["rows"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|r| {
                    let (c, e) = if calls {
                        (n(r, &format!("{side}_calls")), costs(&r[&format!("{side}_excl")]))
                    } else {
                        (n(r, "calls"), costs(&r["excl"]))
                    };
                    (c > 0 || e.iter().any(|&x| x > 0))
                        .then(|| (r["name"].as_str().unwrap().to_string(), (c, e)))
                })
                .collect()
        };
        let own = api(sp, &st, "/api/calltree?view=bottom&path=");
        assert_eq!(by_name(&top, true), by_name(&own, false), "side {side}: the functions");
        let scan_id = own["rows"].as_array().unwrap().iter().find(|r| r["name"] == "scan").unwrap()
            ["function"]
            .clone();
        let own_scan = api(sp, &st, &format!("/api/calltree?view=bottom&path={scan_id}"));
        assert_eq!(
            by_name(&under_scan, true),
            by_name(&own_scan, false),
            "side {side}: scan's callers"
        );
    }
    assert_eq!(under_scan["rows"][0]["name"], "main");
    assert_eq!(under_scan["rows"][0]["delta_excl"], json!(64 * (B_ROUNDS - A_ROUNDS)));
    // What the program does, on its paths.
    let p = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let [sa, sb] = &sides;
    let scan = p(&["main", "scan"]);
    assert_eq!((sa[&scan].0, sa[&scan].1[..2].to_vec()), (1, vec![64 * A_ROUNDS, 0]));
    assert_eq!((sb[&scan].0, sb[&scan].1[..2].to_vec()), (1, vec![64 * B_ROUNDS, 0]));
    let extra = p(&["main", "extra"]);
    assert!(!sa.contains_key(&extra), "extra runs in B only");
    assert_eq!((sb[&extra].0, sb[&extra].1[..2].to_vec()), (1, vec![0, 16]));
    let fixed = p(&["main", "fixed"]);
    assert_eq!(sa[&fixed], sb[&fixed], "fixed() is the same in both");
    // the root's children: main, then under it the largest change first
    let root = api(port, &token, "/api/diff/calltree?node=0");
    assert_eq!(root["rows"][0]["name"], "main");
    let main =
        api(port, &token, &format!("/api/diff/calltree?node={}", n(&root["rows"][0], "node")));
    let names: Vec<&str> =
        main["rows"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(&names[..2], ["scan", "extra"], "{main}");
    assert_eq!(main["rows"][0]["delta"], json!(64 * (B_ROUNDS - A_ROUNDS)));
    // the summary counts the merged tree's paths; a node out of range is a 400
    let s = api(port, &token, "/api/diff/summary");
    let paths: std::collections::BTreeSet<&Vec<String>> = sa.keys().chain(sb.keys()).collect();
    assert_eq!(n(&s["rows"], "calltree"), paths.len() as u64 + 1, "the paths and the root");
    let host = format!("Host: 127.0.0.1:{port}\r\n");
    let (st, _, body) =
        get_raw(port, &format!("/api/diff/calltree?node=99999&token={token}"), &host);
    assert_eq!(st, 400);
    assert!(String::from_utf8_lossy(&body).contains("no node 99999"));
    let (st, _, body) =
        get_raw(port, &format!("/api/diff/bottomup?path=scan&token={token}"), &host);
    assert_eq!(st, 400);
    assert!(String::from_utf8_lossy(&body).contains("JSON array"));
}

/// `memlens view --alloc-fn GLOBS A B`: the allocation sites of the diff are the
/// wrappers' callers, with each run's exact bytes; an index built with other
/// globs (or none) is rebuilt, so the same traces without the option show the
/// wrapper again.
#[test]
fn view_diff_allocation_sites_see_through_alloc_fn_wrappers() {
    const W: &str = "allocwrap.c";
    let dir = scratch("view-diff-alloc-fn");
    let exe = build(Cc::Gcc, W, &dir, &[]);
    let (a, b) = (dir.join("a.trace"), dir.join("b.trace"));
    for (t, n) in [(&a, "10"), (&b, "30")] {
        let out = record(&exe, t, &[n]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    // site line → (A bytes, B bytes) of the rows in allocwrap.c; the variables
    // table's (A stores, B stores) of `pair`, the struct small() allocates
    let mut pair = Vec::new();
    let mut sites = |args: &[&str]| -> BTreeMap<u64, (u64, u64)> {
        let mut all = args.to_vec();
        all.push(a.to_str().unwrap());
        let (_server, port, token) = serve_in_background(&b, &all, None);
        let vars = api(port, &token, "/api/diff/variables");
        let p = vars["rows"].as_array().unwrap().iter().find(|r| r["name"] == "pair");
        pair.push(p.map(|r| (n(r, "a_stores"), n(r, "b_stores"))));
        let heap = api(port, &token, "/api/diff/heap");
        let mut out = BTreeMap::new();
        for r in heap["rows"].as_array().unwrap() {
            if r["file"].as_str().is_some_and(|f| f.ends_with(W)) {
                let e = out.entry(n(r, "line")).or_insert((0, 0));
                e.0 += n(r, "a_bytes");
                e.1 += n(r, "b_bytes");
            }
        }
        out
    };
    let l = |m: &str| line_of(W, m);
    let through = BTreeMap::from([
        (l("small"), (160, 480)),
        (l("big"), (3000, 3000)),
        (l("direct"), (50, 50)),
    ]);
    assert_eq!(sites(&["--alloc-fn", "x*alloc"]), through);
    let wrapper = BTreeMap::from([(l("xmalloc"), (3160, 3480)), (l("direct"), (50, 50))]);
    assert_eq!(sites(&[]), wrapper, "built again without --alloc-fn");
    assert_eq!(sites(&["--alloc-fn", "xmalloc,xcalloc"]), through);
    // the one namer: with the wrappers named, the block has its caller's type
    assert_eq!(pair, [Some((20, 60)), None, Some((20, 60))]);
    // a glob naming nothing: one line, nothing served
    let out = run_memlens(&[
        "view",
        "--no-serve",
        "--alloc-fn",
        "nope_*",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--alloc-fn nope_*") && err.trim_end().lines().count() == 1, "{err}");
}

#[test]
fn view_diff_names_a_missing_or_damaged_trace_in_one_line() {
    let (dir, a, b) = recorded("view-diff-bad");
    let missing = dir.join("nope.trace");
    let damaged = dir.join("damaged.trace");
    std::fs::write(&damaged, b"this is not a memlens trace, just some bytes of text\n").unwrap();
    for (second, says) in [(&missing, "does not exist"), (&damaged, "damaged.trace")] {
        let out =
            run_memlens(&["view", "--no-serve", a.to_str().unwrap(), second.to_str().unwrap()]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(err.starts_with("memlens: error: ") && err.contains(says), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // checked before anything was indexed
    assert!(!dir.join("a.trace.mlview").exists());
    // an index whose variables file is gone: one line naming it, nothing served
    let (at, bt) = (a.to_str().unwrap(), b.to_str().unwrap());
    let out = run_memlens(&["view", "--no-serve", at, bt]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    std::fs::remove_file(dir.join("b.trace.mlview/variables.json")).unwrap();
    let mut child = std::process::Command::new(memlens())
        .args(["view", "--port", "0", at, bt])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("the diff of a damaged index was served");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("variables.json") && err.contains("--reindex"), "{err}");
    // three traces: a usage error
    let a = a.to_str().unwrap();
    let out = run_memlens(&["view", "--no-serve", a, a, a]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// The program's source copied under a name that is HTML, built with gcc.
fn build_hostile(dir: &Path) -> PathBuf {
    crate::view::build_copy_as(dir, SRC, HOSTILE, &["cc", "-O2"], ("MEMLENS_CC", "gcc"))
}

const HOSTILE: &str = "<img src=x onerror=alert(1)>.c";

/// The page: the changed line's delta beside its source, the tables, sorting and
/// a row opening its source; a source file named like HTML shows as its name and
/// runs nothing. Screenshots go to `MEMLENS_VIEW_SHOTS` if set.
#[test]
fn view_diff_page_shows_the_changed_line_and_its_delta() {
    if !browser_available() {
        return;
    }
    let dir = scratch("view-diff-page");
    let exe = build_hostile(&dir);
    let (dir, a, b) = record_both(dir, &exe);
    let (_server, port, token) = serve_in_background(&b, &[a.to_str().unwrap()], None);
    let br = Browser::start();
    br.cmd("POST", "/window/rect", Some(json!({"width": 1600, "height": 900})));
    br.cmd("POST", "/url", Some(json!({"url": format!("http://127.0.0.1:{port}/?token={token}")})));
    let wait = |script: &str| {
        let t = Instant::now();
        while br.js(&format!("return !!({script})")) != json!(true) {
            let err = br.js("return window.memlens && window.memlens.error || null");
            assert!(err.is_null(), "page failed: {err}");
            assert!(t.elapsed() < Duration::from_secs(60), "timed out waiting for {script}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait("window.memlens && window.memlens.ready");
    // the page's own count of requests in flight: a tree opens its largest path
    // after its first rows are drawn, so row counts alone do not mean done
    let idle = || br.js_async("const done = arguments[0]; memlens.idle().then(done);");
    let scan = line_of(SRC, "scan-load");
    let extra = line_of(SRC, "extra-store");
    // the source view opens at the largest change: A, B and delta beside the line
    let cols = |line: u64| {
        br.js(&format!(
            "return [...document.querySelectorAll(\"#dcode .srcline[data-line='{line}'] .m\")].map(e => e.textContent)"
        ))
    };
    let d = 64 * (B_ROUNDS - A_ROUNDS);
    assert_eq!(
        cols(scan),
        json!([(64 * A_ROUNDS).to_string(), (64 * B_ROUNDS).to_string(), format!("+{d}")])
    );
    assert_eq!(cols(extra), json!(["0", "16", "+16"]));
    let cls = br.js(&format!(
        "return document.querySelector(\"#dcode .srcline[data-line='{scan}'] .m:nth-child(3)\").className"
    ));
    assert_eq!(cls, json!("m pos"));
    // the tables: largest change first, delta coloured; the totals
    let first = br.js(
        "const td = document.querySelector('#t-lines tr.row td[data-key=delta]'); return [td.textContent, td.className]",
    );
    assert_eq!(first, json!([format!("+{d}"), "pos"]));
    assert_eq!(
        br.js("return document.querySelector('#t-lines tr.row td').textContent"),
        json!(format!("{HOSTILE}:{scan}"))
    );
    assert_eq!(
        br.js("return document.querySelector('#totals tr[data-side=delta] td[data-key=stores]').textContent"),
        json!("+16")
    );
    assert_eq!(
        br.js("return memlens.rows('variables').slice(0, 2)"),
        json!(["table", "extra_buf"])
    );
    // allocation sites: the leaked block's site first, its file named as text
    let hx = line_of(SRC, "heap-extra");
    assert_eq!(
        br.js("return [...document.querySelectorAll('#t-heap tr.row')[0].children].map(e => e.textContent)"),
        json!([format!("{HOSTILE}:{hx} (heap)"), "24", "1000", "+976", "24", "1000", "+976", "+1000"])
    );
    // sorting: by function name, then the other way
    br.click("#t-functions th[data-key=name]");
    let names = br.js("return memlens.rows('functions')");
    let mut want: Vec<String> =
        names.as_array().unwrap().iter().map(|v| v.as_str().unwrap().into()).collect();
    want.sort();
    assert_eq!(names, json!(want));
    br.click("#t-functions th[data-key=name]");
    want.reverse();
    assert_eq!(br.js("return memlens.rows('functions')"), json!(want));
    shot(&br, &dir, "diff.png");
    // clicking the function extra opens its source there
    br.js("[...document.querySelectorAll('#t-functions tr.row')].find(e => e.dataset.name === 'extra').click()");
    wait(&format!("document.querySelector(\"#dcode .srcline.sel[data-line='{extra}']\")"));
    // nothing from the data became markup
    assert_eq!(br.js("return document.querySelectorAll('img').length"), json!(0));
    let files = br.js("return document.querySelector('#file').textContent");
    assert!(files.as_str().unwrap().contains(HOSTILE), "{files}");
    assert_eq!(br.js("return document.title"), json!("memlens view: diff"));
    shot(&br, &dir, "diff-extra.png");
    // the call tree of both: the path that changed most opened, its figures per side
    br.js("memlens.treeMode('tree')");
    wait("window.memlens.treeRows().length >= 4");
    idle();
    let rows = br.js("return memlens.treeRows()");
    let d = 64 * (B_ROUNDS - A_ROUNDS);
    assert_eq!(rows[0].as_array().unwrap()[..2], [json!(0), json!("main")], "{rows}");
    let scan_row = rows.as_array().unwrap().iter().find(|r| r[1] == "scan").unwrap();
    assert_eq!(scan_row[0], json!(1), "scan under main: {rows}");
    // calls A, B; inclusive A, B, Δ; exclusive A, B, Δ
    let want = [1, 1].map(|x: u64| x.to_string()).into_iter().chain([
        (64 * A_ROUNDS).to_string(),
        (64 * B_ROUNDS).to_string(),
        format!("+{d}"),
        (64 * A_ROUNDS).to_string(),
        (64 * B_ROUNDS).to_string(),
        format!("+{d}"),
    ]);
    assert_eq!(
        scan_row.as_array().unwrap()[2..].to_vec(),
        want.map(Value::from).collect::<Vec<_>>()
    );
    assert!(rows.as_array().unwrap().iter().any(|r| r[1] == "extra" && r[0] == 1), "{rows}");
    // the tree's box fits the page beside the source
    let fits = br.js(
        "const r = document.querySelector('#t-functions .tree').getBoundingClientRect(); return r.bottom <= innerHeight && r.right <= innerWidth && r.height > 40",
    );
    assert_eq!(fits, json!(true));
    shot(&br, &dir, "diff-tree.png");
    // closing main hides its paths
    br.js("document.querySelector('#t-functions .tree tr.row .tog').click()");
    wait("window.memlens.treeRows().length === 1");
    idle();
    // inverted: scan, the largest change in exclusive accesses, opened on main, its caller
    br.js("memlens.treeMode('callers')");
    wait("window.memlens.treeRows('callers').length >= 3");
    idle();
    let rows = br.js("return memlens.treeRows('callers')");
    let want = |depth: u64, name: &str| {
        json!([
            depth,
            name,
            "1",
            "1",
            (64 * A_ROUNDS).to_string(),
            (64 * B_ROUNDS).to_string(),
            format!("+{d}")
        ])
    };
    assert_eq!(rows[0], want(0, "scan"), "{rows}");
    assert_eq!(rows[1], want(1, "main"), "{rows}");
    assert!(rows.as_array().unwrap().iter().any(|r| r[1] == "extra" && r[0] == 0), "{rows}");
    shot(&br, &dir, "diff-callers.png");
    // the flat table comes back
    br.js("memlens.treeMode('flat')");
    wait("!document.querySelector('#t-functions .scroll.flat').hidden && document.querySelector('#t-functions .scroll.callers').hidden");
}

fn shot(b: &Browser, dir: &Path, name: &str) {
    let d = std::env::var_os("MEMLENS_VIEW_SHOTS").map_or(dir.to_path_buf(), PathBuf::from);
    b.screenshot(&d.join(name));
}
