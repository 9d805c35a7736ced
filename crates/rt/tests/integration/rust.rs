//! Rust: the recipe for linking the prebuilt runtime rlib into an instrumented
//! Rust program on stable rustc.
//!
//! Only the user's crate gets the instrumentation flags
//! (`-C passes=function(tsan),sancov-module` plus the SanitizerCoverage load/store
//! llvm-args): the runtime is a prebuilt, uninstrumented rlib, so its callbacks can
//! not recurse. The rlib must really be linked, but rustc drops an `--extern` crate
//! the source never names (the link then fails on `__sanitizer_cov_load8`). Two
//! ways that work:
//! - `--extern force:memlens_rt=<rlib>` with `-Z unstable-options`, which stable
//!   rustc accepts under `RUSTC_BOOTSTRAP=1` (set for that rustc call only): no
//!   source change; what `memlens cargo` does through its `RUSTC_WRAPPER`.
//! - `extern crate memlens_rt;` in the crate root plus a plain `--extern`: fully
//!   stable, but it edits the program.
//!
//! In both cases `-L dependency=<dir>` must name the directory holding the
//! runtime's own dependencies (`memlens_format`, `zstd`, ...: cargo's `deps/`), and
//! the rlib must come from the same rustc version. Linking `-C link-arg=<rlib>`
//! with its dependency rlibs does not work: generic code the runtime shares with
//! its dependencies is only found through rustc's crate graph.

use crate::util::*;
use memlens_format::{AccessKind, AllocKind, Event, RmwOp};
use std::path::Path;
use std::process::Command;

const INSTRUMENT: [&str; 10] = [
    "-C",
    "passes=function(tsan),sancov-module",
    "-C",
    "llvm-args=-sanitizer-coverage-level=3",
    "-C",
    "llvm-args=-sanitizer-coverage-trace-loads",
    "-C",
    "llvm-args=-sanitizer-coverage-trace-stores",
    "-C",
    "force-frame-pointers=yes",
];

fn rustc(src: &Path, out: &Path, extra: &[String], bootstrap: bool) {
    let mut cmd = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()));
    cmd.args(["--edition", "2021", "-O", "-g"])
        .args(INSTRUMENT)
        .args(extra)
        .arg(format!("-Ldependency={}", profile_dir().join("deps").display()))
        .arg(src)
        .arg("-o")
        .arg(out)
        .env_remove("RUSTC_BOOTSTRAP");
    if bootstrap {
        cmd.env("RUSTC_BOOTSTRAP", "1");
    }
    let o = cmd.output().expect("run rustc");
    assert!(o.status.success(), "rustc failed:\n{}", String::from_utf8_lossy(&o.stderr));
}

fn check(exe: &Path, dir: &Path) {
    let trace = dir.join("t.trace");
    let out = run(exe, &[], Some(&trace), &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let s = stdout(&out);
    assert!(s.starts_with("counter=4000 sum=499500 "), "{s}");
    let (counter, boxed, vec) =
        (hex_field(&s, "counter_addr"), hex_field(&s, "box_addr"), hex_field(&s, "vec_addr"));
    let t = read(&trace);
    t.check_invariants();
    assert_eq!(t.streams.len(), 5);
    for evs in &t.streams[1..] {
        let adds = evs
            .iter()
            .filter(|e| matches!(e, Event::Rmw { addr, op: RmwOp::FetchAdd, size: 8, .. } if addr.0 == counter))
            .count();
        assert_eq!(adds, 1000);
        let cas = evs
            .iter()
            .filter(|e| matches!(e, Event::Rmw { op: RmwOp::Cas | RmwOp::CasFailed, size: 8, .. }))
            .count();
        assert_eq!(cas, 1);
    }
    let main = &t.streams[0];
    let in_vec = |a: u64| (vec..vec + 8000).contains(&a);
    let vec_acc = |k: AccessKind| {
        main.iter()
            .filter(|e| matches!(e, Event::Access { addr, size: 8, kind, atomic: false, .. } if in_vec(addr.0) && *kind == k))
            .count()
    };
    assert_eq!(vec_acc(AccessKind::Write), 1000, "Vec::push stores");
    assert_eq!(vec_acc(AccessKind::Read), 1000, "sum() loads");
    let allocs = |size: u64, at: u64| {
        main.iter()
            .filter(|e| matches!(e, Event::Alloc { kind: AllocKind::Malloc, size: s, addr, .. } if *s == size && addr.0 == at))
            .count()
    };
    assert_eq!(allocs(8000, vec), 1, "Vec::with_capacity(1000)");
    assert_eq!(allocs(8, boxed), 1, "Box::new");
}

#[test]
fn rust_program_with_forced_extern() {
    let dir = scratch("rust-force");
    let exe = dir.join("rsprog");
    let rlib = runtime_artifact("rlib");
    let extra = vec![
        "-Zunstable-options".to_string(),
        format!("--extern=force:memlens_rt={}", rlib.display()),
    ];
    rustc(&programs().join("rsprog.rs"), &exe, &extra, true);
    check(&exe, &dir);
}

#[test]
fn rust_program_naming_the_runtime_on_stable() {
    let dir = scratch("rust-stable");
    let src = dir.join("rsprog.rs");
    let body = std::fs::read_to_string(programs().join("rsprog.rs")).unwrap();
    // After the inner doc comments, which must open the file.
    let split = body.lines().take_while(|l| l.starts_with("//!")).map(|l| l.len() + 1).sum();
    let (head, rest) = body.split_at(split);
    std::fs::write(&src, format!("{head}extern crate memlens_rt;\n{rest}")).unwrap();
    let exe = dir.join("rsprog");
    let extra = vec![format!("--extern=memlens_rt={}", runtime_artifact("rlib").display())];
    rustc(&src, &exe, &extra, false);
    check(&exe, &dir);
}
