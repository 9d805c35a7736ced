//! `memlens view` in a real browser: Debian's chromium, headless, driven through
//! chromedriver's WebDriver protocol (plain HTTP/JSON, spoken here with std only).

use crate::util::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One HTTP/1.1 request with `Connection: close`; returns (status, body).
pub(crate) fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // chromedriver keeps connections open: read the header, then Content-Length
    // bytes (or chunks, or to the end).
    let mut r = BufReader::new(s);
    let mut head = String::new();
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).unwrap() == 0 || l == "\r\n" {
            break;
        }
        head.push_str(&l.to_ascii_lowercase());
    }
    let status: u16 = head.split(' ').nth(1).expect("no HTTP status").parse().unwrap();
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse::<usize>().unwrap());
    let mut payload = Vec::new();
    match len {
        Some(n) => {
            payload.resize(n, 0);
            r.read_exact(&mut payload).unwrap();
        }
        None => {
            r.read_to_end(&mut payload).unwrap();
            if head.contains("transfer-encoding: chunked") {
                payload = dechunk(&payload);
            }
        }
    }
    (status, payload)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let nl = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let n = usize::from_str_radix(String::from_utf8_lossy(&b[..nl]).trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[nl + 2..nl + 2 + n]);
        b = &b[nl + 2 + n + 2..];
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=' && !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for ch in bytes.chunks(4) {
        let v: Vec<u32> = ch.iter().map(|&c| val(c) as u32).collect();
        let n = v.iter().enumerate().fold(0u32, |acc, (i, &x)| acc | x << (18 - 6 * i));
        out.push((n >> 16) as u8);
        if v.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if v.len() > 3 {
            out.push(n as u8);
        }
    }
    out
}

/// A chromedriver session.
pub(crate) struct Browser {
    port: u16,
    session: String,
    driver: Child,
}

