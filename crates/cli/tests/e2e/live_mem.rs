//! In-process memory probes (`heap`, `watch`) of `memlens live` on programs built
//! with `memlens cc` and started with `MEMLENS_CONTROL=1`: the runtime accounts
//! allocations per call site (crates/rt/src/liveheap.rs). The programs take one
//! command per line on stdin and answer each with a line, so every value is exact.

use crate::live_probes::Live;
use crate::util::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

pub(crate) fn build(dir: &Path, src: &str) -> PathBuf {
    let exe = dir.join(src.trim_end_matches(".c"));
    let out = Command::new(memlens())
        .args(["cc", "-O1", "-g", "-pthread"])
        .arg(programs().join(src))
        .arg("-o")
        .arg(&exe)
        .env("MEMLENS_QUIET", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "memlens cc: {}", String::from_utf8_lossy(&out.stderr));
    exe
}

/// A program driven over stdin, started with its runtime's control socket.
pub(crate) struct Driven {
    child: Child,
    input: ChildStdin,
    lines: Receiver<String>,
}

impl Driven {
    pub(crate) fn start(dir: &Path, exe: &Path) -> Driven {
        let run = dir.join("run");
        std::fs::create_dir_all(&run).unwrap();
        let child = Command::new(exe)
            .env("MEMLENS_CONTROL", "1")
            .env("XDG_RUNTIME_DIR", &run)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        Driven::adopt(child)
    }

