//! `memlens record`: run a program built with memlens and write its trace.

use anyhow::{bail, Context, Result};
use memlens_format::{FileHeader, HEADER_SIZE};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering::SeqCst};

/// What `record` was asked to do (validated CLI arguments).
pub struct RecordOpts {
    /// Trace path.
    pub output: PathBuf,
    /// Record loaded and stored values.
    pub values: bool,
    /// Allocation call-stack depth.
    pub stack_depth: u32,
    /// zstd level (0: none).
    pub zstd_level: i32,
    /// Only accesses inside `memlens_roi_begin/end`.
    pub roi: bool,
    /// Function globs to include / exclude, file globs to include / exclude.
    pub filter: crate::filter::FilterSpec,
    /// Custom allocator definitions (alloc.in) used when the program was built.
    pub quiet: bool,
    /// Extra environment for the runtime (ordering options, `merge::OrderArgs::env`).
    pub env: Vec<(String, String)>,
    /// `--trace-calls FILE`: functions whose calls and returns are recorded with
    /// their arguments and return value.
    pub trace_calls: Option<PathBuf>,
    /// The program and its arguments.
    pub cmd: Vec<String>,
}

/// Resolves `prog` like a shell would.
pub(crate) fn find_program(prog: &str) -> Result<PathBuf> {
    if prog.contains('/') {
        let p = PathBuf::from(prog);
        if !p.exists() {
            bail!("program {prog} does not exist");
        }
        return Ok(p);
    }
    match crate::runtime::which(prog) {
        Some(p) => Ok(p),
        None => bail!("program {prog} not found in PATH (give a path like ./{prog})"),
    }
}

/// Checks that `exe` is an x86-64 ELF built with the memlens runtime.
fn check_program(exe: &Path) -> Result<()> {
    let md = std::fs::metadata(exe).with_context(|| format!("cannot read {}", exe.display()))?;
    if md.is_dir() {
        bail!("{} is a directory, not a program", exe.display());
    }
    if md.permissions().mode() & 0o111 == 0 {
        bail!("{} is not executable (chmod +x it, or give the right file)", exe.display());
    }
    let data = std::fs::read(exe).with_context(|| format!("cannot read {}", exe.display()))?;
    if data.len() < 4 || &data[..4] != b"\x7fELF" {
        bail!(
            "{} is not an ELF executable (scripts must exec a memlens-built program)",
            exe.display()
        );
    }
    let file = object::File::parse(&*data)
        .with_context(|| format!("{} is not a readable ELF file", exe.display()))?;
    use object::Object;
    if file.architecture() != object::Architecture::X86_64 {
        bail!(
            "{} is built for {:?}; memlens records x86-64 programs",
            exe.display(),
            file.architecture()
        );
    }
    // The runtime reads MEMLENS_OUTPUT; the string is in every program that has it,
    // stripped or not, and in no other TSan runtime.
    if !contains(&data, b"MEMLENS_OUTPUT") {
        let tsan = contains(&data, b"libtsan.so") || contains(&data, b"__tsan_on_report");
        if tsan {
            bail!("{} is linked against the real ThreadSanitizer runtime (libtsan); link it with `memlens cc` instead of `-fsanitize=thread`", exe.display());
        }
        bail!("{} was not built with memlens; rebuild it with `memlens cc`/`memlens c++` (C, C++) or `memlens cargo` (Rust)", exe.display());
    }
    Ok(())
}

/// A `--trace-calls` list: function names one per line, `#` starts a comment; the
/// names after an `@<library>` line are that library's (one the program opens with
/// `dlopen`). Returns the names to look up in the executable and its start-up
/// libraries, and per named library its canonical path and names.
type FunctionList = (Vec<String>, Vec<(PathBuf, Vec<String>)>);

fn read_function_list(path: &Path) -> Result<FunctionList> {
    let text = crate::files::read_text(path, "the function list", crate::files::LIST_CAP)?;
    let (mut names, mut libs) = (Vec::new(), Vec::<(PathBuf, Vec<String>)>::new());
    for l in text.lines().map(|l| l.split('#').next().unwrap_or("").trim()) {
        if let Some(lib) = l.strip_prefix('@') {
            let lib = lib.trim();
            let canon = std::fs::canonicalize(lib).with_context(|| {
                format!(
                    "the function list {} names the library {lib}, which cannot be opened",
                    path.display()
                )
            })?;
            libs.push((canon, Vec::new()));
        } else if !l.is_empty() {
            match libs.last_mut() {
                Some((_, v)) => v.push(l.to_string()),
                None => names.push(l.to_string()),
            }
        }
    }
    if names.is_empty() && libs.iter().all(|(_, v)| v.is_empty()) {
        bail!("the function list {} names no function (one name per line)", path.display());
    }
    Ok((names, libs))
}

