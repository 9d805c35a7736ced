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

/// The user's own `RUSTC_WRAPPER` (sccache), which memlens runs rustc through.
const USER_WRAP_ENV: &str = "MEMLENS_USER_RUSTC_WRAPPER";

/// memlens's own part of `memlens cargo --help` (cargo's help follows).
pub const HELP: &str = "\
memlens cargo: build a Rust project with every memory access recorded
(any cargo arguments; `memlens record -- target/memlens/x86_64-unknown-linux-gnu/release/PROG`)

Usage: memlens cargo build|run|test|bench|rustc|install [CARGO ARGS]

Builds for --target x86_64-unknown-linux-gnu into <workspace root>/target/memlens (apart
from your normal builds) with memlens as RUSTC_WRAPPER; a RUSTC_WRAPPER you set (sccache;
environment or build.rustc-wrapper) still runs, after memlens. Debug info and symbols are kept whatever the profile says
(`strip` is overridden), so reports have source lines. The project must build with the
rustc memlens was built with: a rust-toolchain file pinning another one is reported
before the build starts.

";

/// `memlens cargo ARGS`.
pub fn cargo(args: Vec<String>) -> Result<i32> {
    // Arguments after `--` are the program's (`cargo run -- --help`).
    let own = args.iter().take_while(|a| *a != "--");
    if args.is_empty() || own.clone().any(|a| a == "--help" || a == "-h") || args[0] == "help" {
        print!("{HELP}cargo's help:\n\n");
        use std::io::Write;
        std::io::stdout().flush()?;
    }
    let rt = Runtime::locate()?;
    let rlib = rt.dir.join("libmemlens_rt.rlib");
    if !rlib.is_file() {
        bail!("the Rust runtime {} is missing; build memlens with `cargo build --release --workspace`", rlib.display());
    }
    let exe = std::env::current_exe()?;
    let cargo_prog = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(&cargo_prog);
    cmd.args(&args);
    // rustup's `cargo +TOOLCHAIN ...` picks the toolchain for this build.
    let toolchain = args.first().filter(|a| a.starts_with('+')).cloned();
    let builds = args.get(usize::from(toolchain.is_some())).is_some_and(|a| {
        matches!(
            a.as_str(),
            "build" | "b" | "run" | "r" | "test" | "t" | "bench" | "rustc" | "install"
        )
    });
    let mut out_dir = std::path::PathBuf::from("target/memlens");
    if builds {
        check_toolchain(&rlib, toolchain.as_deref())?;
        if !args.iter().any(|a| a == "--target" || a.starts_with("--target=")) {
            cmd.args(["--target", TARGET]);
        }
        if !args.iter().any(|a| a == "--target-dir" || a.starts_with("--target-dir=")) {
            // One tree per workspace, wherever in it memlens runs (as cargo's own
            // target/).
            if let Some(root) = workspace_root(&cargo_prog, &args) {
                out_dir = root.join("target/memlens");
            }
            cmd.arg("--target-dir").arg(&out_dir);
        }
    }
    if let Some(user) = user_rustc_wrapper(&exe) {
        cmd.env(USER_WRAP_ENV, user);
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
        eprintln!("memlens: instrumented binaries are under {}/{TARGET}/", out_dir.display());
    }
    Ok(st.code().unwrap_or(1))
}

/// The directory of the workspace's root `Cargo.toml`, as cargo finds it (honouring
/// `--manifest-path`); `None` when cargo cannot say (cargo then reports why).
fn workspace_root(cargo: &str, args: &[String]) -> Option<std::path::PathBuf> {
    let mut cmd = Command::new(cargo);
    cmd.args(["locate-project", "--workspace", "--message-format", "plain"]);
    let own = args.iter().take_while(|a| *a != "--");
    let mut it = own.clone();
    while let Some(a) = it.next() {
        if a == "--manifest-path" {
            cmd.arg(a).args(it.next());
        } else if a.starts_with("--manifest-path=") {
            cmd.arg(a);
        }
    }
    let out = cmd.stderr(std::process::Stdio::null()).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let manifest = std::path::PathBuf::from(text.trim());
    (out.status.success() && manifest.is_absolute()).then(|| manifest.parent().map(Into::into))?
}

/// The `RUSTC_WRAPPER` the user set, in the environment or in a cargo config's
/// `build.rustc-wrapper` (cargo would run it; memlens takes its place and runs
/// it), unless it is memlens itself or empty (cargo's "none").
fn user_rustc_wrapper(exe: &std::path::Path) -> Option<String> {
    let w = ["RUSTC_WRAPPER", "CARGO_BUILD_RUSTC_WRAPPER"]
        .iter()
        .find_map(|v| std::env::var(v).ok())
        .or_else(config_rustc_wrapper)
        .filter(|w| !w.is_empty())?;
    let same = std::fs::canonicalize(&w).ok() == std::fs::canonicalize(exe).ok();
    (!same).then_some(w)
}

