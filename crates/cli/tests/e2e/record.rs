//! Recording real programs and checking exact figures.

use crate::util::*;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

#[test]
fn exact_counts_per_line_and_allocation_site() {
    for cc in Cc::all() {
        let Traced { dir, exe, trace, out } = build_and_record(cc, "counts", "counts.c");
        let native = Command::new(&exe).output().unwrap();
        assert_eq!(stdout(&out), "sum=999000 argc=1\n", "{cc:?}: output changed");
        assert_eq!(stdout(&out), stdout(&native));

        let rows = report(&trace, "line");
        let src = "counts.c";
        let l = |m| line_of(src, m);
        assert_eq!(at_line(&rows, src, l("store-g"), "stores"), 1000, "{cc:?}");
        assert_eq!(at_line(&rows, src, l("store-g"), "loads"), 0, "{cc:?}");
        assert_eq!(at_line(&rows, src, l("store-g"), "bytes_written"), 4000, "{cc:?}");
        assert_eq!(at_line(&rows, src, l("load-g"), "loads"), 1000, "{cc:?}");
        assert_eq!(at_line(&rows, src, l("store-arr"), "stores"), 16, "{cc:?}");
        assert_eq!(at_line(&rows, src, l("store-arr"), "bytes_written"), 128, "{cc:?}");
        assert_eq!(at_line(&rows, src, l("store-field"), "stores"), 1, "{cc:?}");

        let allocs = report(&trace, "alloc");
        assert_eq!(at_line(&allocs, src, l("malloc"), "blocks"), 10, "{cc:?}");
        assert_eq!(at_line(&allocs, src, l("malloc"), "bytes"), 1000, "{cc:?}");
        assert_eq!(at_line(&allocs, src, l("calloc"), "blocks"), 1, "{cc:?}");
        assert_eq!(at_line(&allocs, src, l("calloc"), "bytes"), 64, "{cc:?}");
        assert_eq!(at_line(&allocs, src, l("realloc"), "blocks"), 1, "{cc:?}");
        assert_eq!(at_line(&allocs, src, l("realloc"), "bytes"), 128, "{cc:?}");

        let funcs = report(&trace, "function");
        let f = |name: &str| funcs.iter().find(|r| r["function"] == name).cloned();
        assert_eq!(f("fill").expect("fill in report")["stores"], 1000, "{cc:?}");

        let i = info(&trace);
        assert_eq!(i["threads"], 1);
        assert_eq!(i["dropped"], 0);
        assert!(i["allocs"].as_u64().unwrap() >= 12);
        assert!(i["frees"].as_u64().unwrap() >= 12);
        assert!(i["loads"].as_u64().unwrap() >= 1000);
        assert!(i["bytes_on_disk"].as_u64().unwrap() > 4096);
        assert_eq!(i["end"]["status"], 0);

        // The program's own exit status passes through.
        let out = record(&exe, &dir.join("t3.trace"), &["a", "b"]);
        assert_eq!(out.status.code(), Some(3), "{cc:?}");
        assert_eq!(stdout(&out), "sum=999000 argc=3\n");
    }
}

#[test]
fn threads_each_get_a_stream() {
    for cc in Cc::all() {
        let Traced { trace, out, .. } = build_and_record(cc, "threads", "threads.c");
        assert_eq!(stdout(&out), "counter=4000\n");
        assert_eq!(info(&trace)["threads"], 5, "{cc:?}");
        let rows = report(&trace, "line");
        let src = "threads.c";
        let slot = line_of(src, "store-slot");
        assert_eq!(at_line(&rows, src, slot, "stores"), 4000, "{cc:?}");
        let r: Vec<_> = rows.iter().filter(|r| r["line"] == slot).collect();
        assert!(r.iter().all(|r| r["threads"] == 4), "{cc:?}: {r:?}");
        let rmw = line_of(src, "rmw");
        assert_eq!(at_line(&rows, src, rmw, "loads"), 4000, "{cc:?}");
        assert_eq!(at_line(&rows, src, rmw, "stores"), 4000, "{cc:?}");
        let by_thread = report(&trace, "thread");
        assert_eq!(by_thread.len(), 5);
        // every worker stream starts with its thread and a parent
        let ev = dump(&trace);
        let starts: Vec<_> = ev.iter().filter(|e| e["event"] == "thread_start").collect();
        assert_eq!(starts.len(), 5, "{cc:?}");
        assert_eq!(starts.iter().filter(|e| e["parent"] == 0).count(), 4, "{cc:?}");
    }
}