/// `MEMLENS_TRACE_CALLS` for the listed functions of `exe` and of the shared
/// libraries it loads: lines `<function vaddr> <pad vaddr> <name>` (hex file
/// addresses; see the runtime's `calls.rs`), the executable's first, then per
/// library an `@<canonical path>` line followed by its functions. A name matches a
/// symbol's raw or demangled name, or the demangled name without its parameter
/// list; every match is traced (static functions may share a name). A library
/// match without a pad (a system library's function of the same name) is skipped.
/// A name found nowhere becomes a line `? <name>` (with a note unless `quiet`): the
/// runtime looks it up in the libraries the program opens with `dlopen` and warns
/// at exit if none defined it.
fn trace_calls_spec(exe: &Path, list: &Path, quiet: bool) -> Result<String> {
    let (names, named_libs) = read_function_list(list)?;
    let mut found = vec![0usize; names.len()];
    let mut unpadded: Vec<Option<PathBuf>> = vec![None; names.len()];
    let mut spec = String::new();
    for (i, m) in module_functions(exe, &names)? {
        match m {
            Some(line) => {
                spec.push_str(&line);
                found[i] += 1;
            }
            None => bail!(
                "function {} in {} has no patchable entry; rebuild it with `memlens cc` (which compiles with -fpatchable-function-entry=5)",
                names[i],
                exe.display()
            ),
        }
    }
    for lib in shared_libraries(exe) {
        let Ok(fns) = module_functions(&lib, &names) else { continue };
        let mut head = false;
        for (i, m) in fns {
            let Some(line) = m else {
                unpadded[i].get_or_insert(lib.clone());
                continue;
            };
            if !head {
                spec.push_str(&format!("@{}\n", lib.display()));
                head = true;
            }
            spec.push_str(&line);
            found[i] += 1;
        }
    }
    let mut later = String::new();
    for (i, name) in names.iter().enumerate() {
        if found[i] > 0 {
            continue;
        }
        if let Some(lib) = &unpadded[i] {
            bail!(
                "function {name} in {} has no patchable entry; rebuild it with `memlens cc -shared` (which compiles with -fpatchable-function-entry=5)",
                lib.display()
            );
        }
        if !quiet {
            eprintln!(
                "memlens: note: function {name} (from {}) is not in the symbol table of {} or of its start-up libraries; it is traced if a library the program opens with dlopen defines it",
                list.display(),
                exe.display()
            );
        }
        later.push_str(&format!("? {name}\n"));
    }
    // libraries the list names: patched by the runtime when `dlopen` maps them
    for (lib, names) in named_libs {
        let mut found = vec![false; names.len()];
        spec.push_str(&format!("@{}\n", lib.display()));
        for (i, m) in module_functions(&lib, &names)? {
            let Some(line) = m else {
                bail!(
                    "function {} in {} has no patchable entry; rebuild it with `memlens cc -shared` (which compiles with -fpatchable-function-entry=5)",
                    names[i],
                    lib.display()
                );
            };
            spec.push_str(&line);
            found[i] = true;
        }
        if let Some(i) = found.iter().position(|f| !f) {
            bail!(
                "function {} (from {}) is not in the symbol table of {}",
                names[i],
                list.display(),
                lib.display()
            );
        }
    }
    // names found nowhere: the runtime looks for them in libraries opened later
    spec.push_str(&later);
    Ok(spec)
}

/// The shared libraries `exe` loads at start-up, canonical paths, as `ldd` lists
/// them (none when `ldd` is missing or fails).
fn shared_libraries(exe: &Path) -> Vec<PathBuf> {
    let Ok(out) = Command::new("ldd").arg(exe).output() else { return Vec::new() };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let path = l.split("=>").nth(1)?.split(" (").next()?.trim();
            path.starts_with('/').then(|| std::fs::canonicalize(path).ok()).flatten()
        })
        .collect()
}