/// `build.rustc-wrapper` from the cargo config files cargo reads (the nearest
/// `.cargo/config.toml` from the current directory up, then `$CARGO_HOME`'s); a
/// relative path is relative to the directory holding `.cargo/`.
fn config_rustc_wrapper() -> Option<String> {
    let cwd = std::env::current_dir().ok()?;
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cargo")));
    let dirs = cwd.ancestors().map(|d| d.join(".cargo")).chain(home);
    for dir in dirs {
        for name in ["config.toml", "config"] {
            let Ok(text) = std::fs::read_to_string(dir.join(name)) else { continue };
            let Some(w) = toml_build_rustc_wrapper(&text) else { continue };
            if w.contains('/') && !w.starts_with('/') {
                let base = dir.parent().unwrap_or(&dir);
                return Some(base.join(w).display().to_string());
            }
            return Some(w);
        }
    }
    None
}

/// `rustc-wrapper` under `[build]`, or `build.rustc-wrapper`, as a string (the
/// forms cargo's docs show; memlens has no TOML parser).
fn toml_build_rustc_wrapper(text: &str) -> Option<String> {
    let mut table = String::new();
    for line in text.lines().map(|l| l.trim()) {
        if line.starts_with('[') {
            table = line.trim_matches(['[', ']', ' ']).to_string();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        let key = key.trim().trim_matches('"');
        let full = if table.is_empty() { key.to_string() } else { format!("{table}.{key}") };
        if full == "build.rustc-wrapper" {
            let v = value.split('#').next()?.trim().trim_matches(['"', '\'']);
            return Some(v.to_string());
        }
    }
    None
}

/// The `rustc -V` line of the compiler that built the runtime rlib (rustc writes it
/// into the crate metadata).
fn rlib_rustc(rlib: &std::path::Path) -> Option<String> {
    let data = std::fs::read(rlib).ok()?;
    let at = data.windows(7).position(|w| w.starts_with(b"rustc ") && w[6].is_ascii_digit())?;
    let end = data[at..].iter().position(|&b| b == b')')?;
    Some(String::from_utf8_lossy(&data[at..=at + end]).into_owned())
}

/// Fails before the build when the project's rustc (its rust-toolchain file,
/// RUSTUP_TOOLCHAIN or RUSTC) is not the one the runtime was built with: rustc
/// would only say E0514 at the first link, after building every dependency.
fn check_toolchain(rlib: &std::path::Path, toolchain: Option<&str>) -> Result<()> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(&rustc).args(toolchain).arg("-vV").output() else { return Ok(()) };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(project) = text.lines().next().filter(|l| l.starts_with("rustc ")) else {
        return Ok(());
    };
    let Some(built) = rlib_rustc(rlib) else { return Ok(()) };
    if project.trim() != built {
        let release = |v: &str| v.split_whitespace().nth(1).unwrap_or("").to_string();
        bail!(
            "this project builds with {} (its rust-toolchain file, `+TOOLCHAIN`, RUSTUP_TOOLCHAIN or RUSTC), but memlens's Rust runtime {} was built with {built}; build the project with that toolchain (`RUSTUP_TOOLCHAIN={} memlens cargo ...`) or rebuild memlens with the project's toolchain (`cargo +TOOLCHAIN build --release --workspace` in the memlens source)",
            project.trim(),
            rlib.display(),
            release(&built)
        );
    }
    Ok(())
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
    // `rustc -vV` and `--print` probes pass through untouched.
    let instrument = target && !host_only && !has("-vV") && !rest.iter().any(|a| a == "--print");
    // The user's own wrapper (sccache) runs rustc, with memlens's flags.
    let mut cmd = match std::env::var(USER_WRAP_ENV) {
        Ok(user) => {
            let mut c = Command::new(user);
            c.arg(rustc);
            c
        }
        Err(_) => Command::new(rustc),
    };
    if instrument {
        // cargo strips debug info from release builds without `debug` (`-C
        // strip=debuginfo`), and `strip = "symbols"` would drop function names:
        // reports need both.
        cmd.args(without_strip(rest)).args(["-C", "strip=none"]);
    } else {
        cmd.args(rest);
    }
    if instrument {
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

/// `args` without `-C strip=...` / `-Cstrip=...`.
fn without_strip(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        if args[i] == "-C" && args.get(i + 1).is_some_and(|v| v.starts_with("strip=")) {
            i += 2;
            continue;
        }
        if !args[i].starts_with("-Cstrip=") {
            out.push(args[i].clone());
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_build_rustc_wrapper_from_cargo_config() {
        let t = "[net]\nretry = 2\n[build]\njobs = 4\nrustc-wrapper = \"sccache\" # cache\n";
        assert_eq!(toml_build_rustc_wrapper(t).as_deref(), Some("sccache"));
        let t = "build.rustc-wrapper = '/usr/bin/sccache'\n";
        assert_eq!(toml_build_rustc_wrapper(t).as_deref(), Some("/usr/bin/sccache"));
        assert_eq!(toml_build_rustc_wrapper("[target.x]\nrustc-wrapper = \"a\"\n"), None);
    }

    #[test]
    fn strip_options_are_removed() {
        let a: Vec<String> = ["-C", "strip=debuginfo", "-Cstrip=symbols", "-C", "opt-level=3"]
            .map(String::from)
            .to_vec();
        assert_eq!(without_strip(&a), ["-C", "opt-level=3"].map(String::from).to_vec());
    }
}
