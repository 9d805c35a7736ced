//! `memlens record --dbi`: plain binaries (no memlens at build time) traced under
//! QEMU user mode, checked against the compiled path and valgrind lackey.

use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub(crate) fn have(tool: &str) -> bool {
    let ok = Command::new(tool).arg("--version").output().is_ok();
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "{tool} is required in CI");
        eprintln!("note: {tool} not installed; skipping");
    }
    ok
}

/// gcc (g++ for C++ sources) -O2 -g, no memlens.
pub(crate) fn plain_build(src: &Path, dir: &Path, extra: &[&str]) -> PathBuf {
    let exe = dir.join(src.file_stem().unwrap());
    let cc = if src.extension().is_some_and(|e| e == "cpp") { "g++" } else { "gcc" };
    let out = Command::new(cc)
        .args(["-O2", "-g", "-pthread"])
        .args(extra)
        .arg(src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "{cc}: {}", stderr(&out));
    exe
}

pub(crate) fn record_dbi(exe: &Path, trace: &Path, args: &[&str], extra: &[&str]) -> Output {
    Command::new(memlens())
        .args(["record", "-q", "--dbi"])
        .args(extra)
        .arg("-o")
        .arg(trace)
        .arg("--")
        .arg(exe)
        .args(args)
        .output()
        .unwrap()
}

/// Where a test program comes from: `tests/programs/NAME` or inline C text.
pub(crate) enum Src<'a> {
    Program(&'a str),
    Inline(&'a str, &'a str),
}

/// A scratch directory and a plain build of `src` in it; `None` (skip) when qemu
/// is missing outside CI.
pub(crate) fn setup(name: &str, src: Src, extra: &[&str]) -> Option<(PathBuf, PathBuf)> {
    if !have("qemu-x86_64") {
        return None;
    }
    let dir = scratch(name);
    let path = match src {
        Src::Program(p) => programs().join(p),
        Src::Inline(file, text) => {
            let path = dir.join(file);
            std::fs::write(&path, text).unwrap();
            path
        }
    };
    let exe = plain_build(&path, &dir, extra);
    Some((dir, exe))
}

/// `record_dbi` that must succeed.
pub(crate) fn record_ok(exe: &Path, trace: &Path, args: &[&str], extra: &[&str]) -> Output {
    let out = record_dbi(exe, trace, args, extra);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    out
}

