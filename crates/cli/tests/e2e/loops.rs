//! Loops recorded as runs (crates/rt/src/loops.rs, crates/pass): clang builds
//! tests/programs/loops.c with its simple loops versioned. One binary, recorded
//! with runs on and off (`MEMLENS_LOOP_RUNS`, so the instrumented copy runs),
//! must give the same events with the same names, files, lines and columns; the
//! marked lines must have the bytes the code reads and writes; the loops that
//! can be runs must call the runtime, the one with a branch must not.

use crate::util::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const SRC: &str = "loops.c";

fn avx2() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains(" avx2"))
}

/// Functions of `exe` whose code calls `__memlens_loop_run`, with the count.
fn runs_per_function(exe: &Path) -> BTreeMap<String, usize> {
    let out = Command::new("objdump").args(["-d", "--no-show-raw-insn"]).arg(exe).output();
    let out = out.expect("objdump (binutils) is needed");
    let mut per = BTreeMap::new();
    let mut func = String::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(name) = l.strip_suffix(">:").and_then(|h| h.split_once(" <")).map(|x| x.1) {
            func = name.to_string();
        } else if l.contains("call") && l.contains("<__memlens_loop_run") {
            *per.entry(func.clone()).or_insert(0) += 1;
        }
    }
    per
}

/// `memlens dump`, each thread's events on their own, without what differs
/// between the two copies of a loop or between two runs: the code address, the
/// event index, time stamps, clocks and the tid. Where a worker's stack lands
/// and which worker registers first are the scheduler's and the allocator's
/// choice (a stack freed in between can put the second worker above the
/// first), so an address on a stack is an offset into the main thread's stack
/// (`Mstack-N`), the thread's own (`own-stack-N`) or another worker's, and the
/// workers are named `W0`, `W1`, ... in the order of their events' text.
fn events(trace: &Path) -> BTreeMap<String, Vec<String>> {
    let out = run_memlens(&["dump", trace.to_str().unwrap()]);
    assert!(out.status.success(), "dump: {}", stderr(&out));
    let text = stdout(&out);
    let hex = |x: &str| u64::from_str_radix(x.strip_prefix("0x")?, 16).ok();
    // thread -> (stack lo, hi, is main); values may point into a thread's
    // stack before its start is dumped, so all starts are read first
    let stacks: BTreeMap<String, (u64, u64, bool)> = text
        .lines()
        .filter(|l| l.split(' ').nth(2) == Some("thread-start"))
        .filter_map(|l| {
            let r = l.split(' ').find_map(|x| x.strip_prefix("stack="))?;
            let (lo, hi) = r.split_once("..")?;
            let main = !l.contains(" parent=");
            Some((l.split(' ').next()?.to_string(), (hex(lo)?, hex(hi)?, main)))
        })
        .collect();
    let one = |me: &str, v: &str| match hex(v) {
        Some(a) => match stacks.iter().find(|(_, s)| s.0 <= a && a <= s.1) {
            Some((_, s)) if s.2 => format!("Mstack-{}", s.1 - a),
            Some((t, s)) if t == me => format!("own-stack-{}", s.1 - a),
            Some((_, s)) => format!("other-stack-{}", s.1 - a),
            None => v.to_string(),
        },
        None => v.to_string(),
    };
    let is_main = |t: &str| stacks.get(t).is_some_and(|s| s.2);
    let mut per: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // time stamps and synchronisation clocks depend on the scheduling
    for l in text.lines().filter(|l| !l.contains(" time ") && !l.contains(" clock ")) {
        let mut w = l.split(' ');
        let thread = w.next().unwrap_or("").to_string();
        let _index = w.next();
        let words: Vec<String> = w
            .filter(|x| !x.starts_with("pc=") && !x.starts_with("tid="))
            .map(|x| {
                let (key, val) = x.split_once('=').unwrap_or(("", x));
                let v = if key == "parent" {
                    if is_main(val) {
                        "M".to_string()
                    } else {
                        "W".to_string()
                    }
                } else {
                    val.split("..").map(|v| one(&thread, v)).collect::<Vec<_>>().join("..")
                };
                if key.is_empty() {
                    v
                } else {
                    format!("{key}={v}")
                }
            })
            .collect();
        per.entry(thread).or_default().push(words.join(" "));
    }
    let mut named = BTreeMap::new();
    let mut workers = Vec::new();
    for (t, evs) in per {
        if is_main(&t) {
            named.insert("M".to_string(), evs);
        } else {
            workers.push(evs);
        }
    }
    workers.sort();
    for (i, evs) in workers.into_iter().enumerate() {
        named.insert(format!("W{i}"), evs);
    }
    named
}

