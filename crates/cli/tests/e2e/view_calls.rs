//! The viewer's call tree and heap over time (docs/viewer.md) against `memlens report
//! --by function` and `memlens analyze heap`, on a tree builder (`calltree.c`: nested
//! and recursive calls, three trees built and freed, one leak), and both views in
//! the browser.

use crate::util::*;
use crate::view::{browser_available, get_raw, serve_in_background, Viewer};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn api(port: u16, token: &str, path: &str) -> Value {
    crate::view::get_api(port, token, path)
}

fn recorded(name: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(name);
    let exe = build(Cc::Gcc, "calltree.c", &dir, &[]);
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &[]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    (dir, trace)
}

fn pair(c: &Value) -> (u64, u64) {
    (c[0].as_u64().unwrap(), c[1].as_u64().unwrap())
}

/// Every node of the top-down tree under `node`, depth first: (name, incl, excl,
/// calls, children's names).
fn walk(port: u16, token: &str, node: u64, out: &mut Vec<(String, Value, Value, u64)>) {
    let v = api(port, token, &format!("/api/calltree?view=top&node={node}"));
    let me = &v["self"];
    // inclusive = exclusive + the children's inclusive
    let mut sum = pair(&me["excl"]);
    for r in v["rows"].as_array().unwrap() {
        let c = pair(&r["incl"]);
        sum = (sum.0 + c.0, sum.1 + c.1);
    }
    assert_eq!(sum, pair(&me["incl"]), "node {node} ({})", me["name"]);
    out.push((
        me["name"].as_str().unwrap().to_string(),
        me["incl"].clone(),
        me["excl"].clone(),
        me["calls"].as_u64().unwrap(),
    ));
    for r in v["rows"].as_array().unwrap() {
        walk(port, token, r["node"].as_u64().unwrap(), out);
    }
}

