//! `memlens export`: traced test programs in Perfetto, speedscope, Spall,
//! cachegrind and DHAT formats, checked against memlens's own reports and, where
//! the consuming tool runs here, against that tool (cg_annotate, dh_view.js).

use crate::util::*;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

mod stacks;

fn traced(src: &str, name: &str) -> (PathBuf, PathBuf) {
    traced_with(Cc::Gcc, src, name)
}

fn traced_with(cc: Cc, src: &str, name: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(name);
    let exe = build(cc, src, &dir, &[]);
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &[]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    (dir, trace)
}

/// `memlens export --format F -o OUT TRACE [extra]`, returning OUT's text.
fn export(trace: &Path, format: &str, extra: &[&str]) -> String {
    std::fs::read_to_string(export_file(trace, format, extra)).unwrap()
}

/// `memlens export --format F -o OUT TRACE [extra]`, returning OUT.
fn export_file(trace: &Path, format: &str, extra: &[&str]) -> PathBuf {
    let out_path = trace.with_extension(format!("{format}.out"));
    let mut args = vec!["export", "--format", format, "-o", out_path.to_str().unwrap()];
    args.extend(extra);
    args.push(trace.to_str().unwrap());
    let out = run_memlens(&args);
    assert!(out.status.success(), "export {format}: {}", stderr(&out));
    assert!(stderr(&out).starts_with("memlens: wrote "), "{}", stderr(&out));
    out_path
}

/// Loads + stores per function, from `memlens report --by function`.
fn ops_by_function(trace: &Path) -> HashMap<String, u64> {
    report(trace, "function")
        .iter()
        .map(|r| {
            let n = r["loads"].as_u64().unwrap() + r["stores"].as_u64().unwrap();
            (r["function"].as_str().unwrap().to_string(), n)
        })
        .collect()
}

/// Replays B/E events per tid: (name, depth at entry, memory operations before
/// the B and before the E, tid) per call.
fn calls_from_trace_events(events: &[Value]) -> Vec<(String, usize, u64, u64, u64)> {
    let mut stacks: HashMap<u64, Vec<(String, u64)>> = HashMap::new();
    let mut calls = Vec::new();
    let mut last_ts: HashMap<u64, u64> = HashMap::new();
    for e in events {
        let tid = e["tid"].as_u64().unwrap();
        match e["ph"].as_str().unwrap() {
            "B" | "E" => {
                // µs = memory operations; same-ts events of a thread are nudged 1 ns
                let ns = (e["ts"].as_f64().unwrap() * 1000.0).round() as u64;
                // time never runs backwards on a thread (Spall rejects that), and
                // no two events of a thread share a timestamp (Perfetto mis-nests)
                if let Some(&last) = last_ts.get(&tid) {
                    assert!(ns > last, "{e}");
                }
                last_ts.insert(tid, ns);
                let ts = ns / 1000;
                let st = stacks.entry(tid).or_default();
                if e["ph"] == "B" {
                    st.push((e["name"].as_str().unwrap().to_string(), ts));
                } else {
                    let (name, b) = st.pop().expect("E without B");
                    calls.push((name, st.len(), b, ts, tid));
                }
            }
            "M" => {}
            ph => panic!("unexpected phase {ph}"),
        }
    }
    assert!(stacks.values().all(|s| s.is_empty()), "unclosed frames");
    calls
}

fn count(calls: &[(String, usize, u64, u64, u64)], f: &str) -> usize {
    calls.iter().filter(|c| c.0 == f).count()
}

fn max_depth(calls: &[(String, usize, u64, u64, u64)], f: &str) -> usize {
    calls.iter().filter(|c| c.0 == f).map(|c| c.1).max().unwrap()
}