    /// Drives `child` (the program, or a `memlens live` that launched it) over its
    /// piped stdin and stdout, once it printed "ready".
    pub(crate) fn adopt(mut child: Child) -> Driven {
        let input = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let d = Driven { child, input, lines };
        let first = d.line();
        assert!(first.starts_with("ready"), "{first}");
        d
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn line(&self) -> String {
        self.lines.recv_timeout(Duration::from_secs(120)).expect("the target printed nothing")
    }

    /// Sends one command and returns the numbers of its "done" line.
    pub(crate) fn send(&mut self, cmd: &str) -> Vec<i64> {
        writeln!(self.input, "{cmd}").unwrap();
        self.input.flush().unwrap();
        let l = self.line();
        let name = cmd.split(' ').next().unwrap();
        assert!(l.starts_with(&format!("done {name} ")), "{cmd}: {l}");
        l.split(' ').skip(2).map(|w| w.parse().unwrap()).collect()
    }

    /// Sends one command and returns the number its "done" line ends with.
    pub(crate) fn run(&mut self, cmd: &str) -> i64 {
        *self.send(cmd).last().unwrap()
    }

    pub(crate) fn quit(mut self) {
        writeln!(self.input, "q").unwrap();
        self.input.flush().unwrap();
        assert!(self.child.wait().unwrap().success());
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The heap probe's row of the site at `marker` in liveheap.c: (bytes, blocks, peak).
fn site(probe: &Value, marker: &str) -> Option<(u64, u64, u64)> {
    let at = format!("liveheap.c:{} ", line_of("liveheap.c", marker));
    let rows = probe["sites"].as_array().expect("sites");
    let row = rows.iter().find(|r| r["site"].as_str().unwrap().contains(&at))?;
    let n = |k: &str| row[k].as_u64().unwrap();
    Some((n("bytes"), n("blocks"), n("peak_bytes")))
}

/// The (allocs, frees) of the site at `marker` in liveheap.c.
fn site_calls(probe: &Value, marker: &str) -> (u64, u64) {
    let at = format!("liveheap.c:{} ", line_of("liveheap.c", marker));
    let rows = probe["sites"].as_array().expect("sites");
    let row = rows.iter().find(|r| r["site"].as_str().unwrap().contains(&at)).expect("site");
    (row["allocs"].as_u64().unwrap(), row["frees"].as_u64().unwrap())
}

fn totals(p: &Value) -> (u64, u64, u64, u64) {
    let n = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("{k} in {p}"));
    (n("bytes"), n("blocks"), n("peak_bytes"), n("dropped"))
}

#[test]
fn heap_bytes_blocks_and_peaks_per_site_exact() {
    let dir = scratch("live-heap");
    let exe = build(&dir, "liveheap.c");
    let mut t = Driven::start(&dir, &exe);
    // Blocks from before the probe are not counted, nor are their frees.
    t.run("o 10");
    let live = Live::attach(&dir, t.pid(), &["--no-gui"]);
    let heap = live.add("heap");
    let p = live.get(heap);
    assert_eq!(p["module"], "heap");
    assert_eq!(totals(&p), (0, 0, 0, 0), "{p}");
    assert_eq!(p["sites"], Value::Array(vec![]), "{p}");

    t.run("a 20"); // 20 × 100 at A
    t.run("b 5"); // 5 × 1000 at B (calloc)
    t.run("fa 5");
    t.run("fb 2");
    let p = live.get(heap);
    assert_eq!(site(&p, "heap-a"), Some((1500, 15, 2000)), "{p}");
    assert_eq!(site(&p, "heap-b"), Some((3000, 3, 5000)), "{p}");
    assert_eq!(totals(&p), (4500, 18, 7000, 0), "{p}");
    let name = p["sites"][0]["site"].as_str().unwrap();
    assert!(name.ends_with(" alloc_b"), "FILE:LINE FUNCTION: {name}");

    // realloc moves a block to the realloc's site; old blocks' frees are ignored
    t.run("g");
    t.run("fo");
    let p = live.get(heap);
    assert_eq!(site(&p, "heap-a"), Some((1400, 14, 2000)), "{p}");
    assert_eq!(site(&p, "heap-c"), Some((5000, 1, 5000)), "{p}");
    assert_eq!(totals(&p), (9400, 18, 9400, 0), "{p}");
    assert_eq!(site(&p, "heap-o"), None, "{p}");
    // the calls charged: A's realloc'd block counts as one of its frees, and as C's
    // allocation
    assert_eq!(site_calls(&p, "heap-a"), (20, 6), "{p}");
    assert_eq!(site_calls(&p, "heap-b"), (5, 2), "{p}");
    assert_eq!(site_calls(&p, "heap-c"), (1, 0), "{p}");
    // sorted by bytes in use
    let bytes: Vec<u64> =
        p["sites"].as_array().unwrap().iter().map(|r| r["bytes"].as_u64().unwrap()).collect();
    assert_eq!(bytes, [5000, 3000, 1400], "{p}");

    // 1000 short-lived blocks: in use 0, peak one block
    assert!(t.run("t 1000") >= 0);
    let p = live.get(heap);
    assert_eq!(site(&p, "heap-t"), Some((0, 0, 64)), "{p}");
    assert_eq!(totals(&p).0, 9400);

    // 8 threads allocating and freeing at once: the accounting stays exact.
    t.run("p 4000");
    let p = live.get(heap);
    let (bytes, blocks, peak) = site(&p, "heap-p").unwrap();
    assert_eq!((bytes, blocks), (8 * 2000 * 100, 8 * 2000), "{p}");
    assert!((bytes..=bytes + 8 * 100).contains(&peak), "{p}");
    // pthread_create's own blocks (libc's, outside the executable) count too: the
    // totals are the sites' sums
    let sum = |k: &str| -> u64 {
        p["sites"].as_array().unwrap().iter().map(|r| r[k].as_u64().unwrap()).sum()
    };
    assert_eq!((totals(&p).0, totals(&p).1), (sum("bytes"), sum("blocks")), "{p}");
    assert!(totals(&p).0 >= 9400 + bytes, "{p}");
    let libs: Vec<&str> = p["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["site"].as_str().unwrap())
        .filter(|s| s.starts_with("0x"))
        .collect();
    assert!(
        !libs.is_empty() && libs.iter().all(|s| s.contains(" in ") && s.contains(".so")),
        "{p}"
    );
    assert_eq!(totals(&p).3, 0, "{p}");

    // Removed: allocation goes on unaffected, and a new probe starts from zero.
    live.rm(heap);
    assert!(live.list().is_empty());
    t.run("a 5");
    t.run("fa 20");
    t.run("b 1");
    let again = live.add("heap");
    t.run("fb 4"); // blocks from before this probe
    t.run("a 3");
    let p = live.get(again);
    assert_eq!(totals(&p), (300, 3, 300, 0), "{p}");
    assert_eq!(site(&p, "heap-a"), Some((300, 3, 300)), "{p}");
    // one heap probe at a time
    let o = live.probe(&["add", "heap"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("a heap probe is active already"), "{}", stderr(&o));
    t.quit();
}

#[test]
fn heap_from_launch_ends_with_the_values_at_exit() {
    let dir = scratch("live-heap-launch");
    let exe = build(&dir, "liveheap.c");
    let stream = dir.join("stream.jsonl");
    let mut live = Command::new(memlens())
        .args(["live", "--no-gui", "--probe", "heap", "--every", "50ms", "--json-stream"])
        .arg(&stream)
        .arg("--")
        .arg(&exe)
        .env("XDG_RUNTIME_DIR", &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    live.stdin.take().unwrap().write_all(b"a 3\nb 2\nfb 1\nq\n").unwrap();
    let o = live.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&stream).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["final"], true, "{last}");
    let p = &last["probes"][0];
    assert_eq!(site(p, "heap-a"), Some((300, 3, 300)), "{last}");
    assert_eq!(site(p, "heap-b"), Some((1000, 1, 2000)), "{last}");
    // stdio's buffers are allocated inside libc, also counted
    assert!(totals(p).0 >= 1300, "{last}");
}

/// heapgrow.c's site at `marker` in a heap probe's values (`null` when absent).
fn grow_site<'a>(probe: &'a Value, marker: &str) -> &'a Value {
    let at = format!("heapgrow.c:{} ", line_of("heapgrow.c", marker));
    let rows = probe["sites"].as_array().expect("sites");
    rows.iter().find(|r| r["site"].as_str().unwrap().contains(&at)).unwrap_or(&Value::Null)
}

/// A site's (bytes, blocks, peak_bytes, allocs, frees).
fn counts(site: &Value) -> (u64, u64, u64, u64, u64) {
    let n = |k: &str| site[k].as_u64().unwrap_or_else(|| panic!("{k} in {site}"));
    (n("bytes"), n("blocks"), n("peak_bytes"), n("allocs"), n("frees"))
}

/// A site's series as (ms, bytes) points (none for an absent site).
fn series(site: &Value) -> Vec<(u64, u64)> {
    let pts = site["series"].as_array().cloned().unwrap_or_default();
    pts.iter().map(|p| (p[0].as_u64().unwrap(), p[1].as_u64().unwrap())).collect()
}

/// A site's `growth_bps` is the least-squares slope of its series' last 10 s, in
/// bytes per second (docs/live.md), give or take the rounding.
fn assert_growth_is_the_slope(site: &Value) {
    let s = series(site);
    let last = s.last().map_or(0, |p| p.0);
    let pts: Vec<(f64, f64)> =
        s.iter().filter(|p| p.0 + 10_000 >= last).map(|&(t, b)| (t as f64, b as f64)).collect();
    let n = pts.len() as f64;
    let (mt, mb) =
        (pts.iter().map(|p| p.0).sum::<f64>() / n, pts.iter().map(|p| p.1).sum::<f64>() / n);
    let var: f64 = pts.iter().map(|p| (p.0 - mt).powi(2)).sum();
    let cov: f64 = pts.iter().map(|p| (p.0 - mt) * (p.1 - mb)).sum();
    let want = if pts.len() < 2 || var == 0.0 { 0.0 } else { cov / var * 1000.0 };
    let got = site["growth_bps"].as_i64().unwrap() as f64;
    assert!((got - want).abs() <= 1.0, "growth {got}, slope {want}: {site}");
}

/// The first snapshot of the `--json-stream` file `stream` that `pred` accepts,
/// waiting for the collector to write it.
fn first_snapshot(stream: &Path, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let t = std::time::Instant::now();
    loop {
        let text = std::fs::read_to_string(stream).unwrap_or_default();
        // a line still being written does not parse: skipped
        let found = text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(&pred);
        if let Some(s) = found {
            return s;
        }
        assert!(t.elapsed() < Duration::from_secs(120), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn heap_growth_over_time_and_calls_per_site() {
    let dir = scratch("live-heap-growth");
    let exe = build(&dir, "heapgrow.c");
    let mut t = Driven::start(&dir, &exe);
    let stream = dir.join("stream.jsonl");
    let args = ["--no-gui", "--every", "50ms", "--json-stream", stream.to_str().unwrap()];
    let live = Live::attach(&dir, t.pid(), &args);
    let heap = live.add("heap");
    // Balanced: exact calls, nothing stays in use.
    t.run("b 1000");
    let p = live.get(heap);
    assert_eq!(counts(grow_site(&p, "grow-b")), (0, 0, 64, 1000, 1000), "{p}");
    assert_eq!(grow_site(&p, "grow-g"), &Value::Null, "{p}");
    let g_bytes = |step: u64| step * 2 * 10_000;
    for step in 1..=4u64 {
        assert_eq!(t.run("g 2") as u64, g_bytes(step));
        t.run("b 500");
        let p = live.get(heap);
        let (g, b) = (grow_site(&p, "grow-g"), grow_site(&p, "grow-b"));
        assert_eq!(counts(g), (g_bytes(step), 2 * step, g_bytes(step), 2 * step, 0), "{p}");
        let calls = 1000 + 500 * step;
        assert_eq!(counts(b), (0, 0, 64, calls, calls), "{p}");
        // The first sample after the step: the series rose, so did the growth rate;
        // the balanced site's bytes stayed flat (at most its one block in flight).
        let snap = first_snapshot(&stream, &format!("a sample of step {step}"), |s| {
            series(grow_site(&s["probes"][0], "grow-g")).last().map(|p| p.1) == Some(g_bytes(step))
        });
        let p = &snap["probes"][0];
        let (g, b) = (grow_site(p, "grow-g"), grow_site(p, "grow-b"));
        let growth = g["growth_bps"].as_i64().unwrap();
        assert!(growth > 0, "{snap}");
        assert_growth_is_the_slope(g);
        assert_growth_is_the_slope(b);
        assert!(b["growth_bps"].as_i64().unwrap().abs() * 100 < growth, "{snap}");
        assert!(series(b).iter().all(|&(_, bytes)| bytes == 0 || bytes == 64), "{snap}");
    }
    // The growing site's series: times rising, bytes monotone from 0 (before its
    // first allocation) to the last step; peak_ms the first read that saw the peak.
    let p = live.get(heap);
    let g = grow_site(&p, "grow-g");
    let s = series(g);
    assert!(s.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1), "{g}");
    assert_eq!(s.last().unwrap().1, g_bytes(4), "{g}");
    // (the ring holds the last 240 samples: a minute)
    assert!(s[0].1 == 0 || s.len() == 240, "{g}");
    let peak_ms = g["peak_ms"].as_u64().unwrap();
    let before = s.iter().rev().find(|p| p.1 < g_bytes(4)).unwrap().0;
    let reached = s.iter().find(|p| p.1 == g_bytes(4)).unwrap().0;
    assert!(before <= peak_ms && peak_ms <= reached, "{g}");
    // Freed: the calls balance, the peak and its time stay.
    assert_eq!(t.run("f"), 8);
    let p = live.get(heap);
    let g = grow_site(&p, "grow-g");
    assert_eq!(counts(g), (0, 0, g_bytes(4), 8, 8), "{p}");
    assert_eq!(g["peak_ms"].as_u64(), Some(peak_ms), "{p}");
    let snap = first_snapshot(&stream, "a sample after the frees", |s| {
        let s = series(grow_site(&s["probes"][0], "grow-g"));
        s.last().map(|p| p.1) == Some(0) && s.iter().any(|p| p.1 == g_bytes(4))
    });
    let g = grow_site(&snap["probes"][0], "grow-g");
    assert_growth_is_the_slope(g);
    // ms since the probe's insertion, which came after the collector's start
    assert!(peak_ms <= snap["time_ms"].as_u64().unwrap(), "{snap}");
    assert_eq!(g["peak_ms"].as_u64(), Some(peak_ms), "{snap}");
    t.quit();
}

#[test]
fn a_runtime_of_another_protocol_version_is_refused_in_one_line() {
    use std::os::unix::fs::DirBuilderExt;
    let dir = scratch("live-heap-protocol");
    let exe = build(&dir, "heapgrow.c");
    // Started without its control socket; in its place, one that answers `hello` as
    // a runtime of protocol 1 (before the heap answer gained allocs and frees) would.
    let child = Command::new(&exe).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let t = Driven::adopt(child);
    let run = dir.join("run");
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(run.join("memlens")).unwrap();
    let sock = run.join("memlens").join(format!("rt-{}.sock", t.pid()));
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let pid = t.pid();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { break };
            let mut line = String::new();
            let _ = BufReader::new(&s).read_line(&mut line);
            let _ = writeln!(s, "ok memlens-rt 1 pid={pid} bias=0x0");
        }
    });
    let o = Command::new(memlens())
        .args(["live", "--no-gui", "--pid", &pid.to_string()])
        .env("XDG_RUNTIME_DIR", &run)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("speaks control protocol 1, this memlens speaks 2: rebuild"), "{err}");
    t.quit();
}

