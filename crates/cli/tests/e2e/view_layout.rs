//! The viewer's resizable panes and the views that follow the time selection
//! (docs/viewer.md, "Layout" and "Call tree" / "Heap over time"), in headless
//! chromium on `calltree.c`.

use crate::util::*;
use crate::view::{browser_available, Viewer};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub(crate) fn recorded(name: &str, src: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(name);
    let exe = build(Cc::Gcc, src, &dir, &[]);
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &[]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    (dir, trace)
}

/// A screenshot of the window as it is (the page fits it: nothing to scroll).
fn shot(v: &Viewer, dir: &Path, name: &str) {
    let d = std::env::var_os("MEMLENS_VIEW_SHOTS").map_or(dir.to_path_buf(), PathBuf::from);
    v.b.screenshot(&d.join(name));
}

/// `[left, top, width, height]` of element `id`.
fn rect(v: &Viewer, id: &str) -> [f64; 4] {
    let r = v.b.js(&format!(
        "const r = document.getElementById('{id}').getBoundingClientRect(); return [r.left, r.top, r.width, r.height]"
    ));
    let n = |k: usize| r[k].as_f64().unwrap_or_else(|| panic!("{id}: {r}"));
    [n(0), n(1), n(2), n(3)]
}

/// The page fits the 1600x900 window (issue #22): the document is no taller than the
/// window, and every pane lies inside it as it stands (nothing scrolled into view) and
/// is not squeezed to nothing.
fn fits(v: &Viewer) {
    let r = v.b.js("return [document.documentElement.scrollHeight, innerHeight, scrollY, \
         document.documentElement.scrollWidth, innerWidth]");
    let n = |k: usize| r[k].as_f64().unwrap();
    assert!(n(1) <= 900.0 && n(4) <= 1600.0, "window {r}");
    assert!(n(0) <= n(1), "the page scrolls: scrollHeight {} > innerHeight {}", n(0), n(1));
    assert!(n(3) <= n(4), "the page scrolls sideways: {r}");
    assert_eq!(n(2), 0.0, "scrolled: {r}");
    let mut panes = vec!["map", "flame", "tree", "code", "tables"];
    if v.b.js("return !document.getElementById('timelanes').classList.contains('off')")
        == json!(true)
    {
        panes.push("lanesbox");
    }
    for id in panes {
        let r = v.b.js(&format!(
            "const r = document.getElementById('{id}').getBoundingClientRect(); \
             return [r.left, r.top, r.right, r.bottom, innerWidth, innerHeight];"
        ));
        let n = |k: usize| r[k].as_f64().unwrap();
        assert!(
            n(0) >= 0.0 && n(1) >= 0.0 && n(2) <= n(4) + 0.5 && n(3) <= n(5) + 0.5,
            "{id} outside the window: {r}"
        );
        let min_h = if id == "map" { 80.0 } else { 40.0 };
        assert!(n(2) - n(0) >= 40.0 && n(3) - n(1) >= min_h, "{id} squeezed: {r}");
    }
    // the code and the tables keep room for several lines; they scroll inside
    let b = rect(v, "bottom");
    assert!(b[3] >= 120.0, "the panes below the map: {b:?}");
    // the header is one row, and every control in it is inside the window
    let h = v.b.js("const h = document.querySelector('body.view > header'); if (!h) return null; \
         const out = [...h.querySelectorAll('select, button, input')] \
           .filter((e) => e.getBoundingClientRect().right > innerWidth + 0.5).map((e) => e.id); \
         return [h.getBoundingClientRect().height, out];");
    if !h.is_null() {
        assert!(h[0].as_f64().unwrap() <= 40.0, "the header wraps: {h}");
        assert_eq!(h[1], json!([]), "controls outside the window: {h}");
    }
}

