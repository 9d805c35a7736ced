//! Wall-clock time: the runtime's `time` stamps (trace-format.md, "Time") and the
//! viewer's per-thread lanes, on a program whose two workers provably run at the
//! same time (`overlap.c`: a start barrier, lockstep work, an end barrier).

use crate::util::*;
use crate::view::{browser_available, http, Browser};
use memlens_format::{Event, EventBuffer, MetaRecord, TraceReader, TraceWriter};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Per thread: its name and its events as (index, event) from `dump --format json`.
fn by_thread(trace: &Path) -> BTreeMap<u64, Vec<Value>> {
    let mut m: BTreeMap<u64, Vec<Value>> = BTreeMap::new();
    for e in dump(trace) {
        m.entry(e["thread"].as_u64().unwrap()).or_default().push(e);
    }
    m
}

/// The time range that brackets a thread's stores at the `@work` line: from the
/// last stamp before the first of them to the first stamp after the last.
fn work_range(evs: &[Value], line: u64) -> (u64, u64) {
    let is_work = |e: &Value| {
        e["line"] == line && e["file"].as_str().is_some_and(|f| f.ends_with("overlap.c"))
    };
    let first = evs.iter().position(is_work).expect("no work stores");
    let last = evs.iter().rposition(is_work).unwrap();
    let ns = |e: &Value| e["ns"].as_u64();
    let lo = evs[..first].iter().rev().find_map(ns).expect("no stamp before the work");
    let hi = evs[last..].iter().find_map(ns).expect("no stamp after the work");
    (lo, hi)
}

fn record_overlap(name: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(name);
    let exe = build(Cc::Gcc, "overlap.c", &dir, &[]);
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &[]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    (dir, trace)
}

#[test]
fn threads_that_run_together_have_overlapping_monotonic_time_stamps() {
    let (_dir, trace) = record_overlap("time-overlap");
    let line = line_of("overlap.c", "work");
    let threads = by_thread(&trace);
    assert_eq!(threads.len(), 3, "main and two workers");
    let mut ranges = Vec::new();
    for (t, evs) in &threads {
        let stamps: Vec<(u64, u64)> = evs
            .iter()
            .filter(|e| e["event"] == "time")
            .map(|e| (e["index"].as_u64().unwrap(), e["ns"].as_u64().unwrap()))
            .collect();
        // a stamp right after thread start, then never decreasing
        assert_eq!(evs[0]["event"], "thread_start", "thread {t}");
        assert_eq!(stamps.first().map(|s| s.0), Some(1), "thread {t}: first stamp after start");
        assert!(stamps.windows(2).all(|w| w[0].1 <= w[1].1), "thread {t}: time runs backwards");
        // at least every 4,096 events
        let n = evs.len() as u64;
        for w in stamps.windows(2) {
            let between = w[1].0 - w[0].0 - 1;
            assert!(between <= 4096, "thread {t}: {between} events between stamps");
        }
        // every thread ends with a stamp just before thread_exit (main: at exit)
        assert_eq!(evs[evs.len() - 1]["event"], "thread_exit", "thread {t}");
        assert_eq!(stamps.last().unwrap().0, n - 2, "thread {t}: stamp before exit");
        if *t > 0 {
            let stores = evs.iter().filter(|e| e["line"] == line).count();
            assert_eq!(stores, 100_000, "thread {t}: K stores");
            ranges.push(work_range(evs, line));
        }
    }
    let (a, b) = (ranges[0], ranges[1]);
    assert!(a.0 < a.1 && b.0 < b.1, "{ranges:?}");
    assert!(a.0.max(b.0) < a.1.min(b.1), "the workers' time ranges do not overlap: {ranges:?}");
    // the metadata's offset turns a stamp into Unix time: the first is within 10 s
    // of the start time in the file header
    let r = TraceReader::open(&trace).unwrap();
    let off = r.meta().options.iter().find(|o| o.0 == "clock_offset").expect("no clock_offset");
    let off: i64 = off.1.parse().unwrap();
    let first = threads[&0].iter().find_map(|e| e["ns"].as_i64()).unwrap();
    let start = r.header().start_ns as i64;
    assert!((first + off - start).abs() < 10_000_000_000, "{first} + {off} vs {start}");
}

