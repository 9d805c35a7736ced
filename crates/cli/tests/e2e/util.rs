//! Shared helpers: build test programs with `memlens cc`, record, read reports.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

pub fn memlens() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_memlens"))
}

/// The runtime must have been built next to the binary (`cargo build --workspace`).
pub fn require_runtime() {
    let dir = std::env::var_os("MEMLENS_RUNTIME_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| memlens().parent().unwrap().to_path_buf());
    let lib = dir.join("libmemlens_rt.a");
    assert!(
        lib.is_file(),
        "{} is missing: run `cargo build --workspace` before the tests",
        lib.display()
    );
}

pub fn programs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/programs")
}

#[path = "../../../../tests/support/scratch.rs"]
mod cleanup;

/// A fresh scratch directory under target/, removed when the test passes.
pub fn scratch(name: &str) -> PathBuf {
    let dir = scratch_kept(name);
    cleanup::remove_on_pass(&dir);
    dir
}

/// A fresh scratch directory under target/ that stays (for values cached across tests).
pub fn scratch_kept(name: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = memlens().parent().unwrap().join("e2e").join(format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[derive(Clone, Copy, Debug)]
pub enum Cc {
    Gcc,
    Clang,
}

impl Cc {
    pub fn all() -> Vec<Cc> {
        let clang = Command::new("clang-22").arg("--version").output().is_ok();
        if !clang {
            assert!(std::env::var_os("CI").is_none(), "clang-22 is required in CI");
            eprintln!("note: clang-22 not installed; testing gcc only");
            return vec![Cc::Gcc];
        }
        vec![Cc::Gcc, Cc::Clang]
    }

    fn env(self, cxx: bool) -> (&'static str, &'static str) {
        match (self, cxx) {
            (Cc::Gcc, false) => ("MEMLENS_CC", "gcc"),
            (Cc::Gcc, true) => ("MEMLENS_CXX", "g++"),
            (Cc::Clang, false) => ("MEMLENS_CC", "clang-22"),
            (Cc::Clang, true) => ("MEMLENS_CXX", "clang++-22"),
        }
    }
}

/// Builds `tests/programs/<src>` with `memlens cc`/`c++` into `dir`.
pub fn build(cc: Cc, src: &str, dir: &Path, extra: &[&str]) -> PathBuf {
    require_runtime();
    let cxx = src.ends_with(".cpp");
    let (var, compiler) = cc.env(cxx);
    let exe = dir.join(format!("{}-{:?}", src.replace('.', "_"), cc));
    let out = Command::new(memlens())
        .arg(if cxx { "c++" } else { "cc" })
        .args(["-O2", "-pthread"])
        .args(extra)
        .arg(programs().join(src))
        .arg("-o")
        .arg(&exe)
        .env(var, compiler)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "memlens {} failed for {src}:\n{}",
        if cxx { "c++" } else { "cc" },
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// `memlens record -o TRACE -- exe args`.
pub fn record(exe: &Path, trace: &Path, args: &[&str]) -> Output {
    Command::new(memlens())
        .arg("record")
        .arg("-q")
        .arg("-o")
        .arg(trace)
        .arg("--")
        .arg(exe)
        .args(args)
        .output()
        .unwrap()
}

pub fn run_memlens(args: &[&str]) -> Output {
    Command::new(memlens()).args(args).output().unwrap()
}

pub fn json(args: &[&str]) -> Value {
    let out = run_memlens(args);
    assert!(
        out.status.success(),
        "memlens {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

pub fn info(trace: &Path) -> Value {
    json(&["info", "--format", "json", trace.to_str().unwrap()])
}

pub fn report(trace: &Path, by: &str) -> Vec<Value> {
    let v =
        json(&["report", "--by", by, "--top", "0", "--format", "json", trace.to_str().unwrap()]);
    v.as_array().unwrap().clone()
}

/// Line number of the `// @marker` comment in a test program.
pub fn line_of(src: &str, marker: &str) -> u64 {
    let text = std::fs::read_to_string(programs().join(src)).unwrap();
    let tag = format!("// @{marker}");
    let hits: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim_end().ends_with(&tag))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(hits.len(), 1, "marker {marker} must appear once in {src}");
    hits[0] as u64
}

/// Sums of a report's rows at a file:line.
pub fn at_line(rows: &[Value], src: &str, line: u64, key: &str) -> u64 {
    rows.iter()
        .filter(|r| r["line"] == line && r["file"].as_str().is_some_and(|f| f.ends_with(src)))
        .map(|r| r[key].as_u64().unwrap())
        .sum()
}

/// Events of a trace as JSON lines.
pub fn dump(trace: &Path) -> Vec<Value> {
    let out = run_memlens(&["dump", "--format", "json", trace.to_str().unwrap()]);
    assert!(out.status.success(), "dump failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        // the last line says whether the trace is complete (tested in damaged.rs)
        .filter(|e| e["event"] != "end_of_trace")
        .collect()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `memlens cc` (or `c++`) with explicit arguments; panics on failure.
pub fn memlens_cc(cc: Cc, cxx: bool, args: &[&str]) {
    require_runtime();
    let (var, compiler) = cc.env(cxx);
    let out = Command::new(memlens())
        .arg(if cxx { "c++" } else { "cc" })
        .args(args)
        .env(var, compiler)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "memlens cc {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Rows of `report --by variable`.
pub fn variables(trace: &Path, group: &str) -> Vec<Value> {
    let v = json(&[
        "report",
        "--by",
        "variable",
        "--group-by",
        group,
        "--top",
        "0",
        "--format",
        "json",
        trace.to_str().unwrap(),
    ]);
    v.as_array().unwrap().clone()
}

/// The row of a variable name in `report --by variable` output.
pub fn var<'a>(rows: &'a [Value], name: &str) -> Option<&'a Value> {
    rows.iter().find(|r| r["variable"] == name)
}

/// A test program built and recorded in its own scratch directory.
pub struct Traced {
    pub dir: PathBuf,
    pub exe: PathBuf,
    pub trace: PathBuf,
    pub out: Output,
}

/// Builds `tests/programs/<src>` with `cc` in `scratch(name)` and records it without
/// arguments; the recording must succeed.
pub fn build_and_record(cc: Cc, name: &str, src: &str) -> Traced {
    let dir = scratch(name);
    let exe = build(cc, src, &dir, &[]);
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &[]);
    assert!(out.status.success(), "{cc:?} {src}: {}", stderr(&out));
    Traced { dir, exe, trace, out }
}

/// Builds a copy of the Rust program `tests/programs/<name>` (so the source tree
/// stays clean) with `memlens cargo build --release` in a scratch directory;
/// returns the directory and the executable.
pub fn memlens_cargo_build(name: &str) -> (PathBuf, PathBuf) {
    require_runtime();
    let dir = scratch(name);
    let proj = dir.join(name);
    std::fs::create_dir_all(proj.join("src")).unwrap();
    let src = programs().join(name);
    std::fs::copy(src.join("Cargo.toml"), proj.join("Cargo.toml")).unwrap();
    std::fs::copy(src.join("src/main.rs"), proj.join("src/main.rs")).unwrap();
    let out = Command::new(memlens())
        .args(["cargo", "build", "--release", "--quiet"])
        .current_dir(&proj)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap();
    assert!(out.status.success(), "memlens cargo failed:\n{}", stderr(&out));
    let exe = proj.join(format!("target/memlens/x86_64-unknown-linux-gnu/release/{name}"));
    assert!(exe.is_file(), "{}", exe.display());
    (dir, exe)
}
