//! A traced program behaves as the untraced one (issue 21): signals reach and stop
//! it, its descriptors are its own, a stack overflow still leaves a trace, and
//! `--values` records the value each store wrote.

use crate::util::*;
use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Starts `memlens record` on `sigwait.c` with `pre` run in memlens before exec;
/// returns it and the SigIgn mask the program printed, once it said "ready".
fn start_sigwait(
    exe: &Path,
    trace: &Path,
    ignore: &[i32],
) -> (Child, u64, BufReader<std::process::ChildStdout>) {
    let mut cmd = Command::new(memlens());
    cmd.args(["record", "-q", "-o"]).arg(trace).arg("--").arg(exe).stdout(Stdio::piped());
    let ignore = ignore.to_vec();
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // the dispositions the test gives, whatever it was started with (a
            // background job of a script ignores SIGINT and SIGQUIT, nohup SIGHUP)
            for s in [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP, libc::SIGTERM] {
                libc::signal(s, libc::SIG_DFL);
            }
            for &s in &ignore {
                libc::signal(s, libc::SIG_IGN);
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let mask =
        u64::from_str_radix(line.trim().strip_prefix("SigIgn:").unwrap().trim(), 16).unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    (child, mask, out)
}

fn wait_for(child: &mut Child, secs: u64) -> std::process::ExitStatus {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < end, "the recorded program did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn bit(sig: i32) -> u64 {
    1 << (sig - 1)
}

#[test]
fn record_forwards_signals_and_dies_of_the_childs_signal() {
    let cc = Cc::all()[0];
    let dir = scratch("fidelity-sig");
    let exe = build(cc, "sigwait.c", &dir, &[]);
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
        let trace = dir.join(format!("t{sig}.trace"));
        let (mut child, mask, mut out) = start_sigwait(&exe, &trace, &[]);
        assert_eq!(mask & (bit(libc::SIGINT) | bit(libc::SIGTERM)), 0, "child ignores {mask:x}");
        // SAFETY: signalling our own child (memlens).
        unsafe { libc::kill(child.id() as i32, sig) };
        let status = wait_for(&mut child, 8);
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        assert_eq!(rest, "", "signal {sig}: the program survived");
        assert_eq!(status.signal(), Some(sig), "signal {sig}: {status:?}");
        let i = info(&trace);
        assert_eq!(i["end"]["signal"], sig, "{i}");
        let rows = report(&trace, "line");
        assert_eq!(at_line(&rows, "sigwait.c", line_of("sigwait.c", "store-g"), "stores"), 1000);
        // and as the stream's last event, even when the thread's buffer went to the
        // writers before the signal (it was missing then, once in CI)
        let signals = dump(&trace).iter().filter(|e| e["event"] == "signal").count();
        assert_eq!(signals, 1, "signal {sig}: {signals} signal events");
    }
}

#[test]
fn record_keeps_the_dispositions_it_was_given() {
    let cc = Cc::all()[0];
    let dir = scratch("fidelity-ign");
    let exe = build(cc, "sigwait.c", &dir, &[]);
    let trace = dir.join("t.trace");
    // as under `nohup` or a non-interactive shell's `&`
    let (mut child, mask, _out) = start_sigwait(&exe, &trace, &[libc::SIGINT, libc::SIGHUP]);
    assert_eq!(
        mask & (bit(libc::SIGINT) | bit(libc::SIGHUP)),
        bit(libc::SIGINT) | bit(libc::SIGHUP)
    );
    assert_eq!(mask & bit(libc::SIGTERM), 0, "{mask:x}");
    // SAFETY: signalling our own child (memlens).
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "an ignored SIGINT stopped it");
    // SAFETY: as above.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(wait_for(&mut child, 8).signal(), Some(libc::SIGTERM));
}

#[test]
fn the_programs_descriptors_are_its_own() {
    for cc in Cc::all() {
        let dir = scratch("fidelity-fds");
        let exe = build(cc, "fdclobber.c", &dir, &[]);
        for how in ["closefrom", "close_range", "close"] {
            let file = dir.join(format!("{how}.txt"));
            let native = Command::new(&exe).arg(&file).arg(how).output().unwrap();
            assert!(native.status.success(), "{}", stderr(&native));
            assert_eq!(std::fs::read(&file).unwrap(), b"ok");
            let trace = dir.join(format!("{how}.trace"));
            let out = record(&exe, &trace, &[file.to_str().unwrap(), how]);
            assert!(out.status.success(), "{cc:?} {how}: {}", stderr(&out));
            assert_eq!(stdout(&out), stdout(&native), "{cc:?} {how}");
            assert!(stdout(&out).contains(&format!("after {how}: open 0\nreopened as 3\n")));
            assert_eq!(
                std::fs::read(&file).unwrap(),
                b"ok",
                "{cc:?} {how}: the file got trace bytes"
            );
            let i = info(&trace);
            assert_eq!(i["dropped"], 0, "{cc:?} {how}: {i}");
            let rows = report(&trace, "line");
            for m in ["store-before", "store-after"] {
                let n = at_line(&rows, "fdclobber.c", line_of("fdclobber.c", m), "stores");
                assert_eq!(n, 1000, "{cc:?} {how} {m}");
            }
        }
    }
}