#[test]
fn a_crash_leaves_a_readable_trace() {
    for cc in Cc::all() {
        let dir = scratch("crash");
        let exe = build(cc, "crash.c", &dir, &[]);
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &[]);
        assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{cc:?}: {:?}", out.status);
        assert_eq!(stdout(&out), "about to crash\n");
        let rows = report(&trace, "line");
        assert_eq!(
            at_line(&rows, "crash.c", line_of("crash.c", "store-g"), "stores"),
            5000,
            "{cc:?}"
        );
        let i = info(&trace);
        assert_eq!(i["end"]["signal"], libc::SIGSEGV, "{cc:?}");
        assert!(i["truncated"].is_null(), "{cc:?}: {i}");
    }
}

fn balanced(trace: &std::path::Path) -> (usize, usize) {
    let ev = dump(trace);
    let mut per_thread: std::collections::HashMap<u64, (usize, usize)> = Default::default();
    for e in &ev {
        let t = e["thread"].as_u64().unwrap();
        let c = per_thread.entry(t).or_default();
        if e["event"] == "enter" {
            c.0 += 1;
        }
        if e["event"] == "exit" {
            c.1 += 1;
        }
    }
    for (t, (a, b)) in &per_thread {
        assert_eq!(a, b, "thread {t}: {a} entries, {b} exits");
    }
    per_thread.values().fold((0, 0), |acc, c| (acc.0 + c.0, acc.1 + c.1))
}

#[test]
fn function_entry_and_exit_stay_balanced() {
    for cc in Cc::all() {
        let Traced { trace, out, .. } = build_and_record(cc, "calls", "calls.c");
        assert_eq!(stdout(&out), "fib=55 depth=0\n");
        let (enters, _) = balanced(&trace);
        // clang turns part of the recursion into loops, gcc keeps all 177 + 6 calls
        assert!(enters >= 3, "{cc:?}: {enters}");
        let funcs = report(&trace, "function");
        assert!(funcs.iter().any(|r| r["function"] == "deep"), "{cc:?}");
    }
}

#[test]
fn cxx_new_delete_and_exceptions() {
    for cc in Cc::all() {
        let Traced { exe, trace, out, .. } = build_and_record(cc, "cxx", "objects.cpp");
        let native = Command::new(&exe).output().unwrap();
        assert_eq!(stdout(&out), stdout(&native));
        let src = "objects.cpp";
        let allocs = report(&trace, "alloc");
        assert_eq!(at_line(&allocs, src, line_of(src, "new"), "blocks"), 8, "{cc:?}");
        assert_eq!(at_line(&allocs, src, line_of(src, "new"), "bytes"), 8 * 24, "{cc:?}");
        assert_eq!(at_line(&allocs, src, line_of(src, "new-array"), "blocks"), 1, "{cc:?}");
        assert_eq!(at_line(&allocs, src, line_of(src, "new-array"), "bytes"), 128, "{cc:?}");
        assert_eq!(at_line(&allocs, src, line_of(src, "new-nothrow"), "blocks"), 1, "{cc:?}");
        assert_eq!(at_line(&allocs, src, line_of(src, "new-nothrow"), "bytes"), 4, "{cc:?}");
        let ev = dump(&trace);
        let kinds = |k: &str| ev.iter().filter(|e| e["event"] == "alloc" && e["kind"] == k).count();
        assert!(kinds("new") >= 9, "{cc:?}");
        assert!(kinds("new[]") >= 1, "{cc:?}");
        let deletes = ev.iter().filter(|e| e["event"] == "free" && e["kind"] == "delete").count();
        assert!(deletes >= 9, "{cc:?}");
        balanced(&trace);
    }
}

#[test]
fn a_forked_child_records_its_own_trace() {
    let cc = *Cc::all().last().unwrap();
    let Traced { trace, out, .. } = build_and_record(cc, "fork", "forks.c");
    assert_eq!(stdout(&out), "child=0\n");
    let i = info(&trace);
    let children = i["children"].as_array().unwrap();
    assert_eq!(children.len(), 1, "{i}");
    let child_trace = children[0]["trace"].as_str().unwrap();
    let src = "forks.c";
    let parent_rows = report(&trace, "line");
    assert_eq!(at_line(&parent_rows, src, line_of(src, "parent-store"), "stores"), 100);
    assert_eq!(at_line(&parent_rows, src, line_of(src, "child-store"), "stores"), 0);
    let child_rows = report(std::path::Path::new(child_trace), "line");
    assert_eq!(at_line(&child_rows, src, line_of(src, "child-store"), "stores"), 200);
}

#[test]
fn a_thousand_threads() {
    let cc = Cc::Gcc;
    let Traced { trace, out, .. } = build_and_record(cc, "many", "manythreads.c");
    assert_eq!(stdout(&out), "started=1000\n");
    let i = info(&trace);
    assert_eq!(i["threads"], 1001);
    assert_eq!(i["dropped"], 0);
    let rows = report(&trace, "line");
    let src = "manythreads.c";
    assert_eq!(at_line(&rows, src, line_of(src, "store"), "stores"), 1000);
}

