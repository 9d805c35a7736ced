//! Bad input gets a one-line error and a non-zero exit, never a panic.

use crate::util::*;
use std::process::Command;

fn one_line_error(out: &std::process::Output, needle: &str) {
    let err = stderr(out);
    assert!(!out.status.success(), "expected failure, got success; stderr: {err}");
    assert!(out.status.code().is_some(), "killed by a signal: {:?}", out.status);
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "panic: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    assert!(err.starts_with("memlens: error:"), "{err}");
    assert!(err.contains(needle), "expected `{needle}` in: {err}");
}

#[test]
fn record_rejects_bad_programs() {
    let dir = scratch("errors");
    let t = dir.join("x.trace");
    let t = t.to_str().unwrap();
    one_line_error(&run_memlens(&["record", "-o", t, "--", "/nonexistent/prog"]), "does not exist");
    one_line_error(&run_memlens(&["record", "-o", t, "--", "no-such-prog-xyz"]), "not found");
    let text = dir.join("script.txt");
    std::fs::write(&text, "hello").unwrap();
    one_line_error(
        &run_memlens(&["record", "-o", t, "--", text.to_str().unwrap()]),
        "not executable",
    );
    std::process::Command::new("chmod").arg("+x").arg(&text).status().unwrap();
    one_line_error(&run_memlens(&["record", "-o", t, "--", text.to_str().unwrap()]), "not an ELF");
    one_line_error(&run_memlens(&["record", "-o", t, "--", "/bin/true"]), "not built with memlens");
    one_line_error(&run_memlens(&["record", "-o", t, "--", dir.to_str().unwrap()]), "directory");
}

#[test]
fn record_rejects_an_unwritable_output() {
    let dir = scratch("unwritable");
    let exe = build(Cc::Gcc, "counts.c", &dir, &[]);
    let out = record(&exe, std::path::Path::new("/nonexistent-dir/x.trace"), &[]);
    one_line_error(&out, "cannot write the trace");
}

#[test]
fn readers_reject_bad_traces() {
    let dir = scratch("badtrace");
    let junk = dir.join("junk.trace");
    std::fs::write(&junk, b"this is not a trace at all, just some text").unwrap();
    for cmd in ["info", "report", "dump"] {
        one_line_error(&run_memlens(&[cmd, junk.to_str().unwrap()]), "not a memlens trace");
        one_line_error(&run_memlens(&[cmd, "/nonexistent.trace"]), "does not exist");
    }
    let empty = dir.join("empty.trace");
    std::fs::write(&empty, b"").unwrap();
    one_line_error(&run_memlens(&["info", empty.to_str().unwrap()]), "not a memlens trace");
    one_line_error(
        &run_memlens(&["report", "--by", "nonsense", junk.to_str().unwrap()]),
        "invalid value",
    );
    let out = run_memlens(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!stderr(&out).contains("panicked"));
}

#[test]
fn truncated_and_corrupted_traces_read_up_to_the_damage() {
    let dir = scratch("trunc");
    let exe = build(Cc::Gcc, "counts.c", &dir, &[]);
    let trace = dir.join("t.trace");
    assert!(record(&exe, &trace, &[]).status.success());
    let full = std::fs::read(&trace).unwrap();
    let whole = info(&trace);
    // Cut in the middle of the last chunk.
    let cut = dir.join("cut.trace");
    std::fs::write(&cut, &full[..full.len() - 10]).unwrap();
    let i = info(&cut);
    assert!(i["truncated"]["reason"].as_str().unwrap().contains("file ends inside a chunk"), "{i}");
    assert!(i["events"].as_u64().unwrap() <= whole["events"].as_u64().unwrap());
    assert!(run_memlens(&["report", cut.to_str().unwrap()]).status.success());
    // Flip bytes everywhere after the header: no panic, whatever happens.
    for at in (4096..full.len()).step_by(full.len() / 37 + 1) {
        let mut bad = full.clone();
        bad[at] ^= 0x5a;
        let p = dir.join("bad.trace");
        std::fs::write(&p, &bad).unwrap();
        for cmd in ["info", "report", "dump"] {
            let out = Command::new(memlens()).args([cmd, p.to_str().unwrap()]).output().unwrap();
            let err = stderr(&out);
            assert!(!err.contains("panicked"), "{cmd} at byte {at}: {err}");
            assert!(out.status.code().is_some(), "{cmd} at byte {at} died: {:?}", out.status);
        }
    }
}

#[test]
fn disk_full_keeps_the_program_running_and_counts_drops() {
    let dir = scratch("diskfull");
    let exe = build(Cc::Gcc, "counts.c", &dir, &[]);
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    // A 64 KiB tmpfs fills up long before the trace is written.
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root and must be able to mount tmpfs"
        );
        eprintln!("note: cannot mount tmpfs here; skipping disk-full test");
        return;
    }
    // Fill it up first so even the first chunks fail.
    let _ = std::fs::write(mnt.join("filler"), vec![0u8; 60 * 1024]);
    let trace = mnt.join("t.trace");
    let out = record(&exe, &trace, &["a", "b"]);
    let i =
        Command::new(memlens()).args(["info", "--format", "json"]).arg(&trace).output().unwrap();
    let _ = Command::new("umount").arg(&mnt).status();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(stdout(&out), "sum=999000 argc=3\n");
    assert!(i.status.success(), "{}", stderr(&i));
    let v: serde_json::Value = serde_json::from_slice(&i.stdout).unwrap();
    assert!(v["dropped"].as_u64().unwrap() > 0, "{v}");
}
