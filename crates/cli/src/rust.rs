//! `memlens cargo`: instrumented Rust builds.
//!
//! cargo runs with an explicit `--target` so that build scripts and proc-macros
//! (host code that runs during the build, without the runtime) are compiled apart
//! from the program, and with `memlens` itself as `RUSTC_WRAPPER`. The wrapper
//! adds the instrumentation to target crates only — the program's crates and
//! their dependencies; the runtime is a prebuilt, uninstrumented rlib, so its own
//! callbacks cannot recurse — and links that rlib into every final artefact:
//!
//! - `-C passes=function(tsan),sancov-module` with the SanitizerCoverage load and
//!   store callbacks: the tsan pass (stable rustc) turns atomics into
//!   `__tsan_atomic*` calls and adds function entry/exit; sancov then sees only the
//!   plain loads and stores that remain, so nothing is counted twice.
//! - `-C force-frame-pointers=yes` and debug info, for call stacks and names.
//! - `--extern force:memlens_rt=...`: rustc drops an unused `--extern` crate, and
//!   the program never names the runtime. `force:` is behind `-Z unstable-options`,
//!   so only these rustc invocations run with `RUSTC_BOOTSTRAP=1`; nothing else
//!   about the build changes.
//! - `-Z patchable-function-entry=5` (also behind `RUSTC_BOOTSTRAP=1`): the NOP
//!   pad `record --trace-calls` patches, as `memlens cc` leaves in C code.

use crate::runtime::Runtime;
use anyhow::{bail, Context, Result};
use std::process::Command;

/// The target triple memlens builds for.
pub const TARGET: &str = "x86_64-unknown-linux-gnu";

const WRAP_ENV: &str = "MEMLENS_RUSTC_WRAPPER";

/// `memlens cargo ARGS`.
pub fn cargo(args: Vec<String>) -> Result<i32> {
    let rt = Runtime::locate()?;
    let rlib = rt.dir.join("libmemlens_rt.rlib");
    if !rlib.is_file() {
        bail!("the Rust runtime {} is missing; build memlens with `cargo build --release --workspace`", rlib.display());
    }
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(&args);
    let builds = args.first().is_some_and(|a| {
        matches!(
            a.as_str(),
            "build" | "b" | "run" | "r" | "test" | "t" | "bench" | "rustc" | "install"
        )
    });
    if builds {
        if !args.iter().any(|a| a == "--target" || a.starts_with("--target=")) {
            cmd.args(["--target", TARGET]);
        }
        if !args.iter().any(|a| a == "--target-dir" || a.starts_with("--target-dir=")) {
            cmd.args(["--target-dir", "target/memlens"]);
        }
    }
    if builds && wide_vectors_requested() {
        eprintln!("memlens: note: Rust with AVX/AVX-512 target features: loads and stores wider than 16 bytes and masked/gather intrinsics are not recorded (stable rustc cannot load memlens's LLVM pass; SanitizerCoverage has no callback for them); `memlens record --dbi` sees them (docs/fidelity.md)");
    }
    cmd.env("RUSTC_WRAPPER", &exe)
        .env(WRAP_ENV, "1")
        .env("MEMLENS_RT_RLIB", &rlib)
        .env("MEMLENS_RT_DEPS", rt.dir.join("deps"));
    let st = cmd.status().context("cannot run cargo")?;
    if st.success() && builds {
        eprintln!("memlens: instrumented binaries are under target/memlens/{TARGET}/");
    }
    Ok(st.code().unwrap_or(1))
}

/// Whether the user's rustflags enable 32- or 64-byte vectors (`target-cpu` other
/// than the baseline, or an AVX target feature).
fn wide_vectors_requested() -> bool {
    let flags: String = ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_RUSTFLAGS"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .collect::<Vec<_>>()
        .join(" ");
    flags.contains("+avx")
        || flags.split(['\x1f', ' ']).any(|f| {
            f.strip_prefix("target-cpu=")
                .or_else(|| f.strip_prefix("-Ctarget-cpu="))
                .is_some_and(|cpu| !matches!(cpu, "x86-64" | "x86-64-v2" | "generic"))
        })
}

/// When memlens runs as cargo's `RUSTC_WRAPPER`: `memlens /path/to/rustc ARGS`.
pub fn is_wrapper_call() -> bool {
    std::env::var_os(WRAP_ENV).is_some()
}

/// Instrumentation flags for rustc (also used by tests that call rustc directly).
pub fn instrument_flags() -> Vec<String> {
    [
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
    ]
    .map(String::from)
    .to_vec()
}

/// Runs rustc, instrumenting target crates.
pub fn wrapper(args: Vec<String>) -> Result<i32> {
    let Some((rustc, rest)) = args.split_first() else {
        bail!("RUSTC_WRAPPER called without rustc")
    };
    let has = |flag: &str| rest.iter().any(|a| a == flag);
    let crate_types: Vec<&str> =
        rest.windows(2).filter(|w| w[0] == "--crate-type").map(|w| w[1].as_str()).collect();
    let target = rest.iter().any(|a| a == "--target" || a.starts_with("--target="));
    let host_only = crate_types.contains(&"proc-macro")
        || rest.windows(2).any(|w| w[0] == "--crate-name" && w[1].starts_with("build_script_"));
    let mut cmd = Command::new(rustc);
    cmd.args(rest);
    // `rustc -vV` and `--print` probes pass through untouched.
    if target && !host_only && !has("-vV") && !rest.iter().any(|a| a == "--print") {
        cmd.args(instrument_flags());
        // A 5-byte NOP pad at every function entry, as `memlens cc` gives C, so
        // `record --trace-calls` can patch Rust functions too (a `-Z` flag, hence
        // RUSTC_BOOTSTRAP).
        cmd.args(["-Z", "patchable-function-entry=5"]).env("RUSTC_BOOTSTRAP", "1");
        if !rest.iter().any(|a| a.starts_with("debuginfo=") || a == "-g") {
            cmd.args(["-C", "debuginfo=2"]);
        }
        // Only executables get the runtime; libraries keep their callbacks undefined
        // (as C shared libraries do) and resolve to the executable's runtime.
        let links = has("--test") || crate_types.is_empty() || crate_types.contains(&"bin");
        if links {
            let rlib = std::env::var("MEMLENS_RT_RLIB").context("MEMLENS_RT_RLIB not set")?;
            let deps = std::env::var("MEMLENS_RT_DEPS").context("MEMLENS_RT_DEPS not set")?;
            cmd.args(["-Z", "unstable-options"])
                .arg(format!("--extern=force:memlens_rt={rlib}"))
                .arg(format!("-Ldependency={deps}"))
                // memlens-annotate finds the annotation API with dlsym.
                .args(["-C", "link-arg=-Wl,--export-dynamic-symbol=memlens_*"])
                .env("RUSTC_BOOTSTRAP", "1");
        }
    }
    let st = cmd.status().with_context(|| format!("cannot run {rustc}"))?;
    Ok(st.code().unwrap_or(1))
}
