//! The viewer's navigation (docs/viewer.md, "Navigation: URL, search, keys, library
//! frames") in headless chromium, on `navprog.cpp` built at -O0 (std::vector's header
//! functions stay real frames under /usr) and copied under a name that is HTML.

use crate::util::*;
use crate::view::{browser_available, Viewer};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const SRC: &str = "navprog.cpp";
const HOSTILE: &str = "<img src=x onerror=alert(1)>.cpp";

/// The program under the hostile name, built with `memlens c++ -O0` and recorded.
fn recorded(name: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(name);
    let exe =
        crate::view::build_copy_as(&dir, SRC, HOSTILE, &["c++", "-O0"], ("MEMLENS_CXX", "g++"));
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &[]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    (dir, trace)
}

fn page_url(v: &Viewer) -> String {
    format!("http://127.0.0.1:{}/?token={}", v.port, v.token)
}

/// Loads `url` afresh (via about:blank: a new hash alone would not reload) and
/// waits until the page restored its state from the hash.
fn reload(v: &Viewer, url: &str) {
    v.b.cmd("POST", "/url", Some(json!({"url": "about:blank"})));
    v.b.cmd("POST", "/url", Some(json!({"url": url})));
    let t = Instant::now();
    while v.b.js("return !!(window.memlens && window.memlens.restored)") != json!(true) {
        let err = v.b.js("return window.memlens && window.memlens.error || null");
        assert!(err.is_null(), "page failed: {err}");
        assert!(t.elapsed() < Duration::from_secs(60), "the page did not restore its state");
        std::thread::sleep(Duration::from_millis(100));
    }
    v.idle();
}

/// Keys typed into whatever has the focus (WebDriver actions).
fn keys(v: &Viewer, text: &str) {
    let mut acts = Vec::new();
    for c in text.chars() {
        acts.push(json!({"type": "keyDown", "value": c.to_string()}));
        acts.push(json!({"type": "keyUp", "value": c.to_string()}));
    }
    v.b.cmd(
        "POST",
        "/actions",
        Some(json!({"actions": [{"type": "key", "id": "kb", "actions": acts}]})),
    );
}

const ENTER: &str = "\u{E007}";
const ESCAPE: &str = "\u{E00C}";

fn hash(v: &Viewer) -> String {
    v.b.js("return location.hash").as_str().unwrap().to_string()
}

/// The hash once the page wrote it with `part` in it.
fn hash_with(v: &Viewer, part: &str) -> String {
    v.wait_for(&format!("location.hash.includes({})", json!(part)));
    hash(v)
}

fn num(v: &Value) -> u64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}")) as u64
}

