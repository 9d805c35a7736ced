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
    EXES[i].get_or_init(|| build(cc, "inc.c", &scratch_kept("order-build"), &[])).clone()
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
    // per-thread input is unit-tested in `merge.rs`; the recorder's skew bound is
    // on chunks, tested with `merge --trace` below).
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

/// `racy.c` (a plain, non-atomic `counter++` in every thread) built once per compiler.
fn racy(cc: Cc) -> PathBuf {
    static EXES: [OnceLock<PathBuf>; 2] = [OnceLock::new(), OnceLock::new()];
    let i = match cc {
        Cc::Gcc => 0,
        Cc::Clang => 1,
    };
    EXES[i].get_or_init(|| build(cc, "racy.c", &scratch_kept("order-racy-build"), &[])).clone()
}

const RACY_TOTAL: u64 = 40_000;

/// Records `racy 4 RACY_TOTAL` under `--order atomic` (`hold`: stripes held across
/// the access, the default; else released right after the stamp, as before) and
/// replays the merged loads and stores of the counter: a load takes the replayed
/// value, a store writes that thread's last load + 1. Returns (replay equals what the
/// program printed — final value and per-thread increments and even loads —,
/// increments were lost, i.e. the threads really raced).
fn racy_replays(exe: &Path, dir: &Path, hold: bool) -> (bool, bool) {
    let trace = dir.join("racy.trace");
    let total = RACY_TOTAL.to_string();
    let out = std::process::Command::new(memlens())
        .args(["record", "-q", "--order", "atomic", "-o", trace.to_str().unwrap(), "--"])
        .args([exe.to_str().unwrap(), "4", &total])
        .env("MEMLENS_ORDER_HOLD", if hold { "1" } else { "0" })
        .output()
        .unwrap();
    assert!(out.status.success(), "record racy: {}", stderr(&out));
    let text = stdout(&out);
    let mut lines = text.lines();
    let addr: u64 = lines.next().unwrap().strip_prefix("counter ").unwrap().parse().unwrap();
    let fin: u64 = lines.next().unwrap().strip_prefix("final ").unwrap().parse().unwrap();
    let mut want: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
    for l in lines {
        let f: Vec<&str> = l.split(&[' ', '\t'][..]).collect();
        want.insert(f[1].parse().unwrap(), (f[2].parse().unwrap(), f[3].parse().unwrap()));
    }
    let amt = run_memlens(&["dump", "--merged", "--format", "amt", trace.to_str().unwrap()]);
    assert!(amt.status.success(), "dump: {}", stderr(&amt));
    let (mut value, mut loaded) = (0u64, BTreeMap::<i64, u64>::new());
    let mut got: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
    for (tid, r, w, a) in roi_records(&stdout(&amt)) {
        if a != addr {
            continue;
        }
        if r {
            loaded.insert(tid, value);
            let e = got.entry(tid).or_default();
            e.0 += 1;
            e.1 += u64::from(value.is_multiple_of(2));
        }
        if w {
            value = loaded[&tid] + 1;
        }
    }
    (value == fin && got == want, fin < RACY_TOTAL)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A data race: under `--order atomic` the stripe of the counter is held from each
/// access's callback until the access has executed, so the merged order of the racy
/// loads and stores is the order they hit memory: replaying it gives the final value
/// the program printed (lost increments included), run after run.
#[test]
fn racy_plain_increments_replay_under_order_atomic() {
    let dir = scratch("order-racy");
    for cc in Cc::all() {
        let exe = racy(cc);
        let runs = 10 * repeats();
        let mut raced = 0;
        for i in 0..runs {
            let (ok, lost) = racy_replays(&exe, &dir, true);
            assert!(ok, "{cc:?}, run {i}: the replay of the racy counter differs from the program");
            raced += usize::from(lost);
        }
        eprintln!("{cc:?}: {runs} runs replayed exactly, {raced} with lost increments");
    }
}

/// The negative control: stamping in the callback without holding the stripe across
/// the access (what `--order atomic` did before) must be caught by the same replay.
/// Needs two cores: the race is between accesses running at the same time.
#[test]
fn racy_replay_fails_without_holding_the_stripe() {
    if cores() < 2 {
        eprintln!("one core: the negative control needs two");
        return;
    }
    let dir = scratch("order-racy-nohold");
    for cc in Cc::all() {
        let exe = racy(cc);
        // up to 100 runs (the first mismatch ends it, in one or two on a quiet
        // machine): on a loaded one the two threads seldom run at the same time
        let mismatched = (0..100).any(|_| !racy_replays(&exe, &dir, false).0);
        assert!(
            mismatched,
            "{cc:?}: 100 runs without holding replayed exactly; the test cannot fail"
        );
    }
}

/// `SKEW_CHUNKS` of the runtime (`crates/rt/src/order.rs`): how many hand-overs of
/// all threads a thread may lag behind before it must hand its buffer over.
const SKEW_CHUNKS: u64 = 16;

/// Records `skew 3 ITERS` (three fast threads racing their clocks ahead, the main
/// thread recording little) with 64 KB buffers and merges it in file order:
/// (max events held back, events per chunk at most, events).
fn skew_merge(dir: &Path, skew: bool) -> (u64, u64, u64) {
    file_order_merge(dir, "skew.c", &["3", "500000"], skew)
}

/// Records `src` with `args` (64 KiB buffers, the skew bound on or off) and merges it
/// in file order: (most events held back, most events in a chunk, events).
fn file_order_merge(dir: &Path, src: &str, args: &[&str], skew: bool) -> (u64, u64, u64) {
    let exe = build(Cc::Gcc, src, dir, &[]);
    let trace = dir.join(format!("{src}-{skew}.trace"));
    let out = std::process::Command::new(memlens())
        .args(["record", "-q", "-o", trace.to_str().unwrap(), "--", exe.to_str().unwrap()])
        .args(args)
        .env("MEMLENS_BUFFER_KB", "64")
        .env("MEMLENS_ORDER_SKEW", if skew { "1" } else { "0" })
        .output()
        .unwrap();
    assert!(out.status.success(), "record skew: {}", stderr(&out));
    let m = run_memlens(&["merge", "--trace", trace.to_str().unwrap(), "--stats"]);
    assert!(m.status.success(), "merge --trace: {}", stderr(&m));
    // The file-order merge writes exactly the order of `dump --merged`.
    let full = run_memlens(&["dump", "--merged", trace.to_str().unwrap()]);
    assert!(stdout(&m) == stdout(&full), "merge --trace differs from dump --merged");
    let stat = |k: &str| -> u64 {
        let e = stderr(&m);
        let l = e.lines().find(|l| l.starts_with(k)).unwrap_or_else(|| panic!("no {k}: {e}"));
        l[k.len()..].trim().parse().unwrap()
    };
    (stat("max buffered events"), stat("max events per chunk"), stat("events"))
}

/// Bounded skew: a thread lagging more than SKEW_CHUNKS hand-overs hands its buffer
/// over at its next event, at the high-water clock, so a merge reading the file in
/// order holds back about SKEW_CHUNKS chunks, not the whole trace; without the bound
/// the slow thread's first chunk holds everything back.
#[test]
fn file_order_merge_memory_is_bounded_by_the_skew() {
    let dir = scratch("order-skew");
    let (held, per_chunk, events) = skew_merge(&dir, true);
    // SKEW_CHUNKS + 4 by construction, plus the chunks handed over while the lagging
    // thread waits for the CPU (the test shares one CPU among its threads and yields
    // often, but the machine may be loaded): twice SKEW_CHUNKS leaves room for that.
    let bound = 2 * SKEW_CHUNKS * per_chunk;
    eprintln!("skew bound on: held back {held} of {events} events, bound {bound}");
    assert!(events > 3 * bound, "too few events ({events}) to tell the bound ({bound})");
    assert!(held <= bound, "held back {held} events, more than the bound {bound}");
    let (held_off, _, events_off) = skew_merge(&dir, false);
    eprintln!("skew bound off: held back {held_off} of {events_off} events");
    assert!(held_off > bound, "without the bound the merge held back only {held_off}");
}

/// Threads asleep in waiting calls (a condition wait, a join) cannot hand their
/// partly filled buffers over; the thread that finds them lagging does it for them
/// and raises their clocks, so they do not hold the file-order merge back either.
/// Without the skew bound their first chunks land at the end and the merge holds
/// back everything.
#[test]
fn parked_threads_do_not_hold_the_file_order_merge_back() {
    let dir = scratch("order-parked");
    let (held, per_chunk, events) = file_order_merge(&dir, "parked.c", &["2", "600000"], true);
    // SKEW_CHUNKS + 4 by construction; more while a sleeper has not reached its wait
    // yet (main, before `pthread_join`, on a machine loaded by the other tests)
    let bound = 3 * SKEW_CHUNKS * per_chunk;
    eprintln!("parked, skew bound on: held back {held} of {events} events, bound {bound}");
    assert!(events > 3 * bound / 2, "too few events ({events}) to tell the bound ({bound})");
    assert!(held <= bound, "held back {held} events, more than the bound {bound}");
    let (held_off, _, events_off) = file_order_merge(&dir, "parked.c", &["2", "600000"], false);
    eprintln!("parked, skew bound off: held back {held_off} of {events_off} events");
    assert!(held_off > bound, "without the bound the merge held back only {held_off}");
}

/// `--order atomic` holds a line's lock from an access until the thread's next
/// event; a thread that sleeps in code the runtime does not see keeps holding it.
/// The thread waiting for that line takes it over after a while instead of
/// deadlocking, and the trace says so (`info`: order_steals, a possible misorder).
#[test]
fn a_lock_held_by_a_blocked_thread_is_taken_over_and_reported() {
    let dir = scratch("order-steal");
    let exe = build(Cc::Gcc, "steal.c", &dir, &[]);
    for (mode, steals) in [("atomic", 1), ("sync", 0)] {
        let trace = dir.join(format!("{mode}.trace"));
        let (t, e) = (trace.to_str().unwrap(), exe.to_str().unwrap());
        let out = run_memlens(&["record", "-q", "--order", mode, "-o", t, "--", e]);
        assert!(out.status.success(), "record: {}", stderr(&out));
        assert_eq!(stdout(&out).trim(), "x 1");
        assert_eq!(info(&trace)["order_steals"], steals, "--order {mode}");
        let text = stdout(&run_memlens(&["info", trace.to_str().unwrap()]));
        assert_eq!(text.contains("line lock(s) taken over"), steals > 0, "{text}");
    }
}

/// A stripe another thread held at `fork` is freed in the child: the child's own
/// atomic on that line neither hangs (`sync`) nor waits to take it over (`atomic`).
#[test]
fn a_forked_child_does_not_wait_for_stripes_held_at_the_fork() {
    let dir = scratch("order-fork");
    let exe = build(Cc::Gcc, "fork_stripes.c", &dir, &[]);
    let src = "fork_stripes.c";
    for mode in ["atomic", "sync"] {
        let trace = dir.join(format!("{mode}.trace"));
        let (t, e) = (trace.to_str().unwrap(), exe.to_str().unwrap());
        // a child stuck on a stripe would hang the test: bound it
        let out = std::process::Command::new("timeout")
            .arg("120")
            .arg(memlens())
            .args(["record", "-q", "--order", mode, "-o", t, "--", e])
            .output()
            .unwrap();
        assert!(out.status.success(), "record --order {mode}: {:?} {}", out.status, stderr(&out));
        assert_eq!(stdout(&out).trim(), "children=5", "--order {mode}");
        let i = info(&trace);
        let children = i["children"].as_array().unwrap();
        assert_eq!(children.len(), 5, "{i}");
        for c in children {
            let child = Path::new(c["trace"].as_str().unwrap());
            assert_eq!(info(child)["order_steals"], 0, "--order {mode}: {}", child.display());
            let rows = report(child, "line");
            assert_eq!(at_line(&rows, src, line_of(src, "child-rmw"), "loads"), 1, "{mode}");
        }
    }
}
