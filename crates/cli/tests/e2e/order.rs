//! The global order (issue 4): atomic-memory-trace's increment tests, ported.
//! `tests/programs/inc.c` increments a shared counter from N threads and prints, per
//! thread, its increments, how often the value before its increment was even and its
//! failed compare-exchanges; replaying the merged trace (`dump --merged --format
//! amt`) must give the same numbers, for gcc and clang builds. `MEMLENS_STRESS=<n>`
//! repeats each check n times (default 2).

use crate::util::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const TOTAL: u64 = 100_000;

/// `inc.c` built once per compiler and shared by the tests (they only run it).
fn inc(cc: Cc) -> PathBuf {
    static EXES: [OnceLock<PathBuf>; 2] = [OnceLock::new(), OnceLock::new()];
    let i = match cc {
        Cc::Gcc => 0,
        Cc::Clang => 1,
    };
    EXES[i].get_or_init(|| build(cc, "inc.c", &scratch("order-build"), &[])).clone()
}

fn repeats() -> usize {
    std::env::var("MEMLENS_STRESS").ok().and_then(|v| v.parse().ok()).unwrap_or(2)
}

/// What the program printed: the counter's address and, per thread,
/// (increments, even, failed CAS).
struct Printed {
    addr: u64,
    threads: BTreeMap<i64, (u64, u64, u64)>,
}

fn run(exe: &Path, dir: &Path, mode: &str, n: usize, flags: &[&str]) -> (Printed, String) {
    let trace = dir.join(format!("{mode}-{n}.trace"));
    let mut args = vec!["record", "-q", "-o", trace.to_str().unwrap()];
    args.extend_from_slice(flags);
    let ns = n.to_string();
    let total = TOTAL.to_string();
    args.extend_from_slice(&["--", exe.to_str().unwrap(), mode, &ns, &total]);
    let out = run_memlens(&args);
    assert!(out.status.success(), "record {args:?}: {}", stderr(&out));
    let text = stdout(&out);
    let mut lines = text.lines();
    let addr = lines.next().unwrap().strip_prefix("counter ").unwrap().parse().unwrap();
    let mut threads = BTreeMap::new();
    for l in lines {
        let f: Vec<&str> = l.split(&[' ', '\t'][..]).collect();
        let v = |i: usize| f[i].parse::<u64>().unwrap();
        threads.insert(f[1].parse().unwrap(), (v(2), v(3), v(4)));
    }
    let amt = run_memlens(&["dump", "--merged", "--format", "amt", trace.to_str().unwrap()]);
    assert!(amt.status.success(), "dump: {}", stderr(&amt));
    (Printed { addr, threads }, stdout(&amt))
}

/// One memory record of an atomic-memory-trace line inside the ROI:
/// (tid, read, write, addr).
/// Without clocks (`--order=none`) the ROI events do not bracket the other threads'
/// events, so every record counts.
fn roi_records(amt: &str) -> Vec<(i64, bool, bool, u64)> {
    let unordered = amt.lines().all(|l| l.starts_with("0\t"));
    let mut inside = unordered;
    let mut v = Vec::new();
    for l in amt.lines() {
        let f: Vec<&str> = l.split('\t').collect();
        match f.get(2).copied() {
            Some("start_roi") => inside = true,
            Some("end_roi") => inside = unordered,
            Some("m") if inside => {
                let tid = f[1].parse().unwrap();
                let (mut r, mut w, mut addr) = (false, false, 0);
                let mut i = 3;
                while i + 2 < f.len() + 1 && i < f.len() {
                    match f[i] {
                        "r" => r = true,
                        "w" => w = true,
                        _ => {}
                    }
                    addr = f[i + 1].parse().unwrap();
                    i += 3;
                }
                v.push((tid, r, w, addr));
            }
            _ => {}
        }
    }
    v
}

/// inc_sim.py: every RMW at the counter is an increment of the replayed value.
fn replay_add(p: &Printed, amt: &str) -> (u64, BTreeMap<i64, (u64, u64)>) {
    let mut value = 0u64;
    let mut got: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
    for (tid, r, w, addr) in roi_records(amt) {
        if addr == p.addr && r && w {
            let e = got.entry(tid).or_default();
            e.0 += 1;
            if value.is_multiple_of(2) {
                e.1 += 1;
            }
            value += 1;
        }
    }
    (value, got)
}

fn expected(p: &Printed) -> BTreeMap<i64, (u64, u64)> {
    p.threads.iter().map(|(&t, &(c, e, _))| (t, (c, e))).collect()
}

#[test]
fn increment_replay_reproduces_every_thread_count() {
    let dir = scratch("order-inc");
    for cc in Cc::all() {
        let exe = inc(cc);
        for n in [4, 8] {
            for _ in 0..repeats() {
                let (p, amt) = run(&exe, &dir, "add", n, &[]);
                let (final_value, got) = replay_add(&p, &amt);
                assert_eq!(final_value, TOTAL);
                assert_eq!(got, expected(&p), "{cc:?}, {n} threads: replayed (incs, even) differ");
            }
        }
    }
}

#[test]
fn increment_replay_with_a_stamp_per_access() {
    let dir = scratch("order-inc-atomic");
    for cc in Cc::all() {
        let exe = inc(cc);
        for n in [4, 8] {
            let (p, amt) = run(&exe, &dir, "add", n, &["--order", "atomic", "--order-locks", "64"]);
            let (final_value, got) = replay_add(&p, &amt);
            assert_eq!(final_value, TOTAL);
            assert_eq!(got, expected(&p), "{cc:?}, {n} threads, --order=atomic");
        }
    }
}

