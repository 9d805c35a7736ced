//! `memlens analyze` kernels on programs built for them.

use crate::util::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;

fn analyze(trace: &std::path::Path, args: &[&str]) -> Value {
    let mut a = vec!["analyze"];
    a.extend_from_slice(args);
    a.extend(["--format", "json", trace.to_str().unwrap()]);
    json(&a)
}

#[test]
fn a_shared_counter_ranks_first_in_sharing() {
    let dir = scratch("sharing");
    let exe = build(Cc::Gcc, "sharing.c", &dir, &[]);
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &[]);
    assert_eq!(stdout(&out), "hits=80000\n");
    let v = analyze(&trace, &["sharing"]);
    let top = &v["by_address"][0];
    assert_eq!(top["variable"], "stats.hits", "{top}");
    assert_eq!(top["line"], line_of("sharing.c", "hits"));
    // four workers, plus main reading the result once
    assert_eq!(top["threads"], 5);
    assert_eq!(top["accesses"], 4 * 20000 * 2 + 1);
    // DINAMITE's names of the same two numbers
    assert_eq!((top["threadcount"].as_u64(), top["totalcount"].as_u64()), (Some(5), Some(160001)));
    assert_eq!(top["uniform"], true);
    let workers: Vec<_> =
        top["per_thread"].as_array().unwrap().iter().filter(|t| t[1] == 40000).collect();
    assert_eq!(workers.len(), 4);
    assert_eq!(v["by_variable"][0]["variable"], "stats");
    // private arrays are not shared
    assert!(v["by_address"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| !r["variable"].as_str().unwrap_or("").starts_with("priv")));
}

#[test]
fn packed_counters_are_false_sharing_and_padded_ones_are_not() {
    for cc in Cc::all() {
        let dir = scratch("falseshare");
        let exe = build(cc, "falseshare.c", &dir, &[]);
        let trace = dir.join("t.trace");
        assert_eq!(stdout(&record(&exe, &trace, &[])), "sum=80000\n");
        let v = analyze(&trace, &["false-sharing"]);
        let lines = v["cache_lines"].as_array().unwrap();
        assert_eq!(lines.len(), 1, "{cc:?}: {v}");
        let l = &lines[0];
        assert_eq!(l["kind"], "false", "{cc:?}: {l}");
        assert_eq!(l["threads"], 4);
        let vars: Vec<String> = l["per_thread"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| {
                t["variables"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string())
            })
            .collect();
        for i in 0..4 {
            assert!(vars.contains(&format!("counters[{i}].value")), "{cc:?}: {vars:?}");
        }
        assert!(l["transfers"].as_u64().unwrap() >= 3, "{cc:?}: {l}");
        assert_eq!(l["lines"][0]["line"], line_of("falseshare.c", "bump"));

        let exe = build(cc, "falseshare.c", &dir, &["-DPADDED"]);
        let trace = dir.join("padded.trace");
        assert_eq!(stdout(&record(&exe, &trace, &[])), "sum=80000\n");
        let v = analyze(&trace, &["false-sharing"]);
        assert_eq!(v["cache_lines"].as_array().unwrap().len(), 0, "{cc:?}: {v}");
    }
}

/// Sums cachegrind's per-function counters for `func` from its output file.
fn cachegrind_fn(out: &std::path::Path, func: &str) -> (u64, u64) {
    let text = std::fs::read_to_string(out).unwrap();
    let events: Vec<&str> =
        text.lines().find_map(|l| l.strip_prefix("events: ")).unwrap().split_whitespace().collect();
    let col = |name: &str| events.iter().position(|e| *e == name).unwrap();
    let (d1mr, dlmr) = (col("D1mr"), col("DLmr"));
    let mut in_fn = false;
    let (mut d1, mut ll) = (0, 0);
    for l in text.lines() {
        if let Some(f) = l.strip_prefix("fn=") {
            in_fn = f == func;
            continue;
        }
        if in_fn && l.starts_with(|c: char| c.is_ascii_digit()) {
            let n: Vec<u64> = l.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
            // first number is the line, then one per event (trailing zeros omitted)
            d1 += n.get(1 + d1mr).copied().unwrap_or(0);
            ll += n.get(1 + dlmr).copied().unwrap_or(0);
        }
    }
    (d1, ll)
}

