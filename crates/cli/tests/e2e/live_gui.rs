//! `memlens live`'s GUI: its JSON API over HTTP, the page in headless chromium
//! (insert a `count` probe through the context menu, watch it count up, remove it,
//! watch it stop), and an out-of-tree probe module loaded with `--module-path`.
//! The target is tests/programs/ticker.c (plain gcc -O1 -g), calling tick() about
//! every millisecond. Needs root and the uprobe PMU, like live_probes.rs.

use crate::live_mem::{build, Driven};
use crate::live_probes::unsupported;
use crate::util::*;
use crate::view::{browser_available, http, Browser};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// ticker.c copied into `dir` and built there, so its DWARF names `dir/ticker.c`.
fn build_ticker(dir: &Path) -> (PathBuf, String) {
    let src = dir.join("ticker.c");
    std::fs::copy(programs().join("ticker.c"), &src).unwrap();
    let exe = dir.join("ticker");
    let out = Command::new("gcc").args(["-O1", "-g"]).arg(&src).arg("-o").arg(&exe).output();
    let out = out.unwrap();
    assert!(out.status.success(), "gcc: {}", String::from_utf8_lossy(&out.stderr));
    (exe, src.to_str().unwrap().to_owned())
}

/// A `memlens live` launching the ticker, with its GUI's port and token.
struct Gui {
    /// `None` when a [`Driven`] owns it (the target's stdin and stdout go through it).
    child: Option<Child>,
    port: u16,
    token: String,
    target: i32,
    /// A pidfd of the target: the kill at the end reaches it and never a process
    /// that took its pid after it exited (a driven program exits early).
    target_fd: i32,
}

impl Gui {
    fn start(dir: &Path, exe: &Path, extra: &[&str]) -> Gui {
        Gui::spawn(dir, exe, extra, Stdio::null(), Stdio::null())
    }

    /// A `memlens live` launching the memlens-built `exe` (liveheap.c, livewatch.c),
    /// with the program driven over the collector's stdin and stdout.
    fn driven(dir: &Path, exe: &Path) -> (Gui, Driven) {
        let mut g = Gui::spawn(dir, exe, &[], Stdio::piped(), Stdio::piped());
        let d = Driven::adopt(g.child.take().unwrap());
        (g, d)
    }

    fn spawn(dir: &Path, exe: &Path, extra: &[&str], stdin: Stdio, stdout: Stdio) -> Gui {
        let runtime = dir.join("run");
        std::fs::create_dir_all(&runtime).unwrap();
        let mut child = Command::new(memlens())
            .args(["live", "--port", "0"])
            .args(extra)
            .arg("--")
            .arg(exe)
            .env("XDG_RUNTIME_DIR", &runtime)
            .stdin(stdin)
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let (mut url, mut target) = (String::new(), 0);
        while url.is_empty() || target == 0 {
            let mut l = String::new();
            assert!(err.read_line(&mut l).unwrap() > 0, "memlens live ended early: {l}");
            if let Some(u) = l.trim().strip_prefix("memlens: live: GUI ") {
                url = u.to_owned();
            }
            if let Some(p) = l.strip_prefix("memlens: live: launched PID ") {
                target = p.split(',').next().unwrap().parse().unwrap();
            }
        }
        // Keep draining stderr so the collector never blocks on it.
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
        let rest = url.strip_prefix("http://127.0.0.1:").expect("not bound to 127.0.0.1");
        let port = rest.split('/').next().unwrap().parse().unwrap();
        let token = rest.split("token=").nth(1).unwrap().to_owned();
        // SAFETY: pidfd_open takes a pid and flags and returns a descriptor or -1.
        let target_fd = unsafe { libc::syscall(libc::SYS_pidfd_open, target, 0) } as i32;
        Gui { child: Some(child), port, token, target, target_fd }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/?token={}", self.port, self.token)
    }

    /// One API request; the answer's `result`, or panics with its error.
    fn call(&self, req: Value) -> Value {
        let v = self.try_call(req.clone());
        assert_eq!(v["ok"], true, "{req}: {v}");
        v["result"].clone()
    }

    fn try_call(&self, req: Value) -> Value {
        let (st, body) =
            http(self.port, "POST", &format!("/api/call?token={}", self.token), Some(&req));
        assert!(st == 200 || st == 400, "{req}: HTTP {st}");
        serde_json::from_slice(&body).unwrap()
    }