impl Browser {
    pub(crate) fn start() -> Browser {
        let port = free_port();
        let mut driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver");
        let t = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if t.elapsed() > Duration::from_secs(20) {
                let _ = driver.kill();
                panic!("chromedriver did not start");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut b = Browser { port, session: String::new(), driver };
        let caps = json!({"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-background-networking",
                     "--disable-gpu", "--window-size=1400,1000", "--disable-dev-shm-usage"]}}}});
        let (st, body) = http(port, "POST", "/session", Some(&caps));
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(st, 200, "new session failed: {v}");
        b.session = v["value"]["sessionId"].as_str().unwrap().to_string();
        // Elements drawn after a fetch: wait for them up to 10 s.
        b.cmd("POST", "/timeouts", Some(json!({"implicit": 10000})));
        b
    }

    pub(crate) fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let p = format!("/session/{}{path}", self.session);
        let (st, b) = http(self.port, method, &p, body.as_ref());
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(st, 200, "{method} {path} failed: {v}");
        v["value"].clone()
    }

    pub(crate) fn js(&self, script: &str) -> Value {
        self.cmd("POST", "/execute/sync", Some(json!({"script": script, "args": []})))
    }

    /// Runs an async script: `done(value)` is `arguments[0]`.
    pub(crate) fn js_async(&self, script: &str) -> Value {
        self.cmd("POST", "/execute/async", Some(json!({"script": script, "args": []})))
    }

    pub(crate) fn click(&self, css: &str) {
        let e = self.cmd("POST", "/element", Some(json!({"using": "css selector", "value": css})));
        let id = e.as_object().unwrap().values().next().unwrap().as_str().unwrap().to_string();
        self.cmd("POST", &format!("/element/{id}/click"), Some(json!({})));
    }

    pub(crate) fn screenshot(&self, path: &Path) {
        let v = self.cmd("GET", "/screenshot", None);
        std::fs::write(path, base64_decode(v.as_str().unwrap())).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = http(self.port, "DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Builds `src` with gcc and records it into `t.trace` in a scratch directory `name`;
/// `None` when no browser can run the test.
fn browser_trace(name: &str, src: &str) -> Option<(PathBuf, PathBuf)> {
    if !browser_available() {
        return None;
    }
    let dir = scratch(name);
    let exe = build(Cc::Gcc, src, &dir, &[]);
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &[]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    Some((dir, trace))
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Kills the `memlens view` server when the test ends, even on failure.
pub(crate) struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn have(cmd: &str) -> bool {
    Command::new(cmd).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Whether the browser tests can run here (in CI they must).
pub(crate) fn browser_available() -> bool {
    if have("chromium") && have("chromedriver") {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "chromium and chromedriver are required in CI");
    eprintln!("note: skipping the browser test: chromium or chromedriver is not installed");
    false
}

/// A running `memlens view` with a browser on its page.
pub(crate) struct Viewer {
    // Field order: the browser closes before the server stops.
    pub(crate) b: Browser,
    _server: Server,
    url: String,
    pub(crate) port: u16,
    pub(crate) token: String,
}

impl Viewer {
    /// Serves `trace` (indexing it first), opens the page and waits until it drew and
    /// fetched what hover and selection need.
    pub(crate) fn open(trace: &Path) -> Viewer {
        let mut child = Command::new(memlens())
            .args(["view", "--port", "0", trace.to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        let server = Server(child);
        let url = first.trim().strip_prefix("memlens view: ").expect("no URL printed").to_string();
        let rest = url.strip_prefix("http://127.0.0.1:").expect("not bound to 127.0.0.1");
        let port: u16 = rest.split('/').next().unwrap().parse().unwrap();
        let token = rest.split("token=").nth(1).unwrap().to_string();
        let b = Browser::start();
        b.cmd("POST", "/url", Some(json!({"url": url})));
        let t = Instant::now();
        while b.js("return !!(window.memlens && window.memlens.ready)") != json!(true) {
            let err = b.js("return window.memlens && window.memlens.error || null");
            assert!(err.is_null(), "page failed: {err}");
            assert!(t.elapsed() < Duration::from_secs(30), "the viewer did not become ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        let v = Viewer { b, _server: server, url, port, token };
        v.idle();
        v
    }

    /// Waits for the page's background fetches and pending selections; returns the
    /// number of highlighted cells.
    pub(crate) fn idle(&self) -> Value {
        self.b.js_async("const done = arguments[0]; memlens.idle().then(done);")
    }

    /// Polls `script` until it returns something truthy (at most 10 s).
    pub(crate) fn wait_for(&self, script: &str) {
        let t = Instant::now();
        while !self.b.js(&format!("return !!({script})")).as_bool().unwrap() {
            assert!(t.elapsed() < Duration::from_secs(10), "timed out waiting for {script}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The metric columns beside a source line in the file view.
    fn cols(&self, line: u64) -> Vec<String> {
        let v = self.b.js(&format!(
            "return [...document.querySelectorAll(\"#code .srcline[data-line='{line}'] .m\")].map(e => e.textContent)"
        ));
        v.as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
    }
}

#[test]
fn viewer_draws_the_map_hovers_highlights_and_shows_the_flame_chart() {
    if !browser_available() {
        return;
    }
    let dir = scratch("view-test");
    let exe = build(Cc::Gcc, "viewer.c", &dir, &[]);
    let trace = dir.join("v.trace");
    let out = record(&exe, &trace, &[]);
    assert!(out.status.code().is_some(), "record failed: {}", stderr(&out));
    let src = "viewer.c";
    let store_a = line_of(src, "store-a");
    let load_b = line_of(src, "load-b");

    // What the browser must show, from the trace itself: every memory operation in order.
    let ops: Vec<Value> = dump(&trace)
        .into_iter()
        .filter(|e| matches!(e["event"].as_str(), Some("read" | "write" | "range" | "rmw")))
        .collect();
    let addr = |e: &Value| u64::from_str_radix(&e["addr"].as_str().unwrap()[2..], 16).unwrap();
    let mut lines: Vec<u64> = ops.iter().map(|e| addr(e) / 64).collect();
    lines.sort();
    lines.dedup();
    // 64 ints and 128 longs, cache-aligned: 4 + 16 lines, and only they.
    assert_eq!(lines.len(), 4 + 16);
    let at = |l: u64| ops.iter().filter(|e| e["line"] == l).count();
    assert_eq!((at(store_a), at(load_b)), (64, 256));

    let v = Viewer::open(&trace);
    let (port, token) = (v.port, v.token.as_str());
    assert!(v.url.contains("token="));
    assert_eq!(token.len(), 32, "a 128-bit hex token");

    // No token or a wrong one: 403 for the page and the API alike.
    assert_eq!(http(port, "GET", "/", None).0, 403);
    assert_eq!(http(port, "GET", "/api/meta", None).0, 403);
    assert_eq!(http(port, "GET", "/api/meta?token=00000000000000000000000000000000", None).0, 403);
    assert_eq!(http(port, "GET", &format!("/api/meta?token={token}"), None).0, 200);
    assert_eq!(
        http(port, "GET", &format!("/api/source?token={token}&file=/etc/passwd"), None).0,
        404
    );

    let b = &v.b;
    b.screenshot(&dir.join("01-loaded.png"));

    // The map: one row per cache line in the working set, all 20 lines drawn.
    assert_eq!(b.js("return memlens.rowsDrawn"), json!(20));
    assert_eq!(b.js("return memlens.linesDrawn"), json!(20));
    assert_eq!(b.js("return memlens.level"), json!(0), "one operation per bucket");
    assert_eq!(b.js("return document.getElementById('map').dataset.rowsDrawn"), json!("20"));

    // The flame chart shows exactly the program's functions.
    assert_eq!(b.js("return memlens.flameFunctions()"), json!(["fill_a", "main", "sum_b"]));

    // Hover: at operation k exactly one cell is touched, and the tooltip names the
    // access of operation k — its source line, variable element and address.
    for k in [10usize, 64 + 36, 64 + 128 + 100] {
        let e = &ops[k];
        let info = b.js(&format!(
            "const x = memlens.xOf({k} + 0.5); const out = [];
             for (let r = 0; r < 20; r++) {{ const i = memlens.hoverAt(x, memlens.yOfRow(r));
               if (i && i.touched) out.push(i); }}
             return out;"
        ));
        let info = info.as_array().unwrap();
        assert_eq!(info.len(), 1, "op {k}: {info:?}");
        let i = &info[0];
        assert_eq!(i["line"], e["line"], "op {k}");
        assert!(i["file"].as_str().unwrap().ends_with(src));
        assert_eq!(i["variable"], e["variable"], "op {k}");
        assert_eq!(i["address"], e["addr"], "op {k}");
        assert_eq!(i["function"], e["function"], "op {k}");
        assert_eq!(i["thread"], json!(0));
    }
    // A real mouse move over operation 100 shows the tooltip with its source line.
    let (x, y) = {
        let v = b.js("const x = memlens.xOf(100.5); let row = -1;
             for (let r = 0; r < 20; r++) { const i = memlens.hoverAt(x, memlens.yOfRow(r));
               if (i && i.touched) row = r; }
             return [Math.round(x), Math.round(memlens.yOfRow(row))];");
        (v[0].as_i64().unwrap(), v[1].as_i64().unwrap())
    };
    let m = b.cmd("POST", "/element", Some(json!({"using": "css selector", "value": "#map"})));

    let map_rect = b.js("const r = document.getElementById('map').getBoundingClientRect(); return [r.width, r.height];");
    let (w, h) = (map_rect[0].as_f64().unwrap(), map_rect[1].as_f64().unwrap());
    b.cmd(
        "POST",
        "/actions",
        Some(json!({"actions": [{"type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"},
            "actions": [{"type": "pointerMove", "duration": 0,
                "origin": m,
                "x": x - (w / 2.0) as i64, "y": y - (h / 2.0) as i64}]}]})),
    );
    let tip = b.js("const t = document.getElementById('tip'); return [t.hidden, t.textContent];");
    assert_eq!(tip[0], json!(false), "tooltip shown");
    let tip_text = tip[1].as_str().unwrap();
    assert!(tip_text.contains(&format!("viewer.c:{load_b} sum_b")), "{tip_text}");
    assert!(tip_text.contains(ops[100]["variable"].as_str().unwrap()), "{tip_text}");
    b.screenshot(&dir.join("02-hover.png"));

    // Source browser: open the file in the tree, click the load line: its 256
    // accesses light up in the map; the store line's 64 likewise.
    b.click(".node[data-file-node$='viewer.c']");
    b.click(&format!(".srcline[data-line='{load_b}']"));
    assert_eq!(v.idle(), json!(256));
    b.screenshot(&dir.join("03-source-line.png"));
    b.click(&format!(".srcline[data-line='{store_a}']"));
    assert_eq!(v.idle(), json!(64));
    let cols = b.js(&format!(
        "return [...document.querySelectorAll(\".srcline[data-line='{store_a}'] .m\")].map(e => e.textContent)"
    ));
    assert_eq!(
        cols.as_array().unwrap()[0..2],
        [json!("0"), json!("64")],
        "loads, stores beside the line"
    );

    // Selecting the fill_a frame filters the time axis: only a's 4 lines are drawn,
    // and the source columns count only that range.
    assert_eq!(
        b.js_async("const done = arguments[0]; memlens.selectFrame('fill_a').then(() => done(memlens.view()));"),
        json!({"t0": 0, "t1": 64, "ymode": "ws"})
    );
    assert_eq!(b.js("return memlens.rowsDrawn"), json!(4));
    let cols = b.js(&format!(
        "return [...document.querySelectorAll(\".srcline[data-line='{load_b}'] .m\")].map(e => e.textContent)"
    ));
    assert_eq!(cols[0], json!("0"), "sum_b's loads are outside fill_a");
    b.screenshot(&dir.join("04-frame.png"));

    // The by-variable Y mode: rows = all 20 lines, in bands for a and b.
    let rows = b.js_async(
        "const done = arguments[0]; memlens.setRange(null).then(() => memlens.setView(0, memlens.meta.ops))
           .then(() => memlens.setYMode('addr')).then(done);",
    );
    assert_eq!(rows, json!(20));
    let bands =
        b.js("return memlens.meta.bands.map(b => [b[1] - b[0], memlens.meta.vars[b[2]][1]])");
    let mut bands: Vec<(u64, String)> = bands
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v[0].as_u64().unwrap(), v[1].as_str().unwrap().to_string()))
        .collect();
    bands.sort();
    assert_eq!(bands, [(4, "a".to_string()), (16, "b".to_string())]);
    b.screenshot(&dir.join("05-by-variable.png"));

    // Tables: the top variable is b; its row highlights b's cells: every line of b
    // from its first access to the end of the trace (nothing ages out of 20 lines).
    let mut first_b: std::collections::BTreeMap<u64, usize> = Default::default();
    for (k, e) in ops.iter().enumerate() {
        if e["variable"].as_str().is_some_and(|v| v.starts_with("b[")) {
            first_b.entry(addr(e) / 64).or_insert(k);
        }
    }
    assert_eq!(first_b.len(), 16);
    let expect: usize = first_b.values().map(|&f| ops.len() - f).sum();
    assert_eq!(b.js("return memlens.meta.tables.variables[0].variable"), json!("b"));
    b.js("memlens.clickTableRow('variables', 0)");
    assert_eq!(v.idle(), json!(expect));
    eprintln!("screenshots in {}", dir.display());
}

#[test]
fn viewer_shows_one_flame_lane_per_thread_with_its_functions() {
    let Some((dir, trace)) = browser_trace("view-threads", "threads.c") else {
        return;
    };
    // From the trace: the functions each thread entered.
    let mut want: std::collections::BTreeMap<u64, std::collections::BTreeSet<String>> =
        Default::default();
    for e in dump(&trace) {
        if e["event"] == "enter" {
            let f = e["function"].as_str().unwrap().to_string();
            want.entry(e["thread"].as_u64().unwrap()).or_default().insert(f);
        }
    }
    assert_eq!(want.len(), 5, "main and 4 workers: {want:?}");
    assert_eq!(want.values().filter(|f| f.contains("worker")).count(), 4);

    let v = Viewer::open(&trace);
    let lanes = v.b.js("return memlens.flameLanes()");
    let height = lanes["canvasHeight"].as_f64().unwrap();
    let mut got: std::collections::BTreeMap<u64, std::collections::BTreeSet<String>> =
        Default::default();
    let mut prev_bottom = 0.0;
    for l in lanes["lanes"].as_array().unwrap() {
        let fns = l["functions"].as_array().unwrap().iter();
        got.insert(
            l["thread"].as_u64().unwrap(),
            fns.map(|f| f.as_str().unwrap().to_string()).collect(),
        );
        // Lanes do not overlap and all fit on the canvas.
        let (top, h) = (l["top"].as_f64().unwrap(), l["height"].as_f64().unwrap());
        assert!(top >= prev_bottom && top + h <= height, "{lanes}");
        prev_bottom = top + h;
    }
    assert_eq!(got, want, "one lane per thread with that thread's functions");
    v.b.screenshot(&dir.join("01-threads.png"));
    eprintln!("screenshots in {}", dir.display());
}

#[test]
fn viewer_source_columns_show_cache_misses_and_follow_the_time_filter() {
    let Some((dir, trace)) = browser_trace("view-cachesim", "viewer.c") else {
        return;
    };
    let src = "viewer.c";
    let (store_a, load_b) = (line_of(src, "store-a"), line_of(src, "load-b"));
    // The cache simulation, with its per-access annotation next to the trace.
    let ann = format!("{}.cachesim", trace.display());
    let t = trace.to_str().unwrap();
    let caches = ["--D1=4096,2,64", "--LL=65536,4,64"];
    let sim = json(
        &[&["analyze", "cachesim"][..], &caches[..], &["--top", "0", "--format", "json", t][..]]
            .concat(),
    );
    let out = run_memlens(
        &[&["analyze", "cachesim"][..], &caches[..], &["--annotate", &ann, t][..]].concat(),
    );
    assert!(out.status.success(), "cachesim --annotate failed: {}", stderr(&out));
    let misses = |line: u64| {
        let rows = sim["by_line"].as_array().unwrap();
        let r =
            rows.iter().find(|r| r["line"] == line && r["file"].as_str().unwrap().ends_with(src));
        r.map(|r| r["misses"]["D1"].as_u64().unwrap()).unwrap_or(0)
    };
    // Cold 4 KiB cache: b's 16 lines miss in the first pass only, a's 4 lines once.
    assert_eq!((misses(load_b), misses(store_a)), (16, 4), "{sim}");
    let ops: Vec<Value> = dump(&trace)
        .into_iter()
        .filter(|e| matches!(e["event"].as_str(), Some("read" | "write" | "range" | "rmw")))
        .collect();
    let first_b = ops.iter().position(|e| e["line"] == load_b).unwrap();
    let last_b = ops.iter().rposition(|e| e["line"] == load_b).unwrap();
    assert_eq!(last_b + 1 - first_b, 256);

    let v = Viewer::open(&trace);
    let b = &v.b;
    assert_eq!(b.js("return memlens.meta.cachesim"), json!(true));
    b.click(".node[data-file-node$='viewer.c']");
    // The file view fills in once its text has arrived.
    v.wait_for(&format!("document.querySelector(\"#code .srcline[data-line='{load_b}']\")"));
    let head = b.js("return [...document.querySelectorAll('#code .srcline:first-child .m')].map(e => e.textContent)");
    assert_eq!(head, json!(["loads", "stores", "bytes", "misses", "miss%", "shared"]));
    // Whole trace: loads, stores, bytes, misses, miss ratio, shared.
    let c = v.cols(load_b);
    assert_eq!(c[0..4], ["256", "0", "2048", &misses(load_b).to_string()]);
    let ratio: f64 = c[4].parse().unwrap();
    assert!((ratio - 100.0 * 16.0 / 256.0).abs() <= 0.051, "{c:?}");
    assert_eq!(v.cols(store_a)[0..4], ["0", "64", "256", "4"]);
    b.screenshot(&dir.join("01-misses.png"));

    // A window: the first pass over b only (128 loads, all 16 misses) ...
    let set = |t0: usize, t1: usize| {
        b.js_async(&format!(
            "const done = arguments[0]; memlens.setRange({t0}, {t1}).then(() => done(memlens.rangeWindow));"
        ))
    };
    assert_eq!(set(first_b, first_b + 128), json!([first_b, first_b + 128]));
    assert_eq!(v.cols(load_b)[0..4], ["128", "0", "1024", "16"]);
    assert_eq!(v.cols(store_a)[0..4], ["0", "0", "0", "0"], "fill_a is outside the window");
    b.screenshot(&dir.join("02-window.png"));
    // ... the second pass (all hits) ...
    set(first_b + 128, last_b + 1);
    assert_eq!(v.cols(load_b)[0..5], ["128", "0", "1024", "0", "0.0"]);
    // ... and fill_a's frame from the flame chart.
    let sel = b.js_async("const done = arguments[0]; memlens.selectFrame('fill_a').then(done);");
    assert_eq!(sel, json!(true));
    assert_eq!(v.cols(store_a)[0..4], ["0", "64", "256", "4"]);
    assert_eq!(v.cols(load_b)[0..4], ["0", "0", "0", "0"]);
    eprintln!("screenshots in {}", dir.display());
}

/// A zoom to tiles that are not here yet draws the cached coarser level at once,
/// then the right level: the final frame is pixel for pixel the one drawn directly.
#[test]
fn viewer_draws_a_coarse_frame_first_then_the_fine_one() {
    let Some((dir, trace)) = browser_trace("view-zoom", "viewer_zoom.c") else {
        return;
    };
    let v = Viewer::open(&trace);
    let b = &v.b;
    let ops = b.js("return memlens.meta.ops").as_u64().unwrap();
    assert!(ops > 200_000, "{ops} operations");
    let whole = b.js("return memlens.level").as_i64().unwrap();
    assert!(whole >= 1, "the whole trace is drawn from a coarser level: {whole}");
    // a window of 600 operations a third of the way in: drawn from the finest level
    let (t0, t1) = (ops / 3, ops / 3 + 600);
    // the map's pixels, hashed, with what drew them
    let frame = "const c = document.getElementById('map'); const d = c.getContext('2d')
        .getImageData(0, 0, c.width, c.height).data; let h = 0;
        for (let i = 0; i < d.length; i++) h = (Math.imul(h, 31) + d[i]) | 0;
        return [memlens.previews - n, memlens.level, memlens.rowsDrawn, memlens.linesDrawn, h];";
    let zoom = |forget: bool| {
        let f = if forget { format!("memlens.forgetFinerThan({whole});") } else { String::new() };
        b.js_async(&format!(
            "const done = arguments[0]; {f} const n = memlens.previews;
             memlens.setView({t0}, {t1}).then(() => done((() => {{ {frame} }})()));"
        ))
    };
    let fresh = zoom(true);
    assert_eq!(fresh[0], json!(1), "one coarse frame first: {fresh}");
    assert!(b.js("return memlens.previewLevel").as_i64().unwrap() >= whole);
    assert_eq!(fresh[1], json!(0), "then the finest level: {fresh}");
    assert!(fresh[3].as_u64().unwrap() > 0, "{fresh}");
    eprintln!(
        "coarse frame {} ms, fine frame {} ms",
        b.js("return memlens.lastPreviewMs"),
        b.js("return memlens.lastRedrawMs")
    );
    b.screenshot(&dir.join("01-zoomed.png"));
    // The same view again from the cache: no coarse frame, the same pixels.
    v.idle();
    let cached = zoom(false);
    assert_eq!(cached[0], json!(0), "{cached}");
    assert_eq!(
        cached.as_array().unwrap()[1..],
        fresh.as_array().unwrap()[1..],
        "{fresh} vs {cached}"
    );
}

/// One raw GET with the given header lines; returns (status, lower-cased head, body).
/// A JSON endpoint of a viewer on `port`, with its token; the status must be 200.
pub(crate) fn get_api(port: u16, token: &str, path: &str) -> Value {
    let sep = if path.contains('?') { '&' } else { '?' };
    let host = format!("Host: 127.0.0.1:{port}\r\n");
    let (st, _, body) = get_raw(port, &format!("{path}{sep}token={token}"), &host);
    assert_eq!(st, 200, "{path}: {}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

pub(crate) fn get_raw(port: u16, path: &str, headers: &str) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\n{headers}Connection: close\r\n\r\n").unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").expect("no HTTP head") + 4;
    let head = String::from_utf8_lossy(&all[..end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut body = all[end..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    (status, head, body)
}

/// `memlens view --port 0 [args] TRACE` in the background: (server, port, token).
pub(crate) fn serve_in_background(
    trace: &Path,
    args: &[&str],
    path_env: Option<&Path>,
) -> (Server, u16, String) {
    let mut cmd = Command::new(memlens());
    cmd.arg("view").args(["--port", "0"]).args(args).arg(trace);
    if let Some(p) = path_env {
        let old = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{old}", p.display()));
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let url = first.trim().strip_prefix("memlens view: ").expect("no URL printed").to_string();
    let rest = url.strip_prefix("http://127.0.0.1:").expect("not bound to 127.0.0.1");
    let port: u16 = rest.split('/').next().unwrap().parse().unwrap();
    let token = rest.split("token=").nth(1).unwrap().to_string();
    (Server(child), port, token)
}

/// `tests/programs/viewer.c` copied to `dir/name` and built there with gcc.
fn build_as(dir: &Path, name: &str) -> PathBuf {
    build_copy_as(dir, "viewer.c", name, &["cc", "-O2"], ("MEMLENS_CC", "gcc"))
}

/// `tests/programs/{program}` copied to `dir/name` and built there by `memlens CMD`
/// with `compiler` in the environment (a source file named like HTML, for the pages'
/// escaping tests).
pub(crate) fn build_copy_as(
    dir: &Path,
    program: &str,
    name: &str,
    cmd: &[&str],
    compiler: (&str, &str),
) -> PathBuf {
    require_runtime();
    let src = dir.join(name);
    std::fs::copy(programs().join(program), &src).unwrap();
    let exe = dir.join("prog");
    let out = Command::new(memlens())
        .args(cmd)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .env(compiler.0, compiler.1)
        .output()
        .unwrap();
    assert!(out.status.success(), "memlens {cmd:?} failed: {}", stderr(&out));
    exe
}

/// A source file named like HTML is shown as its name, and no script runs: the
/// page builds DOM text nodes, and its Content-Security-Policy forbids inline script.
#[test]
fn viewer_shows_a_hostile_file_name_as_text_and_runs_no_script() {
    if !browser_available() {
        return;
    }
    let dir = scratch("view-xss");
    let name = "<img src=x onerror=alert(1)>.c";
    let exe = build_as(&dir, name);
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &[]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let v = Viewer::open(&trace);
    let b = &v.b;
    // The tree shows the file's name as text; opening it shows the path relative to
    // the program's directory as text, the full path as its title.
    let node = b.js("return document.querySelector('#tree .node.lvl1').firstChild.textContent");
    assert_eq!(node, json!(name));
    b.click("#tree .node.lvl1");
    let store_a = line_of("viewer.c", "store-a");
    v.wait_for(&format!("document.querySelector(\"#code .srcline[data-line='{store_a}']\")"));
    let head = b.js(
        "const s = document.querySelector('#code .srcline:first-child span:last-child'); return [s.textContent, s.title]",
    );
    assert_eq!(head[0], json!(name));
    assert!(head[1].as_str().unwrap().ends_with(&format!("/{name}")), "{head}");
    // Its text came from /api/source (the file is one the DWARF names).
    let line = b.js(&format!(
        "return document.querySelector(\"#code .srcline[data-line='{store_a}'] span:last-child\").textContent"
    ));
    assert!(line.as_str().unwrap().contains("a[i] = i;"), "{line}");
    assert_eq!(b.js("return document.querySelectorAll('img').length"), json!(0));
    assert_eq!(b.js("return document.title"), json!("memlens view"));
    // No alert is open (an open one would also fail the scripts above).
    let (st, body) = http(b.port, "GET", &format!("/session/{}/alert/text", b.session), None);
    assert_eq!(st, 404, "an alert is open: {}", String::from_utf8_lossy(&body));
}

/// A planted `meta.json` naming /etc/passwd does not make the server read it: the
/// files it serves come from the trace's own DWARF. Requests naming another host
/// (DNS rebinding) get 403; every answer carries the security headers.
#[test]
fn viewer_serves_only_dwarf_sources_checks_host_and_sends_csp() {
    let dir = scratch("view-planted");
    let exe = build(Cc::Gcc, "viewer.c", &dir, &[]);
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &[]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let out = run_memlens(&["view", "--no-serve", trace.to_str().unwrap()]);
    assert!(out.status.success(), "view --no-serve failed: {}", stderr(&out));
    // Plant /etc/passwd among the index's source files; the index stays current.
    let meta_path = dir.join("t.trace.mlview/meta.json");
    let mut meta: Value = serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    let src = meta["source"][0]["file"].as_str().unwrap().to_string();
    assert!(src.ends_with("viewer.c"), "{src}");
    meta["source"].as_array_mut().unwrap().push(json!({"file": "/etc/passwd",
        "function": "main", "line": 1, "loads": 1, "stores": 0, "bytes": 8, "shared": 0}));
    std::fs::write(&meta_path, meta.to_string()).unwrap();

    let (_server, port, token) = serve_in_background(&trace, &[], None);
    let host = format!("Host: 127.0.0.1:{port}\r\n");
    let q = |file: &str| {
        let f: String = file
            .bytes()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    (c as char).to_string()
                } else {
                    format!("%{c:02X}")
                }
            })
            .collect();
        format!("/api/source?token={token}&file={f}")
    };
    let (st, _, body) = get_raw(port, &q("/etc/passwd"), &host);
    assert_eq!(st, 404, "{}", String::from_utf8_lossy(&body));
    let (st, _, body) = get_raw(port, &q(&src), &host);
    assert_eq!(st, 200);
    assert_eq!(body, std::fs::read(programs().join("viewer.c")).unwrap());

    // DNS rebinding: right token, wrong Host or Origin.
    let page = format!("/?token={token}");
    assert_eq!(get_raw(port, &page, "Host: evil.example\r\n").0, 403);
    assert_eq!(get_raw(port, &page, &format!("Host: evil.example:{port}\r\n")).0, 403);
    assert_eq!(get_raw(port, &page, &format!("Host: 127.0.0.1:{}\r\n", port ^ 1)).0, 403);
    let evil_origin = format!("{host}Origin: http://evil.example:{port}\r\n");
    assert_eq!(get_raw(port, &format!("/api/meta?token={token}"), &evil_origin).0, 403);
    assert_eq!(get_raw(port, &page, &format!("Host: localhost:{port}\r\n")).0, 200);
    let good_origin = format!("{host}Origin: http://127.0.0.1:{port}\r\n");
    assert_eq!(get_raw(port, &format!("/api/meta?token={token}"), &good_origin).0, 200);

    // Every answer, 200 or 403 or 404, carries the policy.
    for (path, hd, want) in [
        (page.clone(), host.clone(), 200),
        (format!("/app.js?token={token}"), host.clone(), 200),
        (format!("/api/tiles?token={token}&level=0&b0=0&b1=4&fields=draw"), host.clone(), 200),
        ("/".to_string(), host.clone(), 403),
        (page.clone(), "Host: evil.example\r\n".to_string(), 403),
        (q("/etc/passwd"), host.clone(), 404),
    ] {
        let (st, head, _) = get_raw(port, &path, &hd);
        assert_eq!(st, want, "{path}");
        for h in [
            "content-security-policy: default-src 'self'; script-src 'self';",
            "connect-src 'self'",
            "x-content-type-options: nosniff",
            "referrer-policy: no-referrer",
            "x-frame-options: deny",
        ] {
            assert!(head.contains(h), "{path}: no `{h}` in\n{head}");
        }
        assert!(!head.contains("unsafe-inline") && !head.contains("unsafe-eval"), "{head}");
    }
    // The page itself has no inline script for the policy to forbid.
    let html = String::from_utf8(get_raw(port, &page, &host).2).unwrap();
    assert!(!html.contains("<script>") && !html.contains("document.write"), "{html}");
}

/// `--open` hands the browser a 0600 file in a 0700 directory, never the token
/// (a command line is readable by every user in /proc/PID/cmdline); the file
/// redirects to the URL and goes away when the server stops.
#[test]
fn viewer_open_keeps_the_token_off_the_browser_command_line() {
    let dir = scratch("view-open");
    let exe = build(Cc::Gcc, "viewer.c", &dir, &[]);
    let trace = dir.join("t.trace");
    assert!(record(&exe, &trace, &[]).status.success());
    // A stand-in browser that reports what it was given.
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let seen = dir.join("seen");
    let script = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{0}.args'\nstat -c %a \"$1\" > '{0}.mode'\n\
         stat -c %a \"$(dirname \"$1\")\" > '{0}.dirmode'\ncat \"$1\" > '{0}.page'\nmv '{0}.args' '{0}'\n",
        seen.display()
    );
    let fake = bin.join("xdg-open");
    std::fs::write(&fake, script).unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let runtime = dir.join("run");
    std::fs::create_dir(&runtime).unwrap();
    let mut cmd = Command::new(memlens());
    let old = std::env::var("PATH").unwrap_or_default();
    cmd.args(["view", "--open", "--port", "0"])
        .arg(&trace)
        .env("PATH", format!("{}:{old}", bin.display()))
        .env("XDG_RUNTIME_DIR", &runtime)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = cmd.spawn().unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let server = Server(child);
    let url = first.trim().strip_prefix("memlens view: ").unwrap().to_string();
    let token = url.split("token=").nth(1).unwrap().to_string();
    let t = Instant::now();
    while !seen.exists() {
        assert!(t.elapsed() < Duration::from_secs(20), "the browser was not started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let args = std::fs::read_to_string(&seen).unwrap();
    assert!(!args.contains(&token), "the token is on the browser's command line: {args}");
    let page = PathBuf::from(args.trim());
    assert!(page.starts_with(&runtime), "{args}");
    let read = |ext: &str| std::fs::read_to_string(format!("{}.{ext}", seen.display())).unwrap();
    assert_eq!(read("mode").trim(), "600");
    assert_eq!(read("dirmode").trim(), "700");
    assert!(read("page").contains(&format!("content=\"0;url={url}\"")), "{}", read("page"));
    // Interrupted, the server removes the file and its directory.
    unsafe { libc::kill(server.0.id() as i32, libc::SIGINT) };
    let t = Instant::now();
    while page.exists() || page.parent().unwrap().exists() {
        assert!(t.elapsed() < Duration::from_secs(10), "{} left behind", page.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Peak RSS (VmHWM) of a process, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// 200 concurrent tile requests whose readers are slow (they read only after all
/// were sent): the server's memory stays under 1 GB (it answers two at a time and
/// streams each answer) and every answer arrives complete.
#[test]
fn viewer_memory_stays_bounded_under_200_concurrent_tile_requests() {
    let dir = scratch("view-flood");
    let exe = build(Cc::Gcc, "viewer_zoom.c", &dir, &[]);
    let trace = dir.join("t.trace");
    assert!(record(&exe, &trace, &[]).status.success());
    let (server, port, token) = serve_in_background(&trace, &[], None);
    let pid = server.0.id();
    let meta: Value =
        serde_json::from_slice(&http(port, "GET", &format!("/api/meta?token={token}"), None).1)
            .unwrap();
    let buckets = meta["levels"][0]["buckets"].as_u64().unwrap();
    assert!(buckets >= 8192, "{buckets} buckets");
    let before = peak_rss(pid);
    let t = Instant::now();
    let mut conns = Vec::new();
    for k in 0..200u64 {
        let b0 = (k * 97) % (buckets - 4096);
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        write!(
            s,
            "GET /api/tiles?token={token}&level=0&b0={b0}&b1={}&fields=all HTTP/1.1\r\n\
             Host: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n",
            b0 + 4096
        )
        .unwrap();
        conns.push(s);
    }
    // Readers that stall: give the server time to pile answers up, if it would.
    std::thread::sleep(Duration::from_secs(5));
    let mut total = 0usize;
    let readers: Vec<_> = conns
        .into_iter()
        .map(|mut s| {
            std::thread::spawn(move || {
                let mut all = Vec::new();
                s.read_to_end(&mut all).unwrap();
                all
            })
        })
        .collect();
    for r in readers {
        let all = r.join().unwrap();
        let end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert!(all.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&all[..end]));
        let head = String::from_utf8_lossy(&all[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map(|v| v.trim().parse().unwrap())
            .expect("no content-length");
        assert_eq!(all.len() - end, len, "a complete answer");
        // 4096 buckets, each with a header and its cells.
        assert_eq!(u32::from_le_bytes(all[end..end + 4].try_into().unwrap()), 4096);
        total += len;
    }
    let peak = peak_rss(pid);
    eprintln!(
        "200 requests, {} MB answered in {:.1} s; server peak RSS {} MB (at start {} MB)",
        total >> 20,
        t.elapsed().as_secs_f64(),
        peak >> 20,
        before >> 20
    );
    assert!(total > 1 << 30, "the answers add up to more than the bound: {total}");
    assert!(peak < 1 << 30, "server peak RSS {} MB", peak >> 20);
    assert!(t.elapsed() < Duration::from_secs(120));
}
