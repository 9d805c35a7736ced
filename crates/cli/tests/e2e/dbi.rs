//! `memlens record --dbi`: plain binaries (no memlens at build time) traced under
//! QEMU user mode, checked against the compiled path and valgrind lackey.

use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn have(tool: &str) -> bool {
    let ok = Command::new(tool).arg("--version").output().is_ok();
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "{tool} is required in CI");
        eprintln!("note: {tool} not installed; skipping");
    }
    ok
}

/// gcc -O2 -g, no memlens.
fn plain_build(src: &Path, dir: &Path, extra: &[&str]) -> PathBuf {
    let exe = dir.join(src.file_stem().unwrap());
    let out = Command::new("gcc")
        .args(["-O2", "-g", "-pthread"])
        .args(extra)
        .arg(src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "gcc: {}", stderr(&out));
    exe
}

fn record_dbi(exe: &Path, trace: &Path, args: &[&str], extra: &[&str]) -> Output {
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

#[test]
fn dbi_counts_match_the_compiled_path() {
    if !have("qemu-x86_64") {
        return;
    }
    let dir = scratch("dbi-counts");
    let exe = plain_build(&programs().join("counts.c"), &dir, &[]);
    let trace = dir.join("t.trace");
    let out = record_dbi(&exe, &trace, &[], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
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
    assert_eq!(at_line(&allocs, src, l("malloc"), "count"), 10, "{allocs:?}");
    assert_eq!(at_line(&allocs, src, l("malloc"), "bytes"), 1000);
    assert_eq!(at_line(&allocs, src, l("calloc"), "count"), 1);
    assert_eq!(at_line(&allocs, src, l("calloc"), "bytes"), 64);
    assert_eq!(at_line(&allocs, src, l("realloc"), "count"), 1);
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
    if !have("qemu-x86_64") {
        return;
    }
    let dir = scratch("dbi-threads");
    let exe = plain_build(&programs().join("threads.c"), &dir, &[]);
    let trace = dir.join("t.trace");
    let out = record_dbi(&exe, &trace, &[], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
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
fn lackey_counts(exe: &Path, lo: u64, hi: u64) -> (u64, u64) {
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
    let out = record_dbi(&exe, &trace, &[], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
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
    let mut elf = std::fs::read(memlens()).unwrap();
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
