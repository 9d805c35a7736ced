//! Soak (issue 21): `tests/programs/soak.c` with 64 threads doing atomics, a mutex,
//! signals and forks, recorded with `--values`; replaying `dump --merged` must give
//! the program's final counters, every load the latest value stored before it,
//! and no recorded value other than the one written. One run per compiler for CI
//! (3000 iterations per thread, `--order sync`); `MEMLENS_SOAK_SECS=N` then
//! repeats runs, under `--order atomic` too, until N seconds have passed (each
//! run bounded, so each trace stays small enough to replay).

use crate::util::*;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const THREADS: usize = 64;

/// What the program printed.
#[derive(Default)]
struct Printed {
    /// Addresses of `acnt`, `ccnt`, `mcnt`, `prog[0]`.
    addr: [u64; 4],
    /// Final `acnt`, `ccnt`, `mcnt`.
    finals: [u64; 3],
    /// Per thread, its last `prog[t]`.
    prog: Vec<u64>,
    forks: u64,
    failed: u64,
}

fn parse(text: &str) -> Printed {
    let mut p = Printed::default();
    for l in text.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        let n = |i: usize| f[i].parse::<u64>().unwrap();
        match f[0] {
            "addr" => p.addr = [n(1), n(2), n(3), n(4)],
            "final" => p.finals = [n(1), n(2), n(3)],
            "prog" => p.prog.push(n(2)),
            "forks" => (p.forks, p.failed) = (n(1), n(3)),
            _ => panic!("unexpected output line {l:?}"),
        }
    }
    p
}

/// The replay of the merged order, per counter: how many changes it saw and how
/// many recorded values disagree with the replayed one.
#[derive(Default, Debug)]
struct Replay {
    value: [u64; 3],
    changes: [u64; 3],
    wrong: [u64; 3],
    prog: HashMap<u64, u64>,
    prog_wrong: u64,
    loads: u64,
}

fn field(ev: &[&str], key: &str) -> Option<u64> {
    let v = ev.iter().find_map(|w| w.strip_prefix(key))?;
    u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()
}

fn replay(trace: &Path, p: &Printed) -> Replay {
    let mut child = Command::new(memlens())
        .args(["dump", "--merged", trace.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut r = Replay::default();
    let prog_end = p.addr[3] + 8 * THREADS as u64;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let Some(text) = line.split('\t').nth(3) else { continue };
        let ev: Vec<&str> = text.split(' ').collect();
        if ev.len() < 3 || !ev[1].starts_with("0x") {
            continue;
        }
        let addr = u64::from_str_radix(&ev[1][2..], 16).unwrap();
        if (p.addr[3]..prog_end).contains(&addr) && ev[0] == "AW" {
            // each thread's progress: 1, 2, 3, ... in its own order
            let last = r.prog.entry(addr).or_default();
            let v = field(&ev, "value=").unwrap();
            if v != *last + 1 {
                r.prog_wrong += 1;
            }
            *last = v;
            continue;
        }
        let Some(k) = p.addr[..3].iter().position(|&a| a == addr) else { continue };
        let cur = r.value[k];
        match ev[0] {
            "R" | "AR" => {
                r.loads += 1;
                if field(&ev, "value=") != Some(cur) {
                    r.wrong[k] += 1;
                }
            }
            "W" => {
                let v = field(&ev, "value=").unwrap();
                if v != cur + 1 {
                    r.wrong[k] += 1;
                }
                r.value[k] = v;
                r.changes[k] += 1;
            }
            "RMW.add" | "RMW.cas" => {
                if field(&ev, "old=") != Some(cur) {
                    r.wrong[k] += 1;
                }
                r.value[k] = cur + 1;
                r.changes[k] += 1;
            }
            "RMW.cas-fail" => {
                if field(&ev, "old=") != Some(cur) {
                    r.wrong[k] += 1;
                }
            }
            other => panic!("unexpected event {other} on a counter: {line}"),
        }
    }
    assert!(child.wait().unwrap().success(), "dump --merged failed");
    r
}

/// `MEMLENS_SOAK_SECS`: run for that many seconds.
fn long() -> Option<u64> {
    std::env::var("MEMLENS_SOAK_SECS").ok().and_then(|s| s.parse().ok())
}

fn soak_once(exe: &Path, dir: &Path, order: &str) {
    let (iters, secs) = (3000u64, 100u64);
    let trace = dir.join(format!("{order}.trace"));
    let out = run_memlens(&[
        "record",
        "-q",
        "--values",
        "--order",
        order,
        "-o",
        trace.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
        &THREADS.to_string(),
        &iters.to_string(),
        &secs.to_string(),
    ]);
    assert!(out.status.success(), "{order}: {:?} {}", out.status, stderr(&out));
    let p = parse(&stdout(&out));
    let total: u64 = p.prog.iter().sum();
    assert_eq!(p.finals, [total; 3], "{order}: the program lost increments");
    assert_eq!(p.failed, 0, "{order}: a forked child failed");
    let i = info(&trace);
    // A signal that lands while its thread is inside the runtime's own buffer write
    // has its handler's events dropped, and counted (docs/security.md, known limits);
    // every event of the program's own work must still be there, which the exact
    // replay below checks.
    assert!(i["dropped"].as_u64().unwrap() <= 64, "{order}: {i}");
    assert_eq!(i["end"]["status"], 0, "{order}: {i}");
    let children = i["children"].as_array().unwrap();
    assert_eq!(children.len() as u64, p.forks, "{order}");
    for c in children {
        let ci = json(&["info", "--fast", "--format", "json", c["trace"].as_str().unwrap()]);
        assert_eq!(ci["end"]["status"], 0, "{order}: {ci}");
        assert_eq!(ci["stores"], 100, "{order}: the child counts to 100: {ci}");
        assert_eq!(ci["dropped"], 0, "{order}: {ci}");
        let _ = std::fs::remove_file(c["trace"].as_str().unwrap());
    }
    let r = replay(&trace, &p);
    assert_eq!(r.wrong, [0; 3], "{order}: recorded values that disagree with the replay");
    assert_eq!(r.value, p.finals, "{order}: replayed finals");
    assert_eq!(r.changes, p.finals, "{order}: replayed increments");
    assert_eq!(r.prog_wrong, 0, "{order}: progress values out of order");
    let prog: Vec<u64> = (0..THREADS as u64)
        .map(|t| r.prog.get(&(p.addr[3] + 8 * t)).copied().unwrap_or(0))
        .collect();
    assert_eq!(prog, p.prog, "{order}: replayed progress");
    assert!(r.loads >= 2 * total, "{order}: {} loads", r.loads);
}

#[test]
fn soak_64_threads_atomics_mutex_signals_fork_replay_exactly() {
    let until = long().map(|s| Instant::now() + Duration::from_secs(s));
    let mut exes = Vec::new();
    for cc in Cc::all() {
        let dir = scratch("soak");
        let exe = build(cc, "soak.c", &dir, &[]);
        soak_once(&exe, &dir, "sync");
        exes.push((exe, dir));
    }
    let mut runs = 0;
    while until.is_some_and(|u| Instant::now() < u) {
        // `--order atomic` can take minutes on a loaded machine: long runs only
        for (exe, dir) in &exes {
            soak_once(exe, dir, "atomic");
            soak_once(exe, dir, "sync");
            runs += 2;
        }
    }
    if until.is_some() {
        eprintln!("soak: {runs} more runs, all replayed exactly");
    }
}