    fn probes(&self) -> Vec<Value> {
        self.call(json!({"cmd": "state"}))["probes"].as_array().unwrap().clone()
    }
}

impl Drop for Gui {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
        // The launched program outlives a killed collector. SAFETY: a pidfd of ours.
        if self.target_fd >= 0 {
            unsafe {
                libc::syscall(libc::SYS_pidfd_send_signal, self.target_fd, libc::SIGKILL, 0, 0);
                libc::close(self.target_fd);
            }
        }
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(20), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn live_gui_api_lists_sources_inserts_counts_and_removes() {
    if unsupported() {
        return;
    }
    let dir = scratch("live-gui-api");
    let (exe, src) = build_ticker(&dir);
    let g = Gui::start(&dir, &exe, &[]);
    let line = line_of("ticker.c", "tick");

    // The files from DWARF, the source with its lines of code and their functions.
    let files = g.call(json!({"cmd": "files"}));
    assert!(files.as_array().unwrap().contains(&json!(src)), "{files}");
    let s = g.call(json!({"cmd": "source", "file": src}));
    assert!(s["text"].as_str().unwrap().contains("total += i; // @tick"));
    let lines = s["lines"].as_array().unwrap();
    assert!(lines.contains(&json!([line, "tick"])), "{lines:?}");
    assert!(!lines.iter().any(|l| l[0] == 1), "a comment line marked as code: {lines:?}");
    // Only DWARF's files are served.
    let v = g.try_call(json!({"cmd": "source", "file": "/etc/passwd"}));
    assert_eq!(v["ok"], false, "{v}");
    // The modules register their actions and columns; the page needs nothing else.
    let mods = g.call(json!({"cmd": "modules"}));
    let count = mods.as_array().unwrap().iter().find(|m| m["name"] == "count").unwrap();
    assert_eq!(count["columns"], json!([{"name": "count", "unit": "executions"}]));
    assert_eq!(count["actions"][0]["spec"], "count:{loc}");
    // Requests beyond reading and inserting/removing probes are refused.
    let v = g.try_call(json!({"cmd": "info"}));
    assert_eq!(v["ok"], false, "{v}");

    // Insert at the line, as the menu would; it counts up.
    let spec = format!("count:{src}:{line}");
    let id = g.call(json!({"cmd": "add", "spec": spec}));
    let read = || {
        let ps = g.probes();
        ps.iter().find(|p| p["id"] == id).map(|p| (p["count"].as_u64().unwrap(), p.clone()))
    };
    let (first, p) = read().expect("the probe is listed");
    assert_eq!(p["lines"], json!([[src, line]]), "{p}");
    assert_eq!(p["module"], "count");
    wait_until("the count to go up", || read().unwrap().0 > first);
    // Removed: gone from the state at once.
    g.call(json!({"cmd": "rm", "id": id}));
    assert!(read().is_none(), "still listed after rm");
    let v = g.try_call(json!({"cmd": "rm", "id": id}));
    assert!(v["error"].as_str().unwrap().contains(&format!("no probe with id {id}")), "{v}");
}

/// A memlens-built program (the runtime linked in) compiled from a path with `..`:
/// the GUI lists the program's file as DWARF spells it, with its lines of code, and
/// none of the runtime's own sources nor the Rust library's it is built from.
#[test]
fn live_gui_lists_the_program_s_files_only_and_code_lines_through_dotdot() {
    if unsupported() {
        return;
    }
    let dir = scratch("live-gui-files");
    let exe = build(&dir, "ticker.c");
    let g = Gui::start(&dir, &exe, &[]);
    let files = g.call(json!({"cmd": "files"}));
    let files: Vec<&str> = files.as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    let src = *files.iter().find(|f| f.ends_with("/ticker.c")).expect("ticker.c listed");
    assert!(src.contains("/../"), "built from a path with `..`: {src}");
    let runtime = ["/crates/rt/", "/crates/format/", "/crates/contract/", "library/core/", "zstd"];
    let shown: Vec<_> = files.iter().filter(|f| runtime.iter().any(|r| f.contains(r))).collect();
    assert!(shown.is_empty(), "the runtime's sources are listed: {shown:?}");
    let s = g.call(json!({"cmd": "source", "file": src}));
    let lines = s["lines"].as_array().unwrap();
    assert!(lines.contains(&json!([line_of("ticker.c", "tick"), "tick"])), "{lines:?}");
}

#[test]
fn live_gui_keeps_view_s_server_rules() {
    if unsupported() {
        return;
    }
    let dir = scratch("live-gui-rules");
    let (exe, _) = build_ticker(&dir);
    let g = Gui::start(&dir, &exe, &[]);
    let (st, _) = http(g.port, "GET", "/?token=00", None);
    assert_eq!(st, 403, "a wrong token must be refused");
    let (st, _) = http(g.port, "POST", "/api/call", Some(&json!({"cmd": "state"})));
    assert_eq!(st, 403, "no token must be refused");
    let (st, page) = http(g.port, "GET", &format!("/?token={}", g.token), None);
    assert_eq!(st, 200);
    let page = String::from_utf8(page).unwrap();
    assert!(page.contains("live.js?token=") && !page.contains("<script>"), "{page}");
    // A rebound DNS name (another Host) is refused.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", g.port)).unwrap();
    use std::io::{Read, Write};
    write!(
        s,
        "GET /?token={} HTTP/1.1\r\nHost: evil.example:{}\r\nConnection: close\r\n\r\n",
        g.token, g.port
    )
    .unwrap();
    let mut head = String::new();
    s.read_to_string(&mut head).unwrap();
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let mut s = std::net::TcpStream::connect(("127.0.0.1", g.port)).unwrap();
    write!(
        s,
        "GET /?token={} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
        g.token, g.port
    )
    .unwrap();
    let mut head = String::new();
    s.read_to_string(&mut head).unwrap();
    assert!(
        head.to_ascii_lowercase().contains("content-security-policy: default-src 'self'"),
        "{head}"
    );
}

/// Runs `script` in the page until it returns something truthy; returns it.
fn poll_js(b: &Browser, script: &str) -> Value {
    let t = Instant::now();
    loop {
        let v = b.js(script);
        if !(v.is_null() || v == json!(false) || v == json!("")) {
            return v;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "timed out waiting for: {script}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn live_gui_in_the_browser_inserts_a_count_through_the_menu_and_removes_it() {
    if unsupported() || !browser_available() {
        return;
    }
    let dir = scratch("live-gui-browser");
    let (exe, src) = build_ticker(&dir);
    let g = Gui::start(&dir, &exe, &[]);
    let line = line_of("ticker.c", "tick");
    let b = Browser::start();
    b.cmd("POST", "/url", Some(json!({"url": g.url()})));
    poll_js(&b, "return window.memlens && (window.memlens.error || window.memlens.ready)");
    assert_eq!(b.js("return memlens.error"), Value::Null);
    // The tree holds the program's file; a click opens it.
    b.click(&format!("#tree .file[data-path='{src}']"));
    let row = format!("#code tr[data-line='{line}']");
    poll_js(&b, &format!("return document.querySelector(\"{row}.code\")"));
    assert_eq!(
        b.js(
            "return document.querySelector(\"#code tr[data-line='1']\").classList.contains('code')"
        ),
        json!(false)
    );
    // The `count count` column, wherever the modules put it.
    let col = b.js(
        "return [...document.querySelectorAll('#code th.m')].findIndex(t => t.textContent === 'count count')",
    );
    let col = col.as_i64().unwrap();
    assert!(col >= 0, "no count column");
    let cell = format!("return document.querySelectorAll(\"{row} td.m\")[{col}].textContent");
    // Right-click the line: the menu offers the count module's action there.
    let menu = format!(
        "const td = document.querySelector(\"{row} td.n\"); const r = td.getBoundingClientRect();
         td.dispatchEvent(new MouseEvent('contextmenu', {{bubbles: true, cancelable: true, clientX: r.left + 4, clientY: r.top + 4}}));"
    );
    b.js(&menu);
    b.click(&format!("#menu div[data-spec='count:{src}:{line}']"));
    // Its column counts up.
    let first: u64 = poll_js(&b, &cell).as_str().unwrap().parse().unwrap();
    poll_js(&b, &format!("{}; return Number(v) > {first}", cell.replace("return ", "const v = ")));
    // Aggregated per function, file and program; a sparkline per probe.
    let agg = |scope: &str| {
        b.js(&format!(
            "return document.querySelectorAll(\"#totals tr[data-scope='{scope}'] td.m\")[{col}].textContent"
        ))
    };
    assert!(agg("function tick").as_str().unwrap().parse::<u64>().unwrap() > 0);
    assert!(agg("program").as_str().unwrap().parse::<u64>().unwrap() > 0);
    assert!(agg("file ticker.c").as_str().unwrap().parse::<u64>().unwrap() > 0);
    assert_eq!(b.js("return document.querySelectorAll('#probes .probe canvas').length"), json!(1));
    let id = g.probes()[0]["id"].clone();
    // Remove it through the menu: it stops counting.
    b.js(&menu);
    b.click(&format!("#menu div[data-rm='{id}']"));
    poll_js(
        &b,
        &format!("return document.querySelector(\"#probes .probe.removed[data-id='{id}']\")"),
    );
    assert!(g.probes().is_empty());
    let frozen = b.js(&format!(
        "return document.querySelector(\"#probes .probe[data-id='{id}'] .vals\").textContent"
    ));
    assert!(frozen.as_str().unwrap().starts_with("count="), "{frozen}");
    assert_eq!(b.js(&cell), json!(""), "the line still shows a value");
    let polls = b.js("return memlens.polls").as_u64().unwrap();
    poll_js(&b, &format!("return memlens.polls >= {} ", polls + 3));
    let later = b.js(&format!(
        "return document.querySelector(\"#probes .probe[data-id='{id}'] .vals\").textContent"
    ));
    assert_eq!(later, frozen, "a removed probe changed");

    // A two-line action ({start}..{stop}): the start at one line, the stop at the next
    // right-clicked one; the timer's columns then fill at the start line.
    let (l1, l2) = (line_of("ticker.c", "start"), line_of("ticker.c", "stop"));
    let at = |l: u64| menu.replace(&format!("data-line='{line}'"), &format!("data-line='{l}'"));
    b.js(&at(l1));
    b.click(&format!("#menu div[data-start='timer:{src}:{l1}..{{stop}}']"));
    b.js(&at(l2));
    b.click(&format!("#menu div[data-spec='timer:{src}:{l1}..{src}:{l2}']"));
    let tcol = b
        .js("return [...document.querySelectorAll('#code th.m')].findIndex(t => t.textContent === 'timer sum_ns')")
        .as_i64()
        .unwrap();
    poll_js(
        &b,
        &format!(
            "return Number(document.querySelectorAll(\"#code tr[data-line='{l1}'] td.m\")[{tcol}].textContent) > 0"
        ),
    );
    let p = g.probes();
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0]["spec"], format!("timer:{src}:{l1}..{src}:{l2}"));
}

/// examples/probe-module built as its own crate, into the test's target directory.
fn build_example_module() -> PathBuf {
    let target = memlens().parent().unwrap().parent().unwrap().join("probe-module");
    let manifest =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/probe-module/Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--offline", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .output()
        .unwrap();
    assert!(out.status.success(), "building the example module: {}", stderr(&out));
    target.join("debug/libmemlens_probe_module_example.so")
}

#[test]
fn out_of_tree_module_is_loaded_by_path_and_reports_values() {
    if unsupported() {
        return;
    }
    let dir = scratch("live-module");
    let (exe, _) = build_ticker(&dir);
    let so = build_example_module();
    let g = Gui::start(&dir, &exe, &["--module-path", so.to_str().unwrap()]);
    // It registers like a built-in module: query, actions, columns, available.
    let mods = g.call(json!({"cmd": "modules"}));
    let m = mods.as_array().unwrap().iter().find(|m| m["name"] == "procstat").expect("loaded");
    assert_eq!(m["available"], true, "{m}");
    assert_eq!(m["requirements"], json!(["/proc mounted"]));
    assert_eq!(m["actions"][0]["spec"], "procstat:process");
    let cols: Vec<&str> =
        m["columns"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(cols, ["polls", "minflt", "cpu_ms"]);
    // Its probes poll and report through the same list as the built-in ones.
    let id = g.call(json!({"cmd": "add", "spec": "procstat:process"}));
    let get = || g.probes().into_iter().find(|p| p["id"] == id).unwrap();
    let p = get();
    assert_eq!(p["location"], format!("process {}", g.target));
    assert_eq!(p["module"], "procstat");
    wait_until("polls", || get()["polls"].as_u64().unwrap() >= 3);
    assert!(get()["cpu_ms"].is_u64() && get()["minflt"].is_u64());
    // Its table (the target's threads) becomes a panel like a built-in module's.
    let state = g.call(json!({"cmd": "state"}));
    let row = state["probes"].as_array().unwrap().iter().find(|p| p["id"] == id).unwrap();
    let t = &row["tables"][0];
    assert_eq!(t["title"], "Threads", "{row}");
    assert_eq!(t["columns"][0]["name"], "tid");
    assert_eq!(t["sort"], 2);
    let tids: Vec<i64> =
        t["rows"].as_array().unwrap().iter().map(|r| r["cells"][0].as_i64().unwrap()).collect();
    assert_eq!(tids, [i64::from(g.target)], "the ticker has one thread: {t}");
    // Its own errors come back as one line.
    let v = g.try_call(json!({"cmd": "add", "spec": "procstat:main"}));
    assert_eq!(
        v["error"],
        "procstat:main: procstat samples the whole process: use procstat:process"
    );
    g.call(json!({"cmd": "rm", "id": id}));
    assert!(g.probes().is_empty());
}

#[test]
fn a_module_of_another_abi_version_is_refused_in_one_line() {
    let dir = scratch("live-module-abi");
    let c = dir.join("v2.c");
    std::fs::write(&c, "const unsigned table[2] = {2, 0};\nconst void *memlens_probe_module(void) { return table; }\n").unwrap();
    let so = dir.join("libv2.so");
    let out =
        Command::new("gcc").args(["-shared", "-fPIC"]).arg(&c).arg("-o").arg(&so).output().unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let none = dir.join("libnone.so");
    std::fs::write(&c, "int nothing(void) { return 0; }\n").unwrap();
    let out = Command::new("gcc")
        .args(["-shared", "-fPIC"])
        .arg(&c)
        .arg("-o")
        .arg(&none)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    for (lib, want) in [
        (&so, "probe module ABI version 2, this memlens speaks version 1: rebuild the module against this memlens"),
        (&none, "not a memlens probe module (it exports no `memlens_probe_module`)"),
    ] {
        let out = Command::new(memlens())
            .args(["live", "--module-path", lib.to_str().unwrap(), "--pid", "1"])
            .env("XDG_RUNTIME_DIR", &dir)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(want), "{err}");
    }
}

/// The rows of the panels of `module`'s probes titled `title`, as cell texts.
fn panel_rows(b: &Browser, module: &str, title: &str) -> Value {
    b.js(&format!(
        "const d = document.querySelector(\"#panels .panel[data-module='{module}'][data-title='{title}']\");
         return d && [...d.querySelectorAll('tr')].slice(1).map(tr => [...tr.cells].map(td => td.textContent));"
    ))
}

/// Polls until `rows` (of the program's own lines: rows naming `src`) are `want`.
fn wait_rows(what: &str, want: &Value, mut rows: impl FnMut() -> Value) -> Value {
    let t = Instant::now();
    loop {
        let got = rows();
        if &got == want {
            return got;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "{what}: got {got}, want {want}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The page's rows naming `src`: the program's own allocation sites or lines.
fn own(rows: Value, src: &str) -> Value {
    let rows = rows.as_array().cloned().unwrap_or_default();
    rows.into_iter().filter(|r| r.to_string().contains(&format!("{src}:"))).collect()
}

fn open_browser(g: &Gui) -> Browser {
    let b = Browser::start();
    b.cmd("POST", "/url", Some(json!({"url": g.url()})));
    poll_js(&b, "return window.memlens && (window.memlens.error || window.memlens.ready)");
    assert_eq!(b.js("return memlens.error"), Value::Null);
    b
}

/// Where the screenshots go: `MEMLENS_SHOTS` when set (they outlive the scratch
/// directory), else `dir`.
fn shot(b: &Browser, dir: &Path, name: &str) {
    let to = std::env::var_os("MEMLENS_SHOTS").map_or(dir.to_path_buf(), PathBuf::from);
    std::fs::create_dir_all(&to).unwrap();
    b.screenshot(&to.join(name));
    eprintln!("screenshot {}", to.join(name).display());
}

#[test]
fn live_gui_heap_panel_shows_exact_bytes_per_allocation_site() {
    if !browser_available() {
        return;
    }
    let dir = scratch("live-gui-heap");
    // Built from a copy in `dir`: its DWARF path has no `..` (the source view's code
    // lines need the path as the line table spells it).
    std::fs::copy(programs().join("liveheap.c"), dir.join("liveheap.c")).unwrap();
    let exe = build(&dir, dir.join("liveheap.c").to_str().unwrap());
    let (g, mut t) = Gui::driven(&dir, &exe);
    let b = open_browser(&g);
    // Open the program's file; insert `heap` through its menu action (it takes no
    // location, so every line offers it).
    let src = dir.join("liveheap.c").to_str().unwrap().to_owned();
    let (la, lb) = (line_of("liveheap.c", "heap-a"), line_of("liveheap.c", "heap-b"));
    b.click(&format!("#tree .file[data-path='{src}']"));
    poll_js(&b, &format!("return document.querySelector(\"#code tr[data-line='{la}'].code\")"));
    b.js(&format!(
        "const td = document.querySelector(\"#code tr[data-line='{la}'] td.n\"); const r = td.getBoundingClientRect();
         td.dispatchEvent(new MouseEvent('contextmenu', {{bubbles: true, cancelable: true, clientX: r.left + 4, clientY: r.top + 4}}));"
    ));
    b.click("#menu div[data-spec='heap']");
    poll_js(&b, "return document.querySelector(\"#panels .panel[data-module='heap']\")");
    assert_eq!(g.probes().len(), 1);

    t.run("a 20"); // 20 × 100 bytes at A
    t.run("b 5"); // 5 × 1000 at B
    t.run("fa 5");
    t.run("fb 2");
    let site = |l: u64, f: &str| format!("{src}:{l} {f}");
    // Sorted by bytes in use: B's 3000 over A's 1500; exact blocks, peaks and calls
    // (the growth rate and the sparkline move with time: checked with heapgrow.c).
    let want = json!([
        [site(lb, "alloc_b"), "3000", "3", "5000", "5", "2"],
        [site(la, "alloc_a"), "1500", "15", "2000", "20", "5"],
    ]);
    let rows = || counted(own(panel_rows(&b, "heap", "allocation sites"), &src));
    wait_rows("heap panel", &want, rows);
    shot(&b, &dir, "live-gui-heap.png");
    // The values move as the program runs: freeing all of A's blocks.
    t.run("fa 15");
    let want = json!([
        [site(lb, "alloc_b"), "3000", "3", "5000", "5", "2"],
        [site(la, "alloc_a"), "0", "0", "2000", "20", "20"],
    ]);
    wait_rows("heap panel after frees", &want, rows);
    // A click on a column's header sorts by it; again reverses.
    b.click("#panels .panel[data-module='heap'] th[data-col='3']");
    b.click("#panels .panel[data-module='heap'] th[data-col='3']");
    let asc = json!([
        [site(la, "alloc_a"), "0", "0", "2000", "20", "20"],
        [site(lb, "alloc_b"), "3000", "3", "5000", "5", "2"],
    ]);
    wait_rows("ascending peaks", &asc, rows);
    // A site opens its line.
    b.click("#panels .panel[data-module='heap'] td.at");
    poll_js(&b, &format!("return document.querySelector(\"#code tr.hit[data-line='{la}']\")"));
    // Text goes in as text: no element came from the data but the sparklines, drawn
    // from numbers.
    assert_eq!(
        b.js("return document.querySelectorAll('#panels td:not(.series) *').length"),
        json!(0)
    );
    assert_eq!(
        b.js("return [...document.querySelectorAll('#panels td.series *')].filter(e => !['svg','polyline','circle'].includes(e.tagName)).length"),
        json!(0)
    );
}

/// The first six cells of each row (the heap table's counts: site, bytes, blocks,
/// peak_bytes, allocs, frees).
fn counted(rows: Value) -> Value {
    let rows = rows.as_array().cloned().unwrap_or_default();
    rows.into_iter()
        .map(|r| r.as_array().unwrap().iter().take(6).cloned().collect::<Vec<Value>>())
        .collect()
}

#[test]
fn live_gui_heap_table_draws_each_site_s_bytes_over_time() {
    if !browser_available() {
        return;
    }
    let dir = scratch("live-gui-growth");
    std::fs::copy(programs().join("heapgrow.c"), dir.join("heapgrow.c")).unwrap();
    let exe = build(&dir, dir.join("heapgrow.c").to_str().unwrap());
    let (g, mut t) = Gui::driven(&dir, &exe);
    let b = open_browser(&g);
    g.call(json!({"cmd": "add", "spec": "heap"}));
    let src = dir.join("heapgrow.c").to_str().unwrap().to_owned();
    let site = |m: &str, f: &str| format!("{src}:{} {f}", line_of("heapgrow.c", m));
    let (grow, balanced) = (site("grow-g", "grow"), site("grow-b", "balanced"));
    let rows = || counted(own(panel_rows(&b, "heap", "allocation sites"), &src));
    t.run("b 100");
    for step in 1..=3u64 {
        t.run("g 1");
        let bytes = (step * 10_000).to_string();
        let want = json!([
            [grow, bytes, step.to_string(), bytes, step.to_string(), "0"],
            [balanced, "0", "0", "64", "100", "100"],
        ]);
        wait_rows(&format!("step {step}"), &want, rows);
    }
    let heads = "return [...document.querySelectorAll(\"#panels .panel[data-module='heap'] th\")].map(th => th.textContent)";
    assert_eq!(
        b.js(heads),
        json!([
            "site",
            "bytes \u{25BC}",
            "blocks",
            "peak_bytes",
            "allocs",
            "frees",
            "growth B/s",
            "bytes in use"
        ])
    );
    // The growing site's row: a positive rate, and a sparkline whose last point is
    // its highest (y grows downwards) once the last step was sampled.
    let row = |s: &str| {
        b.js(&format!(
            "const tr = [...document.querySelectorAll(\"#panels .panel[data-module='heap'] tr\")]
               .find(tr => tr.cells[0].textContent === {});
             const pl = tr && tr.cells[7].querySelector('svg.spark polyline');
             return tr && {{growth: Number(tr.cells[6].textContent),
               ys: pl ? pl.getAttribute('points').split(' ').map(p => Number(p.split(',')[1])) : []}};",
            serde_json::to_string(s).unwrap()
        ))
    };
    let top = 2.0; // the sparkline's highest y (live.js: SPARK_H - 2 - (SPARK_H - 4))
    let ys = |v: &Value| -> Vec<f64> {
        v["ys"].as_array().unwrap().iter().map(|y| y.as_f64().unwrap()).collect()
    };
    let t0 = Instant::now();
    let got = loop {
        let v = row(&grow);
        let y = ys(&v);
        if v["growth"].as_f64().unwrap_or(0.0) > 0.0 && y.len() >= 2 && y.last() == Some(&top) {
            break v;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no rising sparkline: {v}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let y = ys(&got);
    assert!(y.windows(2).all(|w| w[1] <= w[0]), "monotone growth: {got}");
    // (the series holds the last minute)
    assert!(y[0] > top || y.len() == 240, "it started lower: {got}");
    let flat = row(&balanced);
    assert!(!ys(&flat).is_empty(), "the balanced site's sparkline: {flat}");
    shot(&b, &dir, "live-gui-heap-growth.png");
    t.quit();
}

#[test]
fn live_gui_watch_panels_show_exact_accesses_per_thread_and_line() {
    if !browser_available() {
        return;
    }
    let dir = scratch("live-gui-watch");
    let exe = build(&dir, "livewatch.c");
    let (g, mut t) = Gui::driven(&dir, &exe);
    let b = open_browser(&g);
    // watch has no menu action (it needs a variable): the GUI's API inserts it.
    g.call(json!({"cmd": "add", "spec": "watch:cfg.limit"}));
    // A stores 1..=10, then B stores 1001..=1005 and loads it 3 times.
    let r = t.send("r 10 5 3");
    let (ta, tb) = (r[0].to_string(), r[1].to_string());
    let src = programs().join("livewatch.c").to_str().unwrap().to_owned();
    let line = |m: &str, f: &str| format!("{src}:{} {f}", line_of("livewatch.c", m));
    wait_rows("threads", &json!([[ta, "0", "10"], [tb, "3", "5"]]), || {
        panel_rows(&b, "watch", "accesses per thread")
    });
    // Most accesses first (the probe's order).
    wait_rows(
        "threads and lines",
        &json!([
            [ta, line("watch-a", "set_a"), "0", "10"],
            [tb, line("watch-b", "set_b"), "0", "5"],
            [tb, line("watch-load", "get_limit"), "3", "0"],
        ]),
        || panel_rows(&b, "watch", "accesses per thread and line"),
    );
    wait_rows("last store", &json!([[tb, line("watch-b", "set_b"), "1005"]]), || {
        panel_rows(&b, "watch", "last store and value")
    });
    shot(&b, &dir, "live-gui-watch.png");
}