/// Records `exe args` with ASLR off (so both runs see the same addresses) and
/// `MEMLENS_LOOP_RUNS=runs` plus `env`.
fn record_with(exe: &Path, trace: &Path, runs: &str, env: &[(&str, &str)], args: &[&str]) {
    let out = Command::new("setarch")
        .args(["-R"])
        .arg(memlens())
        .args(["record", "-q", "-o"])
        .arg(trace)
        .arg("--")
        .arg(exe)
        .args(args)
        .env("MEMLENS_LOOP_RUNS", runs)
        .envs(env.iter().copied())
        .output()
        .expect("setarch (util-linux) is needed");
    assert!(out.status.success(), "record failed: {}", stderr(&out));
}

fn build_loops(dir: &Path, opts: &[&str]) -> std::path::PathBuf {
    let exe = dir.join(format!("loops{}", opts.join("").replace(['-', '='], "_")));
    let mut args = vec!["-g", "-pthread"];
    args.extend_from_slice(opts);
    let (src, out) = (programs().join(SRC), exe.to_str().unwrap().to_string());
    args.extend_from_slice(&[src.to_str().unwrap(), "-o", &out]);
    memlens_cc(Cc::Clang, false, &args);
    exe
}

fn options() -> Vec<Vec<&'static str>> {
    let mut v = vec![vec!["-O2"]];
    if avx2() {
        v.push(vec!["-O3", "-march=x86-64-v3"]);
    }
    v
}

#[test]
fn runs_record_the_same_events_as_the_instrumented_loops() {
    if Cc::all().len() < 2 {
        return; // the pass is clang's
    }
    let dir = scratch("loops-same");
    for opts in options() {
        let exe = build_loops(&dir, &opts);
        let per = runs_per_function(&exe);
        let all = ["sum", "scale", "back", "accumulate", "fields", "narrow", "prefix", "wrap"];
        for f in all.iter().chain(&["find", "insertion", "upto"]) {
            assert!(per.get(*f).is_some_and(|&n| n >= 1), "{opts:?}: no run in {f}: {per:?}");
        }
        assert!(!per.contains_key("branchy"), "{opts:?}: a body with a branch became a run");
        for (what, env) in [("plain", &[][..]), ("values", &[("MEMLENS_VALUES", "1")][..])] {
            let (on, off) = (dir.join("a.trace"), dir.join("b.trace"));
            record_with(&exe, &on, "1", env, &["1000", "2"]);
            record_with(&exe, &off, "0", env, &["1000", "2"]);
            let (a, b) = (events(&on), events(&off));
            assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
            assert_eq!(a.len(), 3, "{opts:?} {what}: main and two workers");
            for (t, a) in &a {
                let b = &b[t];
                assert!(a.len() > 20, "{opts:?} {what}: {t}: {} events", a.len());
                if let Some(i) = (0..a.len().min(b.len())).find(|&i| a[i] != b[i]) {
                    panic!(
                        "{opts:?} {what}: {t} event {i} differs:\n on:  {}\n off: {}",
                        a[i], b[i]
                    );
                }
                assert_eq!(a.len(), b.len(), "{opts:?} {what}: {t}: event counts differ");
            }
            let total: usize = a.values().map(Vec::len).sum();
            assert!(total > 20_000, "{opts:?} {what}: only {total} events");
        }
    }
}

#[test]
fn runs_have_the_bytes_the_loops_touch() {
    if Cc::all().len() < 2 {
        return;
    }
    let dir = scratch("loops-bytes");
    let (n, threads) = (1000u64, 2u64);
    for opts in options() {
        let exe = build_loops(&dir, &opts);
        let trace = dir.join("t.trace");
        record_with(&exe, &trace, "1", &[], &[&n.to_string(), &threads.to_string()]);
        let rows = report(&trace, "line");
        let at = |m: &str, k: &str| at_line(&rows, SRC, line_of(SRC, m), k);
        let per = |r: u64, w: u64| (threads * r, threads * w);
        let rw = |m: &str| (at(m, "bytes_read"), at(m, "bytes_written"));
        // sum runs with 0, 1, 2, 3, 4 and n iterations
        assert_eq!(rw("sum"), per((10 + n) * 8, 0), "{opts:?} sum");
        assert_eq!(rw("scale"), per(n * 8, n * 8), "{opts:?} scale");
        assert_eq!(rw("back"), per(n / 2 * 4, n / 2 * 4), "{opts:?} back");
        assert_eq!(rw("narrow"), per(n, 2 * n), "{opts:?} narrow");
        assert_eq!(rw("wrap"), per(0, 12), "{opts:?} wrap");
        assert_eq!(rw("fill"), per(0, (n + n / 2) * 4), "{opts:?} fill");
        // one search stops at element n / 3, the other reads all n
        assert_eq!(rw("find"), per((n / 3 + 1 + n) * 8, 0), "{opts:?} find");
        let (r, w) = rw("prefix");
        assert_eq!(w, threads * (n - 1) * 8, "{opts:?} prefix writes");
        // a[i - 1] is read again or kept in a register
        assert!(r == w || r == 2 * w, "{opts:?} prefix reads {r}");
    }
}

