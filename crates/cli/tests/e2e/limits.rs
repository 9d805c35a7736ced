//! Unbounded options and inputs are refused with one line, and small command-line
//! surprises (`cc -x c`, doubled error texts, globs selecting nothing, empty
//! traces) behave (issue 21, items 12 and 14).

use crate::util::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn one_line_error(out: &Output, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "expected exit 2; stderr: {err}");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "panic: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    assert!(err.starts_with("memlens: error:"), "{err}");
    assert!(err.contains(needle), "expected `{needle}` in: {err}");
}

fn traced(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = scratch(name);
    let exe = build(Cc::Gcc, "counts.c", &dir, &[]);
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &[]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    (dir, trace)
}

#[test]
fn numeric_options_and_config_files_are_bounded() {
    let (dir, trace) = traced("limits");
    let t = trace.to_str().unwrap();
    let sim = |extra: &[&str]| {
        let mut a = vec!["analyze", "cachesim"];
        a.extend_from_slice(extra);
        a.push(t);
        run_memlens(&a)
    };
    // 2^34 lines of state: refused before any allocation.
    one_line_error(&sim(&["--D1=1099511627776,8,64"]), "at most 134217728");
    one_line_error(&sim(&["--cores", "4294967296"]), "not in 1..=1024");
    one_line_error(&sim(&["--cores", "100000"]), "not in 1..=1024");
    one_line_error(&sim(&["--cores", "0"]), "not in 1..=1024");
    // an associativity past 32 bits is not truncated to 1
    one_line_error(&sim(&["--D1=32768,4294967297,64"]), "too large");
    one_line_error(&sim(&["--cache-config", "/dev/zero"]), "larger than 1024 KiB");
    let cfg = dir.join("cores.cfg");
    for cores in ["0", "100000"] {
        std::fs::write(&cfg, format!("cores = {cores}\n[D1]\nsize = 32K\nassoc = 8\nline = 64\n"))
            .unwrap();
        one_line_error(&sim(&["--cache-config", cfg.to_str().unwrap()]), "1 to 1024 cores");
    }
    // a snapshot period past what a Duration holds
    one_line_error(
        &run_memlens(&["analyze", "counts", "--follow", "--every", "18446744073709551615s", t]),
        "longest period is a day",
    );
    // the largest accepted values still run
    let ok = sim(&["--cores", "1024"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    one_line_error(
        &run_memlens(&[
            "export",
            "--format",
            "cachegrind",
            "--D1=1099511627776,8,64",
            "-o",
            "-",
            t,
        ]),
        "at most 134217728",
    );
    one_line_error(
        &run_memlens(&["export", "--format", "cachegrind", "--cache-config", "/dev/zero", t]),
        "larger than 1024 KiB",
    );
}

#[test]
fn merge_refuses_endless_lines() {
    let out = Command::new(memlens())
        .arg("merge")
        .stdin(std::fs::File::open("/dev/zero").unwrap())
        .stdout(Stdio::null())
        .output()
        .unwrap();
    one_line_error(&out, "not atomic-memory-trace text");
}

#[test]
fn errors_do_not_repeat_their_cause() {
    let dir = scratch("doubled");
    for cmd in ["info", "report", "dump"] {
        let out = run_memlens(&[cmd, dir.to_str().unwrap()]);
        one_line_error(&out, "Is a directory");
        assert_eq!(stderr(&out).matches("Is a directory").count(), 1, "{}", stderr(&out));
        assert_eq!(stderr(&out).matches("cannot read").count(), 1, "{}", stderr(&out));
    }
}

#[test]
fn a_filter_selecting_nothing_is_refused() {
    let dir = scratch("badglob");
    let exe = build(Cc::Gcc, "counts.c", &dir, &[]);
    let trace = dir.join("t.trace");
    for (glob, err) in [("[", "bad glob '['"), ("no_such_function_*", "select no function")] {
        let out = Command::new(memlens())
            .args(["record", "-q", "--functions", glob, "-o"])
            .arg(&trace)
            .arg("--")
            .arg(&exe)
            .output()
            .unwrap();
        one_line_error(&out, err);
        assert_eq!(out.status.code(), Some(2));
        assert!(stderr(&out).contains(glob), "{}", stderr(&out));
        assert!(stdout(&out).is_empty(), "the program must not run: {}", stdout(&out));
    }
    // a glob that selects something still records
    let out = Command::new(memlens())
        .args(["record", "-q", "--functions", "main", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
}

#[test]
fn an_empty_trace_claims_no_naming() {
    let dir = scratch("noacc");
    let exe = build(Cc::Gcc, "counts.c", &dir, &[]);
    let trace = dir.join("t.trace");
    // --roi without memlens_roi_begin(): nothing is recorded
    let out = Command::new(memlens())
        .args(["record", "-q", "--roi", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert_eq!(info(&trace)["loads"], 0);
    let text = stdout(&run_memlens(&["info", trace.to_str().unwrap()]));
    let named: Vec<&str> = text.lines().filter(|l| l.starts_with("named")).collect();
    assert_eq!(named, ["named       no accesses"], "{text}");
}

fn clang() -> bool {
    Command::new("clang-22").arg("--version").output().is_ok()
}

/// `-x c` applies to every later input: the objects and the runtime archive memlens
/// appends must not be compiled as C.
#[test]
fn cc_resets_the_language_after_dash_x() {
    if !clang() {
        assert!(std::env::var_os("CI").is_none(), "clang-22 is required in CI");
        return;
    }
    require_runtime();
    let dir = scratch("dashx");
    let src =
        "int g[8];\nint main(void) { for (int i = 0; i < 8; i++) g[i] = i; return g[3] - 3; }\n";
    let txt = dir.join("prog.txt");
    std::fs::write(&txt, src).unwrap();
    let check = |exe: &Path| {
        let trace = dir.join("x.trace");
        let out = record(exe, &trace, &[]);
        assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
        assert!(info(&trace)["stores"].as_u64().unwrap() >= 8);
    };
    let exe = dir.join("from_txt");
    let out = Command::new(memlens())
        .args(["cc", "-O1", "-x", "c"])
        .arg(&txt)
        .arg("-o")
        .arg(&exe)
        .env("MEMLENS_CC", "clang-22")
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    check(&exe);
    let exe = dir.join("from_stdin");
    let mut child = Command::new(memlens())
        .args(["cc", "-O1", "-x", "c", "-", "-o"])
        .arg(&exe)
        .env("MEMLENS_CC", "clang-22")
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(src.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    check(&exe);
}

/// `analyze --follow` of a trace whose writer died without finishing it, its pid
/// now another process's: it must notice from the start time and finish.
#[test]
fn follow_is_not_fooled_by_a_reused_pid() {
    use memlens_format::{FileHeader, HEADER_SIZE};
    let (_dir, trace) = traced("pidreuse");
    let mut other = Command::new("sleep").arg("60").spawn().unwrap();
    let mut bytes = std::fs::read(&trace).unwrap();
    let mut h = FileHeader::decode(&bytes[..HEADER_SIZE]).unwrap();
    h.finished = false;
    h.pid = other.id();
    // the recording started 10 s before `sleep` did
    h.start_ns -= 10_000_000_000;
    bytes[..HEADER_SIZE].copy_from_slice(&h.encode());
    std::fs::write(&trace, &bytes).unwrap();
    let mut follow = Command::new(memlens())
        .args(["analyze", "counts", "--follow"])
        .arg(&trace)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = follow.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > std::time::Duration::from_secs(20) {
            let _ = follow.kill();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let _ = other.kill();
    let _ = other.wait();
    let out = follow.wait_with_output().unwrap();
    assert!(status.is_some(), "still waiting for pid {} after 20 s", h.pid);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert!(stderr(&out).contains("gone"), "{}", stderr(&out));
    assert!(!stdout(&out).is_empty());
}