#[test]
fn view_ux_url_state_survives_a_reload_and_bad_values_are_ignored() {
    if !browser_available() {
        return;
    }
    let (dir, trace) = recorded("view-ux-url");
    let full = dir.join(HOSTILE).to_str().unwrap().to_string();
    let sum = line_of(SRC, "sum-load");
    let v = Viewer::open(&trace);
    v.wait_for("memlens.restored");
    let ops = num(&v.b.js("return memlens.meta.ops"));
    assert!(ops > 1000, "{ops} operations");
    // a state: a zoomed view, a selected range, a source line, another table, the other axis
    let (t0, t1, r0, r1) = (ops / 4, ops / 2, ops / 3, ops / 3 + ops / 20);
    v.b.js_async(&format!(
        "const done = arguments[0]; memlens.setView({t0}, {t1}).then(() => memlens.setRange({r0}, {r1})).then(done)"
    ));
    v.b.js_async(&format!(
        "const done = arguments[0]; memlens.showFile({f}, {sum}).then(() => memlens.selectSourceLine({f}, {sum})).then(() => done(1))",
        f = json!(full)
    ));
    let tab = v.b.js("return document.querySelectorAll('#tabs button')[1].dataset.key");
    v.b.js("document.querySelectorAll('#tabs button')[1].click()");
    v.b.js("const x = document.getElementById('xmode'); x.value = 'order'; x.dispatchEvent(new Event('change'))");
    let h = hash_with(&v, "x=order");
    for part in [
        format!("t0={t0}&t1={t1}"),
        format!("r0={r0}&r1={r1}"),
        format!("line={sum}"),
        format!("tab={}", tab.as_str().unwrap()),
    ] {
        assert!(h.contains(&part), "{part} not in {h}");
    }
    // the same URL in a fresh page shows the same view
    reload(&v, &format!("{}{h}", page_url(&v)));
    let st = v.b.js(
        "const s = memlens.st; return [s.t0, s.t1, s.range && s.range.t0, s.range && s.range.t1, s.file, s.line, document.getElementById('xmode').value, document.querySelector('#tabs button.on').dataset.key]",
    );
    assert_eq!(st, json!([t0, t1, r0, r1, full, sum, "order", tab]));
    v.wait_for(&format!("document.querySelector(\"#code .srcline.sel[data-line='{sum}']\")"));
    assert_eq!(hash(&v), h, "the restored page wrote another state");
    // bad values are ignored, none reaches the page as markup
    let bad = "#t0=abc&t1=-5&r0=9&r1=1&file=%3Cimg%20src%3Dx%20onerror%3Dalert(2)%3E&line=x&view=%3Cb%3E&tab=nope&x=evil&lib=2";
    reload(&v, &format!("{}{bad}", page_url(&v)));
    let st = v.b.js(
        "const s = memlens.st; return [s.t0, s.t1, s.range, s.file, s.hideLib, s.view || 'source', document.getElementById('xmode').value === 'evil']",
    );
    assert_eq!(st, json!([0, ops, null, null, false, "source", false]));
    assert_eq!(v.b.js("return document.querySelectorAll('img, [onerror]').length"), json!(0));
}