/// The row of `rows` (`lines` of a watch probe) at `marker` in livewatch.c.
fn at_line<'a>(rows: &'a Value, marker: &str) -> &'a Value {
    let at = format!("livewatch.c:{} ", line_of("livewatch.c", marker));
    let rows = rows.as_array().expect("rows");
    rows.iter().find(|r| r["line"].as_str().unwrap().contains(&at)).unwrap_or(&Value::Null)
}

fn ls(row: &Value) -> (u64, u64) {
    (row["loads"].as_u64().unwrap(), row["stores"].as_u64().unwrap())
}

#[test]
fn watch_counts_loads_and_stores_per_thread_and_line_exact() {
    let dir = scratch("live-watch");
    let exe = build(&dir, "livewatch.c");
    let mut t = Driven::start(&dir, &exe);
    t.send("r 4 4 4"); // before the probe: not counted
    let live = Live::attach(&dir, t.pid(), &["--no-gui"]);
    let w = live.add("watch:cfg.limit");
    let p = live.get(w);
    let loc = p["location"].as_str().unwrap();
    assert!(loc.starts_with("cfg.limit @ 0x") && loc.ends_with("(4 bytes, int)"), "{p}");
    assert_eq!((ls(&p), &p["value"], &p["last_store"]), ((0, 0), &json!(1004), &Value::Null));

    // A stores 1..=10, then B stores 1001..=1005 and loads it 3 times.
    let r = t.send("r 10 5 3");
    let (a, b) = (r[0], r[1]);
    assert_eq!(r[2], 3 * 1005);
    let p = live.get(w);
    // cfg.after, stored next to each cfg.limit store, is not counted
    assert_eq!(ls(&p), (3, 15), "{p}");
    assert_eq!(p["value"], 1005, "{p}");
    assert_eq!(p["dropped"], 0, "{p}");
    assert_eq!(
        p["threads"],
        json!([{"thread": a, "loads": 0, "stores": 10}, {"thread": b, "loads": 3, "stores": 5}]),
        "{p}"
    );
    assert_eq!(ls(at_line(&p["lines"], "watch-a")), (0, 10), "{p}");
    assert_eq!(ls(at_line(&p["lines"], "watch-b")), (0, 5), "{p}");
    assert_eq!(ls(at_line(&p["lines"], "watch-load")), (3, 0), "{p}");
    assert_eq!(p["lines"].as_array().unwrap().len(), 3, "{p}");
    assert_eq!(p["last_store"]["thread"], b, "{p}");
    let last = p["last_store"]["line"].as_str().unwrap();
    assert!(last.contains(&format!("livewatch.c:{} set_b", line_of("livewatch.c", "watch-b"))));

    // one watch at a time; bad variables are one line and exit 2
    for (spec, why) in [
        ("watch:counter", "a watch probe is active already"),
        ("watch:cfg.nope", "cfg has no member .nope"),
        ("watch:nosuch", "no global variable nosuch"),
    ] {
        let o = live.probe(&["add", spec]);
        assert_eq!(o.status.code(), Some(2), "{spec}");
        assert!(stderr(&o).contains(why) && stderr(&o).lines().count() == 1, "{}", stderr(&o));
    }

    // Removed: the program runs on; a new watch counts from zero.
    live.rm(w);
    assert_eq!(t.send("r 2 2 2")[2], 2 * 1002);
    let c = live.add("watch:counter");
    assert_eq!(t.run("c 7"), 7);
    let p = live.get(c);
    // 7 increments, and main's printf of the result loads it once more
    assert_eq!((ls(&p), &p["value"]), ((8, 7), &json!(7)), "{p}");
    assert_eq!(p["threads"], json!([{"thread": t.pid(), "loads": 8, "stores": 7}]), "{p}");
    assert_eq!(ls(at_line(&p["lines"], "watch-counter")), (7, 7), "{p}");
    assert_eq!(ls(at_line(&p["lines"], "watch-print")), (1, 0), "{p}");
    assert!(p["location"].as_str().unwrap().starts_with("counter @ 0x"), "{p}");

    // one element of an array
    live.rm(c);
    let h = live.add("watch:hist[2]");
    assert!(live.get(h)["location"].as_str().unwrap().ends_with("(4 bytes, int)"));
    assert_eq!(t.run("h 12"), 3);
    let p = live.get(h);
    assert_eq!((ls(&p), &p["value"]), ((4, 3), &json!(3)), "{p}");
    assert_eq!(ls(at_line(&p["lines"], "watch-hist")), (3, 3), "{p}");
    assert_eq!(ls(at_line(&p["lines"], "watch-hist-print")), (1, 0), "{p}");

    // atomics: a fetch-add reads and writes, an atomic load reads
    live.rm(h);
    let x = live.add("watch:hits");
    assert_eq!(t.run("x 6"), 6);
    let p = live.get(x);
    assert_eq!((ls(&p), &p["value"]), ((7, 6), &json!(6)), "{p}");
    assert_eq!(ls(at_line(&p["lines"], "watch-rmw")), (6, 6), "{p}");
    assert_eq!(ls(at_line(&p["lines"], "watch-aload")), (1, 0), "{p}");
    t.quit();
}