/// Opens `trace` in a 1600x900 window and waits until the page settled at that size.
fn open_1600x900(trace: &Path) -> Viewer {
    let v = Viewer::open(trace);
    // the window's frame (if any) outside the 1600x900 viewport
    v.b.cmd("POST", "/window/rect", Some(json!({"width": 1600, "height": 900})));
    let f = v.b.js("return [outerWidth - innerWidth, outerHeight - innerHeight]");
    let (fw, fh) = (f[0].as_i64().unwrap().max(0), f[1].as_i64().unwrap().max(0));
    v.b.cmd("POST", "/window/rect", Some(json!({"width": 1600 + fw, "height": 900 + fh})));
    v.wait_for("memlens.restored");
    v.wait_for("innerWidth === 1600 && innerHeight === 900");
    // the map fits what the lanes and the flame chart leave once they drew at this size
    v.wait_for(
        "(() => { const d = memlens.layout.defaults().mh; \
         return memlens.layout.sizes().mh === d && document.getElementById('map').getBoundingClientRect().height === d; })()",
    );
    v.idle();
    v
}

/// Element `id` as a WebDriver pointer origin (its centre).
fn element_origin(v: &Viewer, id: &str) -> Value {
    let e = v.b.cmd(
        "POST",
        "/element",
        Some(json!({"using": "css selector", "value": format!("#{id}")})),
    );
    let eid = e.as_object().unwrap().values().next().unwrap().clone();
    json!({"element-6066-11e4-a52e-4f735466cecf": eid})
}

/// Performs one sequence of WebDriver mouse actions, then releases the buttons.
fn mouse(v: &Viewer, acts: Value) {
    v.b.cmd(
        "POST",
        "/actions",
        Some(json!({"actions": [{"type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"}, "actions": acts}]})),
    );
    v.b.cmd("DELETE", "/actions", None);
}

/// Drags element `id` by (dx, dy) with WebDriver's mouse: real mousedown, mousemove
/// and mouseup events.
fn drag(v: &Viewer, id: &str, dx: i64, dy: i64) {
    v.b.js(&format!("document.getElementById('{id}').scrollIntoView({{block: 'center'}})"));
    let origin = element_origin(v, id);
    let acts = json!([
        {"type": "pointerMove", "duration": 0, "origin": origin, "x": 0, "y": 0},
        {"type": "pointerDown", "button": 0},
        {"type": "pointerMove", "duration": 50, "origin": "pointer", "x": dx / 2, "y": dy / 2},
        {"type": "pointerMove", "duration": 50, "origin": "pointer", "x": dx - dx / 2, "y": dy - dy / 2},
        {"type": "pointerUp", "button": 0},
    ]);
    mouse(v, acts);
}

fn hash(v: &Viewer) -> String {
    v.b.js("return location.hash").as_str().unwrap().to_string()
}

fn wait_hash(v: &Viewer, part: &str) -> String {
    v.wait_for(&format!("location.hash.includes({})", json!(part)));
    hash(v)
}

fn sizes(v: &Viewer) -> Value {
    v.b.js("return memlens.layout.sizes()")
}