#[test]
fn a_stack_overflow_leaves_a_readable_trace() {
    for cc in Cc::all() {
        let dir = scratch("fidelity-overflow");
        let exe = build(cc, "overflow.c", &dir, &[]);
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &[]);
        assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{cc:?}: {:?}", out.status);
        assert_eq!(stdout(&out), "recursing\n");
        let i = info(&trace);
        assert_eq!(i["end"]["signal"], libc::SIGSEGV, "{cc:?}: {i}");
        assert!(i["truncated"].is_null(), "{cc:?}: {i}");
        let rows = report(&trace, "line");
        let n = at_line(&rows, "overflow.c", line_of("overflow.c", "store-g"), "stores");
        assert_eq!(n, 5000, "{cc:?}");
    }
}

/// The values stored at `addr` in `dump --merged` order.
pub fn merged_store_values(trace: &Path, addr: u64) -> Vec<u64> {
    let out = run_memlens(&["dump", "--merged", trace.to_str().unwrap()]);
    assert!(out.status.success(), "dump --merged: {}", stderr(&out));
    let want = format!("{addr:#x}");
    stdout(&out)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let ev: Vec<&str> = f.get(3)?.split(' ').collect();
            (ev.first() == Some(&"W") && ev.get(1) == Some(&want.as_str())).then(|| {
                let v = ev.iter().find_map(|w| w.strip_prefix("value="))?;
                u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()
            })?
        })
        .collect()
}

#[test]
fn values_of_stores_before_an_unlock_are_the_stored_ones() {
    for cc in Cc::all() {
        let dir = scratch("fidelity-values");
        let exe = build(cc, "mutexvals.c", &dir, &[]);
        for order in ["sync", "atomic"] {
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
                "8",
                "2000",
            ]);
            assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
            let text = stdout(&out);
            let addr: u64 =
                text.lines().next().unwrap().strip_prefix("counter ").unwrap().parse().unwrap();
            assert!(text.ends_with("final 16000\n"), "{text}");
            let values = merged_store_values(&trace, addr);
            assert_eq!(values.len(), 16000, "{cc:?} {order}");
            let wrong = values.iter().enumerate().filter(|&(i, &v)| v != i as u64 + 1).count();
            assert_eq!(wrong, 0, "{cc:?} {order}: {wrong} stores recorded with another value");
        }
    }
}

#[test]
fn a_store_retried_after_its_fault_handler_is_recorded_with_its_value() {
    for cc in Cc::all() {
        let dir = scratch("fidelity-wprotect");
        let exe = build(cc, "wprotect.c", &dir, &[]);
        let native = Command::new(&exe).output().unwrap();
        let trace = dir.join("t.trace");
        let out = run_memlens(&[
            "record",
            "-q",
            "--values",
            "-o",
            trace.to_str().unwrap(),
            "--",
            exe.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        let text = stdout(&out);
        let tail = |s: &str| s.split_once(" value").unwrap().1.to_string();
        assert_eq!(tail(&text), tail(&stdout(&native)), "{cc:?}");
        assert!(text.ends_with("value 42 faults 1 own-handler 1\n"), "{cc:?}: {text}");
        let page: u64 = text.split(' ').nth(1).unwrap().parse().unwrap();
        assert_eq!(merged_store_values(&trace, page), [7, 42], "{cc:?}");
        let rows = report(&trace, "line");
        let n = at_line(&rows, "wprotect.c", line_of("wprotect.c", "store-faults"), "stores");
        assert_eq!(n, 1, "{cc:?}: the handler's own store");
    }
}

#[test]
fn an_atomic_in_a_signal_handler_does_not_hang_the_program() {
    let cc = Cc::all()[0];
    let dir = scratch("fidelity-sigatomic");
    let exe = build(cc, "sigatomic.c", &dir, &[]);
    // not `--order atomic`: there the sender, holding the line's stripe across
    // each pthread_kill, starves the handler's atomic (a separate problem)
    for flags in [&[][..], &["--values"]] {
        let trace = dir.join("t.trace");
        let mut child = Command::new(memlens())
            .args(["record", "-q", "-o"])
            .arg(&trace)
            .args(flags)
            .arg("--")
            .arg(&exe)
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let end = Instant::now() + Duration::from_secs(120);
        while child.try_wait().unwrap().is_none() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
        }
        // a hung program goes with memlens (its own process group)
        // SAFETY: signalling the process group we created.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{flags:?}: hung or failed: {:?}", out.status);
        assert_eq!(stdout(&out), "ok\n", "{flags:?}");
    }
}

#[test]
fn a_sigpipe_leaves_a_finished_trace() {
    for cc in Cc::all() {
        let dir = scratch("fidelity-sigpipe");
        let exe = build(cc, "sigpipe.c", &dir, &[]);
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &[]);
        assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{cc:?}: {:?}", out.status);
        assert_eq!(stdout(&out), "writing\n");
        let i = info(&trace);
        assert_eq!(i["end"]["signal"], libc::SIGPIPE, "{cc:?}: {i}");
        assert_eq!(i["finished"], true, "{cc:?}: {i}");
        let rows = report(&trace, "line");
        let n = at_line(&rows, "sigpipe.c", line_of("sigpipe.c", "store-g"), "stores");
        assert_eq!(n, 3000, "{cc:?}");
    }
}
