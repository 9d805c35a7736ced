//! `memlens record --dbi`: trace an unmodified x86-64 program under QEMU user mode.
//!
//! Runs `qemu-x86_64 -plugin libmemlens_dbi.so` (the plugin, crate `memlens-dbi`)
//! with the guest preload library `libmemlens_dbi_preload.so` in the guest's
//! `LD_PRELOAD` only, both found next to the memlens binary (or in
//! `MEMLENS_RUNTIME_DIR`). The plugin is configured through QEMU's environment,
//! which is removed from the guest's with `-U`.

use anyhow::{bail, Context, Result};
use memlens_contract::filter::Filter;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What `record --dbi` was asked to do.
pub struct DbiOpts {
    /// Trace path.
    pub output: PathBuf,
    /// zstd level (0: none).
    pub zstd_level: i32,
    /// `--dbi-filter`: exe, all, lib:NAME, 0xA-0xB (comma-separated).
    pub filter: String,
    /// `--functions` / `--files`: trace only the executable's code they select.
    pub code: crate::filter::FilterSpec,
    /// Record loaded and stored values.
    pub values: bool,
    /// Only accesses inside `memlens_roi_begin/end`.
    pub roi: bool,
    /// Allocation call-stack depth.
    pub stack_depth: u32,
    /// `--order`: `sync` (clocks at synchronisation), `atomic` (a stamp per access)
    /// or `none`.
    pub order: &'static str,
    /// Print nothing but the program's own output.
    pub quiet: bool,
    /// The program and its arguments.
    pub cmd: Vec<String>,
}

const PLUGIN: &str = "libmemlens_dbi.so";
const PRELOAD: &str = "libmemlens_dbi_preload.so";
const ENV: [&str; 8] = [
    "MEMLENS_OUTPUT",
    "MEMLENS_ZSTD_LEVEL",
    "MEMLENS_DBI_FILTER",
    "MEMLENS_DBI_SKIP",
    "MEMLENS_VALUES",
    "MEMLENS_ROI",
    "MEMLENS_STACK_DEPTH",
    "MEMLENS_ORDER",
];

fn lib_dir() -> Result<PathBuf> {
    Ok(match std::env::var_os("MEMLENS_RUNTIME_DIR") {
        Some(d) => PathBuf::from(d),
        None => std::env::current_exe()?
            .parent()
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(".")),
    })
}

fn find_qemu() -> Result<PathBuf> {
    if let Some(q) = std::env::var_os("MEMLENS_QEMU") {
        return Ok(PathBuf::from(q));
    }
    if let Some(q) = crate::runtime::which("qemu-x86_64") {
        return Ok(q);
    }
    bail!("qemu-x86_64 not found in PATH: --dbi needs QEMU user mode; install qemu-user (Debian/Ubuntu: apt-get install qemu-user)")
}

/// Checks that `exe` is an x86-64 ELF program.
fn check_program(exe: &Path) -> Result<()> {
    let md = std::fs::metadata(exe).with_context(|| format!("cannot read {}", exe.display()))?;
    if md.is_dir() {
        bail!("{} is a directory, not a program", exe.display());
    }
    let data = std::fs::read(exe).with_context(|| format!("cannot read {}", exe.display()))?;
    if data.len() < 4 || &data[..4] != b"\x7fELF" {
        bail!("{} is not an ELF executable; --dbi runs x86-64 Linux programs", exe.display());
    }
    use object::Object;
    let file = object::File::parse(&*data)
        .with_context(|| format!("{} is not a readable ELF file", exe.display()))?;
    if file.architecture() != object::Architecture::X86_64 {
        bail!(
            "{} is built for {:?}; memlens --dbi traces x86-64 programs",
            exe.display(),
            file.architecture()
        );
    }
    Ok(())
}

/// `--functions` / `--files` as `exe:0xA-0xB` filter items (link-time instruction
/// addresses of the selected code).
fn code_filter(exe: &Path, spec: &crate::filter::FilterSpec) -> Result<String> {
    let ranges = crate::filter::code_ranges(exe, spec)?;
    Ok(Filter::exe_ranges(ranges).to_string())
}

/// Runs the program under QEMU with the plugin and returns the exit code to use.
pub fn run(opts: DbiOpts) -> Result<i32> {
    let Some(prog) = opts.cmd.first() else {
        bail!("no program given: memlens record --dbi -- PROG [ARGS]")
    };
    // the plugin reads the same representation back
    Filter::parse(&opts.filter).map_err(anyhow::Error::msg)?;
    let exe = crate::record::find_program(prog)?;
    check_program(&exe)?;
    let filter = if opts.code.is_empty() {
        opts.filter.clone()
    } else {
        if opts.filter != "exe" {
            bail!("--functions/--files choose the code to trace: leave out --dbi-filter");
        }
        code_filter(&exe, &opts.code)?
    };
    let dir = lib_dir()?;
    let (plugin, preload) = (dir.join(PLUGIN), dir.join(PRELOAD));
    for p in [&plugin, &preload] {
        if !p.is_file() {
            bail!(
                "{} is missing; build it with `cargo build --workspace` in the memlens source tree (or set MEMLENS_RUNTIME_DIR)",
                p.display()
            );
        }
    }
    if plugin.to_string_lossy().contains(',') {
        bail!("the plugin path {} contains a comma, which QEMU cannot take", plugin.display());
    }
    let qemu = find_qemu()?;
    let output = if opts.output.is_absolute() {
        opts.output.clone()
    } else {
        std::env::current_dir()?.join(&opts.output)
    };
    let lock = crate::files::Lock::take(&output)?;
    // a fresh file of ours in place of anything planted at the path
    drop(crate::files::create_in_place(&output)?);
    // The guest's LD_PRELOAD gets ours first; QEMU itself gets none.
    let mut guest_preload = preload.to_string_lossy().into_owned();
    if let Some(p) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        guest_preload = format!("{guest_preload}:{}", p.to_string_lossy());
    }
    let mut qargs: Vec<std::ffi::OsString> =
        vec!["-E".into(), format!("LD_PRELOAD={guest_preload}").into()];
    for v in ENV {
        qargs.push("-U".into());
        qargs.push(v.into());
    }
    qargs.push("-plugin".into());
    qargs.push(plugin.into_os_string());
    let mut cmd = Command::new(&qemu);
    cmd.args(&qargs)
        .arg(&exe)
        .args(&opts.cmd[1..])
        .env_remove("LD_PRELOAD")
        .env("MEMLENS_OUTPUT", &output)
        .env("MEMLENS_ZSTD_LEVEL", opts.zstd_level.to_string())
        .env("MEMLENS_DBI_FILTER", &filter)
        .env("MEMLENS_STACK_DEPTH", opts.stack_depth.to_string())
        // argv[0] of QEMU and its options come before the program in /proc/self/cmdline.
        .env("MEMLENS_DBI_SKIP", (qargs.len() + 1).to_string());
    if opts.values {
        cmd.env("MEMLENS_VALUES", "1");
    }
    if opts.roi {
        cmd.env("MEMLENS_ROI", "1");
    }
    cmd.env("MEMLENS_ORDER", opts.order);
    let status = crate::record::wait_child(&mut cmd, &qemu)?;
    if std::fs::metadata(&output).map(|m| m.len()).unwrap_or(0) < 128 {
        bail!(
            "qemu-x86_64 ran but the plugin wrote no trace to {} (see QEMU's messages above)",
            output.display()
        );
    }
    let code = crate::record::report(None, &output, status, opts.quiet);
    drop(lock);
    code?;
    Ok(crate::record::die_like(status))
}