/// The defined functions of the ELF file `path` named in `names`: per match the
/// index of the name and its spec line, or `None` when it has no patchable entry.
fn module_functions(path: &Path, names: &[String]) -> Result<Vec<(usize, Option<String>)>> {
    use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let file = object::File::parse(&*data)
        .with_context(|| format!("{} is not a readable ELF file", path.display()))?;
    let mut out = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let mut seen = std::collections::BTreeSet::new();
        for sym in file.symbols().chain(file.dynamic_symbols()) {
            if sym.kind() != SymbolKind::Text || sym.is_undefined() || sym.size() == 0 {
                continue;
            }
            let Ok(raw) = sym.name() else { continue };
            let dem = memlens_symbols::demangle_symbol(raw);
            let matches =
                raw == name || dem == *name || dem.split('(').next().is_some_and(|d| d == name);
            if !matches || !seen.insert(sym.address()) {
                continue;
            }
            let code = file
                .sections()
                .find(|s| s.address() <= sym.address() && sym.address() < s.address() + s.size())
                .and_then(|s| {
                    let d = s.data().ok()?;
                    d.get((sym.address() - s.address()) as usize..)
                });
            let a = sym.address();
            out.push((
                i,
                code.and_then(memlens_symbols::patch_pad)
                    .map(|skip| format!("{a:x} {:x} {name}\n", a + skip)),
            ));
        }
    }
    Ok(out)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The program a libtool wrapper script runs (`# NAME - temporary wrapper script
/// for .libs/NAME`, relative to the script), or `None` when `path` is not one.
fn libtool_program(path: &Path) -> Option<PathBuf> {
    let mut head = vec![0u8; 4096];
    let n =
        std::fs::File::open(path).and_then(|mut f| std::io::Read::read(&mut f, &mut head)).ok()?;
    let text = String::from_utf8_lossy(&head[..n]);
    if !text.starts_with("#!") || !text.contains("Generated by libtool") {
        return None;
    }
    let real = text.lines().find_map(|l| l.split("temporary wrapper script for ").nth(1))?;
    Some(path.parent().unwrap_or(Path::new(".")).join(real.trim()))
}

/// Runs the program under recording and returns the exit code to use.
pub fn run(opts: RecordOpts) -> Result<i32> {
    let Some(prog) = opts.cmd.first() else {
        bail!("no program given: memlens record -- PROG [ARGS]")
    };
    let launch = find_program(prog)?;
    // A libtool wrapper script sets LD_LIBRARY_PATH and execs the real program:
    // run the script, check and read the program.
    let exe = match libtool_program(&launch) {
        Some(real) if real.is_file() => real,
        Some(real) => bail!(
            "{} is libtool's wrapper script for {}, which does not exist yet: run {} once (libtool builds it), then record again",
            launch.display(),
            real.display(),
            launch.display()
        ),
        None => launch.clone(),
    };
    check_program(&exe)?;
    let output = absolute(&opts.output)?;
    let lock = crate::files::Lock::take(&output)?;
    let tmp = crate::cc::TempDir::new()?;
    let mut cmd = Command::new(&launch);
    cmd.args(&opts.cmd[1..]);
    cmd.env("MEMLENS_OUTPUT", &output)
        .env("MEMLENS_STACK_DEPTH", opts.stack_depth.to_string())
        .env("MEMLENS_ZSTD_LEVEL", opts.zstd_level.to_string())
        .env_remove("MEMLENS_OWNER_PID");
    if opts.values {
        cmd.env("MEMLENS_VALUES", "1");
    }
    if opts.roi {
        cmd.env("MEMLENS_ROI", "1");
    }
    cmd.envs(opts.env.iter().map(|(k, v)| (k, v)));
    if !opts.filter.is_empty() {
        // The runtime checks event pcs, which are return addresses (instruction + 1).
        let exe_abs = std::fs::canonicalize(&exe)?;
        let ranges: String = crate::filter::code_ranges(&exe_abs, &opts.filter)?
            .iter()
            .map(|(a, b)| format!("{}\t{:x}\t{:x}\n", exe_abs.display(), a + 1, b + 1))
            .collect();
        let f = tmp.path.join("filter.txt");
        std::fs::write(&f, ranges)?;
        cmd.env("MEMLENS_FILTER", &f);
    }
    if let Some(list) = &opts.trace_calls {
        cmd.env("MEMLENS_TRACE_CALLS", trace_calls_spec(&exe, list, opts.quiet)?);
    }
    // The trace is a fresh file of ours (never a planted one), handed to the
    // runtime open: it does not open the path again.
    let trace = crate::files::create_in_place(&output)?;
    let fd = trace.as_raw_fd();
    cmd.env("MEMLENS_OUTPUT_FD", fd.to_string());
    // SAFETY: fcntl is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let status = wait_child(&mut cmd, &exe)?;
    // before `die_like`, which may die of the child's signal
    drop(tmp);
    let code = report(Some(&trace), &output, status, opts.quiet);
    drop(lock);
    code?;
    Ok(die_like(status))
}

/// The signals `record` passes on to the traced child.
const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];
/// The running child's pid (0: none yet).
static CHILD: AtomicI32 = AtomicI32::new(0);
/// A signal that arrived before the child existed.
static EARLY: AtomicI32 = AtomicI32::new(0);

/// Passes a signal sent to `memlens` on to the child, as a shell's job would get
/// it. Signals from the terminal (Ctrl-C, Ctrl-\) reached the child already
/// through the process group, and so did the child's own.
extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let (code, from) = unsafe { ((*info).si_code, (*info).si_pid()) };
    let child = CHILD.load(SeqCst);
    if code == libc::SI_KERNEL || (child > 0 && from == child) {
        return;
    }
    if child > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(child, sig) };
    } else {
        EARLY.store(sig, SeqCst);
    }
}

