//! Helpers: temporary directories, compiling test programs, reading `nm`/`objdump`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A directory under the system temp dir, removed on drop (unless `MEMLENS_KEEP_TMP` is
/// set, to inspect failures).
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("memlens-symbols-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("MEMLENS_KEEP_TMP").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Whether a program can be run.
pub fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Runs a command, panicking with its output on failure; returns stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Writes `source` to `dir/name` and compiles it with `compiler` and `flags` into
/// `dir/<output>`.
pub fn compile(
    dir: &TempDir,
    compiler: &str,
    name: &str,
    source: &str,
    flags: &[&str],
    output: &str,
) -> PathBuf {
    let src = dir.join(name);
    std::fs::write(&src, source).unwrap();
    let out = dir.join(output);
    run(Command::new(compiler).args(flags).arg(&src).arg("-o").arg(&out));
    out
}

/// Symbol name → (address, type letter) from `nm` (add `-C` to demangle).
pub fn nm(binary: &Path, demangle: bool) -> HashMap<String, (u64, char)> {
    let mut cmd = Command::new("nm");
    if demangle {
        cmd.arg("-C");
    }
    let text = run(cmd.arg(binary));
    let mut out = HashMap::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ' ');
        let (Some(addr), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr, 16) else { continue };
        out.entry(name.to_owned()).or_insert((addr, kind.chars().next().unwrap()));
    }
    out
}

/// Address of symbol `name` (exact) in `nm` output.
pub fn sym(table: &HashMap<String, (u64, char)>, name: &str) -> u64 {
    table.get(name).unwrap_or_else(|| panic!("symbol {name} not found by nm")).0
}

/// Return addresses of calls to `callee` made from within function `caller`, from
/// `objdump -d` (the address of the instruction after each call).
pub fn return_addresses(binary: &Path, caller: &str, callee: &str) -> Vec<u64> {
    let text = run(Command::new("objdump").args(["-d", "--no-show-raw-insn"]).arg(binary));
    let mut out = Vec::new();
    let mut in_caller = false;
    let mut pending = false;
    for line in text.lines() {
        if line.ends_with(">:") {
            in_caller = line.contains(&format!("<{caller}>:"));
            pending = false;
            continue;
        }
        let Some((addr, insn)) = line.trim_start().split_once(":\t") else { continue };
        let Ok(addr) = u64::from_str_radix(addr, 16) else { continue };
        if pending {
            out.push(addr);
            pending = false;
        }
        if in_caller && insn.starts_with("call") && insn.contains(&format!("<{callee}>")) {
            pending = true;
        }
    }
    out
}

/// 1-based line number of the first line of `source` containing `marker`.
pub fn line_of(source: &str, marker: &str) -> u32 {
    let i = source
        .lines()
        .position(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("marker {marker} not in source"));
    i as u32 + 1
}