/// The page at `url`, once it restored the state in the hash.
pub(crate) fn reload(v: &Viewer, url: &str) {
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

pub(crate) fn page_url(v: &Viewer) -> String {
    format!("http://127.0.0.1:{}/?token={}", v.port, v.token)
}

#[test]
fn view_layout_splitters_resize_the_panes_and_go_into_the_url() {
    if !browser_available() {
        return;
    }
    let (dir, trace) = recorded("view-layout", "calltree.c");
    let v = open_1600x900(&trace);
    fits(&v);
    let def = sizes(&v);
    let mh0 = def["mh"].as_u64().unwrap();
    assert_eq!(def, json!({"mh": mh0, "sw": 60, "tw": 33}));
    let (map0, tables0, bottom0) = (rect(&v, "map"), rect(&v, "tables"), rect(&v, "bottom"));
    assert_eq!(map0[3], mh0 as f64);
    let max = v.b.js("return memlens.layout.maxMh()").as_u64().unwrap();
    assert!(mh0 + 60 <= max, "room to drag: {mh0} + 60 > {max}");

    // the splitter under the timeline: the map grows by the drag, the panes below
    // give the same, the map's canvas redraws at the new size
    let draws = v.b.js("return memlens.draws").as_u64().unwrap();
    drag(&v, "split-main", 0, 60);
    let mh1 = mh0 + 60;
    v.wait_for(&format!("memlens.layout.sizes().mh === {mh1}"));
    assert_eq!(rect(&v, "map")[3], mh1 as f64);
    assert!((rect(&v, "bottom")[3] - (bottom0[3] - 60.0)).abs() < 1.0, "{bottom0:?}");
    v.wait_for(&format!(
        "memlens.draws > {draws} && document.getElementById('map').height === Math.round({mh1} * (devicePixelRatio || 1))"
    ));
    // the source / tables splitter: dragged 160 px left, the tables get wider
    drag(&v, "split-src", -160, 0);
    v.wait_for("memlens.layout.sizes().sw < 60");
    let tables1 = rect(&v, "tables");
    assert!(tables1[2] > tables0[2] + 100.0, "{tables0:?} → {tables1:?}");
    // the file tree / code splitter with the keyboard: three steps right
    let tree0 = rect(&v, "tree");
    v.b.js("document.getElementById('split-tree').focus()");
    let acts: Vec<Value> = (0..3)
        .flat_map(|_| {
            [
                json!({"type": "keyDown", "value": "\u{E014}"}),
                json!({"type": "keyUp", "value": "\u{E014}"}),
            ]
        })
        .collect();
    v.b.cmd(
        "POST",
        "/actions",
        Some(json!({"actions": [{"type": "key", "id": "kb", "actions": acts}]})),
    );
    v.wait_for("memlens.layout.sizes().tw === 39");
    let tree1 = rect(&v, "tree");
    assert!(tree1[2] > tree0[2], "{tree0:?} → {tree1:?}");
    assert_eq!(
        v.b.js("return [memlens.st.t0, memlens.st.t1]")[0],
        0,
        "arrows moved the splitter only"
    );
    fits(&v);
    shot(&v, &dir, "layout-resized.png");

    // the sizes go into the URL; the same URL reopens the same layout
    let sw = sizes(&v)["sw"].as_u64().unwrap();
    let h = wait_hash(&v, &format!("sw={sw}"));
    assert!(h.contains(&format!("mh={mh1}")) && h.contains("tw=39"), "{h}");
    reload(&v, &format!("{}{h}", page_url(&v)));
    v.wait_for(&format!("memlens.layout.sizes().mh === {mh1}"));
    assert_eq!(sizes(&v), json!({"mh": mh1, "sw": sw, "tw": 39}));
    v.wait_for(&format!("document.getElementById('map').getBoundingClientRect().height === {mh1}"));
    assert_eq!(rect(&v, "tables")[2], tables1[2]);
    assert_eq!(hash(&v), h, "the restored page wrote another state");

    // a double-click resets a splitter (and its key leaves the URL); sizes out of
    // bounds in a URL are clamped
    v.b.js("document.getElementById('split-main').dispatchEvent(new MouseEvent('dblclick', {bubbles: true}))");
    v.wait_for(&format!("memlens.layout.sizes().mh === {mh0} && memlens.layout.fits()"));
    v.wait_for("!location.hash.includes('mh=')");
    assert_eq!(rect(&v, "map")[3], map0[3]);
    // a map too high for the window: as high as leaves the panes below their minimum
    reload(&v, &format!("{}#mh=99999&sw=1&tw=abc", page_url(&v)));
    v.wait_for(&format!("memlens.layout.sizes().mh === {max}"));
    assert_eq!(sizes(&v), json!({"mh": max, "sw": 15, "tw": 33}));
    fits(&v);
    reload(&v, &page_url(&v));
    v.wait_for(&format!("memlens.layout.sizes().mh === {mh0}"));
    assert_eq!(sizes(&v), def);
    fits(&v);
    shot(&v, &dir, "layout-default.png");
}

/// Issue #22: at 1600x900 the map, the lanes, the flame chart, the source and the tables
/// are all on screen without scrolling, on the bundled example (five threads) and on a
/// five-thread test program, at the default layout and with the map dragged 100 px
/// higher.
#[test]
fn view_layout_fits_1600x900_without_scrolling() {
    if !browser_available() {
        return;
    }
    let dir = scratch("view-fit");
    let exe = dir.join("hotspots");
    let out = std::process::Command::new(memlens())
        .args(["cc", "-O2", "-pthread"])
        .arg(programs().join("../../examples/hotspots.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let example = dir.join("hotspots.trace");
    let out = record(&exe, &example, &[]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let (_, threads) = recorded("view-fit-threads", "threads.c");
    for (name, trace) in [("hotspots", &example), ("threads", &threads)] {
        let v = open_1600x900(trace);
        let lanes = v.b.js("return memlens.meta.lanes.length").as_u64().unwrap();
        assert_eq!(lanes, 5, "{name}: main and four workers");
        fits(&v);
        shot(&v, &dir, &format!("fit-{name}-default.png"));
        let mh0 = sizes(&v)["mh"].as_u64().unwrap();
        let bottom0 = rect(&v, "bottom");
        // the top splitter dragged down: the map takes 100 px from the panes below
        drag(&v, "split-main", 0, 100);
        v.wait_for(&format!("memlens.layout.sizes().mh === {}", mh0 + 100));
        v.idle();
        assert_eq!(rect(&v, "map")[3], (mh0 + 100) as f64, "{name}");
        assert!((rect(&v, "bottom")[3] - (bottom0[3] - 100.0)).abs() < 1.0, "{name}: {bottom0:?}");
        fits(&v);
        shot(&v, &dir, &format!("fit-{name}-dragged.png"));
        // dragged far past the room left: the map stops where the panes below keep
        // their minimum, and the page still does not scroll
        let s = rect(&v, "split-main");
        let ih = v.b.js("return innerHeight").as_f64().unwrap();
        drag(&v, "split-main", 0, (ih - s[1] - s[3] / 2.0 - 2.0) as i64);
        let max = v.b.js("return memlens.layout.maxMh()").as_u64().unwrap();
        v.wait_for(&format!("memlens.layout.sizes().mh === {max}"));
        v.idle();
        fits(&v);
    }
    eprintln!("screenshots in {}", dir.display());
}

/// Clicks at (x, y) inside element `id` (CSS pixels from its top left corner).
fn click_at(v: &Viewer, id: &str, x: f64, y: f64) {
    let r = rect(v, id);
    let origin = element_origin(v, id);
    // WebDriver's element origin is the element's centre
    let (dx, dy) = ((x - r[2] / 2.0) as i64, (y - r[3] / 2.0) as i64);
    let acts = json!([
        {"type": "pointerMove", "duration": 0, "origin": origin, "x": dx, "y": dy},
        {"type": "pointerDown", "button": 0},
        {"type": "pointerUp", "button": 0},
    ]);
    mouse(v, acts);
}

#[test]
fn view_layout_thread_lanes_collapse_from_their_label_and_the_url_keeps_them() {
    if !browser_available() {
        return;
    }
    let (_, trace) = recorded("view-lanes-collapse", "threads.c");
    let v = open_1600x900(&trace);
    v.wait_for("memlens.lanes && memlens.lanes.drawn.length === 5");
    let drawn = v.b.js("return memlens.lanes.drawn");
    let full = drawn[1]["height"].as_f64().unwrap();
    let top = drawn[1]["top"].as_f64().unwrap();
    v.b.js("document.getElementById('lanes').scrollIntoView({block: 'center'})");
    // a click on thread 1's label collapses its lane to a thin one
    click_at(&v, "lanes", 20.0, top + 5.0);
    v.wait_for("memlens.lanes.drawn[1].collapsed === true");
    let d = v.b.js("return memlens.lanes.drawn");
    assert_eq!(v.b.js("return memlens.lanes.collapsed"), json!([1]));
    assert!(d[1]["height"].as_f64().unwrap() < full / 2.0, "{d}");
    // the lanes below move up by what it gave
    let shift = full - d[1]["height"].as_f64().unwrap();
    assert_eq!(d[2]["top"].as_f64().unwrap(), drawn[2]["top"].as_f64().unwrap() - shift, "{d}");
    assert_eq!(d[0]["height"], drawn[0]["height"]);
    let h = wait_hash(&v, "cl=1");
    fits(&v);
    // the link reopens with the lane collapsed
    reload(&v, &format!("{}{h}", page_url(&v)));
    v.wait_for("memlens.lanes && memlens.lanes.drawn.length === 5 && memlens.lanes.drawn[1].collapsed === true");
    // clicked again, it expands
    let top = v.b.js("return memlens.lanes.drawn[1].top").as_f64().unwrap();
    v.b.js("document.getElementById('lanes').scrollIntoView({block: 'center'})");
    click_at(&v, "lanes", 20.0, top + 5.0);
    v.wait_for("memlens.lanes.drawn[1].collapsed === false");
    assert_eq!(v.b.js("return memlens.lanes.drawn[1].height").as_f64().unwrap(), full);
    v.wait_for("!location.hash.includes('cl=')");
}
