//! In-process (pad) probes: tests/programs/probed.c built with `memlens cc` and
//! started with `MEMLENS_CONTROL=1`, so `count` and `timer` on a function turn its
//! NOP pad into a call to the runtime instead of placing a uprobe. Same driver as
//! live_probes.rs (phases by signals, exact counts); the collector itself is the
//! same `memlens live`. Pads need no privileges, but the collector's own checks run
//! everywhere these tests do.

use crate::live_probes::{vaddr, Live, Target, N};
use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// `probed` built by memlens cc. clang ignores gcc's `noipa` (and would inline
/// `work`): `noinline` keeps the calls.
fn build_padded(dir: &Path) -> PathBuf {
    let exe = dir.join("probed-memlens");
    let out = Command::new(memlens())
        .args(["cc", "-O1", "-g", "-pthread", "-Dnoipa=noinline"])
        .arg(programs().join("probed.c"))
        .arg("-o")
        .arg(&exe)
        .env("MEMLENS_QUIET", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "memlens cc: {}", String::from_utf8_lossy(&out.stderr));
    exe
}

fn start(dir: &Path, exe: &Path) -> Target {
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    Target::start_env(exe, N, &[("MEMLENS_CONTROL", Path::new("1")), ("XDG_RUNTIME_DIR", &run)])
}

/// The 5 bytes of the function's pad in the file (its NOPs).
fn nops(exe: &Path, at: u64) -> Vec<u8> {
    let file = std::fs::read(exe).unwrap();
    file[at as usize..at as usize + 5].to_vec()
}

