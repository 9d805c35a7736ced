//! `memlens analyze --follow`: kernels over a trace while `memlens record` writes it.

use crate::util::*;
use serde_json::Value;
use std::process::{Command, Stdio};

/// `memlens analyze KERNEL --follow` started before the recording; its stdout must
/// equal the offline run on the finished trace, and it must have printed snapshots
/// of a growing trace on the way.
#[test]
fn follow_while_recording_equals_the_offline_run() {
    let dir = scratch("live");
    let exe = build(Cc::Gcc, "live.c", &dir, &[]);
    let trace = dir.join("t.trace");
    let t = trace.to_str().unwrap();
    // counts and sharing take chunks as they land; working-set and heap the merged order
    let kernels = ["counts", "sharing", "working-set", "heap"];
    let followers: Vec<_> = kernels
        .iter()
        .map(|k| {
            Command::new(memlens())
                .args(["analyze", k, "--follow", "--every", "100ms", "--top", "0"])
                .args(["--format", "json", t])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // small buffers: chunks land every few milliseconds
    let rec = Command::new(memlens())
        .args(["record", "-q", "-o", t, "--"])
        .arg(&exe)
        .arg("3000")
        .env("MEMLENS_BUFFER_KB", "64")
        .output()
        .unwrap();
    assert!(rec.status.success(), "{}", stderr(&rec));
    assert_eq!(stdout(&rec), "hits=2400000\n");
    for (k, f) in kernels.iter().zip(followers) {
        let live = f.wait_with_output().unwrap();
        assert!(live.status.success(), "{k}: {}", stderr(&live));
        let offline = run_memlens(&["analyze", k, "--top", "0", "--format", "json", t]);
        assert!(offline.status.success(), "{k}: {}", stderr(&offline));
        assert!(stdout(&live) == stdout(&offline), "{k}: --follow differs from the offline run");
        // snapshots of the growing trace
        let snaps: Vec<u64> = stderr(&live)
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("memlens: live {k}: ")))
            .map(|l| l.split(' ').next().unwrap().parse().unwrap())
            .collect();
        // order-free kernels show everything on disk; merged-order ones may wait for
        // main, blocked in pthread_join, to write its next chunk (docs/analysis.md)
        if matches!(*k, "counts" | "sharing") {
            assert!(!snaps.is_empty(), "{k}: no snapshot while recording: {}", stderr(&live));
        }
        // never past the end; all of it only in the moment between the last chunk
        // landing and the recorder marking the trace finished (a loaded machine)
        let total = info(&trace)["events"].as_u64().unwrap();
        assert!(snaps.iter().all(|&n| n <= total), "{k}: {snaps:?} of {total}");
        if matches!(*k, "counts" | "sharing") {
            assert!(snaps.iter().any(|&n| n < total), "{k}: none while recording: {snaps:?}");
        }
    }
    let v: Value =
        serde_json::from_str(&stdout(&run_memlens(&["analyze", "sharing", "--format", "json", t])))
            .unwrap();
    let top = &v["by_address"][0];
    assert_eq!(top["variable"], "stats.hits", "{top}");
    assert_eq!(top["threads"], 5);
    // an RMW is a load and a store; main reads the result once
    assert_eq!(top["accesses"], 4 * 3000 * 200 * 2 + 1);
    let v: Value = serde_json::from_str(&stdout(&run_memlens(&[
        "analyze", "counts", "--top", "0", "--format", "json", t,
    ])))
    .unwrap();
    let rows = v["by_line"].as_array().unwrap();
    assert_eq!(at_line(rows, "live.c", line_of("live.c", "private"), "stores"), 4 * 3000 * 200);
}

/// A trace that never appears is a clear error, not a hang.
#[test]
fn follow_gives_up_on_a_missing_trace_when_interrupted() {
    let dir = scratch("live-missing");
    let t = dir.join("none.trace");
    let f = Command::new(memlens())
        .args(["analyze", "counts", "--follow", t.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    // SAFETY: plain kill on our child's pid.
    unsafe { libc::kill(f.id() as i32, libc::SIGINT) };
    let out = f.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("interrupted"), "{}", stderr(&out));
}