#[test]
fn view_ux_search_keys_library_filter_and_paths() {
    if !browser_available() {
        return;
    }
    let (dir, trace) = recorded("view-ux-nav");
    let full = dir.join(HOSTILE).to_str().unwrap().to_string();
    let fill = line_of(SRC, "fill-store");
    let v = Viewer::open(&trace);
    v.wait_for("memlens.restored");
    v.b.cmd("POST", "/window/rect", Some(json!({"width": 1600, "height": 900})));
    // paths: relative to the program's directory, the full path on hover
    assert_eq!(v.b.js("return memlens.root()"), json!(format!("{}/", dir.to_str().unwrap())));
    let node = v.b.js(&format!(
        "const n = [...document.querySelectorAll('#tree .node')].find(e => e.title === {}); return n && n.firstChild.textContent",
        json!(full)
    ));
    assert_eq!(node, json!(HOSTILE));
    // `/` focuses the search; a function's name lists it, Enter opens its first hot line
    v.b.js("document.activeElement.blur()");
    keys(&v, "/");
    assert_eq!(v.b.js("return document.activeElement.id"), json!("search"));
    keys(&v, "fill_tab");
    v.wait_for("document.querySelector('#searchres .hit')");
    let hits = v.b.js(
        "return [...document.querySelectorAll('#searchres .hit')].map(d => [d.querySelector('.kind').textContent, d.querySelector('.name').textContent])",
    );
    assert_eq!(hits[0], json!(["function", "fill_table(int)"]), "{hits}");
    keys(&v, ENTER);
    v.wait_for(&format!("document.querySelector(\"#code .srcline.sel[data-line='{fill}']\")"));
    assert_eq!(v.b.js("return [memlens.st.file, memlens.st.line]"), json!([full, fill]));
    let title =
        v.b.js("const p = document.querySelector('#code .path'); return [p.textContent, p.title]");
    assert_eq!(title, json!([HOSTILE, full]));
    let h = hash_with(&v, &format!("line={fill}"));
    assert!(h.contains("q=fill_tab"), "{h}");
    // the file named like HTML is listed as text; nothing became markup
    v.b.js("document.getElementById('search').focus()");
    keys(&v, &format!("{ESCAPE}/onerror"));
    v.wait_for("document.querySelector('#searchres .hit')");
    let hits = v.b.js(
        "return [...document.querySelectorAll('#searchres .hit')].map(d => [d.querySelector('.kind').textContent, d.querySelector('.name').textContent, d.title])",
    );
    assert_eq!(hits, json!([["file", HOSTILE, full]]));
    shot(&v, &dir, "view-ux-search.png");
    assert_eq!(v.b.js("return document.querySelectorAll('img').length"), json!(0));
    // a variable opens at its row of the variables table
    keys(&v, &format!("{ESCAPE}/table"));
    v.wait_for("document.querySelector('#searchres .hit')");
    let first = v.b.js(
        "const d = document.querySelector('#searchres .hit'); return [d.querySelector('.kind').textContent, d.querySelector('.name').textContent]",
    );
    assert_eq!(first, json!(["variable", "table"]));
    keys(&v, ENTER);
    v.wait_for("document.querySelector('#table tr.row.sel')");
    assert_eq!(
        v.b.js("return document.querySelector('#table tr.row.sel').dataset.variable"),
        json!("table")
    );
    v.b.js("document.getElementById('search').focus()");
    keys(&v, ESCAPE);
    assert_eq!(v.b.js("return [document.getElementById('search').value, document.getElementById('searchres').hidden]"), json!(["", true]));
    // keys: w zooms in, d pans right, s zooms out, ? shows the help, j steps to the next hot line
    v.b.js("document.activeElement.blur()");
    let view = |v: &Viewer| {
        let r = v.b.js("return [memlens.st.t0, memlens.st.t1]");
        (r[0].as_f64().unwrap(), r[1].as_f64().unwrap())
    };
    let (a0, a1) = view(&v);
    keys(&v, "w");
    let (b0, b1) = view(&v);
    assert!(b1 - b0 < a1 - a0, "w did not zoom in: {a0}..{a1} → {b0}..{b1}");
    keys(&v, "d");
    let (c0, c1) = view(&v);
    assert!(c0 > b0 && (c1 - c0 - (b1 - b0)).abs() < 1.0, "d did not pan: {b0}..{b1} → {c0}..{c1}");
    keys(&v, "s");
    assert!(view(&v).1 - view(&v).0 > c1 - c0, "s did not zoom out");
    keys(&v, "?");
    assert_eq!(v.b.js("return document.getElementById('help').hidden"), json!(false));
    keys(&v, ESCAPE);
    assert_eq!(v.b.js("return document.getElementById('help').hidden"), json!(true));
    let hot: Vec<u64> = v
        .b
        .js("return [...document.querySelectorAll('#code .srcline[data-line]')].filter(d => d.querySelector('.m.hot')).map(d => +d.dataset.line)")
        .as_array()
        .unwrap()
        .iter()
        .map(num)
        .collect();
    let next = *hot.iter().find(|&&l| l > fill).expect("a hot line after fill_table's");
    keys(&v, "j");
    v.wait_for(&format!("memlens.st.line === {next}"));
    keys(&v, "k");
    v.wait_for(&format!("memlens.st.line === {fill}"));

    // the library filter: std::vector's frames (files under /usr) leave the flame chart
    v.b.js_async("const done = arguments[0]; memlens.setView(0, memlens.meta.ops).then(done)");
    let flame = || v.b.js("return memlens.flameFunctions()");
    let under_usr = || {
        v.b.js("return memlens.flameFunctions().filter(f => (memlens.funcFile.get(f) || '').startsWith('/usr/'))")
    };
    // each function's file is its entry's (function_files), with or without operations of its own
    let files = v.b.js(
        "return ['main', 'std::vector<long, std::allocator<long> >::push_back(long&&)'].map(f => memlens.funcFile.get(f))",
    );
    assert_eq!(files[0], json!(full));
    assert!(
        files[1].as_str().is_some_and(|f| f.starts_with("/usr/") && f.ends_with("stl_vector.h")),
        "{files}"
    );
    let before = under_usr();
    assert!(
        !before.as_array().unwrap().is_empty(),
        "no frame from a file under /usr drawn: {}",
        flame()
    );
    v.b.click("#hidelib");
    v.wait_for("memlens.st.hideLib");
    // what stays: the program's own three functions
    let own =
        ["fill_table(int)", "main", "sum_table(std::vector<long, std::allocator<long> > const&)"];
    assert_eq!(flame(), json!(own));
    assert_eq!(under_usr(), json!([]));
    assert!(hash_with(&v, "lib=1").contains("lib=1"));
    // the call tree: library rows merged into their callers' self cost
    v.b.js_async("const done = arguments[0]; memlens.showView('calls').then(done)");
    // main's self cost is merged before it is expanded
    let main_first = v.b.js("return memlens.callTree.data().find(r => r.name === 'main').excl");
    v.b.js_async("const done = arguments[0]; memlens.callTree.expand(20).then(done)");
    let rows = v.b.js("return memlens.callTree.data()");
    let rows = rows.as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).skip(1).collect();
    assert!(names.iter().all(|n| own.contains(n)), "{names:?}");
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["name"].as_str().unwrap().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} row: {rows:?}"))
    };
    let pair = |c: &Value| (num(&c[0]), num(&c[1]));
    let (main, fillr, sumr) = (row("main"), row("fill_table"), row("sum_table"));
    // main's callees are fill_table, sum_table and std:: code only: its self cost
    // is now everything but the two
    let (mi, fi, si) = (pair(&main["incl"]), pair(&fillr["incl"]), pair(&sumr["incl"]));
    assert_eq!(pair(&main["excl"]), (mi.0 - fi.0 - si.0, mi.1 - fi.1 - si.1));
    assert_eq!(pair(&main_first), pair(&main["excl"]));
    assert_eq!(pair(&sumr["excl"]), si, "sum_table calls only std:: code");
    // a reload with the hash keeps the filter
    let h = hash_with(&v, "view=calls");
    reload(&v, &format!("{}{h}", page_url(&v)));
    assert_eq!(
        v.b.js("return [memlens.st.hideLib, document.getElementById('hidelib').checked]"),
        json!([true, true])
    );
    v.b.js_async("const done = arguments[0]; memlens.showView('source').then(() => memlens.setView(0, memlens.meta.ops)).then(done)");
    assert_eq!(flame(), json!(own), "library frames drawn after the reload");
    shot(&v, &dir, "view-ux.png");
}