#[test]
fn dbi_counts_match_the_compiled_path() {
    let Some((dir, exe)) = setup("dbi-counts", Src::Program("counts.c"), &[]) else {
        return;
    };
    let trace = dir.join("t.trace");
    let out = record_ok(&exe, &trace, &[], &[]);
    assert_eq!(stdout(&out), "sum=999000 argc=1\n");

    let rows = report(&trace, "line");
    let src = "counts.c";
    let l = |m| line_of(src, m);
    assert_eq!(at_line(&rows, src, l("store-g"), "stores"), 1000);
    assert_eq!(at_line(&rows, src, l("store-g"), "loads"), 0);
    assert_eq!(at_line(&rows, src, l("store-g"), "bytes_written"), 4000);
    assert_eq!(at_line(&rows, src, l("load-g"), "loads"), 1000);
    assert_eq!(at_line(&rows, src, l("store-arr"), "stores"), 16);
    assert_eq!(at_line(&rows, src, l("store-arr"), "bytes_written"), 128);
    assert_eq!(at_line(&rows, src, l("store-field"), "stores"), 1);

    let allocs = report(&trace, "alloc");
    assert_eq!(at_line(&allocs, src, l("malloc"), "blocks"), 10, "{allocs:?}");
    assert_eq!(at_line(&allocs, src, l("malloc"), "bytes"), 1000);
    assert_eq!(at_line(&allocs, src, l("calloc"), "blocks"), 1);
    assert_eq!(at_line(&allocs, src, l("calloc"), "bytes"), 64);
    assert_eq!(at_line(&allocs, src, l("realloc"), "blocks"), 1);
    assert_eq!(at_line(&allocs, src, l("realloc"), "bytes"), 128);

    let funcs = report(&trace, "function");
    let fill = funcs.iter().find(|r| r["function"] == "fill").expect("fill in report");
    assert_eq!(fill["stores"], 1000);

    let i = info(&trace);
    assert_eq!(i["threads"], 1);
    assert_eq!(i["end"]["status"], 0);

    // Arguments and exit status pass through.
    let out = record_dbi(&exe, &dir.join("t3.trace"), &["a", "b"], &[]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(stdout(&out), "sum=999000 argc=3\n");
}

#[test]
fn dbi_threads_each_get_a_stream() {
    let Some((dir, exe)) = setup("dbi-threads", Src::Program("threads.c"), &[]) else {
        return;
    };
    let trace = dir.join("t.trace");
    let out = record_ok(&exe, &trace, &[], &[]);
    assert_eq!(stdout(&out), "counter=4000\n");
    assert_eq!(info(&trace)["threads"], 5);
    let rows = report(&trace, "line");
    let src = "threads.c";
    let slot = line_of(src, "store-slot");
    assert_eq!(at_line(&rows, src, slot, "stores"), 4000);
    let rmw = line_of(src, "rmw");
    assert_eq!(at_line(&rows, src, rmw, "loads"), 4000);
    assert_eq!(at_line(&rows, src, rmw, "stores"), 4000);
    let ev = dump(&trace);
    let starts: Vec<_> = ev.iter().filter(|e| e["event"] == "thread_start").collect();
    assert_eq!(starts.len(), 5);
    assert_eq!(starts.iter().filter(|e| e["parent"] == 0).count(), 4, "{starts:?}");
    // Time stamps: one right after each thread start, never decreasing, at least
    // every 4,096 events (one per raw buffer of 4 Ki records), one before each
    // worker's exit.
    let mut by_thread: std::collections::BTreeMap<u64, Vec<&serde_json::Value>> =
        Default::default();
    for e in &ev {
        by_thread.entry(e["thread"].as_u64().unwrap()).or_default().push(e);
    }
    for (t, evs) in &by_thread {
        assert_eq!(evs[1]["event"], "time", "thread {t}: {}", evs[1]);
        let stamps: Vec<(u64, u64)> = evs
            .iter()
            .filter(|e| e["event"] == "time")
            .map(|e| (e["index"].as_u64().unwrap(), e["ns"].as_u64().unwrap()))
            .collect();
        assert!(stamps.windows(2).all(|w| w[0].1 <= w[1].1 && w[1].0 - w[0].0 <= 4097));
        if *t > 0 {
            assert_eq!(evs[evs.len() - 2]["event"], "time", "thread {t}");
        }
    }
}

const WORK_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#define N 4096
long a[N], b[N];
int idx[N];
__attribute__((noinline)) long work(int rounds) {
    long s = 0;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < N; i++) a[i] += b[i];
        for (int i = 0; i < N; i++) { s += a[idx[i]]; b[idx[i]] ^= s; }
    }
    return s;
}
int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 4;
    for (int i = 0; i < N; i++) { idx[i] = (i * 7919) % N; b[i] = i; }
    printf("%ld\n", work(rounds));
    return 0;
}
"#;

/// Loads and stores executed by instructions in `[lo, hi)` per lackey (M = both).
pub(crate) fn lackey_counts(exe: &Path, lo: u64, hi: u64) -> (u64, u64) {
    let out = Command::new("valgrind")
        .args(["--tool=lackey", "--trace-mem=yes", "--log-fd=1"])
        .arg(exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "valgrind: {}", stderr(&out));
    let (mut loads, mut stores, mut inside) = (0, 0, false);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let (kind, rest) = line.split_at(line.len().min(3));
        let addr = || {
            let a = rest.split(',').next().unwrap_or("").trim();
            u64::from_str_radix(a, 16).unwrap_or(0)
        };
        match kind {
            "I  " => inside = (lo..hi).contains(&addr()),
            " L " if inside => loads += 1,
            " S " if inside => stores += 1,
            " M " if inside => {
                loads += 1;
                stores += 1
            }
            _ => {}
        }
    }
    (loads, stores)
}