fn await_bytes(t: &Target, at: u64, want: &[u8]) {
    let t0 = Instant::now();
    while t.code(at, want.len()) != want {
        assert!(t0.elapsed() < Duration::from_secs(10), "the pad's bytes never came back");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn pad_count_and_timer_exact_then_removed_code_is_the_original() {
    let dir = scratch("live-pads");
    let exe = build_padded(&dir);
    let t = start(&dir, &exe);
    let reference = t.phase(libc::SIGUSR1);
    let live = Live::attach(&dir, t.pid(), &[]);
    let count = live.add("count:work");
    let p = live.get(count);
    assert!(p["location"].as_str().unwrap().ends_with("(pad)"), "{p}");
    let at = vaddr(&p);
    let original = nops(&exe, at);
    assert!(original == [0x90; 5] || original[..4] == [0x0f, 0x1f, 0x44, 0x00], "{original:x?}");
    assert_eq!(t.code(at, 1), [0xe8], "the pad became a call");
    let timer = live.add("timer:work");
    assert_eq!(live.get(count)["count"], 0);

    assert_eq!(t.phase(libc::SIGUSR1), reference, "the probed program computes the same");
    assert_eq!(live.get(count)["count"], N);
    let tm = live.get(timer);
    assert_eq!(tm["count"], N, "{tm}");
    assert!(tm["sum_ns"].as_u64().unwrap() > 0, "{tm}");
    assert!(tm["min_ns"].as_u64() <= tm["max_ns"].as_u64(), "{tm}");
    // the log2 histogram holds every call, each bucket within [min, max]
    let hist = |tm: &serde_json::Value| -> Vec<(u64, u64)> {
        let h = tm["hist"].as_array().unwrap_or_else(|| panic!("no histogram: {tm}"));
        h.iter().map(|b| (b[0].as_u64().unwrap(), b[1].as_u64().unwrap())).collect()
    };
    let h = hist(&tm);
    assert_eq!(h.iter().map(|b| b.1).sum::<u64>(), N, "{tm}");
    let (lo, hi) = (tm["min_ns"].as_u64().unwrap(), tm["max_ns"].as_u64().unwrap());
    assert!(h.iter().all(|&(from, _)| from <= hi && (from == 0 || 2 * from > lo)), "{tm}");
    // eight threads
    assert_eq!(t.phase(libc::SIGUSR2).len(), t.phase(libc::SIGUSR2).len());
    assert_eq!(live.get(count)["count"], N + 16 * N);
    assert_eq!(live.get(timer)["count"], N + 16 * N);
    assert_eq!(hist(&live.get(timer)).iter().map(|b| b.1).sum::<u64>(), N + 16 * N);

    live.rm(count);
    assert_eq!(t.code(at, 1), [0xe8], "the timer still holds the pad");
    live.rm(timer);
    await_bytes(&t, at, &original);
    assert!(live.list().is_empty());
    assert_eq!(t.phase(libc::SIGUSR1), reference);
    let again = live.add("count:work");
    assert_eq!(live.get(again)["count"], 0, "a new probe counts from its insertion");
    assert_eq!(t.phase(libc::SIGUSR1), reference);
    assert_eq!(live.get(again)["count"], N);

    // Ctrl-C: every probe goes, the code is the original, the program runs on.
    let (code, _) = live.interrupt();
    assert_eq!(code, 0);
    await_bytes(&t, at, &original);
    assert_eq!(t.phase(libc::SIGUSR1), reference);

    // Killed with -9: the runtime sees its connection close and removes its probes.
    let live = Live::attach(&dir, t.pid(), &[]);
    let c = live.add("count:work");
    assert_eq!(t.phase(libc::SIGUSR1), reference);
    assert_eq!(live.get(c)["count"], N);
    drop(live);
    await_bytes(&t, at, &original);
    assert_eq!(t.phase(libc::SIGUSR1), reference);
    t.finish();
}

#[test]
fn pads_come_and_go_while_eight_threads_call_the_function() {
    let dir = scratch("live-pads-threads");
    let exe = build_padded(&dir);
    let t = start(&dir, &exe);
    let reference = t.phase(libc::SIGUSR2);
    let live = Live::attach(&dir, t.pid(), &[]);
    // SAFETY: our own child.
    unsafe { libc::kill(t.pid(), libc::SIGUSR2) };
    for _ in 0..20 {
        let c = live.add("count:work");
        let tm = live.add("timer:work");
        live.rm(c);
        live.rm(tm);
    }
    let l = t.line();
    assert!(l.ends_with(&format!(" {reference}")), "{l}");
    let c = live.add("count:work");
    assert_eq!(t.phase(libc::SIGUSR2), reference);
    assert_eq!(live.get(c)["count"], 8 * N);
    t.finish();
}

#[test]
fn launch_inserts_pad_probes_before_main() {
    let dir = scratch("live-pads-launch");
    let exe = build_padded(&dir);
    let last = &crate::live_probes::launch_once(&dir, &exe);
    assert_eq!(last["final"], true);
    assert_eq!(last["exit_code"], 0);
    let probes = last["probes"].as_array().unwrap();
    assert!(probes[0]["location"].as_str().unwrap().ends_with("(pad)"), "{last}");
    assert_eq!(probes[0]["count"], 500, "every call from the first one: {last}");
    assert_eq!(probes[1]["count"], 5, "rec(4): five nested calls: {last}");
    assert!(std::fs::read_dir(dir.join("memlens")).unwrap().next().is_none());
}

/// The target forks and execs with pad probes in place: the child runs its patched
/// copy (its calls count in its own memory, never in the parent's values, and its
/// exit does not end the parent's probes), the program it execs starts from the
/// file's code, and the parent's count is exact.
#[test]
fn pads_in_place_across_fork_and_exec() {
    let dir = scratch("live-pads-fork");
    let exe = build_padded(&dir);
    let stream = dir.join("stream.jsonl");
    let o = Command::new(memlens())
        .args(["live", "--probe", "count:work", "--json-stream"])
        .arg(&stream)
        .args(["--every", "20ms", "--"])
        .arg(&exe)
        .args(["--fork", "300"])
        .env("XDG_RUNTIME_DIR", &dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("once "), "the exec'd program ran: {out}");
    assert!(out.contains(" child 0"), "the child exited 0: {out}");
    let text = std::fs::read_to_string(&stream).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["final"], true, "{last}");
    assert_eq!(last["exit_code"], 0, "{last}");
    let p = &last["probes"][0];
    assert!(p["location"].as_str().unwrap().ends_with("(pad)"), "{p}");
    assert_eq!(p["count"], 600, "the parent's 2N calls only: {last}");
    // no snapshot ever counted the child's calls as the parent's
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let n = v["probes"][0]["count"].as_u64().unwrap_or(0);
        assert!(n <= 600, "a snapshot above the parent's calls: {l}");
    }
}