/// Loops recorded as runs stand for hundreds of events in a few bytes, and a copy
/// writes its two ranges in one buffer write: neither may stretch the gap between
/// two stamps past 4,096 events (`stamps.c`: a 300-iteration loop 3,000 times, a
/// memcpy of a varying length after each; before the runs were charged, 43,632
/// events went by without a stamp).
#[test]
fn loops_recorded_as_runs_and_copies_keep_a_stamp_every_4096_events() {
    for cc in Cc::all() {
        let dir = scratch(&format!("time-runs-{cc:?}"));
        let exe = build(cc, "stamps.c", &dir, &[]);
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &[]);
        assert!(out.status.success(), "record failed: {}", stderr(&out));
        let evs = &by_thread(&trace)[&0];
        let run = line_of("stamps.c", "run");
        let loads = evs.iter().filter(|e| e["line"] == run && e["event"] == "read").count();
        let copies = evs.iter().filter(|e| e["event"] == "range_write").count();
        assert_eq!(copies, 3000, "{cc:?}: a copy per round");
        assert!(loads >= 300 * 3000 / 2, "{cc:?}: {loads} loads of the loop");
        let stamps: Vec<u64> = evs
            .iter()
            .filter(|e| e["event"] == "time")
            .map(|e| e["index"].as_u64().unwrap())
            .collect();
        let widest = stamps.windows(2).map(|w| w[1] - w[0] - 1).max().unwrap();
        assert!(widest <= 4096, "{cc:?}: {widest} events between two stamps");
        assert!(stamps.len() as u64 >= evs.len() as u64 / 4097, "{cc:?}: {} stamps", stamps.len());
        if matches!(cc, Cc::Clang) {
            // clang's build records the loop as runs: far less than a byte an event
            let bytes = std::fs::metadata(&trace).unwrap().len();
            assert!(
                bytes * 10 < evs.len() as u64,
                "{cc:?}: {bytes} bytes for {} events",
                evs.len()
            );
        }
    }
}

