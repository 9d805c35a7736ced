//! The call tree of a time range (`/api/calltree?x0=&x1=`, docs/viewer.md) against
//! the index's whole-run tree and `memlens report --by function`, on `phases.c`
//! (f() then g(), known counts), `calltree.c` (recursion) and `threads.c` (four
//! threads); and the page's call tree and heap chart following the selection.

use crate::util::*;
use crate::view::{browser_available, get_api, serve_in_background, Viewer};
use crate::view_layout::recorded;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Per call path (function names from the root): calls, inclusive and exclusive cost.
type Paths = BTreeMap<Vec<String>, (u64, Vec<u64>, Vec<u64>)>;

fn nums(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

/// Every node of the top-down tree, by path; `q` is the range part of the query.
fn paths(port: u16, token: &str, q: &str) -> Paths {
    fn go(port: u16, token: &str, q: &str, node: u64, path: Vec<String>, out: &mut Paths) {
        let v = get_api(port, token, &format!("/api/calltree?view=top&node={node}{q}"));
        let me = &v["self"];
        out.insert(
            path.clone(),
            (me["calls"].as_u64().unwrap(), nums(&me["incl"]), nums(&me["excl"])),
        );
        for r in v["rows"].as_array().unwrap() {
            let mut p = path.clone();
            p.push(r["name"].as_str().unwrap().to_string());
            go(port, token, q, r["node"].as_u64().unwrap(), p, out);
        }
    }
    let mut out = Paths::new();
    go(port, token, q, 0, Vec::new(), &mut out);
    out
}

fn range(x0: u64, x1: u64) -> String {
    format!("&x0={x0}&x1={x1}")
}

/// The paths of `a` and `b` together: calls and exclusive costs added, the
/// inclusive ones too.
fn add(a: &Paths, b: &Paths) -> Paths {
    let mut out = a.clone();
    for (k, v) in b {
        let e = out.entry(k.clone()).or_insert_with(|| (0, vec![0; v.1.len()], vec![0; v.2.len()]));
        e.0 += v.0;
        for (x, y) in e.1.iter_mut().zip(&v.1) {
            *x += y;
        }
        for (x, y) in e.2.iter_mut().zip(&v.2) {
            *x += y;
        }
    }
    out
}

fn ops(port: u16, token: &str) -> u64 {
    get_api(port, token, "/api/meta")["ops"].as_u64().unwrap()
}

/// The whole range is the index's tree; any split adds up to it.
fn splits_add_up(trace: &Path, cuts: &[u64]) {
    let (_server, port, token) = serve_in_background(trace, &[], None);
    let n = ops(port, &token);
    let whole = paths(port, &token, "");
    assert!(whole.len() > 2, "{whole:?}");
    assert_eq!(paths(port, &token, &range(0, n)), whole, "the whole range vs the index");
    for &k in cuts {
        let x = n * k / 8;
        let (a, b) = (paths(port, &token, &range(0, x)), paths(port, &token, &range(x, n)));
        assert_eq!(add(&a, &b), whole, "split at operation {x} of {n}");
        assert!(a.len() < whole.len() || b.len() < whole.len() || a != b, "split at {x}");
    }
}

fn key(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn view_range_call_tree_counts_one_phase_exactly() {
    let (_dir, trace) = recorded("view-range-phases", "phases.c");
    // what report counts: f loads 3000 times, g stores 2000 times, main stores once
    let mut by_fn = BTreeMap::new();
    for r in report(&trace, "function") {
        let f = r["function"].as_str().unwrap().to_string();
        by_fn.insert(f, (r["loads"].as_u64().unwrap(), r["stores"].as_u64().unwrap()));
    }
    assert_eq!(by_fn.get("f"), Some(&(3000, 0)), "{by_fn:?}");
    assert_eq!(by_fn.get("g"), Some(&(0, 2000)), "{by_fn:?}");
    assert_eq!(by_fn.get("main"), Some(&(0, 1)), "{by_fn:?}");
    let (_server, port, token) = serve_in_background(&trace, &[], None);
    let n = ops(port, &token);
    assert_eq!(n, 5001);
    let whole = paths(port, &token, "");
    assert_eq!(paths(port, &token, &range(0, n)), whole);
    let (f, g, main) = (key(&["main", "f"]), key(&["main", "g"]), key(&["main"]));
    assert_eq!(whole[&f].0, 1);
    // f's phase: f's frame in the flame chart (index spans, not the call tree)
    let meta = get_api(port, &token, "/api/meta");
    let fi = meta["functions"].as_array().unwrap().iter().position(|x| x == "f").unwrap() as u64;
    let spans = get_api(port, &token, "/api/flame?t0=0&t1=99999999&min=0");
    let s = spans.as_array().unwrap().iter().find(|s| s[2] == fi).unwrap();
    let (f0, f1) = (s[0].as_u64().unwrap(), s[1].as_u64().unwrap());
    assert_eq!(f1 - f0, 3000, "{s}");
    // up to f's end and main's store: f exact, g absent
    let a = paths(port, &token, &range(0, f1 + 1));
    assert_eq!(a[&f], (1, vec![3000, 0, 3000 * 8], vec![3000, 0, 3000 * 8]), "{a:?}");
    assert_eq!(a[&main].2, vec![0, 1, 8]);
    assert!(!a.contains_key(&g), "g ran after the range: {a:?}");
    // g's phase: main was entered before it (no call counted there), f absent
    let b = paths(port, &token, &range(f1 + 1, n));
    assert_eq!(b[&g], (1, vec![0, 2000, 2000 * 8], vec![0, 2000, 2000 * 8]), "{b:?}");
    assert_eq!(b[&main].0, 0);
    assert!(!b.contains_key(&f), "f ran before the range: {b:?}");
    assert_eq!(add(&a, &b), whole);
    // the middle third of f: the call open at the range's start takes the loads
    let m = paths(port, &token, &range(f0 + 1000, f0 + 2000));
    assert_eq!(m[&f], (0, vec![1000, 0, 8000], vec![1000, 0, 8000]), "{m:?}");
    assert_eq!(m[&key(&[])].2, vec![0, 0, 0], "nothing at the root: {m:?}");
    assert_eq!(m.len(), 3, "{m:?}");
    // the other views of a range, and bad ranges in one line
    let bu = get_api(port, &token, &format!("/api/calltree?view=bottom&path={}", range(0, f1)));
    let names: Vec<&str> =
        bu["rows"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["f"], "{bu}");
    assert_eq!(bu["range"], json!([0, f1]));
    let host = format!("Host: 127.0.0.1:{port}\r\n");
    let (st, _, body) =
        crate::view::get_raw(port, &format!("/api/calltree?x0=9&x1=9&token={token}"), &host);
    assert_eq!(
        (st, String::from_utf8_lossy(&body).into_owned()),
        (400, "empty range: x0 9 ≥ x1 9 (the run has 5001 operations)".into())
    );
}

#[test]
fn view_range_call_tree_splits_add_up_with_recursion_and_threads() {
    let (_d1, t1) = recorded("view-range-calltree", "calltree.c");
    splits_add_up(&t1, &[1, 3, 5]);
    let (_d2, t2) = recorded("view-range-threads", "threads.c");
    splits_add_up(&t2, &[2, 4, 7]);
}

/// `exe` recorded into `trace` in 64 KB chunks, at least `min` of them.
fn small_chunks(exe: &Path, trace: &Path, min: u64) -> PathBuf {
    let out = Command::new(memlens())
        .env("MEMLENS_BUFFER_KB", "64")
        .args(["record", "-q", "-o"])
        .arg(trace)
        .arg("--")
        .arg(exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let o = run_memlens(&["info", "--fast", "--format", "json", trace.to_str().unwrap()]);
    let info: Value = serde_json::from_slice(&o.stdout).unwrap();
    let chunks = info["chunks"].as_u64().unwrap();
    assert!(chunks >= min, "{chunks} chunks: {info}");
    trace.to_path_buf()
}

#[test]
fn view_range_call_tree_of_a_late_range_steps_over_the_chunks_before_it() {
    // one thread in many chunks: a range's tree walks the chunks before it for
    // their calls only, and must still add up to the index's tree
    let dir = scratch("view-range-chunks");
    let exe = build(Cc::Gcc, "longcalls.c", &dir, &[]);
    let trace = small_chunks(&exe, &dir.join("t.trace"), 8);
    splits_add_up(&trace, &[1, 2, 5, 7]);
    // two threads in many chunks each, merged
    let exe2 = build(Cc::Gcc, "manychunks.c", &dir, &[]);
    splits_add_up(&small_chunks(&exe2, &dir.join("mt.trace"), 16), &[3, 6]);
    // the last eighth: outer's calls of mid were entered chunks before it
    let (_server, port, token) = serve_in_background(&trace, &[], None);
    let n = ops(port, &token);
    let whole = paths(port, &token, "");
    let (o, m, l) = (
        key(&["main", "outer"]),
        key(&["main", "outer", "mid"]),
        key(&["main", "outer", "mid", "leaf"]),
    );
    assert_eq!(whole[&m].0, 60);
    assert_eq!(whole[&l].0, 60 * 40);
    let late = paths(port, &token, &range(n * 7 / 8, n));
    assert_eq!(late[&o].0, 0, "outer was entered before the range: {late:?}");
    // main's own mid(30) at the end: 30 × (256 loads + 1 store) in leaf and mid
    let tail = key(&["main", "mid", "leaf"]);
    assert_eq!(late[&tail].0, 30, "{late:?}");
    assert_eq!(late[&tail].2[0], 30 * 256, "{late:?}");
    // ranges starting at a call of leaf, or one operation after it, all through
    // the run: the calls counted are exactly those that start inside
    let meta = get_api(port, &token, "/api/meta");
    let fi = meta["functions"].as_array().unwrap().iter().position(|x| x == "leaf").unwrap();
    let spans = get_api(port, &token, "/api/flame?t0=0&t1=999999999&min=0");
    let starts: Vec<u64> = spans
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s[2] == fi as u64)
        .map(|s| s[0].as_u64().unwrap())
        .collect();
    assert_eq!(starts.len(), 60 * 40 + 30);
    for (k, &s) in starts.iter().enumerate().step_by(61) {
        for x0 in [s, s + 1] {
            let v =
                get_api(port, &token, &format!("/api/calltree?view=bottom&path={}", range(x0, n)));
            let row = v["rows"].as_array().unwrap().iter().find(|r| r["name"] == "leaf").unwrap();
            let want = (starts.len() - k - usize::from(x0 > s)) as u64;
            assert_eq!(row["calls"].as_u64(), Some(want), "range {x0}..{n}: {row}");
        }
    }
}

/// A screenshot with the bottom panes scrolled into view.
fn shot(v: &Viewer, dir: &Path, name: &str) {
    v.b.js("document.getElementById('bottom').scrollIntoView({block: 'end'})");
    let d = std::env::var_os("MEMLENS_VIEW_SHOTS").map_or(dir.to_path_buf(), PathBuf::from);
    v.b.screenshot(&d.join(name));
}

#[test]
fn view_range_the_call_tree_and_the_heap_chart_follow_the_selection() {
    if !browser_available() {
        return;
    }
    let (dir, trace) = recorded("view-range-page", "phases.c");
    let v = Viewer::open(&trace);
    v.b.cmd("POST", "/window/rect", Some(json!({"width": 1600, "height": 900})));
    v.wait_for("memlens.restored");
    let fi = v.b.js("return memlens.meta.functions.indexOf('f')");
    let span = v.b.js(&format!(
        "const s = memlens.st.allSpans.find(s => s[2] === {fi}); return [s[0], s[1]]"
    ));
    let (f0, f1) = (span[0].as_u64().unwrap(), span[1].as_u64().unwrap());
    // the call tree of f's phase: f's loads, no g; the note says so
    v.b.js_async("const done = arguments[0]; memlens.showView('calls').then(() => done(1))");
    v.wait_for("memlens.callTree.data().some(r => r.name === 'main')");
    v.b.js_async(&format!(
        "const done = arguments[0]; memlens.setRange({f0}, {f1}).then(() => done(1))"
    ));
    v.wait_for(&format!("memlens.callTree.range() && memlens.callTree.range().t1 === {f1}"));
    v.b.js_async("const done = arguments[0]; memlens.callTree.expand(5).then(() => done(1))");
    let rows = v.b.js("return memlens.callTree.data().map(r => [r.name, r.incl[0], r.incl[1]])");
    let rows = rows.as_array().unwrap();
    assert!(rows.iter().any(|r| r == &json!(["f", 3000, 0])), "{rows:?}");
    assert!(!rows.iter().any(|r| r[0] == "g"), "{rows:?}");
    let note =
        v.b.js("const n = document.getElementById('ctnote'); return n.hidden ? '' : n.textContent");
    assert!(note.as_str().unwrap().starts_with("call tree of the selected range"), "{note}");
    shot(&v, &dir, "calltree-range.png");
    // the heap chart of the same range, on the merged order: its request and axis
    v.b.js("const x = document.getElementById('xmode'); x.value = 'order'; x.dispatchEvent(new Event('change'))");
    v.b.js_async("const done = arguments[0]; memlens.showView('heap').then(() => done(1))");
    v.wait_for(&format!("memlens.heapView.data() && memlens.heapView.data().x1 === {f1}"));
    let q = v.b.js("const q = memlens.heapView.query(); return [q.axis, q.op0, q.op1]");
    assert_eq!(q, json!(["order", f0, f1]));
    assert_eq!(
        v.b.js(
            "const c = document.getElementById('heapchart'); return [+c.dataset.x0, +c.dataset.x1]"
        ),
        json!([f0, f1])
    );
    let note = v.b.js("return memlens.heapView.note()");
    assert!(note.as_str().unwrap().starts_with("showing the selected range op "), "{note}");
    let heads =
        v.b.js("return [...document.querySelectorAll('#heapsites .hsec')].map(e => e.textContent)");
    assert!(
        heads.as_array().unwrap().iter().all(|h| h.as_str().unwrap().contains("whole run")),
        "{heads}"
    );
    shot(&v, &dir, "heap-range.png");
    // clearing the selection: the whole run again in both
    v.b.js("document.querySelector('#heapnote button').click()");
    let n = v.b.js("return memlens.meta.ops");
    v.wait_for(&format!("memlens.heapView.data().x1 === {n} && memlens.heapView.note() === ''"));
    v.b.js_async("const done = arguments[0]; memlens.showView('calls').then(() => done(1))");
    v.wait_for(
        "memlens.callTree.range() === null && memlens.callTree.data().some(r => r.name === 'main')",
    );
    v.b.js_async("const done = arguments[0]; memlens.callTree.expand(5).then(() => done(1))");
    let names = v.b.js("return memlens.callTree.names()");
    assert!(names.as_array().unwrap().iter().any(|n| n == "g"), "{names}");
    assert_eq!(v.b.js("return document.getElementById('ctnote').hidden"), json!(true));
}

#[test]
fn view_range_the_heap_chart_shows_a_time_selection_in_time() {
    if !browser_available() {
        return;
    }
    let (dir, trace) = recorded("view-range-heap", "calltree.c");
    let v = Viewer::open(&trace);
    v.b.cmd("POST", "/window/rect", Some(json!({"width": 1600, "height": 900})));
    v.wait_for("memlens.restored");
    assert_eq!(v.b.js("return memlens.lanes.mode"), json!("time"));
    v.wait_for("memlens.lanes.draws > 0");
    // the middle third of the run's time, selected on the lanes
    let t = v.b.js("const t = memlens.meta.time; return [t.t0, t.t1]");
    let (t0, t1) = (t[0].as_u64().unwrap(), t[1].as_u64().unwrap());
    let (a, b) = (t0 + (t1 - t0) / 3, t0 + 2 * (t1 - t0) / 3);
    v.b.js_async(&format!(
        "const done = arguments[0]; memlens.lanesSelect({a}, {b}).then(() => done(1))"
    ));
    v.wait_for("memlens.st.range !== null");
    v.b.js_async("const done = arguments[0]; memlens.showView('heap').then(() => done(1))");
    v.wait_for(&format!("memlens.heapView.data() && memlens.heapView.data().x0 === {a}"));
    let q = v
        .b
        .js("const q = memlens.heapView.query(); return [q.axis, q.x0, q.x1, q.op0 === undefined]");
    assert_eq!(q, json!(["time", a, b, true]));
    let d =
        v.b.js("const d = memlens.heapView.data(); return [d.axis, d.x0, d.x1, d.bins.length > 0]");
    assert_eq!(d, json!(["time", a, b, true]));
    let note = v.b.js("return memlens.heapView.note()");
    assert!(note.as_str().unwrap().starts_with("showing the selected range +"), "{note}");
    shot(&v, &dir, "heap-range-time.png");
}