#[test]
fn cachesim_matches_cachegrind_and_reuse_is_exact() {
    let dir = scratch("cachesim");
    let exe = build(Cc::Gcc, "cachekernels.c", &dir, &[]);
    let trace = dir.join("t.trace");
    assert!(record(&exe, &trace, &[]).status.success());
    let geometry = ["--D1=32768,8,64", "--LL=1048576,16,64"];
    let mut args = vec!["cachesim", "--function", "stride_sweep"];
    args.extend(geometry);
    let v = analyze(&trace, &args);
    let level = |name: &str| {
        v["levels"].as_array().unwrap().iter().find(|l| l["name"] == name).unwrap().clone()
    };
    // hand-computed: every access of the sweep touches a new line of a 32 MiB array
    assert_eq!(level("D1")["accesses"], 2 * (4 << 20) / 8);
    assert_eq!(level("D1")["misses"], 2 * (4 << 20) / 8);
    assert_eq!(level("LL")["misses"], 2 * (4 << 20) / 8);

    // Same program, built natively, under cachegrind with the same geometry.
    let valgrind = Command::new("valgrind").arg("--version").output();
    if valgrind.is_err() {
        assert!(std::env::var_os("CI").is_none(), "valgrind is required in CI");
        return;
    }
    let native = dir.join("native");
    let st = Command::new("gcc")
        .args(["-O2", "-g", "-o"])
        .arg(&native)
        .arg(programs().join("cachekernels.c"))
        .status()
        .unwrap();
    assert!(st.success());
    let cg_out = dir.join("cachegrind.out");
    let st = Command::new("valgrind")
        .args(["--tool=cachegrind", "--cache-sim=yes", "--I1=32768,8,64"])
        .args(geometry)
        .arg(format!("--cachegrind-out-file={}", cg_out.display()))
        .arg(&native)
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", stderr(&st));
    let (cg_d1, cg_ll) = cachegrind_fn(&cg_out, "stride_sweep");
    let ours_d1 = level("D1")["misses"].as_u64().unwrap();
    let ours_ll = level("LL")["misses"].as_u64().unwrap();
    let within = |a: u64, b: u64| (a as f64 - b as f64).abs() <= 0.02 * b as f64;
    assert!(within(ours_d1, cg_d1), "D1 misses: memlens {ours_d1}, cachegrind {cg_d1}");
    assert!(within(ours_ll, cg_ll), "LL misses: memlens {ours_ll}, cachegrind {cg_ll}");

    // A cyclic walk over K = 100 lines: every warm access has reuse distance K-1.
    let v = analyze(&trace, &["reuse", "--function", "cyclic"]);
    let s = &v["summary"][0];
    assert_eq!(s["accesses"], 5000);
    assert_eq!(s["cold"], 100);
    assert_eq!(s["mean_distance"], 99.0);
    let h = v["histogram"].as_array().unwrap();
    let b = h.iter().find(|b| b["low"] == 64).unwrap();
    assert_eq!(b["distance"], 4900);

    // The loop over a set that fits in D1 misses only cold.
    let mut args = vec!["cachesim", "--function", "cyclic"];
    args.extend(geometry);
    let v = analyze(&trace, &args);
    assert_eq!(v["levels"][0]["misses"], 100);
}