/// `memlens view` serving `trace`, with its URL; killed when dropped.
struct Served {
    child: Child,
    url: String,
    port: u16,
    token: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(trace: &Path) -> Served {
    let mut child = Command::new(memlens())
        .args(["view", "--port", "0", trace.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let url = first.trim().strip_prefix("memlens view: ").expect("no URL").to_string();
    let rest = url.strip_prefix("http://127.0.0.1:").unwrap();
    let port: u16 = rest.split('/').next().unwrap().parse().unwrap();
    let token = rest.split("token=").nth(1).unwrap().to_string();
    Served { child, url, port, token }
}

fn open(b: &Browser, s: &Served) {
    b.cmd("POST", "/url", Some(json!({"url": s.url})));
    let t = Instant::now();
    while b.js("return !!(window.memlens && window.memlens.lanes)") != json!(true) {
        let err = b.js("return window.memlens && window.memlens.error || null");
        assert!(err.is_null(), "page failed: {err}");
        assert!(t.elapsed() < Duration::from_secs(30), "the viewer did not become ready");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn viewer_draws_one_wall_clock_lane_per_thread_and_the_workers_overlap() {
    if !browser_available() {
        return;
    }
    let (dir, trace) = record_overlap("time-view");
    let s = serve(&trace);
    // The JSON endpoint: every worker's stamps, monotonic, overlapping in time.
    let meta: Value = {
        let (st, body) = http(s.port, "GET", &format!("/api/meta?token={}", s.token), None);
        assert_eq!(st, 200);
        serde_json::from_slice(&body).unwrap()
    };
    let lanes = meta["lanes"].as_array().unwrap();
    let names: Vec<&str> = lanes.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(names.contains(&"worker-a") && names.contains(&"worker-b"), "{names:?}");
    let (t0, t1) = (meta["time"]["t0"].as_u64().unwrap(), meta["time"]["t1"].as_u64().unwrap());
    let (st, body) = http(
        s.port,
        "GET",
        &format!("/api/lanes?token={}&t0={t0}&t1={t1}&n=100000", s.token),
        None,
    );
    assert_eq!(st, 200);
    let w: Value = serde_json::from_slice(&body).unwrap();
    let mut active = Vec::new();
    for l in w["lanes"].as_array().unwrap() {
        let st: Vec<[u64; 3]> = serde_json::from_value(l["stamps"].clone()).unwrap();
        assert!(st
            .windows(2)
            .all(|p| p[0][0] <= p[1][0] && p[0][1] <= p[1][1] && p[0][2] <= p[1][2]));
        let own = st.last().unwrap()[2];
        if own >= 100_000 {
            // the span of stamps during which the worker did operations
            let a = st.windows(2).find(|p| p[1][2] > p[0][2]).unwrap()[0][0];
            let b = st.windows(2).rev().find(|p| p[1][2] > p[0][2]).unwrap()[1][0];
            active.push((a, b));
        }
    }
    assert_eq!(active.len(), 2, "{w}");
    assert!(active[0].0.max(active[1].0) < active[0].1.min(active[1].1), "{active:?}");

    // The page: lanes labelled with name and tid, drawn where the threads ran.
    let b = Browser::start();
    open(&b, &s);
    b.js_async("const done = arguments[0]; (function w() { if (memlens.lanes.draws > 0) done(1); else setTimeout(w, 50); })();");
    let l = b.js("return memlens.lanes");
    assert_eq!(l["mode"], "time", "wall-clock time is the default axis: {l}");
    let drawn = l["drawn"].as_array().unwrap();
    assert_eq!(drawn.len(), 3);
    let label =
        b.js("return document.getElementById('lanes').dataset.lanes").as_str().unwrap().to_string();
    for ln in lanes {
        let want = format!("{} {}", ln["name"].as_str().unwrap(), ln["tid"]);
        assert!(label.contains(&want), "{label} lacks {want}");
    }
    let px: Vec<(f64, f64)> = drawn
        .iter()
        .filter(|d| d["name"].as_str().unwrap().starts_with("worker"))
        .map(|d| (d["x0"].as_f64().unwrap(), d["x1"].as_f64().unwrap()))
        .collect();
    assert_eq!(px.len(), 2, "{l}");
    // Both workers' bars cover a shared stretch of the axis.
    assert!(px[0].0.max(px[1].0) < px[0].1.min(px[1].1), "{px:?}");
    for d in drawn {
        let top = d["top"].as_f64().unwrap();
        assert!(drawn
            .iter()
            .all(|o| o == d
                || (o["top"].as_f64().unwrap() - top).abs() >= d["height"].as_f64().unwrap()));
    }
    // Selecting a time range: the map and the source metrics follow its operations.
    let (a, z) = (active[0].0.max(active[1].0), active[0].1.min(active[1].1));
    b.js_async(&format!(
        "const done = arguments[0]; memlens.lanesSelect({a}, {z}).then(() => done(1));"
    ));
    let sel = b.js("return [memlens.lanes.selection, memlens.rangeWindow || null]");
    let (g0, g1) = (sel[0]["g0"].as_u64().unwrap(), sel[0]["g1"].as_u64().unwrap());
    assert!(g0 < g1 && g1 <= meta["ops"].as_u64().unwrap(), "{sel}");
    assert!(!sel[1].is_null(), "the range filter was not applied: {sel}");
    b.screenshot(&dir.join("lanes.png"));
    // The switch keeps the merged order.
    b.js("const x = document.getElementById('xmode'); x.value = 'order'; x.dispatchEvent(new Event('change'));");
    assert_eq!(
        b.js("return document.getElementById('timelanes').classList.contains('off')"),
        json!(true)
    );
    eprintln!("screenshot: {}", dir.join("lanes.png").display());
}

/// A trace written before time stamps existed: `trace` without its `time` events
/// and its `clock_offset`.
fn without_time(src: &Path, dst: &Path) {
    let r = TraceReader::open(src).unwrap();
    let m = r.meta();
    let mut w = TraceWriter::new(std::fs::File::create(dst).unwrap(), m.pid, 1).unwrap();
    let mut recs =
        vec![MetaRecord::Process { pid: m.pid, exe: m.exe.clone(), argv: m.argv.clone() }];
    recs.extend(m.modules.iter().cloned().map(MetaRecord::Module));
    for (k, v) in m.options.iter().filter(|o| o.0 != "clock_offset") {
        recs.push(MetaRecord::Option(k.clone(), v.clone()));
    }
    w.write_meta(&recs).unwrap();
    for s in r.streams() {
        let mut buf = EventBuffer::new();
        for e in r.events(s.thread) {
            let e = e.unwrap();
            if !matches!(e, Event::Time(_)) {
                buf.push(&e);
            }
        }
        w.write_events(s.thread.0, &mut buf, true).unwrap();
    }
    w.finish(|_| {}).unwrap();
}

#[test]
fn a_trace_without_time_stamps_views_in_merged_order_with_a_note() {
    let (dir, trace) = record_overlap("time-old");
    let old = dir.join("old.trace");
    without_time(&trace, &old);
    assert!(dump(&old).iter().all(|e| e["event"] != "time"));
    let out = run_memlens(&["view", "--no-serve", old.to_str().unwrap()]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let meta: Value =
        serde_json::from_slice(&std::fs::read(dir.join("old.trace.mlview/meta.json")).unwrap())
            .unwrap();
    assert_eq!(meta["lanes"], json!([]));
    assert!(meta["time"].is_null());
    assert!(meta["ops"].as_u64().unwrap() >= 200_000, "{}", meta["ops"]);
    if !browser_available() {
        return;
    }
    let s = serve(&old);
    let b = Browser::start();
    open(&b, &s);
    let l = b.js("return memlens.lanes");
    assert_eq!(l["mode"], "order", "{l}");
    let note = b
        .js("return document.getElementById('timenote').textContent")
        .as_str()
        .unwrap()
        .to_string();
    assert!(note.contains("merged order"), "{note}");
    assert_eq!(b.js("return document.getElementById('timenote').hidden"), json!(false));
    assert_eq!(b.js("return memlens.ready"), json!(true));
}