/// Runs the traced child to completion. The child starts with the signal
/// dispositions `memlens` got (an ignored SIGINT stays ignored, a default one stays
/// default so the runtime can record it); INT, TERM, HUP and QUIT sent to
/// `memlens` are forwarded to the child, whose status `finish` then reproduces.
pub(crate) fn wait_child(cmd: &mut Command, what: &Path) -> Result<std::process::ExitStatus> {
    let mut old: [libc::sigaction; 4] = unsafe { std::mem::zeroed() };
    let mut installed = [false; 4];
    for (i, &sig) in FORWARDED.iter().enumerate() {
        // SAFETY: valid sigaction structs; the handler only uses async-signal-safe calls.
        unsafe {
            if libc::sigaction(sig, std::ptr::null(), &mut old[i]) != 0
                || old[i].sa_sigaction == libc::SIG_IGN
            {
                continue;
            }
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = forward as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            installed[i] = libc::sigaction(sig, &sa, std::ptr::null_mut()) == 0;
        }
    }
    let status = cmd.spawn().and_then(|mut c| {
        let pid = c.id() as i32;
        CHILD.store(pid, SeqCst);
        let early = EARLY.swap(0, SeqCst);
        if early != 0 {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, early) };
        }
        let st = c.wait();
        CHILD.store(0, SeqCst);
        st
    });
    for (i, &sig) in FORWARDED.iter().enumerate() {
        if installed[i] {
            // SAFETY: restoring the disposition saved above.
            unsafe { libc::sigaction(sig, &old[i], std::ptr::null_mut()) };
        }
    }
    status.with_context(|| format!("cannot run {}", what.display()))
}

/// Writes the child's status into the trace (`file`, else the file at `output`)
/// and prints the summary.
pub(crate) fn report(
    file: Option<&std::fs::File>,
    output: &Path,
    status: std::process::ExitStatus,
    quiet: bool,
) -> Result<()> {
    let (kind, value) = match (status.code(), status.signal()) {
        (Some(c), _) => (1u32, c),
        (None, Some(s)) => (2u32, s),
        _ => (0, 0),
    };
    patch_end_status(file, output, kind, value)?;
    if !quiet {
        summary(output);
    }
    Ok(())
}

/// The exit code of the child's status — or dies of its signal, so the shell sees
/// what it would have seen.
pub(crate) fn die_like(status: std::process::ExitStatus) -> i32 {
    // the trace is final: the sink sends its last header and end mark first
    crate::sink::finish();
    if let Some(sig) = status.signal() {
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        return 128 + sig;
    }
    status.code().unwrap_or(1)
}

fn absolute(p: &Path) -> Result<PathBuf> {
    Ok(if p.is_absolute() { p.to_path_buf() } else { std::env::current_dir()?.join(p) })
}

/// Writes the waitpid status into the header (the runtime cannot know it when
/// main returns, or when the process was killed).
fn patch_end_status(
    file: Option<&std::fs::File>,
    path: &Path,
    kind: u32,
    value: i32,
) -> Result<()> {
    let opened;
    let f = match file {
        Some(f) => f,
        None => {
            opened = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)?;
            &opened
        }
    };
    let mut b = vec![0u8; HEADER_SIZE];
    let n = f.read_at(&mut b, 0)?;
    if n < 128 {
        bail!(
            "the program ran but wrote no trace to {}: was it built with `memlens cc`, and did it start at all?",
            path.display()
        );
    }
    let mut h = match FileHeader::decode(&b) {
        Ok(h) => h,
        Err(e) => bail!("the trace header in {} is unreadable: {e}", path.display()),
    };
    h.end_kind = kind;
    h.end_value = value;
    f.write_all_at(&h.encode(), 0)?;
    Ok(())
}

fn summary(path: &Path) {
    match memlens_format::TraceReader::open(path) {
        Ok(r) => {
            let t = r.totals();
            let acc = t.loads + t.stores;
            let bytes = r.bytes_on_disk();
            eprintln!(
                "memlens: wrote {} ({} threads, {} events, {} accesses, {:.2} B/access, {} dropped)",
                path.display(),
                r.streams().len(),
                t.events,
                acc,
                if acc > 0 { bytes as f64 / acc as f64 } else { 0.0 },
                r.dropped_events()
            );
            if let Some(tr) = r.truncation() {
                eprintln!(
                    "memlens: warning: trace is incomplete: {} at byte {}",
                    tr.reason, tr.offset
                );
            }
        }
        Err(e) => eprintln!("memlens: warning: cannot read back {}: {e}", path.display()),
    }
}
