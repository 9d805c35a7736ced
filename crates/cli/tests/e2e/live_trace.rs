//! The live `trace` probe (crates/rt/src/livetrace.rs): a memlens-built program
//! running without a trace starts its recorder when the probe comes in and
//! finishes the file when it goes. tests/programs/livetrace.c makes exactly 8
//! loads and 8 stores per call of `work` (4 of them in `touch`, which only `work`
//! calls) and as many in `other`, outside `work`; the counts are compared with a
//! full `memlens record` of the same commands.

use crate::live_mem::{build, Driven};
use crate::live_probes::Live;
use crate::util::*;
use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `memlens report --by function` as (function, loads, stores), sorted.
fn by_function(trace: &Path) -> Vec<(String, u64, u64)> {
    let mut rows: Vec<(String, u64, u64)> = report(trace, "function")
        .iter()
        .map(|r| {
            let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k} in {r}"));
            (r["function"].as_str().unwrap().to_string(), n("loads"), n("stores"))
        })
        .collect();
    rows.sort();
    rows
}

/// The rows of `rows` for `names`.
fn only(rows: &[(String, u64, u64)], names: &[&str]) -> Vec<(String, u64, u64)> {
    rows.iter().filter(|r| names.contains(&r.0.as_str())).cloned().collect()
}