#[test]
fn dbi_matches_lackey_within_one_percent() {
    if !have("qemu-x86_64") || !have("valgrind") {
        return;
    }
    let dir = scratch("dbi-lackey");
    let src = dir.join("work.c");
    std::fs::write(&src, WORK_C).unwrap();
    let exe = plain_build(&src, &dir, &["-no-pie"]);
    let nm = Command::new("nm").arg("-S").arg(&exe).output().unwrap();
    let (lo, size) = stdout(&nm)
        .lines()
        .find_map(|l| {
            let f: Vec<_> = l.split_whitespace().collect();
            (f.len() == 4 && f[3] == "work").then(|| {
                (u64::from_str_radix(f[0], 16).unwrap(), u64::from_str_radix(f[1], 16).unwrap())
            })
        })
        .expect("work in nm -S");
    let (ll, ls) = lackey_counts(&exe, lo, lo + size);
    let trace = dir.join("t.trace");
    record_ok(&exe, &trace, &[], &[]);
    let funcs = report(&trace, "function");
    let w = funcs.iter().find(|r| r["function"] == "work").expect("work in report");
    let (ml, ms) = (w["loads"].as_u64().unwrap(), w["stores"].as_u64().unwrap());
    let close = |a: u64, b: u64| (a as f64 - b as f64).abs() <= 0.01 * b as f64;
    assert!(close(ml, ll) && close(ms, ls), "memlens {ml}/{ms} vs lackey {ll}/{ls}");
    assert!(ll > 30_000 && ls > 20_000, "lackey {ll}/{ls}");
}

fn one_line_error(out: &Output, needle: &str) {
    assert!(!out.status.success());
    let e = stderr(out);
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(e.contains(needle), "{e}");
}