/// The heap probe's row of the site at `marker` in `src`: (bytes, blocks, peak).
fn site_in(probe: &Value, src: &str, marker: &str) -> Option<(u64, u64, u64)> {
    let at = format!("{src}:{} ", line_of(src, marker));
    let rows = probe["sites"].as_array().expect("sites");
    let row = rows.iter().find(|r| r["site"].as_str().unwrap().contains(&at))?;
    let n = |k: &str| row[k].as_u64().unwrap();
    Some((n("bytes"), n("blocks"), n("peak_bytes")))
}

#[test]
fn heap_charges_cxx_container_growth_to_the_user_line() {
    let dir = scratch("live-heap-cxx");
    let exe = dir.join("liveheap-cxx");
    let out = Command::new(memlens())
        .args(["c++", "-O1", "-g"])
        .arg(programs().join("liveheap.cpp"))
        .arg("-o")
        .arg(&exe)
        .env("MEMLENS_QUIET", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "memlens c++: {}", String::from_utf8_lossy(&out.stderr));
    let stream = dir.join("stream.jsonl");
    let mut live = Command::new(memlens())
        .args(["live", "--no-gui", "--probe", "heap", "--json-stream"])
        .arg(&stream)
        .arg("--")
        .arg(&exe)
        .env("XDG_RUNTIME_DIR", &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    live.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let o = live.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "done 1024");
    let text = std::fs::read_to_string(&stream).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let p = &last["probes"][0];
    // 1, 2, 4, ... 1024 ints: the last buffer stays, the one before it was the peak's
    // other half. clang inlines libstdc++'s allocator into main: the push_back line;
    // g++ calls it out of line, and only the call site is known: the allocator.
    let growth = site_in(p, "liveheap.cpp", "cxx-push").or_else(|| {
        let rows = p["sites"].as_array().unwrap();
        let r = rows.iter().find(|r| {
            r["site"].as_str().unwrap().contains("std::__new_allocator<int>::allocate")
        })?;
        let n = |k: &str| r[k].as_u64().unwrap();
        Some((n("bytes"), n("blocks"), n("peak_bytes")))
    });
    assert_eq!(growth, Some((4096, 1, 4096 + 2048)), "{last}");
    assert_eq!(site_in(p, "liveheap.cpp", "cxx-vec"), Some((24, 1, 24)), "{last}");
    assert_eq!(site_in(p, "liveheap.cpp", "cxx-new"), Some((40, 1, 40)), "{last}");
}

#[test]
fn memory_probes_on_a_program_not_built_by_memlens_are_refused() {
    let dir = scratch("live-mem-plain");
    let exe = dir.join("plain");
    let out = Command::new("gcc")
        .args(["-O1", "-g"])
        .arg(programs().join("liveheap.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "gcc: {}", String::from_utf8_lossy(&out.stderr));
    for spec in ["heap", "watch:old"] {
        let o = Command::new(memlens())
            .args(["live", "--no-gui", "--probe", spec, "--"])
            .arg(&exe)
            .env("XDG_RUNTIME_DIR", &dir)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        let name = spec.split(':').next().unwrap();
        assert!(err.contains(&format!("module {name} needs a memlens-built target")), "{err}");
        assert!(err.contains("memlens cc"), "{err}");
        assert!(!stdout(&o).contains("ready"), "the program never ran: {}", stdout(&o));
    }
}