/// Runs `exe` under `memlens record` with `input` on stdin.
fn record_full(dir: &Path, exe: &Path, input: &str) -> std::path::PathBuf {
    let trace = dir.join("full.trace");
    let mut c = Command::new(memlens())
        .args(["record", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    assert!(o.status.success(), "record: {}", stderr(&o));
    trace
}

/// `memlens live --no-gui --probe SPEC -- exe` in `dir`, `input` on stdin.
fn live_launch(dir: &Path, exe: &Path, spec: &str, input: &str) -> Output {
    let mut c = Command::new(memlens())
        .args(["live", "--no-gui", "--probe", spec, "--"])
        .arg(exe)
        .current_dir(dir)
        .env("XDG_RUNTIME_DIR", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // a refused spec ends memlens before it reads: its stdin may be closed already
    let _ = c.stdin.take().unwrap().write_all(input.as_bytes());
    c.wait_with_output().unwrap()
}

fn complete(trace: &Path) -> Value {
    let i = info(trace);
    assert_eq!(i["complete"], true, "{i}");
    assert_eq!(i["finished"], true, "{i}");
    assert_eq!(i["dropped"], 0, "{i}");
    i
}

const INPUT: &str = "w 10\no 5\nr 3\nm 7\nq\n";

#[test]
fn trace_of_a_function_from_launch_holds_exactly_its_extent() {
    let dir = scratch("live-trace-launch");
    let exe = build(&dir, "livetrace.c");
    let full = by_function(&record_full(&dir, &exe, INPUT));
    // 10 + 4 (nested) + 2 × 7 calls of work, 8 loads and 8 stores each
    let calls = 10 + 4 + 2 * 7;
    let expect =
        vec![("touch".to_string(), 4 * calls, 4 * calls), ("work".into(), 4 * calls, 4 * calls)];
    assert_eq!(only(&full, &["work", "touch"]), expect, "full record: {full:?}");

    let o = live_launch(&dir, &exe, "trace:work:out.trace", INPUT);
    assert!(o.status.success(), "{}", stderr(&o));
    let trace = dir.join("out.trace");
    let i = complete(&trace);
    assert_eq!(i["end"]["kind"], "exit", "{i}");
    // work and what it calls, exactly as the full record has them; nothing else
    // (main, other, the threads' own loop) was recorded
    assert_eq!(by_function(&trace), expect);
    assert_eq!(i["loads"], 8 * calls, "{i}");
    assert_eq!(i["stores"], 8 * calls, "{i}");
    // three threads entered work: main and the two of `m`
    assert_eq!(i["threads"], 3, "{i}");
    let err = stderr(&o);
    assert!(err.contains("trace:work:out.trace (work @ 0x"), "{err}");
    assert!(err.contains(&format!("path=\"{}\"", trace.display())), "{err}");

    // the file is created new: an existing one is refused before the program runs
    let o = live_launch(&dir, &exe, "trace:work:out.trace", INPUT);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("out.trace") && err.contains("exists"), "{err}");
    assert!(!stdout(&o).contains("ready"), "the program never ran: {}", stdout(&o));
}

#[test]
fn trace_now_from_launch_equals_a_full_record() {
    let dir = scratch("live-trace-now");
    let exe = build(&dir, "livetrace.c");
    let full = by_function(&record_full(&dir, &exe, INPUT));
    let o = live_launch(&dir, &exe, "trace:now", INPUT);
    assert!(o.status.success(), "{}", stderr(&o));
    let pid: u32 = stdout(&o).lines().next().unwrap().trim_start_matches("ready ").parse().unwrap();
    // the default name: memlens-live-PID-ID.trace in the collector's directory
    let trace = dir.join(format!("memlens-live-{pid}-1.trace"));
    complete(&trace);
    assert_eq!(by_function(&trace), full);
}

#[test]
fn trace_inserted_while_running_holds_exactly_the_calls_until_removal() {
    let dir = scratch("live-trace-attach");
    let exe = build(&dir, "livetrace.c");
    let mut t = Driven::start(&dir, &exe);
    t.run("w 5");
    t.run("o 3");
    let live = Live::attach(&dir, t.pid(), &["--no-gui"]);
    let out = dir.join("mid.trace");
    let id = live.add(&format!("trace:work:{}", out.display()));
    let p = live.get(id);
    assert_eq!(p["module"], "trace", "{p}");
    assert_eq!(p["path"], out.display().to_string(), "{p}");
    // one trace probe at a time
    let o = live.probe(&["add", &format!("trace:now:{}", dir.join("second.trace").display())]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("a trace probe is active already"), "{}", stderr(&o));
    assert!(!dir.join("second.trace").exists());

    t.run("w 6");
    t.run("o 4");
    t.run("r 2");
    t.run("m 3");
    live.rm(id);
    // complete on disk once `rm` answered
    let i = complete(&out);
    assert_eq!(i["end"]["kind"], "unknown", "the program runs on: {i}");
    t.run("w 9");
    t.run("o 2");
    let calls = 6 + 3 + 2 * 3;
    let expect =
        vec![("touch".to_string(), 4 * calls, 4 * calls), ("work".into(), 4 * calls, 4 * calls)];
    assert_eq!(by_function(&out), expect);
    // a removed probe's file is not written to again
    let size = std::fs::metadata(&out).unwrap().len();
    t.run("w 3");
    assert_eq!(std::fs::metadata(&out).unwrap().len(), size);
    // another trace after it: a new session, the threads of the old one (main's
    // stream) start afresh; nothing of the first trace's calls in it
    let again = dir.join("again.trace");
    let id2 = live.add(&format!("trace:work:{}", again.display()));
    t.run("o 1");
    t.run("w 4");
    t.run("m 2");
    live.rm(id2);
    complete(&again);
    let calls = 4 + 2 * 2;
    let expect =
        vec![("touch".to_string(), 4 * calls, 4 * calls), ("work".into(), 4 * calls, 4 * calls)];
    assert_eq!(by_function(&again), expect);
    // the first file is as it was
    assert_eq!(std::fs::metadata(&out).unwrap().len(), size);
    // the pad's NOPs are back: a count probe there sees only its own calls
    let c = live.add("count:work");
    t.run("w 4");
    assert_eq!(live.get(c)["count"], 4);
    t.quit();
}

#[test]
fn trace_on_a_program_not_built_by_memlens_is_refused() {
    let dir = scratch("live-trace-plain");
    let exe = dir.join("plain");
    let out = Command::new("gcc")
        .args(["-O1", "-g", "-pthread"])
        .arg(programs().join("livetrace.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "gcc: {}", String::from_utf8_lossy(&out.stderr));
    let o = live_launch(&dir, &exe, "trace:work:x.trace", "q\n");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("module trace needs a memlens-built target"), "{err}");
    assert!(!stdout(&o).contains("ready"), "the program never ran: {}", stdout(&o));
    assert!(!dir.join("x.trace").exists());
}

#[test]
fn a_killed_collector_leaves_a_complete_trace_and_the_program_running() {
    let dir = scratch("live-trace-kill");
    let exe = build(&dir, "livetrace.c");
    let mut t = Driven::start(&dir, &exe);
    let live = Live::attach(&dir, t.pid(), &["--no-gui"]);
    let out = dir.join("killed.trace");
    live.add(&format!("trace:work:{}", out.display()));
    t.run("w 7");
    t.run("o 2");
    // SIGKILL: the runtime sees the connection close and removes the probe itself
    drop(live);
    let t0 = std::time::Instant::now();
    loop {
        let o = run_memlens(&["info", "--format", "json", out.to_str().unwrap()]);
        if o.status.success()
            && serde_json::from_str::<Value>(&stdout(&o)).unwrap()["finished"] == true
        {
            break;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "never finished: {}",
            stderr(&o)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    complete(&out);
    assert_eq!(by_function(&out), vec![("touch".to_string(), 28, 28), ("work".into(), 28, 28)]);
    t.run("w 3");
    t.quit();
}