fn shot(v: &Viewer, dir: &Path, name: &str) {
    let d = std::env::var_os("MEMLENS_VIEW_SHOTS").map_or(dir.to_path_buf(), PathBuf::from);
    v.b.screenshot(&d.join(name));
}

#[test]
fn view_ux_call_tree_mode_and_function_survive_a_reload() {
    if !browser_available() {
        return;
    }
    let (_dir, trace) = recorded("view-ux-calltree");
    let v = Viewer::open(&trace);
    v.wait_for("memlens.restored");
    v.b.js_async("const done = arguments[0]; memlens.showView('calls').then(() => done(1))");
    v.wait_for("memlens.callTree.data().some(r => r.name === 'main')");
    // the callers/callees of fill_table, as a click on its row opens them
    v.b.js_async("const done = arguments[0]; memlens.callTree.expand(20).then(() => done(1))");
    let fid = v.b.js("const r = memlens.callTree.data().find(r => r.name.startsWith('fill_table')); return r ? r.fid : null");
    let fid = fid.as_u64().unwrap_or_else(|| panic!("no fill_table row: {fid}"));
    v.b.js_async(&format!(
        "const done = arguments[0]; memlens.callTree.show('function', {fid}).then(() => done(1))"
    ));
    let h = hash_with(&v, "ct=function");
    assert!(h.contains("view=calls") && h.contains(&format!("ctf={fid}")), "{h}");
    reload(&v, &format!("{}{h}", page_url(&v)));
    v.wait_for("memlens.restored");
    assert_eq!(
        v.b.js("return [memlens.callTree.mode(), memlens.callTree.fn()]"),
        json!(["function", fid])
    );
    assert_eq!(hash(&v), h, "the restored page wrote another state");
    // the bottom-up mode too; a function id the trace does not have leaves the tree top-down
    v.b.js("document.getElementById('ctmode').value = 'bottom'; document.getElementById('ctmode').dispatchEvent(new Event('change'))");
    let h = hash_with(&v, "ct=bottom");
    assert!(!h.contains("ctf="), "{h}");
    reload(&v, &format!("{}#view=calls&ct=function&ctf=999999999", page_url(&v)));
    v.wait_for("memlens.restored");
    assert_eq!(v.b.js("return memlens.callTree.mode()"), json!("top"));
}