#[test]
fn every_kernel_runs_and_bad_kernel_options_are_errors() {
    let dir = scratch("kernels");
    let exe = build(Cc::Gcc, "counts.c", &dir, &[]);
    let trace = dir.join("t.trace");
    assert!(record(&exe, &trace, &[]).status.success());
    for k in
        ["counts", "sharing", "false-sharing", "cachesim", "reuse", "working-set", "heap", "layout"]
    {
        let out = run_memlens(&["analyze", k, trace.to_str().unwrap()]);
        assert!(out.status.success(), "{k}: {}", stderr(&out));
        let v = analyze(&trace, &[k]);
        assert!(v.is_object(), "{k}");
    }
    let heap = analyze(&trace, &["heap"]);
    let site_line = line_of("counts.c", "malloc");
    assert!(heap.to_string().contains(&format!("counts.c:{site_line}")), "{heap}");
    let t = trace.to_str().unwrap();
    for bad in [
        vec!["analyze", "nonsense", t],
        vec!["analyze", "cachesim", "--D1=12,3", t],
        vec!["analyze", "counts", "--window", "9..3", t],
        vec!["analyze", "counts", "--function", "no_such_function_xyz", t],
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

/// `analyze sharing` runs on every core (chunks in any order); `--window 0..` forces
/// the merged serial pass over the same events: the outputs must be identical.
#[test]
fn sharing_on_both_cores_equals_the_merged_pass() {
    let dir = scratch("sharing-par");
    let exe = build(Cc::Gcc, "live.c", &dir, &[]);
    let trace = dir.join("t.trace");
    // small buffers: several chunks per thread, so workers split streams
    let out = Command::new(memlens())
        .args(["record", "-q", "-o", trace.to_str().unwrap(), "--"])
        .arg(&exe)
        .env("MEMLENS_BUFFER_KB", "64")
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "hits=1200000\n");
    assert!(info(&trace)["chunks"].as_u64().unwrap() > 8);
    let t = trace.to_str().unwrap();
    for fmt in ["json", "table"] {
        let par = run_memlens(&["analyze", "sharing", "--top", "0", "--format", fmt, t]);
        let ser = run_memlens(&[
            "analyze", "sharing", "--top", "0", "--format", fmt, "--window", "0..", t,
        ]);
        assert!(par.status.success() && ser.status.success(), "{}", stderr(&par));
        assert!(par.stdout == ser.stdout, "{fmt}: chunked sharing differs from the merged pass");
    }
    let v = analyze(&trace, &["sharing"]);
    assert_eq!(v["by_address"][0]["variable"], "stats.hits");
    assert_eq!(v["by_address"][0]["accesses"], 4 * 1500 * 200 * 2 + 1);
}

/// `analyze heap` sites in `allocwrap.c`: (function, line) → [blocks, bytes, bytes
/// live at exit], the rows of one line summed (an unrolled loop calls from several
/// pcs of one line: one row each).
fn wrap_sites(trace: &std::path::Path, extra: &[&str]) -> BTreeMap<(String, u64), [u64; 3]> {
    let mut args = vec!["heap", "--top", "0"];
    args.extend_from_slice(extra);
    let v = analyze(trace, &args);
    let mut out: BTreeMap<(String, u64), [u64; 3]> = BTreeMap::new();
    for s in v["sites"].as_array().unwrap() {
        if !s["file"].as_str().is_some_and(|f| f.ends_with("allocwrap.c")) {
            continue;
        }
        let key = (s["function"].as_str().unwrap().to_string(), s["line"].as_u64().unwrap());
        let e = out.entry(key).or_default();
        for (i, k) in ["blocks", "bytes", "live_bytes_at_end"].iter().enumerate() {
            e[i] += s[k].as_u64().unwrap();
        }
    }
    out
}

/// `--alloc-fn` (valgrind massif's option): a block allocated inside a wrapper
/// belongs to the wrapper's first caller outside every wrapper, with the program's
/// exact counts; a site outside them stays; bad globs are one-line errors.
#[test]
fn alloc_fn_moves_heap_sites_from_the_wrapper_to_its_callers() {
    const SRC: &str = "allocwrap.c";
    for cc in Cc::all() {
        let dir = scratch("alloc-fn");
        let exe = build(cc, SRC, &dir, &[]);
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &["10"]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        let l = |m: &str| line_of(SRC, m);
        let direct = (("direct".to_string(), l("direct")), [1, 50, 0]);
        // without: every block but direct's is xmalloc's (its stacks differ)
        let plain = wrap_sites(&trace, &[]);
        let x = &plain[&("xmalloc".to_string(), l("xmalloc"))];
        assert_eq!(x[..2], [13, 10 * 16 + 3 * 1000], "{cc:?}: {plain:?}");
        assert_eq!(plain.len(), 2, "{cc:?}: {plain:?}");
        assert_eq!(plain[&direct.0], direct.1);
        // with: the callers, xcalloc's callers through two wrappers
        let want = BTreeMap::from([
            (("small".to_string(), l("small")), [10, 160, 0]),
            (("big".to_string(), l("big")), [3, 3000, 1000]),
            direct.clone(),
        ]);
        for globs in [&["--alloc-fn", "x*alloc"][..], &["--alloc-fn", "xmalloc,xcalloc"]] {
            assert_eq!(wrap_sites(&trace, globs), want, "{cc:?} {globs:?}");
        }
        // only xmalloc: big's blocks stop in xcalloc
        let only = wrap_sites(&trace, &["--alloc-fn", "xmalloc"]);
        assert!(only.keys().any(|k| k.0 == "xcalloc"), "{cc:?}: {only:?}");
        assert_eq!(only[&("small".to_string(), l("small"))], want[&("small".into(), l("small"))]);
        // the layout kernel's sites move alike
        let lay = analyze(&trace, &["layout", "--top", "0", "--alloc-fn", "x*alloc"]);
        let text = lay.to_string();
        assert!(text.contains(&format!("{SRC}:{}", l("big"))), "{cc:?}: {text}");
        assert!(!text.contains(&format!("{SRC}:{}", l("xmalloc"))), "{cc:?}: {text}");

        // The one namer: heap blocks are named after the caller's site, so a block
        // gets the type its caller gives it (struct pair), and its fields.
        let vars = |group: &str, extra: &[&str]| -> BTreeMap<String, (u64, u64)> {
            let mut a = vec!["report", "--by", "variable", "--group-by", group, "--top", "0"];
            a.extend_from_slice(extra);
            a.extend(["--format", "json", trace.to_str().unwrap()]);
            json(&a)
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["kind"] == "heap")
                .map(|r| {
                    let n = |k: &str| r[k].as_u64().unwrap();
                    (r["variable"].as_str().unwrap().to_string(), (n("stores"), n("bytes_written")))
                })
                .collect()
        };
        let site = |m: &str, f: &str| format!("heap({SRC}:{} {f})", l(m));
        let wrapper = site("xmalloc", "xmalloc");
        assert_eq!(vars("variable", &[]), BTreeMap::from([(wrapper.clone(), (23, 3160))]));
        let wrapped =
            BTreeMap::from([("pair".to_string(), (20, 160)), (site("big", "big"), (3, 3000))]);
        assert_eq!(vars("variable", &["--alloc-fn", "x*alloc"]), wrapped, "{cc:?}");
        let fields = vars("field", &["--alloc-fn", "x*alloc"]);
        assert_eq!((fields["pair.a"], fields["pair.b"]), ((10, 80), (10, 80)), "{cc:?}");
        // a kernel that names data names it alike
        let shared = analyze(&trace, &["cachesim", "--top", "0", "--alloc-fn", "x*alloc"]);
        let names: Vec<&str> = shared["by_variable"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["variable"].as_str())
            .collect();
        assert!(names.contains(&"pair") && !names.contains(&wrapper.as_str()), "{cc:?}: {names:?}");

        let t = trace.to_str().unwrap();
        // The text report points at the wrapper (xmalloc: 3160 of the heap's 7306 bytes,
        // from two places); once the wrappers are named, at nothing
        let note = |extra: &[&str]| {
            let mut a = vec!["report", "--by", "variable"];
            a.extend_from_slice(extra);
            a.push(t);
            let o = run_memlens(&a);
            assert!(o.status.success(), "{}", stderr(&o));
            stderr(&o)
        };
        let n = note(&[]);
        assert!(
            n.contains("in xmalloc (allocwrap.c:") && n.contains("`--alloc-fn xmalloc`"),
            "{n}"
        );
        assert!(!note(&["--alloc-fn", "x*alloc"]).contains("--alloc-fn"), "{cc:?}");
        // SQL: variable() is the namer's; allocations.site the heap kernel's sites
        let sql = |q: &str| -> BTreeMap<String, u64> {
            let o = run_memlens(&["sql", "--alloc-fn", "x*alloc", "--format", "json", "-e", q, t]);
            assert!(o.status.success(), "{cc:?} {q}: {}", stderr(&o));
            let rows: Value = serde_json::from_slice(&o.stdout).unwrap();
            let rows = rows.as_array().unwrap().iter();
            rows.map(|r| (r["k"].as_str().unwrap().to_string(), r["n"].as_u64().unwrap())).collect()
        };
        let stores = sql("SELECT variable(address) k, count(*) n FROM accesses WHERE kind = 'store' AND variable(address) IN ('pair', 'heap(allocwrap.c:' || CAST(line_big AS VARCHAR) || ' big)') GROUP BY 1".replace("line_big", &l("big").to_string()).as_str());
        assert_eq!(
            stores,
            BTreeMap::from([("pair".into(), 20), (site("big", "big"), 3)]),
            "{cc:?}"
        );
        let blocks = sql("SELECT line(site) k, count(*) n FROM allocations GROUP BY 1");
        let mine: BTreeMap<u64, u64> = blocks
            .iter()
            .filter(|(k, _)| k.contains(SRC))
            .map(|(k, n)| (k.rsplit(':').next().unwrap().parse().unwrap(), *n))
            .collect();
        assert_eq!(mine, BTreeMap::from([(l("small"), 10), (l("big"), 3), (l("direct"), 1)]));
        // DHAT's program points start at the callers too
        let dj = dir.join("dhat.json");
        let o = run_memlens(&[
            "export",
            "--format",
            "dhat",
            "--alloc-fn",
            "x*alloc",
            "-o",
            dj.to_str().unwrap(),
            t,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let d: Value = serde_json::from_slice(&std::fs::read(&dj).unwrap()).unwrap();
        // bytes per first frame (clang's unrolled loop calls from three pcs of a line)
        let mut top: BTreeMap<String, u64> = BTreeMap::new();
        for p in d["pps"].as_array().unwrap() {
            let f = d["ftbl"][p["fs"][0].as_u64().unwrap() as usize].as_str().unwrap();
            let f = f.split_once(": ").unwrap().1.to_string();
            if f.contains(SRC) {
                *top.entry(f).or_default() += p["tb"].as_u64().unwrap();
            }
        }
        let at = |f: &str, m: &str| format!("{f} ({}:{})", programs().join(SRC).display(), l(m));
        assert_eq!(
            top,
            BTreeMap::from([
                (at("small", "small"), 160),
                (at("big", "big"), 3000),
                (at("direct", "direct"), 50)
            ]),
            "{cc:?}"
        );
        for (args, says) in [
            (&["analyze", "heap", "--alloc-fn", "no_such_fn", t][..], "names no function"),
            (&["analyze", "heap", "--alloc-fn", "!xmalloc", t], "name the wrappers"),
            // an empty list would select every function: refused
            (&["analyze", "heap", "--alloc-fn", "", t], "takes function names"),
            (&["report", "--by", "variable", "--alloc-fn", "x[", t], "bad glob"),
            (&["report", "--by", "line", "--alloc-fn", "xmalloc", t], "--by variable"),
            (&["export", "--format", "perfetto", "--alloc-fn", "xmalloc", t], "dhat and parquet"),
            (&["sql", "--alloc-fn", "nope_*", "-e", "SELECT 1", t], "names no function"),
        ] {
            let out = run_memlens(args);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains(says) && err.trim_end().lines().count() == 1, "{args:?}: {err}");
        }
    }
}