#[test]
fn filters_limit_what_is_recorded() {
    let cc = Cc::Gcc;
    let dir = scratch("filter");
    let exe = build(cc, "counts.c", &dir, &[]);
    let trace = dir.join("t.trace");
    let out = std::process::Command::new(memlens())
        .args(["record", "-q", "--functions", "fill", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let rows = report(&trace, "line");
    let src = "counts.c";
    assert_eq!(at_line(&rows, src, line_of(src, "store-g"), "stores"), 1000);
    assert_eq!(at_line(&rows, src, line_of(src, "load-g"), "loads"), 0);
    let funcs = report(&trace, "function");
    assert!(funcs.iter().all(|r| r["function"] == "fill"), "{funcs:?}");
}

#[test]
fn custom_allocators_from_alloc_in_and_recorded_values() {
    for cc in Cc::all() {
        let dir = scratch("custom");
        let exe = dir.join("custom");
        let p = programs();
        let (var, compiler) = match cc {
            Cc::Gcc => ("MEMLENS_CC", "gcc"),
            Cc::Clang => ("MEMLENS_CC", "clang-22"),
        };
        let out = Command::new(memlens())
            .args(["cc", "-O1"])
            .arg(p.join("custom_alloc.c"))
            .arg(p.join("custom_alloc_lib.c"))
            .arg("-o")
            .arg(&exe)
            .env(var, compiler)
            .env("MEMLENS_ALLOC_DEFS", p.join("alloc.in"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        let trace = dir.join("t.trace");
        let out = Command::new(memlens())
            .args(["record", "-q", "--values", "-o"])
            .arg(&trace)
            .arg("--")
            .arg(&exe)
            .output()
            .unwrap();
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "rc=0 1\n");
        let ev = dump(&trace);
        let custom: Vec<_> =
            ev.iter().filter(|e| e["event"] == "alloc" && e["kind"] == "custom").collect();
        assert_eq!(custom.len(), 2, "{cc:?}: {custom:?}");
        // the out-parameter allocator logs the pointer it stored, not its return code
        let mallocs: Vec<_> = ev
            .iter()
            .filter(|e| e["event"] == "alloc" && e["kind"] == "malloc" && e["size"] == 48)
            .collect();
        assert_eq!(mallocs.len(), 1);
        assert_eq!(custom[0]["addr"], mallocs[0]["addr"], "{cc:?}");
        assert_eq!(custom[0]["size"], 48);
        assert_eq!(custom[1]["size"], 80, "{cc:?}: count x size");
        let allocs = report(&trace, "alloc");
        let src = "custom_alloc.c";
        assert!(
            at_line(&allocs, src, line_of(src, "pool-get"), "blocks") >= 1,
            "{cc:?}: {allocs:?}"
        );
        assert!(at_line(&allocs, src, line_of(src, "pool-array"), "blocks") >= 1, "{cc:?}");
        // --values: each store of the loop carries the value written
        let line = line_of(src, "values");
        let vals: Vec<u64> = ev
            .iter()
            .filter(|e| e["event"] == "write" && e["line"] == line)
            .map(|e| e["value"].as_u64().expect("value recorded"))
            .collect();
        assert_eq!(vals, vec![0, 1, 2], "{cc:?}");
    }
}

#[test]
fn dinamite_filter_file_blacklists_functions() {
    let dir = scratch("filterjson");
    let exe = build(Cc::Gcc, "counts.c", &dir, &[]);
    let trace = dir.join("t.trace");
    let out = Command::new(memlens())
        .args(["record", "-q", "--filter-file"])
        .arg(programs().join("function_filter.json"))
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let rows = report(&trace, "line");
    let src = "counts.c";
    assert_eq!(at_line(&rows, src, line_of(src, "store-g"), "stores"), 1000);
    assert_eq!(at_line(&rows, src, line_of(src, "load-g"), "loads"), 0, "sum is blacklisted");
}

#[test]
fn memlens_cc_works_under_its_own_name_for_cmake_and_make() {
    let dir = scratch("argv0");
    let link = dir.join("memlens-cc");
    std::os::unix::fs::symlink(memlens(), &link).unwrap();
    let exe = dir.join("counts");
    let out = Command::new(&link)
        .args(["-O2"])
        .arg(programs().join("counts.c"))
        .arg("-o")
        .arg(&exe)
        .env("MEMLENS_CC", "gcc")
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert!(record(&exe, &dir.join("t.trace"), &[]).status.success());
}