#[test]
fn perfetto_and_spall_show_every_call_nested() {
    let (_dir, trace) = traced("calls.c", "export-calls");
    // The trace's own function entries, named as `dump` names them.
    let enters: Vec<String> = dump(&trace)
        .iter()
        .filter(|e| e["event"] == "enter")
        .map(|e| e["function"].as_str().unwrap().to_string())
        .collect();
    let v: Value = serde_json::from_str(&export(&trace, "perfetto", &[])).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let calls = calls_from_trace_events(events);
    assert_eq!(calls.len(), enters.len());
    // gcc keeps every call: fib(10) makes 177, deep(5) 6 (left by longjmp)
    assert_eq!(count(&calls, "fib"), 177);
    assert_eq!(count(&calls, "deep"), 6);
    assert_eq!(count(&calls, "main"), 1);
    assert_eq!(enters.iter().filter(|f| *f == "fib").count(), 177);
    // main at depth 0; fib(10) → fib(1) nests 10 deep under it; deep(5) → deep(0) 6
    assert_eq!(max_depth(&calls, "main"), 0);
    assert_eq!(max_depth(&calls, "fib"), 10);
    assert_eq!(max_depth(&calls, "deep"), 6);
    let main = calls.iter().find(|c| c.0 == "main").unwrap();
    for c in &calls {
        assert!(c.2 >= main.2 && c.3 <= main.3, "{c:?} outside main {main:?}");
    }
    let info = info(&trace);
    let tid = info["streams"][0]["os_tid"].as_u64().unwrap();
    assert!(calls.iter().all(|c| c.4 == tid));
    let names: Vec<&Value> = events.iter().filter(|e| e["name"] == "thread_name").collect();
    assert_eq!(names.len(), 1);
    assert_eq!(names[0]["tid"], tid);
    assert_eq!(names[0]["pid"], info["pid"]);
    // main's width is every memory operation of the thread made inside it
    let ops = ops_by_function(&trace);
    assert_eq!(main.3 - main.2, ops.values().sum::<u64>());
    // fib touches no memory: every call is zero memory operations wide
    assert!(calls.iter().filter(|c| c.0 == "fib").all(|c| c.3 == c.2));
    // the innermost deep() is entered after the other five stored depth_seen
    let innermost = calls.iter().filter(|c| c.0 == "deep").max_by_key(|c| c.1).unwrap();
    let outermost = calls.iter().filter(|c| c.0 == "deep").min_by_key(|c| c.1).unwrap();
    assert_eq!(innermost.2 - outermost.2, ops["deep"] - 1);

    let spall: Value = serde_json::from_str(&export(&trace, "spall", &[])).unwrap();
    let spall_calls = calls_from_trace_events(spall.as_array().unwrap());
    assert_eq!(spall_calls, calls);
}

#[test]
fn speedscope_weights_frames_by_memory_operations() {
    for cc in Cc::all() {
        speedscope_for(cc);
    }
}

