//! Every access and allocation counted as valgrind counts it (issue 18): realloc's
//! roles, assembler pass-through, and the `--dbi` defects found on real binaries.

use crate::dbi::{have, record_ok, setup, Src};
use crate::util::*;
use std::path::Path;
use std::process::Command;

/// memcheck's "total heap usage: A allocs, F frees".
fn memcheck_heap(exe: &Path) -> Option<(u64, u64)> {
    if !have("valgrind") {
        return None;
    }
    let out = Command::new("valgrind").arg(exe).output().unwrap();
    let err = stderr(&out);
    let line = err.lines().find(|l| l.contains("total heap usage:")).expect("memcheck summary");
    let n: Vec<u64> = line
        .split("usage:")
        .nth(1)
        .unwrap()
        .split(',')
        .take(2)
        .map(|p| p.split_whitespace().next().unwrap().replace(',', "").parse().unwrap())
        .collect();
    Some((n[0], n[1]))
}

/// realloc(NULL, n) allocates, realloc(p, n) allocates and frees, realloc(p, 0) frees:
/// `info` and `report --by alloc` agree with memcheck on both paths.
fn check_reallocs(trace: &Path, what: &str) {
    let i = info(trace);
    assert_eq!((i["allocs"].as_u64(), i["frees"].as_u64()), (Some(200), Some(200)), "{what}");
    let threads = report(trace, "thread");
    assert_eq!(threads[0]["allocs"], 200, "{what}: {threads:?}");
    assert_eq!(threads[0]["frees"], 200, "{what}: {threads:?}");
    let src = "reallocs.c";
    let allocs = report(trace, "alloc");
    assert_eq!(at_line(&allocs, src, line_of(src, "realloc-null"), "count"), 100, "{what}");
    assert_eq!(at_line(&allocs, src, line_of(src, "realloc-grow"), "count"), 100, "{what}");
    assert_eq!(at_line(&allocs, src, line_of(src, "realloc-zero"), "count"), 0, "{what}");
}

#[test]
fn realloc_counts_as_memcheck_counts_it() {
    for cc in Cc::all() {
        let t = build_and_record(cc, "reallocs", "reallocs.c");
        check_reallocs(&t.trace, &format!("{cc:?}"));
    }
    let Some((dir, exe)) = setup("dbi-reallocs", Src::Program("reallocs.c"), &[]) else {
        return;
    };
    // The plain build (the memlens runtime allocates for itself too, unrecorded).
    if let Some(m) = memcheck_heap(&exe) {
        assert_eq!(m, (200, 200), "memcheck");
    }
    let trace = dir.join("t.trace");
    record_ok(&exe, &trace, &[], &[]);
    check_reallocs(&trace, "--dbi");
}
