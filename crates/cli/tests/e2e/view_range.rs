//! The page's views that follow the time selection (docs/viewer.md): the heap
//! chart of a range selected on the wall-clock lanes, on `calltree.c`.

use crate::view::{browser_available, Viewer};
use crate::view_layout::recorded;
use serde_json::json;
use std::path::{Path, PathBuf};

/// A screenshot with the bottom panes scrolled into view.
fn shot(v: &Viewer, dir: &Path, name: &str) {
    v.b.js("document.getElementById('bottom').scrollIntoView({block: 'end'})");
    let d = std::env::var_os("MEMLENS_VIEW_SHOTS").map_or(dir.to_path_buf(), PathBuf::from);
    v.b.screenshot(&d.join(name));
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
    v.b.js_async(&format!("const done = arguments[0]; memlens.lanesSelect({a}, {b}).then(() => done(1))"));
    v.wait_for("memlens.st.range !== null");
    v.b.js_async("const done = arguments[0]; memlens.showView('heap').then(() => done(1))");
    v.wait_for(&format!("memlens.heapView.data() && memlens.heapView.data().x0 === {a}"));
    let q = v.b.js("const q = memlens.heapView.query(); return [q.axis, q.x0, q.x1, q.op0 === undefined]");
    assert_eq!(q, json!(["time", a, b, true]));
    let d = v.b.js("const d = memlens.heapView.data(); return [d.axis, d.x0, d.x1, d.bins.length > 0]");
    assert_eq!(d, json!(["time", a, b, true]));
    let note = v.b.js("return memlens.heapView.note()");
    assert!(note.as_str().unwrap().starts_with("showing the selected range +"), "{note}");
    shot(&v, &dir, "heap-range-time.png");
}