fn speedscope_for(cc: Cc) {
    let (_dir, trace) = traced_with(cc, "counts.c", "export-counts");
    let v: Value = serde_json::from_str(&export(&trace, "speedscope", &[])).unwrap();
    assert_eq!(v["$schema"], "https://www.speedscope.app/file-format-schema.json");
    let frames: Vec<&str> = v["shared"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    for f in ["main", "fill", "sum", "allocs"] {
        assert_eq!(frames.iter().filter(|n| **n == f).count(), 1, "{cc:?}: {f} in {frames:?}");
    }
    let fill = &v["shared"]["frames"][frames.iter().position(|n| *n == "fill").unwrap()];
    assert!(fill["file"].as_str().unwrap().ends_with("counts.c"), "{fill}");
    let profiles = v["profiles"].as_array().unwrap();
    assert_eq!(profiles.len(), 1);
    let p = &profiles[0];
    assert_eq!(p["type"], "evented");
    // open/close replay: width per function, nesting checked by the stack
    let mut stack: Vec<(u64, u64)> = Vec::new();
    let mut width: HashMap<String, u64> = HashMap::new();
    let mut depth: HashMap<String, usize> = HashMap::new();
    for e in p["events"].as_array().unwrap() {
        let (f, at) = (e["frame"].as_u64().unwrap(), e["at"].as_u64().unwrap());
        if e["type"] == "O" {
            depth.insert(frames[f as usize].to_string(), stack.len());
            stack.push((f, at));
        } else {
            let (g, b) = stack.pop().unwrap();
            assert_eq!(g, f, "speedscope closes the top frame only");
            *width.entry(frames[f as usize].to_string()).or_default() += at - b;
        }
    }
    assert!(stack.is_empty());
    let ops = ops_by_function(&trace);
    let total: u64 = ops.values().sum();
    assert_eq!(p["endValue"], total);
    // 1000 stores in fill; 1000 loads + 16 stores in sum
    assert_eq!(width["fill"], 1000, "{cc:?}");
    assert_eq!(width["sum"], 1016, "{cc:?}");
    assert_eq!(width["allocs"], ops["allocs"], "{cc:?}");
    assert_eq!((depth["main"], depth["fill"]), (0, 1), "{cc:?}");
    // gcc ends fill() with `jmp __tsan_func_exit` (a tail call after the epilogue);
    // sum() and allocs() must still nest under main.
    assert_eq!((depth["sum"], depth["allocs"]), (1, 1), "{cc:?}");
    assert_eq!(width["main"], total);
}

/// Per line `Ir Dr Dw [...]` of a cachegrind.out for one source file.
fn cachegrind_lines(text: &str, src: &str) -> HashMap<u64, Vec<u64>> {
    let mut file = String::new();
    let mut out: HashMap<u64, Vec<u64>> = HashMap::new();
    for l in text.lines() {
        if let Some(f) = l.strip_prefix("fl=") {
            file = f.to_string();
        } else if l.starts_with(|c: char| c.is_ascii_digit()) && file.ends_with(src) {
            let mut n = l.split(' ').map(|x| x.parse::<u64>().unwrap());
            let line = n.next().unwrap();
            let costs: Vec<u64> = n.collect();
            let e = out.entry(line).or_insert_with(|| vec![0; costs.len()]);
            for (a, b) in e.iter_mut().zip(costs) {
                *a += b;
            }
        }
    }
    out
}

#[test]
fn cachegrind_per_line_counts_work_with_cg_annotate() {
    let (dir, trace) = traced("counts.c", "export-cg");
    let src = "counts.c";
    let text = export(&trace, "cachegrind", &[]);
    assert!(text.contains("\nevents: Ir Dr Dw\n"), "{text}");
    let lines = cachegrind_lines(&text, src);
    assert_eq!(lines[&line_of(src, "store-g")], vec![1000, 0, 1000]);
    assert_eq!(lines[&line_of(src, "load-g")], vec![1000, 1000, 0]);
    assert_eq!(lines[&line_of(src, "store-arr")], vec![16, 0, 16]);
    // every line agrees with `memlens report --by line`
    let rows = report(&trace, "line");
    for (line, c) in &lines {
        assert_eq!(c[1], at_line(&rows, src, *line, "loads"), "line {line}");
        assert_eq!(c[2], at_line(&rows, src, *line, "stores"), "line {line}");
    }
    let summary: Vec<u64> = text
        .lines()
        .find_map(|l| l.strip_prefix("summary: "))
        .unwrap()
        .split(' ')
        .map(|x| x.parse().unwrap())
        .collect();
    let info = info(&trace);
    assert_eq!(summary[1], info["loads"].as_u64().unwrap());
    assert_eq!(summary[2], info["stores"].as_u64().unwrap());

    // The real cg_annotate reads it and puts our counts beside the source lines.
    let cg = Command::new("cg_annotate").arg("--version").output();
    if cg.is_err() {
        assert!(std::env::var_os("CI").is_none(), "cg_annotate (valgrind) is required in CI");
        eprintln!("note: cg_annotate not installed; skipping");
        return;
    }
    let out_file = dir.join("cachegrind.out.test");
    std::fs::write(&out_file, &text).unwrap();
    let path = programs().join(src).canonicalize().unwrap();
    let out =
        Command::new("cg_annotate").arg(&out_file).arg(&path).current_dir(&dir).output().unwrap();
    let ann = stdout(&out);
    assert!(out.status.success(), "cg_annotate failed: {}{ann}", stderr(&out));
    let source_line = |marker: &str| {
        let n = line_of(src, marker) as usize;
        let code = std::fs::read_to_string(programs().join(src)).unwrap();
        let code = code.lines().nth(n - 1).unwrap().to_string();
        ann.lines()
            .find(|l| l.ends_with(&code))
            .unwrap_or_else(|| panic!("{marker} not annotated:\n{ann}"))
            .to_string()
    };
    // `1,000 (49.29%)     0          1,000 (97.18%)          g = i; // @store-g`
    let cols = |l: &str| -> Vec<String> {
        let mut plain = String::new();
        let mut in_paren = false;
        for ch in l.chars() {
            match ch {
                '(' => in_paren = true,
                ')' => in_paren = false,
                c if !in_paren => plain.push(c),
                _ => {}
            }
        }
        plain.split_whitespace().take(3).map(String::from).collect()
    };
    assert_eq!(cols(&source_line("store-g")), ["1,000", "0", "1,000"], "{ann}");
    assert_eq!(cols(&source_line("load-g")), ["1,000", "1,000", "0"], "{ann}");
    assert_eq!(cols(&source_line("store-arr")), ["16", "0", "16"], "{ann}");
    assert_eq!(cols(&source_line("store-field")), ["1", "0", "1"], "{ann}");
    // untouched lines show dots
    assert_eq!(cols(&source_line("malloc")), [".", ".", "."], "{ann}");

    // With the cache simulation: misses per line equal `analyze cachesim`'s.
    let text = export(&trace, "cachegrind", &["--D1=4096,2,64", "--LL=65536,4,64"]);
    assert!(text.contains("\nevents: Ir Dr Dw D1mr D1mw DLmr DLmw\n"), "{text}");
    let lines = cachegrind_lines(&text, src);
    let sim = json(&[
        "analyze",
        "cachesim",
        "--D1=4096,2,64",
        "--LL=65536,4,64",
        "--top",
        "0",
        "--format",
        "json",
        trace.to_str().unwrap(),
    ]);
    let mut checked = 0;
    for row in sim["by_line"].as_array().unwrap() {
        if !row["file"].as_str().unwrap().ends_with(src) {
            continue;
        }
        let c = &lines[&row["line"].as_u64().unwrap()];
        assert_eq!(c[3] + c[4], row["misses"]["D1"].as_u64().unwrap(), "{row}");
        assert_eq!(c[5] + c[6], row["misses"]["LL"].as_u64().unwrap(), "{row}");
        checked += 1;
    }
    assert!(checked >= 3, "{sim}");
    // the 16 stores to arr[] touch 2 cold lines
    assert_eq!(lines[&line_of(src, "store-arr")][4], 2);
    std::fs::write(&out_file, &text).unwrap();
    let out = Command::new("cg_annotate").arg(&out_file).arg(&path).output().unwrap();
    assert!(out.status.success(), "cg_annotate failed: {}", stderr(&out));
    assert!(stdout(&out).contains("D1mr"), "{}", stdout(&out));
}

/// The fields valgrind's dh_view.js checks (`checkFields`), read from the installed
/// copy when there is one.
fn dh_view_fields() -> (Vec<String>, Vec<String>) {
    let fallback = || {
        let top = "dhatFileVersion mode verb bklt bkacc tu Mtu cmd pid te pps ftbl tg tuth";
        let pp = "tb tbk fs mb mbk gb gbk eb ebk rb wb";
        (top.split(' ').map(String::from).collect(), pp.split(' ').map(String::from).collect())
    };
    let Ok(js) = std::fs::read_to_string("/usr/libexec/valgrind/dh_view.js") else {
        return fallback();
    };
    let (mut top, mut pp) = (Vec::new(), Vec::new());
    // `checkFields(gData, [...])` / `checkFields(aPP, [...])`, and the `fields` list
    let lists = js.split("checkFields(").skip(1).map(|s| (s.starts_with("aPP"), s));
    for (is_pp, s) in lists {
        let Some(start) = s.find('[') else { continue };
        let end = start + s[start..].find(']').unwrap();
        let names = s[start + 1..end].split(',').map(|x| x.trim().trim_matches('"').to_string());
        if is_pp {
            pp.extend(names.filter(|n| !n.is_empty()));
        } else if s.starts_with("gData") {
            top.extend(names.filter(|n| !n.is_empty()));
        }
    }
    let fields = js.split("let fields = [").nth(1).unwrap();
    let fields = &fields[..fields.find(']').unwrap()];
    top.extend(fields.split(',').map(|x| x.trim().trim_matches('"').to_string()));
    assert!(top.len() >= 12 && pp.len() >= 9, "dh_view.js changed: {top:?} {pp:?}");
    (top, pp)
}

#[test]
fn dhat_sites_equal_the_heap_kernel() {
    let (_dir, trace) = traced("counts.c", "export-dhat");
    let src = "counts.c";
    let v: Value = serde_json::from_str(&export(&trace, "dhat", &[])).unwrap();
    let (top, pp_fields) = dh_view_fields();
    for f in &top {
        assert!(v.get(f).is_some(), "missing top-level {f}");
    }
    assert_eq!(v["dhatFileVersion"], 2);
    assert_eq!(v["mode"], "heap");
    let info = info(&trace);
    assert_eq!(v["pid"], info["pid"]);
    let ftbl: Vec<&str> =
        v["ftbl"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert_eq!(ftbl[0], "[root]");
    let pps = v["pps"].as_array().unwrap();
    let mut seen = std::collections::HashSet::new();
    for pp in pps {
        for f in &pp_fields {
            assert!(pp.get(f).is_some(), "missing {f} in {pp}");
        }
        // dh_view.js refuses repeated frame sequences
        assert!(seen.insert(pp["fs"].to_string()), "repeated {}", pp["fs"]);
        for f in pp["fs"].as_array().unwrap() {
            assert!((f.as_u64().unwrap() as usize) < ftbl.len());
        }
    }
    let site = |marker: &str| -> &Value {
        let at = format!("{src}:{})", line_of(src, marker));
        let hits: Vec<&Value> = pps
            .iter()
            .filter(|pp| ftbl[pp["fs"][0].as_u64().unwrap() as usize].ends_with(&at))
            .collect();
        assert_eq!(hits.len(), 1, "{marker}: {ftbl:?}");
        hits[0]
    };
    let malloc = site("malloc");
    assert_eq!((malloc["tbk"].as_u64(), malloc["tb"].as_u64()), (Some(10), Some(1000)));
    assert_eq!((malloc["mbk"].as_u64(), malloc["ebk"].as_u64()), (Some(10), Some(0)));
    assert_eq!(site("calloc")["tb"], 64);
    assert_eq!(site("realloc")["tb"], 128);
    // vn[2].val = 7: one 8-byte store into the calloc'ed block at offset 40
    assert_eq!(site("calloc")["wb"].as_u64(), Some(8));
    let acc = site("calloc")["acc"].as_array().unwrap().clone();
    assert_eq!(acc, serde_json::json!([-40, 0, -8, 1, -16, 0]).as_array().unwrap().clone());
    // every site's numbers equal `memlens analyze heap`
    let heap =
        json(&["analyze", "heap", "--top", "0", "--format", "json", trace.to_str().unwrap()]);
    let sites = heap["sites"].as_array().unwrap();
    assert_eq!(sites.len(), pps.len());
    for (s, pp) in sites.iter().zip(pps) {
        for (k, d) in [
            ("blocks", "tbk"),
            ("bytes", "tb"),
            ("bytes_read", "rb"),
            ("bytes_written", "wb"),
            ("max_live_bytes", "mb"),
            ("max_live_blocks", "mbk"),
            ("live_at_end", "ebk"),
            ("live_bytes_at_end", "eb"),
        ] {
            assert_eq!(s[k], pp[d], "{k} vs {d}: {s} {pp}");
        }
    }
    let blocks: u64 = pps.iter().map(|p| p["tbk"].as_u64().unwrap()).sum();
    assert_eq!(blocks, heap["summary"][0]["blocks"].as_u64().unwrap());
    assert_eq!(blocks, info["allocs"].as_u64().unwrap());

    // valgrind's own dh_view.js builds and prints the tree (node, with a tiny DOM)
    let dh_view = Path::new("/usr/libexec/valgrind/dh_view.js");
    if !dh_view.is_file() || Command::new("node").arg("--version").output().is_err() {
        eprintln!("note: node or dh_view.js missing; not loading the file in dh_view.js");
        return;
    }
    let dir = trace.parent().unwrap();
    std::fs::write(dir.join("dhcheck.js"), DH_VIEW_HARNESS).unwrap();
    let file = trace.with_extension("dhat.out");
    let out =
        Command::new("node").arg(dir.join("dhcheck.js")).arg(dh_view).arg(&file).output().unwrap();
    let page = stdout(&out);
    assert!(out.status.success(), "dh_view.js failed: {}", stderr(&out));
    assert!(page.contains("Mode:    heap"), "{page}");
    let malloc_line = line_of(src, "malloc");
    let pp = page
        .split("PP 1.")
        .find(|p| p.contains(&format!("counts.c:{malloc_line})")))
        .unwrap_or_else(|| panic!("no malloc site in\n{page}"));
    assert!(pp.contains("Total:     1,000 bytes"), "{pp}");
    assert!(pp.contains("in 10 blocks"), "{pp}");
    assert!(pp.contains("Max:       1,000 bytes in 10 blocks"), "{pp}");
}

/// Runs dh_view.js (argv[2]) on a DHAT file (argv[3]) with a minimal DOM and
/// prints the page's text.
const DH_VIEW_HARNESS: &str = r#"// Loads a DHAT JSON file through valgrind's own dh_view.js with a minimal DOM.
const fs = require("fs");
const vm = require("vm");
function el(tag) {
  return {
    tagName: tag, childNodes: [], textContent: "", className: "", style: {},
    classList: { add() {}, toggle() {}, contains() { return false; } },
    appendChild(c) { this.childNodes.push(c); c.parentNode = this; return c; },
    replaceChild(n, o) { const i = this.childNodes.indexOf(o); this.childNodes[i] = n; n.parentNode = this; return o; },
    removeChild(c) { this.childNodes = this.childNodes.filter(x => x !== c); return c; },
    cloneNode() { return el(tag); },
    addEventListener() {}, setAttribute() {},
    get selectedIndex() { return Math.max(0, this.childNodes.findIndex(o => o.selected)); },
  };
}
const body = el("body");
const document = {
  body, title: "", location: { search: "" },
  createElement: el, createTextNode: t => ({ textContent: t, childNodes: [] }),
};
const ctx = { document, performance: { now: () => 0 }, URLSearchParams, console, Intl };
vm.createContext(ctx);
vm.runInContext(fs.readFileSync(process.argv[2], "utf8") +
  "\nonLoad(); gData = JSON.parse(DATA); buildTree(); displayTree();", Object.assign(ctx, { DATA: fs.readFileSync(process.argv[3], "utf8") }));
const text = n => (n.textContent || "") + (n.childNodes || []).map(text).join("");
process.stdout.write(text(body));
"#;

#[test]
fn threads_get_their_own_tracks_and_bad_input_is_one_line() {
    let (dir, trace) = traced("threads.c", "export-threads");
    let info = info(&trace);
    let v: Value = serde_json::from_str(&export(&trace, "perfetto", &[])).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let calls = calls_from_trace_events(events);
    assert_eq!(count(&calls, "worker"), 4);
    let mut tids: Vec<u64> = calls.iter().filter(|c| c.0 == "worker").map(|c| c.4).collect();
    tids.sort();
    let mut want: Vec<u64> = info["streams"].as_array().unwrap()[1..]
        .iter()
        .map(|s| s["os_tid"].as_u64().unwrap())
        .collect();
    want.sort();
    assert_eq!(tids, want);
    let named = events.iter().filter(|e| e["name"] == "thread_name").count();
    assert_eq!(named as u64, info["threads"].as_u64().unwrap());
    let ss: Value = serde_json::from_str(&export(&trace, "speedscope", &[])).unwrap();
    assert_eq!(ss["profiles"].as_array().unwrap().len() as u64, info["threads"].as_u64().unwrap());
    // each worker's profile is 1000 stores + 1000 atomic RMWs (a load and a store)
    for p in &ss["profiles"].as_array().unwrap()[1..] {
        assert_eq!(p["endValue"], 3000, "{}", p["name"]);
    }

    // default output name and stdout
    let out = Command::new(memlens())
        .args(["export", "--format", "dhat", trace.to_str().unwrap()])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert!(dir.join("dhat.json").is_file());
    let out = run_memlens(&["export", "--format", "spall", "-o", "-", trace.to_str().unwrap()]);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.is_array());
    let t = trace.to_str().unwrap();
    let missing = dir.join("missing.trace");
    for bad in [
        vec!["export", "--format", "nonsense", t],
        vec!["export", "--format", "perfetto", missing.to_str().unwrap()],
        vec!["export", "--format", "perfetto", "--cache-sim", t],
        vec!["export", "--format", "cachegrind", "--D1=12,3", t],
        vec!["export", "--format", "perfetto", "-o", "/nonexistent/dir/x.json", t],
    ] {
        let out = run_memlens(&bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        let err = stderr(&out);
        assert!(
            err.starts_with("memlens: error:") && err.trim_end().lines().count() == 1,
            "{bad:?}: {err}"
        );
    }
}

/// A Python that has perfetto's own generated protobuf classes
/// (`perfetto.protos.perfetto.trace.perfetto_trace_pb2`, from the `perfetto` package
/// on PyPI), in a venv under target/. None outside CI when it cannot be made.
fn perfetto_python() -> Option<PathBuf> {
    let dir = memlens().parent().unwrap().join("pyenv-perfetto");
    let py = dir.join("bin").join("python3");
    let works = |py: &Path| {
        Command::new(py)
            .args(["-c", "import perfetto.protos.perfetto.trace.perfetto_trace_pb2"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if works(&py) {
        return Some(py);
    }
    let venv = Command::new("python3").args(["-m", "venv"]).arg(&dir).output();
    let pip = venv.is_ok_and(|o| o.status.success())
        && Command::new(dir.join("bin").join("pip"))
            .args(["install", "-q", "perfetto==0.59.1", "protobuf==7.36.2"])
            .output()
            .is_ok_and(|o| o.status.success());
    if pip && works(&py) {
        return Some(py);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI needs `python3 -m venv` and `pip install perfetto protobuf` (PyPI)"
    );
    eprintln!("note: no venv with the perfetto Python package; not decoding with it");
    None
}

/// Decodes a Perfetto protobuf trace (argv[1]) with perfetto's own generated classes
/// and replays its track events (timestamps on sequence-scoped incremental clocks
/// as clock_snapshot.proto defines them): prints the slices (tid, name, depth, begin ns,
/// end ns), the threads' descriptors, the process and how the sequences were used.
const PERFETTO_DECODE: &str = r#"
import json, sys
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
t = pb.Trace()
t.ParseFromString(open(sys.argv[1], "rb").read())
tracks, names, defaults, stacks, flags = {}, {}, {}, {}, {}
slices, process, interned, reinterned = [], None, 0, 0
# sequence-scoped clocks (ids 64..127): seq -> clock -> [incremental, last value, boot offset]
clocks, default_clock = {}, {}
BOOT = 6
for p in t.packet:
    seq = p.trusted_packet_sequence_id
    if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
        names[seq] = {}
    flags.setdefault(seq, []).append(p.sequence_flags)
    if p.HasField("trace_packet_defaults"):
        d = p.trace_packet_defaults
        defaults[seq] = d.track_event_defaults.track_uuid
        default_clock[seq] = d.timestamp_clock_id if d.HasField("timestamp_clock_id") else BOOT
    if p.HasField("clock_snapshot"):
        snap = {c.clock_id: c for c in p.clock_snapshot.clocks}
        for c in snap.values():
            if c.clock_id >= 64:
                off = snap[BOOT].timestamp - c.timestamp
                clocks.setdefault(seq, {})[c.clock_id] = [c.is_incremental, c.timestamp, off]
    clock = p.timestamp_clock_id if p.HasField("timestamp_clock_id") else default_clock.get(seq, BOOT)
    ts = p.timestamp
    if clock != BOOT:
        c = clocks[seq][clock]
        if c[0]:
            c[1] += ts
            ts = c[1]
        ts += c[2]
    if p.HasField("track_descriptor"):
        d = p.track_descriptor
        if d.HasField("process"):
            process = {"pid": d.process.pid, "name": d.process.process_name}
        if d.HasField("thread"):
            tracks[d.uuid] = {"pid": d.thread.pid, "tid": d.thread.tid, "name": d.thread.thread_name}
    for n in p.interned_data.event_names:
        interned += 1
        reinterned += n.iid in names[seq]
        names[seq][n.iid] = n.name
    if p.HasField("track_event"):
        e = p.track_event
        assert p.sequence_flags == pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        uuid = e.track_uuid if e.HasField("track_uuid") else defaults[seq]
        st = stacks.setdefault(uuid, [])
        if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            st.append((names[seq][e.name_iid], ts))
        elif e.type == pb.TrackEvent.TYPE_SLICE_END:
            name, begin = st.pop()
            slices.append([tracks[uuid]["tid"], name, len(st), begin, ts])
        else:
            raise SystemExit("unexpected track event type %d" % e.type)
assert all(not s for s in stacks.values()), "unclosed slices"
first = {seq: f[0] for seq, f in flags.items()}
print(json.dumps({"slices": slices, "threads": list(tracks.values()), "process": process,
                  "first_flags": first, "interned": interned, "reinterned": reinterned}))
"#;

#[test]
fn perfetto_pb_decodes_with_perfettos_own_protos() {
    let (dir, trace) = traced("threads.c", "export-pb");
    let pb = export_file(&trace, "perfetto-pb", &[]);
    let json_path = export_file(&trace, "perfetto", &[]);
    let v: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    let json_calls = calls_from_trace_events(v["traceEvents"].as_array().unwrap());
    let (pb_len, json_len) = (pb.metadata().unwrap().len(), json_path.metadata().unwrap().len());
    assert!(pb_len * 2 < json_len, "protobuf {pb_len} B, JSON {json_len} B");
    let Some(py) = perfetto_python() else { return };
    std::fs::write(dir.join("decode.py"), PERFETTO_DECODE).unwrap();
    let out = Command::new(py).arg(dir.join("decode.py")).arg(&pb).output().unwrap();
    assert!(out.status.success(), "perfetto's protos cannot read it: {}", stderr(&out));
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    let info = info(&trace);
    // one track per thread, named and tid'ed as the JSON names them
    let streams = info["streams"].as_array().unwrap();
    let threads = d["threads"].as_array().unwrap();
    assert_eq!(threads.len(), streams.len());
    for (i, s) in streams.iter().enumerate() {
        let t = threads.iter().find(|t| t["tid"] == s["os_tid"]).unwrap();
        assert_eq!(t["pid"], info["pid"]);
        assert!(t["name"].as_str().unwrap().starts_with(&format!("T{i}")), "{t}");
    }
    assert_eq!(d["process"]["pid"], info["pid"]);
    // each sequence starts by clearing its incremental state; every name is
    // interned once per thread that uses it
    let first = d["first_flags"].as_object().unwrap();
    assert_eq!(first.len(), streams.len() + 1);
    assert!(first.iter().filter(|(k, _)| *k != "1").all(|(_, f)| f == 1), "{first:?}");
    assert_eq!(d["reinterned"], 0);
    let per_thread_functions: usize = streams
        .iter()
        .map(|s| {
            let tid = s["os_tid"].as_u64().unwrap();
            let mut f: Vec<&str> =
                json_calls.iter().filter(|c| c.4 == tid).map(|c| c.0.as_str()).collect();
            f.sort();
            f.dedup();
            f.len()
        })
        .sum();
    assert_eq!(d["interned"], per_thread_functions as u64);
    // the same slices as the JSON export: name, depth, begin and end (ns) per tid
    let mut pb_calls: Vec<(String, usize, u64, u64, u64)> = d["slices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let ns = |i: usize| s[i].as_u64().unwrap();
            (s[1].as_str().unwrap().to_string(), ns(2) as usize, ns(3) / 1000, ns(4) / 1000, ns(0))
        })
        .collect();
    let mut want = json_calls.clone();
    pb_calls.sort();
    want.sort();
    assert_eq!(pb_calls, want);
    // and memlens's own counts: 4 workers, one per worker thread; every entry
    assert_eq!(count(&pb_calls, "worker"), 4);
    let enters = dump(&trace).iter().filter(|e| e["event"] == "enter").count();
    assert_eq!(pb_calls.len(), enters);
}

/// `callgrind_annotate [args] FILE`'s function table: file:function → Dr Dw Rb Wb,
/// and with `--tree=caller` the calls into each function (caller → count).
fn callgrind_annotate(file: &Path, args: &[&str]) -> Option<String> {
    // run where no source path starts: callgrind_annotate strips the working
    // directory from `fl=` names but not from `cfl=` names
    let cwd = file.parent().unwrap();
    let out = Command::new("callgrind_annotate").args(args).arg(file).current_dir(cwd).output();
    let Ok(out) = out else {
        assert!(
            std::env::var_os("CI").is_none(),
            "callgrind_annotate (valgrind) is required in CI"
        );
        eprintln!("note: callgrind_annotate not installed; skipping");
        return None;
    };
    assert!(out.status.success(), "callgrind_annotate failed: {}", stderr(&out));
    Some(stdout(&out))
}

/// The numbers and the name of a callgrind_annotate row, percentages dropped.
fn annotate_row(l: &str) -> (Vec<u64>, String) {
    let mut plain = String::new();
    let mut in_paren = false;
    for ch in l.chars() {
        match ch {
            '(' => in_paren = true,
            ')' => in_paren = false,
            c if !in_paren => plain.push(c),
            _ => {}
        }
    }
    let mut w = plain.split_whitespace();
    // `.`: no cost at all
    let num = |x: &str| if x == "." { 0 } else { x.replace(',', "").parse().unwrap() };
    let nums: Vec<u64> = w.by_ref().take(4).map(num).collect();
    (nums, w.collect::<Vec<_>>().join(" "))
}

/// function → [Dr, Dw, Rb, Wb] of the `file:function` table.
fn annotate_functions(text: &str) -> HashMap<String, Vec<u64>> {
    let table = text.split("file:function\n").nth(1).unwrap();
    let table = table.split_once('\n').unwrap().1; // the dashes
    table
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            let (n, name) = annotate_row(l);
            (name.rsplit(':').next().unwrap().to_string(), n)
        })
        .collect()
}

#[test]
fn callgrind_costs_and_calls_agree_with_callgrind_annotate() {
    let (_dir, trace) = traced("counts.c", "export-callgrind");
    let file = export_file(&trace, "callgrind", &[]);
    let Some(excl) = callgrind_annotate(&file, &["--threshold=100"]) else { return };
    let excl = annotate_functions(&excl);
    // self costs per function are `memlens report --by function`'s (nothing
    // inlined: counts.c's functions are noinline)
    let rows = report(&trace, "function");
    for r in &rows {
        let f = r["function"].as_str().unwrap();
        let want: Vec<u64> = ["loads", "stores", "bytes_read", "bytes_written"]
            .iter()
            .map(|k| r[k].as_u64().unwrap())
            .collect();
        assert_eq!(excl[f], want, "{f}");
    }
    assert_eq!(excl.values().filter(|c| c.iter().any(|n| *n > 0)).count(), rows.len());
    // inclusive: fill makes 1000 stores; sum 1000 loads + 16 stores; main all of them
    let incl = callgrind_annotate(&file, &["--threshold=100", "--inclusive=yes"]).unwrap();
    let incl = annotate_functions(&incl);
    let info = info(&trace);
    assert_eq!(incl["fill"][..2], [0, 1000]);
    assert_eq!(incl["sum"][..2], [1000, 16]);
    assert_eq!(incl["allocs"], excl["allocs"]); // a leaf
    let total = [info["loads"].as_u64().unwrap(), info["stores"].as_u64().unwrap()];
    assert_eq!(incl["main"][..2], total);

    // calls: fib(10) is 177 calls (1 from main, 176 recursive), deep(5) 6; inclusive
    // costs count each operation once, as the JSON export's outermost slices span
    let (_dir, trace) = traced("calls.c", "export-callgrind-calls");
    let file = export_file(&trace, "callgrind", &[]);
    let args = ["--threshold=100", "--tree=caller", "--inclusive=yes", "--auto=no"];
    let tree = callgrind_annotate(&file, &args).unwrap();
    // `0  0  0  0  < /path/calls.c:fib (176x) []` then `*  /path/calls.c:fib`
    let mut callers: HashMap<String, Vec<(String, u64)>> = HashMap::new();
    let mut pending = Vec::new();
    for l in tree.lines() {
        if l.contains(" < ") {
            let (_, rest) = l.split_once(" < ").unwrap();
            let (name, n) = rest.split_once(" (").unwrap();
            let n: u64 = n.split_once("x)").unwrap().0.replace(',', "").parse().unwrap();
            pending.push((name.rsplit(':').next().unwrap().to_string(), n));
        } else if l.contains(" *  ") {
            let name = l.rsplit(':').next().unwrap().trim().to_string();
            callers.insert(name, std::mem::take(&mut pending));
        }
    }
    let mut fib = callers["fib"].clone();
    fib.sort();
    assert_eq!(fib, [("fib".to_string(), 176), ("main".to_string(), 1)]);
    let mut deep = callers["deep"].clone();
    deep.sort();
    assert_eq!(deep, [("deep".to_string(), 5), ("main".to_string(), 1)]);
    let v: Value = serde_json::from_str(&export(&trace, "perfetto", &[])).unwrap();
    let calls = calls_from_trace_events(v["traceEvents"].as_array().unwrap());
    let incl = callgrind_annotate(&file, &["--threshold=100", "--inclusive=yes"]).unwrap();
    let incl = annotate_functions(&incl);
    for f in ["main", "fib", "deep"] {
        // calls.c's functions are never called from inside another of their own
        // calls except recursively: the outermost calls are those at the least depth
        let top = calls.iter().filter(|c| c.0 == f).map(|c| c.1).min().unwrap();
        let span: u64 = calls.iter().filter(|c| c.0 == f && c.1 == top).map(|c| c.3 - c.2).sum();
        let got = incl.get(f).map_or(0, |c| c[0] + c[1]);
        assert_eq!(got, span, "{f}");
    }
    assert!(incl["deep"][1] > 0, "{incl:?}");
}