/// `report --by variable` counts a run's accesses at once where every address the
/// run goes through has one name (a global array, a heap block) and one by one
/// elsewhere (the stack): the same rows as the serial pass, which names each
/// access, and the global array's exact bytes.
#[test]
fn by_variable_counts_runs_as_the_serial_pass_names_each_access() {
    if Cc::all().len() < 2 {
        return;
    }
    let dir = scratch("loops-vars");
    let threads = 2u64;
    for opts in options() {
        let exe = build_loops(&dir, &opts);
        let trace = dir.join("t.trace");
        record_with(&exe, &trace, "1", &[], &["1000", &threads.to_string()]);
        // the same run recorded as rows only (no runs, no writer fold): the reader
        // folds its loops itself, and must name them alike
        let rows_only = dir.join("rows.trace");
        record_with(
            &exe,
            &rows_only,
            "0",
            &[("MEMLENS_FOLD", "0")],
            &["1000", &threads.to_string()],
        );
        let by = |trace: &Path, parallel: &str| {
            let out = Command::new(memlens())
                .args(["report", "--by", "variable", "--top", "0", "--format", "json"])
                .arg(trace)
                .env("MEMLENS_NAMES_PARALLEL", parallel)
                .output()
                .unwrap();
            assert!(out.status.success(), "{opts:?}: {}", stderr(&out));
            stdout(&out)
        };
        let (par, serial) = (by(&trace, "1"), by(&trace, "0"));
        assert_eq!(par, serial, "{opts:?}: parallel (runs whole) and serial naming differ");
        assert_eq!(by(&rows_only, "1"), par, "{opts:?}: the loops folded by the reader differ");
        let rows: serde_json::Value = serde_json::from_str(&par).unwrap();
        let rows = rows.as_array().unwrap();
        let t = var(rows, "table").unwrap_or_else(|| panic!("{opts:?}: no table: {par}"));
        assert_eq!(
            (t["bytes_read"].as_u64(), t["bytes_written"].as_u64()),
            (Some(threads * 4096), Some(4096)),
            "{opts:?}: {t}"
        );
        assert!(rows.len() >= 8, "{opts:?}: heap blocks, stack and globals: {par}");
    }
}

#[test]
fn a_long_run_spans_chunks_and_counts_as_the_loop() {
    if Cc::all().len() < 2 {
        return;
    }
    let dir = scratch("loops-long");
    let exe = build_loops(&dir, &["-O2"]);
    // 5 M iterations: more events than a chunk may stand for through repeats
    let (on, off) = (dir.join("a.trace"), dir.join("b.trace"));
    record_with(&exe, &on, "1", &[], &["5000000", "1"]);
    record_with(&exe, &off, "0", &[], &["5000000", "1"]);
    let (a, b) = (info(&on), info(&off));
    for k in ["loads", "stores", "dropped"] {
        assert_eq!(a[k], b[k], "{k}: runs on {} / off {}", a[k], b[k]);
    }
    assert_eq!(a["complete"], true, "{a}");
    let by_line = |t: &Path| {
        let out = run_memlens(&["report", "--by", "line", "--top", "0", t.to_str().unwrap()]);
        stdout(&out)
    };
    assert_eq!(by_line(&on), by_line(&off));
}

#[test]
fn why_names_each_loop_and_the_reason_it_is_not_a_run() {
    if Cc::all().len() < 2 {
        return;
    }
    require_runtime();
    let dir = scratch("loops-why");
    let out = Command::new(memlens())
        .args(["cc", "-O2", "-g", "-pthread", "-c"])
        .arg(programs().join(SRC))
        .arg("-o")
        .arg(dir.join("loops.o"))
        .env("MEMLENS_CC", "clang-22")
        .env("MEMLENS_LOOP_RUNS", "why")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let line = |f: &str| err.lines().filter(|l| l.contains(&format!(" in {f}: "))).count();
    // a loop is named after its `for` line, the one above the marked body
    let at = line_of(SRC, "sum") - 1;
    assert!(err.contains(&format!("loops.c:{at} in sum: run of ")), "{err}");
    assert!(err.contains(" in branchy: not a run ("), "{err}");
    assert!(line("scale") >= 1 && line("main") >= 1, "{err}");
}