#[test]
fn view_call_tree_and_heap_agree_with_report_and_analyze_heap() {
    let (_dir, trace) = recorded("view-calls");
    let t = trace.to_str().unwrap();
    // what report counts per function, and the trace's totals
    let mut by_fn: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for r in report(&trace, "function") {
        let (l, s) = (r["loads"].as_u64().unwrap(), r["stores"].as_u64().unwrap());
        if l + s > 0 {
            by_fn.insert(r["function"].as_str().unwrap().to_string(), (l, s));
        }
    }
    let totals = by_fn.values().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let i = info(&trace);
    assert_eq!(totals, (i["loads"].as_u64().unwrap(), i["stores"].as_u64().unwrap()));
    for f in ["main", "build", "make_node", "sum", "free_tree", "leak"] {
        assert!(by_fn.contains_key(f), "{f} not in report: {by_fn:?}");
    }
    // the viewer's tables keep 100 rows, as `--top 100`
    let heap = json(&["analyze", "heap", "--top", "100", "--format", "json", t]);
    let all = json(&["analyze", "heap", "--top", "0", "--format", "json", t]);

    let (_server, port, token) = serve_in_background(&trace, &[], None);
    // bottom-up, top level: each function's own loads and stores = report's
    let bu = api(port, &token, "/api/calltree?view=bottom&path=");
    let mut seen: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for r in bu["rows"].as_array().unwrap() {
        seen.insert(r["name"].as_str().unwrap().to_string(), pair(&r["excl"]));
    }
    let outside = seen.remove("(outside any function)").unwrap_or((0, 0));
    assert_eq!(seen, by_fn, "bottom-up self cost per function vs report --by function");
    assert_eq!(outside, (0, 0), "every access of calltree.c happens inside a function");

    // top-down: the root's inclusive is the trace's; exclusive costs sum to it
    let mut nodes = Vec::new();
    walk(port, &token, 0, &mut nodes);
    assert_eq!(pair(&nodes[0].1), totals);
    let excl = nodes.iter().fold((0, 0), |a, n| {
        let e = pair(&n.2);
        (a.0 + e.0, a.1 + e.1)
    });
    assert_eq!(excl, totals);
    // calls: three trees of depth 6, 7, 8 (2^7-1 + 2^8-1 + 2^9-1 nodes)
    let calls = |f: &str| nodes.iter().filter(|n| n.0 == f).map(|n| n.3).sum::<u64>();
    assert_eq!(calls("build"), 127 + 255 + 511);
    assert_eq!(calls("make_node"), 127 + 255 + 511);
    assert_eq!(calls("main"), 1);
    assert_eq!(calls("leak"), 1);
    // per function, the nodes' exclusive costs add up to report's
    for (f, want) in &by_fn {
        let got = nodes.iter().filter(|n| &n.0 == f).fold((0, 0), |a, n| {
            let e = pair(&n.2);
            (a.0 + e.0, a.1 + e.1)
        });
        assert_eq!(got, *want, "{f}");
    }

    // callers and callees of build: main and build itself call it; it calls
    // make_node and build; its inclusive cost (recursion once) is main → build's
    let names: BTreeMap<String, u64> = bu["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap().to_string(), r["function"].as_u64().unwrap()))
        .collect();
    let f = api(port, &token, &format!("/api/calltree?view=function&function={}", names["build"]));
    assert_eq!(f["name"], "build");
    assert_eq!(f["calls"], 893);
    let list = |k: &str| -> Vec<String> {
        let mut v: Vec<String> =
            f[k].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().into()).collect();
        v.sort();
        v
    };
    assert_eq!(list("callers"), ["build", "main"]);
    assert_eq!(list("callees"), ["build", "make_node"]);
    let main_build: u64 =
        nodes.iter().filter(|n| n.0 == "build").map(|n| n.1[0].as_u64().unwrap()).max().unwrap();
    assert_eq!(f["incl"][0].as_u64().unwrap(), main_build, "the outermost builds only");
    let from_main = f["callers"].as_array().unwrap().iter().find(|e| e["name"] == "main").unwrap();
    assert_eq!(from_main["calls"], 3);
    assert_eq!(from_main["incl"], f["incl"]);
    assert_eq!(pair(&f["excl"]), by_fn["build"]);

    // heap over time: analyze heap's peak and sites
    let h = api(port, &token, "/api/heap?axis=order&n=300");
    let peak = heap["summary"][0]["max_live_bytes"].as_u64().unwrap();
    assert_eq!(peak, 511 * 24, "the biggest tree: 511 nodes of 24 bytes");
    assert_eq!(h["peak"]["bytes"], peak);
    assert_eq!(h["at_peak"], heap["at_peak"]);
    assert_eq!(h["leaks"], heap["leaks"]);
    // at the peak: the 511 nodes of the last tree (sites differ by call stack), and
    // at exit only the leak
    let node_line = line_of("calltree.c", "alloc-node");
    let leak_line = line_of("calltree.c", "alloc-leak");
    let at_peak = all["at_peak"].as_array().unwrap();
    assert!(at_peak.iter().all(|r| r["line"] == node_line), "{at_peak:?}");
    let sum = |k: &str| at_peak.iter().map(|r| r[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!((sum("at_peak_bytes"), sum("at_peak_blocks")), (peak, 511));
    let leaks = all["leaks"].as_array().unwrap();
    assert_eq!(leaks.len(), 1, "{leaks:?}");
    assert_eq!(leaks[0]["line"], leak_line);
    assert_eq!(
        (&leaks[0]["live_bytes_at_end"], &leaks[0]["live_at_end"]),
        (&json!(800), &json!(1))
    );
    let bins = h["bins"].as_array().unwrap();
    assert_eq!(bins.len(), 300);
    let most = bins.iter().map(|b| b[2].as_u64().unwrap()).max().unwrap();
    assert_eq!(most, peak);
    assert_eq!(bins.last().unwrap()[3], 800, "at exit only the leak is live");
    let allocated: u64 = bins.iter().map(|b| b[4].as_u64().unwrap()).sum();
    assert_eq!(allocated, heap["summary"][0]["bytes"].as_u64().unwrap());
    // the peak falls in the bin that shows it
    let op = h["peak"]["op"].as_u64().unwrap();
    let pb = bins.iter().find(|b| b[0].as_u64().unwrap() <= op && op < b[1].as_u64().unwrap());
    assert_eq!(pb.unwrap()[2], peak);
    // on the wall-clock axis: the same peak, at a time inside the run
    let ht = api(port, &token, "/api/heap?axis=time&n=200");
    assert_eq!(ht["axis"], "time");
    let ns = ht["peak"]["ns"].as_u64().unwrap();
    assert!(ht["x0"].as_u64().unwrap() <= ns && ns <= ht["x1"].as_u64().unwrap());
    let most = ht["bins"].as_array().unwrap().iter().map(|b| b[2].as_u64().unwrap()).max();
    assert_eq!(most, Some(peak));
    // bad requests: one line naming the problem
    let host = format!("Host: 127.0.0.1:{port}\r\n");
    let (st, _, body) = get_raw(port, &format!("/api/calltree?view=nope&token={token}"), &host);
    assert_eq!(
        (st, String::from_utf8_lossy(&body).into_owned()),
        (400, "bad view: nope (top, bottom or function)".into())
    );
}

/// Where screenshots go: `MEMLENS_VIEW_SHOTS` if set, else the scratch directory.
fn shot(v: &Viewer, dir: &Path, name: &str) {
    let d = std::env::var_os("MEMLENS_VIEW_SHOTS").map_or(dir.to_path_buf(), PathBuf::from);
    v.b.screenshot(&d.join(name));
}

/// The pane `id` lies inside the 1600x900 window once scrolled into view.
fn fits(v: &Viewer, id: &str) {
    let r = v.b.js(&format!(
        "const e = document.getElementById('{id}'); e.scrollIntoView({{block: 'nearest'}}); \
         const r = e.getBoundingClientRect(); \
         return [r.left, r.top, r.right, r.bottom, innerWidth, innerHeight, e.scrollWidth <= e.clientWidth + 1];"
    ));
    let n = |k: usize| r[k].as_f64().unwrap();
    assert!(n(4) <= 1600.0 && n(5) <= 900.0, "window {r}");
    assert!(
        n(0) >= 0.0 && n(1) >= 0.0 && n(2) <= n(4) && n(3) <= n(5),
        "{id} outside the window: {r}"
    );
    assert_eq!(r[6], true, "{id} overflows sideways");
}

#[test]
fn viewer_shows_the_call_tree_and_the_heap_over_time() {
    if !browser_available() {
        return;
    }
    let (dir, trace) = recorded("view-calls-page");
    let t = trace.to_str().unwrap();
    let heap = json(&["analyze", "heap", "--top", "100", "--format", "json", t]);
    let v = Viewer::open(&trace);
    v.b.cmd("POST", "/window/rect", Some(json!({"width": 1600, "height": 900})));
    // the call tree: top-down, opened three levels deep
    v.b.click("#views button[data-view='calls']");
    v.wait_for("document.querySelectorAll('#ctable tr.ctrow').length >= 2");
    let rows = v.b.js_async("const done = arguments[0]; memlens.callTree.expand(4).then(done);");
    assert!(rows.as_u64().unwrap() >= 6, "{rows}");
    let names = v.b.js("return memlens.callTree.names()");
    for f in ["main", "build", "make_node", "sum", "free_tree", "leak"] {
        assert!(names.as_array().unwrap().iter().any(|n| n == f), "{f} not drawn: {names}");
    }
    let cell = v.b.js("return [...document.querySelectorAll('#ctable td.ctname')].map(e => e.textContent).join('|')");
    assert!(cell.as_str().unwrap().contains("make_node"), "{cell}");
    fits(&v, "calltree");
    shot(&v, &dir, "calltree-top.png");
    // sorting by a column reorders the rows
    v.b.click("#ctable th[data-key='es']");
    assert!(v
        .b
        .js("return document.querySelector('#ctable th[data-key=es]').textContent")
        .as_str()
        .unwrap()
        .ends_with('▾'));
    // bottom-up and callers/callees
    v.b.js_async("const done = arguments[0]; memlens.callTree.show('bottom').then(() => done(1));");
    assert_eq!(v.b.js("return memlens.callTree.mode()"), "bottom");
    assert!(v
        .b
        .js("return memlens.callTree.names()")
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n == "make_node"));
    shot(&v, &dir, "calltree-bottom.png");
    v.b.js("[...document.querySelectorAll('#ctable td.ctname')].find(e => e.dataset.function === 'build').click()");
    v.wait_for("memlens.callTree.mode() === 'function' && memlens.callTree.rows() >= 4");
    let fnames = v.b.js("return memlens.callTree.names()");
    for f in ["main", "build", "make_node"] {
        assert!(fnames.as_array().unwrap().iter().any(|n| n == f), "{f}: {fnames}");
    }
    fits(&v, "calltree");
    shot(&v, &dir, "calltree-function.png");
    // the heap over time
    v.b.click("#views button[data-view='heap']");
    v.wait_for("memlens.heapView.data() && memlens.heapView.draws() > 0");
    let peak = heap["summary"][0]["max_live_bytes"].clone();
    assert_eq!(v.b.js("return +document.getElementById('heapchart').dataset.peak"), peak);
    assert_eq!(v.b.js("return document.getElementById('heapchart').dataset.axis"), "time");
    let sites =
        v.b.js("return [...document.querySelectorAll('#hpeak td.t')].map(e => e.dataset.site)");
    let shown = v.b.js("return document.querySelector('#hpeak td.t').textContent");
    assert!(shown.as_str().unwrap().starts_with("calltree.c:"), "{shown}");
    let want =
        heap["at_peak"].as_array().unwrap().iter().map(|r| r["site"].clone()).collect::<Vec<_>>();
    assert_eq!(sites.as_array().unwrap(), &want);
    let leaks = v.b.js("return document.querySelectorAll('#hleaks tr.row').length");
    assert_eq!(leaks, heap["leaks"].as_array().unwrap().len());
    fits(&v, "heapview");
    shot(&v, &dir, "heap.png");
    // the merged-order axis
    v.b.js("const x = document.getElementById('xmode'); x.value = 'order'; x.dispatchEvent(new Event('change'));");
    v.wait_for("document.getElementById('heapchart').dataset.axis === 'order'");
    shot(&v, &dir, "heap-order.png");
}

/// A helper inlined at main's first instructions (`inlentry.c`, -O2) names the
/// code there, but not the frame the call entered: the flame chart's functions,
/// the call tree and the speedscope export call it `main` (they called it
/// `arg_long`), while `report --by function` still counts the helper's own
/// accesses under its name.
#[test]
fn a_helper_inlined_at_a_function_entry_does_not_name_the_frame() {
    for cc in Cc::all() {
        let dir = scratch(&format!("view-inlentry-{cc:?}"));
        let exe = build(cc, "inlentry.c", &dir, &["-g"]);
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &["5000"]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        let t = trace.to_str().unwrap();
        // the premise: the helper is inlined into main
        let by_fn: Vec<String> = report(&trace, "function")
            .iter()
            .map(|r| r["function"].as_str().unwrap().to_string())
            .collect();
        assert!(by_fn.iter().any(|f| f == "arg_long"), "{cc:?}: {by_fn:?}");
        assert!(by_fn.iter().any(|f| f == "work"), "{cc:?}: {by_fn:?}");

        let out = run_memlens(&["view", "--no-serve", t]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        let meta: Value = serde_json::from_slice(
            &std::fs::read(dir.join("t.trace.mlview").join("meta.json")).unwrap(),
        )
        .unwrap();
        let mut funcs: Vec<&str> =
            meta["functions"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
        funcs.sort();
        assert_eq!(funcs, ["main", "work"], "{cc:?}: the flame chart's functions");

        let ss = dir.join("t.speedscope.json");
        let out = run_memlens(&["export", "--format", "speedscope", "-o", ss.to_str().unwrap(), t]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        let v: Value = serde_json::from_slice(&std::fs::read(&ss).unwrap()).unwrap();
        let mut frames: Vec<&str> = v["shared"]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        frames.sort();
        assert_eq!(frames, ["main", "work"], "{cc:?}: speedscope's frames");

        let (_server, port, token) = serve_in_background(&trace, &[], None);
        let top = api(port, &token, "/api/calltree?view=top&node=0");
        let rows: Vec<&str> =
            top["rows"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
        assert_eq!(rows, ["main"], "{cc:?}: the call tree's root");
        let main = top["rows"][0]["node"].as_u64().unwrap();
        let v = api(port, &token, &format!("/api/calltree?view=top&node={main}"));
        let rows: Vec<&str> =
            v["rows"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
        assert_eq!(rows, ["work"], "{cc:?}: main's callees");
    }
}