/// The negative control: without clocks the same replay must be able to fail.
#[test]
fn without_ordering_the_replay_can_fail() {
    let dir = scratch("order-none");
    for cc in Cc::all() {
        let exe = inc(cc);
        let mut mismatches = 0;
        let mut no_clocks = true;
        for _ in 0..repeats().max(2) {
            let (p, amt) = run(&exe, &dir, "add", 4, &["--order", "none"]);
            let (final_value, got) = replay_add(&p, &amt);
            assert_eq!(final_value, TOTAL, "increments are counted whatever the order");
            if got != expected(&p) {
                mismatches += 1;
            }
            // Every line's timestamp is 0: nothing orders the threads.
            no_clocks &= amt.lines().all(|l| l.starts_with("0\t"));
        }
        assert!(mismatches > 0 || no_clocks, "{cc:?}: the control never failed and had clocks");
        assert!(no_clocks, "{cc:?}: --order=none wrote clocks");
    }
}

/// inc_sim_cas.py: increments = successful CAS at the counter, failed CAS =
/// reads − 2·final; with failed CAS logged as writes the check breaks.
#[test]
fn cas_increments_and_failures_are_rebuilt() {
    let dir = scratch("order-cas");
    for cc in Cc::all() {
        let exe = inc(cc);
        let check = |flags: &[&str]| -> bool {
            let (p, amt) = run(&exe, &dir, "cas", 4, flags);
            let (mut reads, mut final_value) = (0i64, 0i64);
            let mut incs: BTreeMap<i64, u64> = BTreeMap::new();
            for (tid, r, w, addr) in roi_records(&amt) {
                if addr != p.addr {
                    continue;
                }
                reads += i64::from(r);
                if r && w {
                    *incs.entry(tid).or_default() += 1;
                    final_value += 1;
                }
            }
            let fails: u64 = p.threads.values().map(|t| t.2).sum();
            if fails == 0 && !flags.is_empty() {
                // Nothing failed, nothing to miscount: treat as broken so the caller retries.
                return false;
            }
            let want: BTreeMap<i64, u64> = p.threads.iter().map(|(&t, v)| (t, v.0)).collect();
            incs == want && reads - 2 * final_value == fails as i64 && final_value as u64 == TOTAL
        };
        for _ in 0..repeats() {
            assert!(check(&[]), "{cc:?}: CAS replay differs from the program's counts");
        }
        // Four threads contend, so some CAS fail; logged as writes, they count as
        // increments and the check must break.
        assert!(!check(&["--cas-as-write"]), "{cc:?}: --cas-as-write did not break the CAS check");
    }
}

/// A mutex-protected plain counter: the merged order of the protected load/store
/// pairs reproduces every thread's (increments, even) and the final value.
#[test]
fn mutex_protected_loads_and_stores_replay() {
    let dir = scratch("order-mutex");
    for cc in Cc::all() {
        let exe = inc(cc);
        for n in [4, 8] {
            let (p, amt) = run(&exe, &dir, "mutex", n, &[]);
            let mut value = 0u64;
            let mut loaded: BTreeMap<i64, u64> = BTreeMap::new();
            let mut got: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
            for (tid, r, w, addr) in roi_records(&amt) {
                if addr != p.addr {
                    continue;
                }
                if r {
                    loaded.insert(tid, value);
                    let e = got.entry(tid).or_default();
                    e.0 += 1;
                    if value.is_multiple_of(2) {
                        e.1 += 1;
                    }
                }
                if w {
                    value = loaded[&tid] + 1;
                }
            }
            assert_eq!(value, TOTAL);
            assert_eq!(got, expected(&p), "{cc:?}, {n} threads: mutex replay differs");
        }
    }
}

/// The streaming merge equals a full sort by timestamp (as sets within equal
/// timestamps), for `dump --merged` and for `memlens merge` on shuffled input.
#[test]
fn streaming_merge_equals_a_full_sort() {
    let dir = scratch("order-merge");
    // The merge does not depend on the compiler: one build is enough.
    let exe = inc(Cc::Gcc);
    let (_, amt) = run(&exe, &dir, "add", 4, &[]);
    let ts = |l: &str| l.split('\t').next().unwrap().parse::<u64>().unwrap();
    let merged: Vec<&str> = amt.lines().collect();
    assert!(merged.windows(2).all(|w| ts(w[0]) <= ts(w[1])), "dump --merged is not sorted");
    // `memlens merge` on this input must keep it (its reordering of interleaved
    // per-thread input is unit-tested in `merge.rs`: atomic-memory-trace's merge
    // needs input within the recorder's skew bound, which memlens does not impose).
    let input: String = merged.iter().map(|l| format!("{l}\n")).collect();
    let out = std::process::Command::new(memlens())
        .arg("merge")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            let mut stdin = c.stdin.take().unwrap();
            // Written from another thread: the output pipe fills meanwhile.
            let feed = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
            let out = c.wait_with_output();
            feed.join().unwrap()?;
            out
        })
        .unwrap();
    assert!(out.status.success());
    let remerged = String::from_utf8(out.stdout).unwrap();
    let bunches = |lines: Vec<&str>| -> Vec<(u64, Vec<String>)> {
        let mut v: Vec<(u64, Vec<String>)> = Vec::new();
        for l in lines {
            let t = ts(l);
            match v.last_mut() {
                Some((lt, b)) if *lt == t => b.push(l.to_string()),
                _ => v.push((t, vec![l.to_string()])),
            }
        }
        for (_, b) in &mut v {
            b.sort();
        }
        v
    };
    let mut sorted = merged.clone();
    sorted.sort_by_key(|l| ts(l));
    assert_eq!(bunches(merged.clone()), bunches(sorted.clone()));
    assert_eq!(bunches(remerged.lines().collect()), bunches(sorted));
}