#[test]
fn dbi_bad_input_gives_a_clear_error() {
    let dir = scratch("dbi-errors");
    let script = dir.join("script.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    one_line_error(&record_dbi(&script, &dir.join("a.trace"), &[], &[]), "not an ELF");

    // An x86-64 ELF relabelled as ARM (e_machine = 40).
    let mut elf = std::fs::read("/bin/true").unwrap();
    elf[18..20].copy_from_slice(&40u16.to_le_bytes());
    let arm = dir.join("arm.elf");
    std::fs::write(&arm, elf).unwrap();
    one_line_error(&record_dbi(&arm, &dir.join("b.trace"), &[], &[]), "x86-64");

    let out = Command::new(memlens())
        .args(["record", "-q", "--dbi", "-o"])
        .arg(dir.join("c.trace"))
        .arg("--")
        .arg("/bin/true")
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    one_line_error(&out, "install qemu-user");

    let out =
        record_dbi(Path::new("/bin/true"), &dir.join("d.trace"), &[], &["--dbi-filter", "bogus"]);
    one_line_error(&out, "--dbi-filter");
}

/// `analyze heap` sites of `src`: (line, blocks, bytes) -> the named stack.
fn heap_sites(trace: &Path, src: &str) -> std::collections::BTreeMap<(u64, u64, u64), Vec<String>> {
    let v = json(&["analyze", "heap", "--top", "0", "--format", "json", trace.to_str().unwrap()]);
    v["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["file"].as_str().is_some_and(|f| f.ends_with(src)))
        .map(|s| {
            let key = (
                s["line"].as_u64().unwrap(),
                s["blocks"].as_u64().unwrap(),
                s["bytes"].as_u64().unwrap(),
            );
            let stack = s["stack"].as_array().unwrap();
            (key, stack.iter().map(|f| f.as_str().unwrap().to_string()).collect())
        })
        .collect()
}

#[test]
fn dbi_allocation_sites_and_stacks_match_the_compiled_path() {
    if !have("qemu-x86_64") {
        return;
    }
    for (src, markers) in [
        ("counts.c", &["malloc", "calloc", "realloc"][..]),
        ("objects.cpp", &["new", "new-array", "new-nothrow"][..]),
    ] {
        let dir = scratch("dbi-stacks");
        let compiled = build(Cc::Gcc, src, &dir, &[]);
        let ct = dir.join("compiled.trace");
        let out = record(&compiled, &ct, &[]);
        assert!(out.status.success(), "{src}: {}", stderr(&out));
        let plain = plain_build(&programs().join(src), &dir, &[]);
        let dt = dir.join("dbi.trace");
        let out = record_dbi(&plain, &dt, &[], &[]);
        assert!(out.status.success(), "{src}: {}", stderr(&out));

        // The same allocation sites, with the same counts and bytes.
        let (ca, da) = (report(&ct, "alloc"), report(&dt, "alloc"));
        for m in markers {
            let l = line_of(src, m);
            for k in ["blocks", "bytes"] {
                assert_eq!(at_line(&da, src, l, k), at_line(&ca, src, l, k), "{src} @{m} {k}");
            }
            assert!(at_line(&da, src, l, "blocks") > 0, "{src} @{m}: {da:?}");
        }
        // Each site's callers inside the program's own source are named the same
        // (the compiled path walks frame pointers, --dbi keeps a shadow call stack;
        // libc's frames below main are outside the default --dbi-filter).
        let (cs, ds) = (heap_sites(&ct, src), heap_sites(&dt, src));
        let own = |v: &Vec<String>| -> Vec<String> {
            v.iter().filter(|f| f.contains(src)).cloned().collect()
        };
        for m in markers {
            let l = line_of(src, m);
            let c = cs.iter().find(|(k, _)| k.0 == l).unwrap_or_else(|| panic!("{src} @{m}"));
            let d = ds.iter().find(|(k, _)| k.0 == l).unwrap_or_else(|| panic!("{src} @{m}"));
            assert_eq!(c.0, d.0, "{src} @{m}");
            assert!(!d.1.is_empty(), "{src} @{m}: no stack under --dbi");
            assert_eq!(own(c.1), own(d.1), "{src} @{m}: compiled {:?} vs dbi {:?}", c.1, d.1);
        }
        if src == "counts.c" {
            // allocs() is called from main: its sites have main as first caller.
            let d = ds.iter().find(|(k, _)| k.0 == line_of(src, "malloc")).unwrap();
            assert!(d.1[0].contains("counts.c:"), "{:?}", d.1);
        }
    }
}

#[test]
fn dbi_values_and_function_and_file_filters() {
    let Some((dir, exe)) = setup("dbi-values", Src::Program("counts.c"), &[]) else {
        return;
    };
    let src = "counts.c";
    let trace = dir.join("v.trace");
    record_ok(&exe, &trace, &[], &["--values"]);
    let (sg, lg) = (line_of(src, "store-g"), line_of(src, "load-g"));
    let ev = dump(&trace);
    let in_src = |e: &serde_json::Value| e["file"].as_str().is_some_and(|f| f.ends_with(src));
    let values = |line: u64, event: &str| -> Vec<u64> {
        ev.iter()
            .filter(|e| e["line"] == line && e["event"] == event && in_src(e))
            .map(|e| e["value"].as_u64().unwrap_or_else(|| panic!("no value in {e}")))
            .collect()
    };
    assert_eq!(values(sg, "write"), (0..1000).collect::<Vec<u64>>(), "g = i stores 0..999");
    assert_eq!(values(lg, "read"), vec![999; 1000], "every load of g reads 999");

    // --functions: only sum's code.
    let t = dir.join("f.trace");
    record_ok(&exe, &t, &[], &["--functions", "sum"]);
    let rows = report(&t, "line");
    assert_eq!(at_line(&rows, src, lg, "loads"), 1000);
    assert_eq!(at_line(&rows, src, sg, "stores"), 0);
    let funcs = report(&t, "function");
    assert!(funcs.iter().all(|r| r["function"] == "sum"), "{funcs:?}");

    // --files: every function of counts.c, none of the C runtime's start-up code.
    let t = dir.join("s.trace");
    record_ok(&exe, &t, &[], &["--files", "counts.c"]);
    let rows = report(&t, "line");
    assert_eq!(at_line(&rows, src, lg, "loads"), 1000);
    assert_eq!(at_line(&rows, src, sg, "stores"), 1000);
    let funcs = report(&t, "function");
    let names: Vec<&str> = funcs.iter().filter_map(|r| r["function"].as_str()).collect();
    assert!(names.contains(&"fill") && names.contains(&"main"), "{names:?}");
    assert!(!names.contains(&"_start"), "{names:?}");

    let out = record_dbi(&exe, &dir.join("x.trace"), &[], &["--functions", "no_such_fn"]);
    one_line_error(&out, "select no function");
}

/// A no-op `memlens.h` library: programs built without memlens link against it;
/// under --dbi the guest preload library's definitions win.
const STUB_C: &str = r#"
void memlens_register_thread(long id) { (void)id; }
void memlens_thread_name(const char *n) { (void)n; }
void memlens_roi_begin(void) {}
void memlens_roi_end(void) {}
void memlens_trace_on(void) {}
void memlens_trace_off(void) {}
"#;

const ROI_C: &str = r#"#include <memlens.h>
#include <stdio.h>
volatile int g;
__attribute__((noinline)) void touch(int n) {
    for (int i = 0; i < n; i++) g = i;
}
int main(void) {
    touch(100);
    memlens_roi_begin();
    touch(10);
    memlens_roi_end();
    touch(100);
    puts("ok");
    return 0;
}
"#;

/// Builds `src` with gcc against the stub library in `dir`.
fn build_with_stub(dir: &Path, src: &Path, name: &str) -> PathBuf {
    let stub = dir.join("stub.c");
    std::fs::write(&stub, STUB_C).unwrap();
    let lib = dir.join("libmlstub.so");
    let out = Command::new("gcc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&lib)
        .arg(&stub)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rt/include");
    let exe = dir.join(name);
    let out = Command::new("gcc")
        .args(["-O2", "-g", "-pthread", "-I"])
        .arg(&include)
        .arg(src)
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", dir.display()))
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .arg("-lmlstub")
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    exe
}

#[test]
fn dbi_region_of_interest() {
    if !have("qemu-x86_64") {
        return;
    }
    let dir = scratch("dbi-roi");
    let src = dir.join("roi.c");
    std::fs::write(&src, ROI_C).unwrap();
    let exe = build_with_stub(&dir, &src, "roi");
    let line = ROI_C.lines().position(|l| l.contains("g = i")).unwrap() as u64 + 1;
    let stores = |flags: &[&str]| {
        let t = dir.join(format!("t{}.trace", flags.len()));
        let out = record_ok(&exe, &t, &[], flags);
        assert_eq!(stdout(&out), "ok\n");
        let ev = dump(&t);
        let rois: Vec<_> =
            ev.iter().filter(|e| e["event"] == "roi_begin" || e["event"] == "roi_end").collect();
        assert_eq!(rois.len(), 2, "{rois:?}");
        at_line(&report(&t, "line"), "roi.c", line, "stores")
    };
    assert_eq!(stores(&[]), 210);
    assert_eq!(stores(&["--roi"]), 10);
}

#[test]
fn dbi_forked_child_records_its_own_trace() {
    let Some((dir, exe)) = setup("dbi-fork", Src::Program("forks.c"), &[]) else {
        return;
    };
    let trace = dir.join("t.trace");
    let out = record_ok(&exe, &trace, &[], &[]);
    assert_eq!(stdout(&out), "child=0\n");
    let i = info(&trace);
    let children = i["children"].as_array().unwrap();
    assert_eq!(children.len(), 1, "{i}");
    let child_trace = PathBuf::from(children[0]["trace"].as_str().unwrap());
    assert_eq!(
        child_trace.to_str().unwrap(),
        format!("{}.{}", trace.display(), children[0]["pid"])
    );
    let src = "forks.c";
    let rows = report(&trace, "line");
    assert_eq!(at_line(&rows, src, line_of(src, "parent-store"), "stores"), 100);
    assert_eq!(at_line(&rows, src, line_of(src, "child-store"), "stores"), 0);
    let rows = report(&child_trace, "line");
    assert_eq!(at_line(&rows, src, line_of(src, "child-store"), "stores"), 200);
    assert_eq!(at_line(&rows, src, line_of(src, "parent-store"), "stores"), 0);
    assert_eq!(info(&child_trace)["threads"], 1);
}

/// Replays `inc`'s counter from a merged `amt` dump: every store to the counter
/// inside the ROI (an RMW's or a plain one) in merged order is one increment, of an
/// even value when the count so far is even. Returns (increments, per-thread
/// (increments, even)) and checks that clocks are present.
fn replay_inc(trace: &Path, addr: u64) -> (u64, std::collections::BTreeMap<i64, (u64, u64)>) {
    let amt = run_memlens(&["dump", "--merged", "--format", "amt", trace.to_str().unwrap()]);
    assert!(amt.status.success(), "{}", stderr(&amt));
    let amt = stdout(&amt);
    assert!(amt.lines().any(|l| !l.starts_with("0\t")), "no clocks in the merged dump");
    let (mut inside, mut value) = (false, 0u64);
    let mut got: std::collections::BTreeMap<i64, (u64, u64)> = Default::default();
    for l in amt.lines() {
        let f: Vec<&str> = l.split('\t').collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
        let store = match f.get(2).copied() {
            Some("start_roi") => {
                inside = true;
                false
            }
            Some("end_roi") => {
                inside = false;
                false
            }
            // An RMW: `m r ADDR SIZE w ADDR SIZE`; a plain store: `m w ADDR SIZE`.
            Some("m") if inside => {
                (f.len() >= 9 && f[6] == "w" && num(7) == Some(addr))
                    || (f.len() == 6 && f[3] == "w" && num(4) == Some(addr))
            }
            _ => false,
        };
        if store {
            let e = got.entry(f[1].parse().unwrap()).or_default();
            e.0 += 1;
            if value.is_multiple_of(2) {
                e.1 += 1;
            }
            value += 1;
        }
    }
    (value, got)
}

/// Runs `inc MODE N TOTAL` under --dbi with `flags` and checks that replaying the
/// merged order gives every thread's (increments, even values seen) as the program
/// counted them.
fn inc_replays_exactly(exe: &Path, dir: &Path, mode: &str, n: usize, flags: &[&str]) {
    const TOTAL: u64 = 20_000;
    let t = dir.join(format!("inc-{mode}-{n}-{}.trace", flags.len()));
    let (ns, total) = (n.to_string(), TOTAL.to_string());
    let out = record_ok(exe, &t, &[mode, &ns, &total], flags);
    let text = stdout(&out);
    let mut lines = text.lines();
    let addr: u64 = lines.next().unwrap().strip_prefix("counter ").unwrap().parse().unwrap();
    let mut want = std::collections::BTreeMap::new();
    for l in lines {
        let f: Vec<&str> = l.split(&[' ', '\t'][..]).collect();
        let v = |i: usize| f[i].parse::<u64>().unwrap();
        want.insert(f[1].parse::<i64>().unwrap(), (v(2), v(3)));
    }
    let (value, got) = replay_inc(&t, addr);
    assert_eq!(value, TOTAL, "{mode} {n} threads {flags:?}: increments in the ROI");
    assert_eq!(got, want, "{mode} {n} threads {flags:?}: replayed (increments, even) differ");
}

/// atomic-memory-trace's increment check on a plain binary: replaying the merged
/// order of the counter's RMWs inside the ROI gives every thread's (increments,
/// even values seen) as the program counted them.
#[test]
fn dbi_order_atomic_increment_replay() {
    if !have("qemu-x86_64") {
        return;
    }
    let dir = scratch("dbi-inc");
    let exe = build_with_stub(&dir, &programs().join("inc.c"), "inc");
    for n in [4usize, 8] {
        inc_replays_exactly(&exe, &dir, "add", n, &["--order", "atomic"]);
    }
}

/// Without --order: atomic instructions, thread creation/exit and the preload
/// library's pthread interposers carry Lamport clocks, enough for an exact replay
/// of atomic increments and of mutex-protected plain ones.
#[test]
fn dbi_default_order_increment_replay() {
    if !have("qemu-x86_64") {
        return;
    }
    let dir = scratch("dbi-inc-sync");
    let exe = build_with_stub(&dir, &programs().join("inc.c"), "inc");
    inc_replays_exactly(&exe, &dir, "add", 4, &[]);
    inc_replays_exactly(&exe, &dir, "mutex", 4, &[]);
    // --order none: no clocks at all.
    let t = dir.join("none.trace");
    record_ok(&exe, &t, &["add", "4", "2000"], &["--order", "none"]);
    assert!(!dump(&t).iter().any(|e| e["event"] == "clock"), "clocks under --order none");
}

const STACKS_C: &str = r#"
#include <pthread.h>
#include <stdio.h>
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
__attribute__((noinline)) static void show(const char *who) {
    volatile int local = 0;
    pthread_mutex_lock(&mu);
    printf("%s %lu %lu\n", who, (unsigned long)&local,
           (unsigned long)__builtin_thread_pointer());
    pthread_mutex_unlock(&mu);
}
static void *run(void *p) { show((const char *)p); return NULL; }
int main(void) {
    pthread_t t[3];
    const char *names[3] = {"t1", "t2", "t3"};
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, run, (void *)names[i]);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    show("main");
    return 0;
}
"#;

/// Every thread's ThreadStart carries its stack bounds (around a local variable
/// of the thread) and its thread pointer (exactly).
#[test]
fn dbi_thread_stacks_and_thread_pointers() {
    let Some((dir, exe)) = setup("dbi-stacks-tp", Src::Inline("stacks.c", STACKS_C), &[]) else {
        return;
    };
    let trace = dir.join("t.trace");
    let out = record_ok(&exe, &trace, &[], &[]);
    let hex = |v: &serde_json::Value| {
        u64::from_str_radix(v.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
    };
    let starts: Vec<(u64, u64, u64)> = dump(&trace)
        .iter()
        .filter(|e| e["event"] == "thread_start")
        .map(|e| (hex(&e["stack_lo"]), hex(&e["stack_hi"]), hex(&e["tls"])))
        .collect();
    assert_eq!(starts.len(), 4, "{starts:?}");
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 4, "{text}");
    for l in text.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        let (local, tp): (u64, u64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
        let s = starts.iter().find(|s| s.2 == tp);
        let s = s.unwrap_or_else(|| panic!("{l}: no thread_start with tls {tp:#x}: {starts:?}"));
        assert!(s.0 <= local && local < s.1, "{l}: local outside {:#x}..{:#x}", s.0, s.1);
        assert!(s.1 - s.0 >= 64 * 1024, "{l}: stack {:#x}..{:#x}", s.0, s.1);
    }
}

/// A function entered by a traced `call` carries that call's return address as
/// its call site, as in the compiled path.
#[test]
fn dbi_function_entries_carry_their_call_site() {
    let Some((dir, exe)) = setup("dbi-callsite", Src::Program("counts.c"), &["-no-pie"]) else {
        return;
    };
    let trace = dir.join("t.trace");
    record_ok(&exe, &trace, &[], &[]);
    let ev = dump(&trace);
    let enters: Vec<&serde_json::Value> =
        ev.iter().filter(|e| e["event"] == "enter" && e["function"] == "fill").collect();
    assert_eq!(enters.len(), 1, "{enters:?}");
    let cs =
        u64::from_str_radix(enters[0]["call_site"].as_str().unwrap().trim_start_matches("0x"), 16)
            .unwrap();
    // The instruction just before the call site is `call <fill>`.
    let od = Command::new("objdump")
        .args(["-d", &format!("--start-address={:#x}", cs - 5), &format!("--stop-address={cs:#x}")])
        .arg(&exe)
        .output()
        .unwrap();
    let text = stdout(&od);
    assert!(text.lines().any(|l| l.contains("call") && l.contains("<fill")), "{cs:#x}: {text}");
    // main is entered from libc's untraced code: unknown.
    let main = ev.iter().find(|e| e["event"] == "enter" && e["function"] == "main").unwrap();
    assert_eq!(main["call_site"], "0x0");
}

const FORK_EXIT_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
int main(void) {
    pid_t p = fork();
    if (p == 0) exit(7);
    int st = 0;
    waitpid(p, &st, 0);
    printf("child=%d\n", WEXITSTATUS(st));
    return 3;
}
"#;

/// A forked child's trace ends with the child's real exit status.
#[test]
fn dbi_forked_child_exit_status() {
    let Some((dir, exe)) = setup("dbi-fork-exit", Src::Inline("fork_exit.c", FORK_EXIT_C), &[])
    else {
        return;
    };
    let trace = dir.join("t.trace");
    let out = record_dbi(&exe, &trace, &[], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(stdout(&out), "child=7\n");
    let i = info(&trace);
    assert_eq!(i["end"]["status"], 3, "{i}");
    let children = i["children"].as_array().unwrap();
    assert_eq!(children.len(), 1, "{i}");
    let child = info(Path::new(children[0]["trace"].as_str().unwrap()));
    assert_eq!(child["end"]["kind"], "exit", "{child}");
    assert_eq!(child["end"]["status"], 7, "{child}");
}

/// A static executable: no preload library can load, so the plugin hooks malloc,
/// calloc, realloc and free by symbol and reads their arguments and results from the
/// guest registers.
#[test]
fn dbi_static_executable_allocations() {
    let Some((dir, exe)) = setup("dbi-static", Src::Program("counts.c"), &["-static"]) else {
        return;
    };
    let trace = dir.join("t.trace");
    let out = record_ok(&exe, &trace, &[], &[]);
    assert_eq!(stdout(&out), "sum=999000 argc=1\n");
    assert!(!stderr(&out).contains("not recorded"), "{}", stderr(&out));
    let src = "counts.c";
    let l = |m| line_of(src, m);
    let rows = report(&trace, "line");
    assert_eq!(at_line(&rows, src, l("store-g"), "stores"), 1000);
    let allocs = report(&trace, "alloc");
    assert_eq!(at_line(&allocs, src, l("malloc"), "blocks"), 10, "{allocs:?}");
    assert_eq!(at_line(&allocs, src, l("malloc"), "bytes"), 1000);
    assert_eq!(at_line(&allocs, src, l("calloc"), "blocks"), 1);
    assert_eq!(at_line(&allocs, src, l("calloc"), "bytes"), 64);
    assert_eq!(at_line(&allocs, src, l("realloc"), "blocks"), 1);
    assert_eq!(at_line(&allocs, src, l("realloc"), "bytes"), 128);
    // Every block allocated in counts.c is freed in it: 10 + calloc'd/realloc'd one.
    let ev = dump(&trace);
    let in_src = |e: &&serde_json::Value| e["file"].as_str().is_some_and(|f| f.ends_with(src));
    let frees = ev.iter().filter(|e| e["event"] == "free").filter(in_src).count();
    assert_eq!(frees, 11);
    let sites = heap_sites(&trace, src);
    let m = sites.iter().find(|(k, _)| k.0 == l("malloc")).expect("malloc site");
    assert!(m.1.first().is_some_and(|f| f.contains("counts.c:")), "{:?}", m.1);
}
