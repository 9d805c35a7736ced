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

/// A screenshot with the bottom panes scrolled into view.
fn shot(v: &Viewer, dir: &Path, name: &str) {
    v.b.js("document.getElementById('bottom').scrollIntoView({block: 'end'})");
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

/// Every pane lies inside the 1600x900 window once scrolled into view, and is not
/// squeezed to nothing.
fn all_inside(v: &Viewer) {
    for id in ["map", "flame", "tree", "code", "tables"] {
        let r = v.b.js(&format!(
            "const e = document.getElementById('{id}'); e.scrollIntoView({{block: 'nearest', inline: 'nearest'}}); \
             const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom, innerWidth, innerHeight];"
        ));
        let n = |k: usize| r[k].as_f64().unwrap();
        assert!(n(4) <= 1600.0 && n(5) <= 900.0, "window {r}");
        assert!(
            n(0) >= 0.0 && n(1) >= 0.0 && n(2) <= n(4) + 0.5 && n(3) <= n(5) + 0.5,
            "{id} outside the window: {r}"
        );
        assert!(n(2) - n(0) >= 40.0 && n(3) - n(1) >= 40.0, "{id} squeezed: {r}");
    }
    v.b.js("window.scrollTo(0, 0)");
}

/// Drags element `id` by (dx, dy) with WebDriver's mouse: real mousedown, mousemove
/// and mouseup events.
fn drag(v: &Viewer, id: &str, dx: i64, dy: i64) {
    v.b.js(&format!("document.getElementById('{id}').scrollIntoView({{block: 'center'}})"));
    let e = v.b.cmd(
        "POST",
        "/element",
        Some(json!({"using": "css selector", "value": format!("#{id}")})),
    );
    let eid = e.as_object().unwrap().values().next().unwrap().clone();
    let origin = json!({"element-6066-11e4-a52e-4f735466cecf": eid});
    let acts = json!([
        {"type": "pointerMove", "duration": 0, "origin": origin, "x": 0, "y": 0},
        {"type": "pointerDown", "button": 0},
        {"type": "pointerMove", "duration": 50, "origin": "pointer", "x": dx / 2, "y": dy / 2},
        {"type": "pointerMove", "duration": 50, "origin": "pointer", "x": dx - dx / 2, "y": dy - dy / 2},
        {"type": "pointerUp", "button": 0},
    ]);
    v.b.cmd(
        "POST",
        "/actions",
        Some(json!({"actions": [{"type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"}, "actions": acts}]})),
    );
    v.b.cmd("DELETE", "/actions", None);
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
    let v = Viewer::open(&trace);
    v.b.cmd("POST", "/window/rect", Some(json!({"width": 1600, "height": 900})));
    v.wait_for("memlens.restored");
    v.wait_for("innerWidth <= 1600 && innerHeight <= 900");
    all_inside(&v);
    let def = sizes(&v);
    assert_eq!(def, json!({"mh": 360, "sw": 60, "tw": 33}));
    let (map0, tables0) = (rect(&v, "map"), rect(&v, "tables"));
    assert_eq!(map0[3], 360.0);

    // the splitter under the timeline: the map grows by the drag, the panes below
    // give the same, the map's canvas redraws at the new size
    let draws = v.b.js("return memlens.draws").as_u64().unwrap();
    drag(&v, "split-main", 0, 60);
    v.wait_for("memlens.layout.sizes().mh === 420");
    assert_eq!(rect(&v, "map")[3], 420.0);
    v.wait_for(&format!(
        "memlens.draws > {draws} && document.getElementById('map').height === Math.round(420 * (devicePixelRatio || 1))"
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
    all_inside(&v);
    shot(&v, &dir, "layout-resized.png");

    // the sizes go into the URL; the same URL reopens the same layout
    let sw = sizes(&v)["sw"].as_u64().unwrap();
    let h = wait_hash(&v, &format!("sw={sw}"));
    assert!(h.contains("mh=420") && h.contains("tw=39"), "{h}");
    reload(&v, &format!("{}{h}", page_url(&v)));
    assert_eq!(sizes(&v), json!({"mh": 420, "sw": sw, "tw": 39}));
    v.wait_for("document.getElementById('map').getBoundingClientRect().height === 420");
    assert_eq!(rect(&v, "tables")[2], tables1[2]);
    assert_eq!(hash(&v), h, "the restored page wrote another state");

    // a double-click resets a splitter (and its key leaves the URL); sizes out of
    // bounds in a URL are clamped
    v.b.js("document.getElementById('split-main').dispatchEvent(new MouseEvent('dblclick', {bubbles: true}))");
    v.wait_for("memlens.layout.sizes().mh === 360");
    v.wait_for("!location.hash.includes('mh=')");
    assert_eq!(rect(&v, "map")[3], map0[3]);
    reload(&v, &format!("{}#mh=99999&sw=1&tw=abc", page_url(&v)));
    assert_eq!(sizes(&v), json!({"mh": 1200, "sw": 15, "tw": 33}));
    reload(&v, &page_url(&v));
    assert_eq!(sizes(&v), def);
    all_inside(&v);
    shot(&v, &dir, "layout-default.png");
}
