//! Files memlens creates are its own: private temporary directories removed even
//! when the program crashes, outputs that replace planted links instead of writing
//! through them, and one recording per trace path at a time (issue 21, items 5-7).

use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Builds the C program `src` (text) into `dir/name`.
fn build_c(dir: &Path, name: &str, src: &str) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let exe = dir.join(name);
    memlens_cc(Cc::Gcc, false, &["-O1", c.to_str().unwrap(), "-o", exe.to_str().unwrap()]);
    exe
}

/// Prints the mode of the directory holding the `--functions` filter file and the
/// recorder's pid, then crashes.
const TMPDIR_PROG: &str = r#"
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
int g;
int main(void) {
    const char *f = getenv("MEMLENS_FILTER");
    char buf[4096];
    if (!f) return 3;
    strncpy(buf, f, sizeof buf - 1);
    struct stat st;
    if (stat(dirname(buf), &st) != 0) return 4;
    printf("%o %d %s\n", st.st_mode & 0777, (int)getppid(), buf);
    fflush(stdout);
    g = 1;
    abort();
}
"#;

#[test]
fn temporary_directories_are_private_and_removed_after_a_crash() {
    let dir = scratch("tmpdirs");
    let exe = build_c(&dir, "tmpdir", TMPDIR_PROG);
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let trace = dir.join("t.trace");
    let out = Command::new(memlens())
        .args(["record", "-q", "--functions", "main", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    // the recorder dies of the program's signal, as the shell would see it
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc_sigabrt()), "{}", stderr(&out));
    let line = stdout(&out);
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(f.len(), 3, "{line}");
    assert_eq!(f[0], "700", "the temporary directory must be private: {line}");
    let name = Path::new(f[2]).file_name().unwrap().to_str().unwrap().to_string();
    assert!(Path::new(f[2]).starts_with(&tmp), "{line}");
    // not the predictable memlens-<pid>-<n>
    assert!(!name.starts_with(&format!("memlens-{}-", f[1])), "predictable name: {name}");
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(left.is_empty(), "left behind after the crash: {left:?}");
    assert!(info(&trace)["stores"].as_u64().unwrap() >= 1);
}

#[test]
fn outputs_replace_planted_links_and_never_write_through_them() {
    let dir = scratch("planted");
    let exe = build(Cc::Gcc, "counts.c", &dir, &[]);
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let plant = |p: &Path| {
        let _ = std::fs::remove_file(p);
        std::os::unix::fs::symlink(&victim, p).unwrap();
    };
    let regular = |p: &Path| {
        let m = std::fs::symlink_metadata(p).unwrap();
        assert!(m.file_type().is_file(), "{} is not a regular file", p.display());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    };
    let trace = dir.join("t.trace");
    plant(&trace);
    let out = record(&exe, &trace, &[]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    regular(&trace);
    assert!(info(&trace)["stores"].as_u64().unwrap() > 0);
    let t = trace.to_str().unwrap();
    // exports and the cache annotation
    let exported = dir.join("out.json");
    plant(&exported);
    let out =
        run_memlens(&["export", "--format", "speedscope", "-o", exported.to_str().unwrap(), t]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    regular(&exported);
    let ann = dir.join("ann.bin");
    plant(&ann);
    let out = run_memlens(&["analyze", "cachesim", "--annotate", ann.to_str().unwrap(), t]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    regular(&ann);
    // a device is never replaced (as root a rename would succeed): refused for a
    // trace, written directly by an export
    let out = record(&exe, Path::new("/dev/null"), &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("is not a regular file"), "{}", stderr(&out));
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
    let out = run_memlens(&["export", "--format", "speedscope", "-o", "/dev/stdout", t]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert!(stdout(&out).starts_with("{\"$schema\""), "{}", stdout(&out));
    // nothing temporary is left next to the outputs
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-") || n.ends_with(".lock"))
        .collect();
    names.sort();
    assert!(names.is_empty(), "left behind: {names:?}");
}

/// Runs for about two seconds.
const SLOW_PROG: &str = r#"
#include <stdio.h>
#include <time.h>
volatile long g;
int main(void) {
    for (int i = 0; i < 20; i++) {
        g += i;
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, 0);
    }
    printf("done %ld\n", g);
    return 0;
}
"#;

#[test]
fn a_second_recording_of_the_same_trace_is_refused() {
    let dir = scratch("twice");
    let exe = build_c(&dir, "slow", SLOW_PROG);
    let trace = dir.join("same.trace");
    let first = Command::new(memlens())
        .args(["record", "-q", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // wait until the first recording is under way (its runtime wrote the header)
    let start = Instant::now();
    while std::fs::metadata(&trace).map(|m| m.len()).unwrap_or(0) < 128 {
        assert!(start.elapsed() < Duration::from_secs(20), "the first recording never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = record(&exe, &trace, &[]);
    let err = stderr(&second);
    assert_eq!(second.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("memlens: error:") && err.contains("being written by another"),
        "{err}"
    );
    assert!(stdout(&second).is_empty(), "the second program must not run");
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success(), "{}", stderr(&first));
    assert_eq!(stdout(&first), "done 190\n");
    let i = info(&trace);
    assert_eq!(i["end"]["status"], 0, "{i}");
    assert!(i["stores"].as_u64().unwrap() >= 20, "{i}");
    assert!(!dir.join("same.trace.lock").exists());
    // and a third, after the first, records again
    let third = record(&exe, &trace, &[]);
    assert!(third.status.success(), "{}", stderr(&third));
}

fn libc_sigabrt() -> i32 {
    6
}

#[test]
fn the_viewer_index_is_never_written_through_links() {
    let dir = scratch("planted-index");
    let exe = build(Cc::Gcc, "counts.c", &dir, &[]);
    let trace = dir.join("t.trace");
    assert!(record(&exe, &trace, &[]).status.success());
    let t = trace.to_str().unwrap();
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let index = dir.join("t.trace.mlview");
    // links planted inside the index: replaced, their targets untouched
    std::fs::create_dir(&index).unwrap();
    for f in ["meta.json", "cells0.bin", "lines.bin"] {
        std::os::unix::fs::symlink(&victim, index.join(f)).unwrap();
    }
    let out = run_memlens(&["view", "--no-serve", "--reindex", t]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    for f in ["meta.json", "cells0.bin", "lines.bin"] {
        let m = std::fs::symlink_metadata(index.join(f)).unwrap();
        assert!(m.file_type().is_file(), "{f} is still a link");
    }
    // a symlinked index directory: refused, with one line
    std::fs::remove_dir_all(&index).unwrap();
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &index).unwrap();
    let out = run_memlens(&["view", "--no-serve", t]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("is a symbolic link"), "{err}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "written through the link");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
