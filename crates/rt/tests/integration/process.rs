//! The process around the trace: crashes, fork, exec, unwritable output.

use crate::util::*;
use memlens_format::{EndStatus, Event};
use std::os::unix::process::ExitStatusExt;

#[test]
fn segfault_leaves_a_readable_trace_and_the_same_signal() {
    for cc in BOTH {
        let dir = scratch("crash");
        let exe = build("crash.c", cc, &dir);
        let trace = dir.join("t.trace");
        let native = run(&exe, &[], None, &[]);
        assert_eq!(native.status.signal(), Some(libc::SIGSEGV));
        let out = run(&exe, &[], Some(&trace), &[]);
        assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{cc:?}");
        let g = hex_field(&stdout(&out), "g_addr");
        let t = read(&trace);
        assert!(t.reader.truncation().is_none());
        assert_eq!(t.accesses_at(0, g).1, 5000, "{cc:?}: every store before the crash");
        assert!(t.streams[0].contains(&Event::Signal(libc::SIGSEGV)));
        assert_eq!(t.reader.meta().end, Some(EndStatus::Signaled(libc::SIGSEGV)));
        let h = t.reader.header();
        assert!(h.finished && h.end_kind == 2 && h.end_value == libc::SIGSEGV);
    }
}

#[test]
fn forked_child_writes_its_own_trace() {
    let dir = scratch("fork");
    let exe = build("forker.c", Compiler::Gcc, &dir);
    let trace = dir.join("t.trace");
    let out = run(&exe, &[], Some(&trace), &[]);
    let s = stdout(&out);
    assert!(s.ends_with("status=0\n"), "{s}");
    let pid: u32 =
        s.split_whitespace().find_map(|w| w.strip_prefix("child=")).unwrap().parse().unwrap();
    let parent = read(&trace);
    parent.check_invariants();
    assert!(parent.streams[0].contains(&Event::Fork { child_pid: pid }));
    let child_path = format!("{}.{pid}", trace.display());
    assert_eq!(parent.reader.meta().children, vec![(pid, child_path.clone())]);
    let child = read(std::path::Path::new(&child_path));
    child.check_invariants();
    assert_eq!(child.reader.meta().pid, pid);
    assert_eq!(child.reader.meta().end, Some(EndStatus::Exited(0)));
    let g = hex_field(&s, "g_addr");
    assert_eq!(child.accesses_at(0, g).1, 500);
    assert_eq!(parent.accesses_at(0, g).1, 300);
}

#[test]
fn exec_finishes_the_trace_and_a_failed_exec_continues_it() {
    let dir = scratch("exec");
    let exe = build("execer.c", Compiler::Clang, &dir);
    // Successful exec of an uninstrumented program.
    let trace = dir.join("ok.trace");
    let out = run(&exe, &["/bin/echo", "replaced"], Some(&trace), &[]);
    assert_eq!(stdout(&out), "replaced\n");
    let t = read(&trace);
    t.check_invariants();
    assert_eq!(t.reader.meta().end, Some(EndStatus::Exec));
    assert!(t.streams[0].contains(&Event::Exec));
    // An exec'd instrumented program writes <output>.<pid>, not over the parent.
    let trace = dir.join("self.trace");
    let out = run(&exe, &[exe.to_str().unwrap()], Some(&trace), &[]);
    assert!(out.status.success());
    let t = read(&trace);
    assert_eq!(t.reader.meta().end, Some(EndStatus::Exec));
    let pid = t.reader.meta().pid;
    let second = read(&dir.join(format!("self.trace.{pid}")));
    assert_eq!(second.reader.meta().end, Some(EndStatus::Exited(0)));
    // Failed exec: recording goes on and the later end record wins.
    let trace = dir.join("fail.trace");
    let out = run(&exe, &["/nonexistent"], Some(&trace), &[]);
    assert_eq!(out.status.code(), Some(7));
    let t = read(&trace);
    assert_eq!(t.reader.meta().end, Some(EndStatus::Exited(7)));
    let stores = t.streams[0]
        .iter()
        .filter(|e| {
            matches!(e, Event::Access { kind: memlens_format::AccessKind::Write, size: 4, .. })
        })
        .count();
    assert_eq!(stores, 150);
}

#[test]
fn full_disk_keeps_the_program_running_and_counts_drops() {
    let dir = scratch("full");
    let exe = build("atomics.c", Compiler::Clang, &dir);
    // A file-size limit makes writes past 64 KiB fail (EFBIG; SIGXFSZ ignored).
    let trace = dir.join("t.trace");
    let mut cmd = std::process::Command::new(&exe);
    cmd.env("MEMLENS_OUTPUT", &trace)
        .env("MEMLENS_ZSTD_LEVEL", "0")
        .env_remove("MEMLENS_OWNER_PID");
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit { rlim_cur: 64 << 10, rlim_max: 64 << 10 };
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).starts_with("counter=400000 "));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot write the trace"));
    let t = memlens_format::TraceReader::open(&trace).unwrap();
    let h = t.header();
    assert!(h.finished, "the header is rewritten in place");
    assert_eq!(h.end_kind, 1);
    assert!(h.dropped_events > 0 && h.dropped_bytes > 0, "{h:?}");
    assert!(std::fs::metadata(&trace).unwrap().len() <= 64 << 10);

    // /dev/full: nothing can be written at all, the program still runs normally.
    let out = run(&exe, &[], Some(std::path::Path::new("/dev/full")), &[]);
    assert!(out.status.success());
    assert!(stdout(&out).starts_with("counter=400000 "));
}

#[test]
fn unwritable_output_warns_and_runs() {
    let dir = scratch("unwritable");
    let exe = build("crash.c", Compiler::Gcc, &dir);
    let out = run(&exe, &[], Some(std::path::Path::new("/nonexistent/dir/t.trace")), &[]);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot create the trace"));
}
