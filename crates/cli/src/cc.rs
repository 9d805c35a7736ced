//! `memlens cc` / `memlens c++`: drop-in compiler drivers.
//!
//! Compiles with the compiler's own ThreadSanitizer instrumentation and links
//! against the memlens runtime instead of TSan's. Linking with `-fsanitize=thread`
//! would silently pull in the real TSan runtime, so a command that both compiles
//! and links is split: each source is compiled to a temporary object with the
//! instrumentation flags, then everything is linked without them.

use crate::runtime::Runtime;
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// C or C++.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Lang {
    /// `memlens cc`.
    C,
    /// `memlens c++`.
    Cxx,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Family {
    Clang,
    Gcc,
}

fn on_path(name: &str) -> bool {
    crate::runtime::which(name).is_some()
}

/// The compiler to run: the one named by memlens's own name (`memlens-g++`), else
/// `MEMLENS_CC`/`MEMLENS_CXX`, else clang-22 when present, else gcc/g++.
fn choose_compiler(lang: Lang, named: Option<&str>) -> (String, Family) {
    let (var, clang, gcc) = match lang {
        Lang::C => ("MEMLENS_CC", "clang-22", "gcc"),
        Lang::Cxx => ("MEMLENS_CXX", "clang++-22", "g++"),
    };
    let cc = match (named, std::env::var(var)) {
        (Some(n), _) => n.to_string(),
        (None, Ok(v)) if !v.is_empty() => v,
        _ if on_path(clang) => clang.to_string(),
        _ => gcc.to_string(),
    };
    let base = Path::new(&cc).file_name().map(|s| s.to_string_lossy().to_string());
    let fam = if base.is_some_and(|b| b.contains("clang")) { Family::Clang } else { Family::Gcc };
    (cc, fam)
}

/// Options that take the next argument as their value.
const WITH_VALUE: &[&str] = &[
    "-o",
    "-I",
    "-include",
    "-imacros",
    "-x",
    "-MF",
    "-MT",
    "-MQ",
    "-isystem",
    "-iquote",
    "-idirafter",
    "-iprefix",
    "-isysroot",
    "-L",
    "-l",
    "-D",
    "-U",
    "-Xlinker",
    "-Xassembler",
    "-Xpreprocessor",
    "-Xclang",
    "-T",
    "-u",
    "-z",
    "-e",
    "--param",
    "-aux-info",
    "-B",
    "-mllvm",
    "-target",
    "--target",
    "-arch",
];

const SOURCE_EXT: &[&str] =
    &["c", "cc", "cpp", "cxx", "c++", "C", "cp", "CPP", "i", "ii", "m", "mm"];

/// Assembler inputs: assembled as they are, nothing to instrument.
const ASM_EXT: &[&str] = &["s", "S", "sx"];

fn is_asm(a: &str) -> bool {
    !a.starts_with('-')
        && Path::new(a).extension().is_some_and(|e| ASM_EXT.contains(&e.to_string_lossy().as_ref()))
}

/// An assembler invocation: assembler inputs (or `-x assembler*`) and no C or C++
/// source. CMake runs one for each `.S` file with the C compiler's path but without
/// its first argument, so `CC="memlens cc"` arrives as `memlens -D... -c x.S`.
pub fn is_assembler_call(args: &[String]) -> bool {
    let p = parse(args);
    p.asm && p.sources.is_empty()
}

fn is_source(a: &str) -> bool {
    !a.starts_with('-')
        && Path::new(a)
            .extension()
            .is_some_and(|e| SOURCE_EXT.contains(&e.to_string_lossy().as_ref()))
}

/// A parsed command line: which arguments are sources, and what it does.
struct Parsed {
    args: Vec<String>,
    sources: Vec<usize>,
    output: Option<String>,
    compile_only: bool,
    has_g: bool,
    has_x: bool,
    /// Assembler inputs or `-x assembler*`.
    asm: bool,
}

fn parse(args: &[String]) -> Parsed {
    let mut p = Parsed {
        args: args.to_vec(),
        sources: Vec::new(),
        output: None,
        compile_only: false,
        has_g: false,
        has_x: false,
        asm: false,
    };
    let mut lang: Option<String> = None;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if WITH_VALUE.contains(&a) {
            if a == "-o" {
                p.output = args.get(i + 1).cloned();
            }
            if a == "-x" {
                p.has_x = true;
                let l = args.get(i + 1);
                p.asm |= l.is_some_and(|l| l.starts_with("assembler"));
                lang = l.filter(|l| *l != "none" && !l.starts_with("assembler")).cloned();
            }
            i += 2;
            continue;
        }
        match a {
            "-c" | "-S" | "-E" | "-M" | "-MM" | "-fsyntax-only" => p.compile_only = true,
            _ if a.starts_with("-g") && a != "-g0" => p.has_g = true,
            _ if a.starts_with("-o") && a.len() > 2 => p.output = Some(a[2..].to_string()),
            _ if a.starts_with("-xassembler") => p.asm = true,
            _ if a.starts_with("-x") && a.len() > 2 => {
                p.has_x = true;
                lang = Some(a[2..].to_string()).filter(|l| l != "none");
            }
            // after `-x LANG` every input is a source of LANG, stdin (`-`) included
            _ if lang.is_some() && (a == "-" || !a.starts_with('-')) => p.sources.push(i),
            _ if is_source(a) => p.sources.push(i),
            _ if is_asm(a) => p.asm = true,
            _ => {}
        }
        i += 1;
    }
    p
}

fn compile_flags(fam: Family, p: &Parsed, rt: &Runtime, plugin: Option<&Path>) -> Vec<String> {
    let mut f = vec!["-fsanitize=thread".to_string(), "-fno-omit-frame-pointer".to_string()];
    // A 5-byte NOP pad at every function entry: `record --trace-calls` patches the
    // listed ones into calls to the runtime at start-up; the others keep the NOPs.
    if !p.args.iter().any(|a| a.starts_with("-fpatchable-function-entry")) {
        f.push("-fpatchable-function-entry=5".into());
    }
    if !p.has_g {
        f.push("-g".into());
    }
    if fam == Family::Clang {
        // clang leaves out a read followed by a write in the same block, and locals
        // whose address never escapes (a race detector needs neither); we want
        // every access.
        f.extend(["-mllvm", "-tsan-instrument-read-before-write=1"].map(String::from));
        f.extend(["-mllvm", "-tsan-omit-by-pointer-capturing=0"].map(String::from));
        // Everything else TSan leaves out (other widths, masked, gather/scatter,
        // constant data) comes from memlens's own pass.
        if let Some(plugin) = plugin {
            f.push(format!("-fpass-plugin={}", plugin.display()));
        }
    }
    f.push(format!("-I{}", rt.include_dir.display()));
    f
}

/// Link arguments: the runtime for executables. A shared library's callbacks
/// resolve to the executable's runtime at load time (its own weak fallbacks from
/// crate::stubs only without one), which is why the executable exports them (also
/// for `dlopen`ed libraries).
fn link_flags(rt: &Runtime, shared: bool) -> Vec<String> {
    if shared {
        return Vec::new();
    }
    let mut f = vec![rt.staticlib.display().to_string()];
    f.extend(["-lpthread", "-ldl", "-lm", "-lrt", "-lutil", "-lgcc_s"].map(String::from));
    for pat in ["__tsan_*", "__sanitizer_cov_*", "__memlens_*", "memlens_*"] {
        f.push(format!("-Wl,--export-dynamic-symbol={pat}"));
    }
    f
}

/// Link arguments that go before the user's: every entry point a library may call
/// is taken from the runtime even when the executable's own code does not call it,
/// and before any library (whose weak fallbacks from crate::stubs would otherwise
/// define it and leave the library unrecorded).
fn link_front(rt: &Runtime, shared: bool) -> Vec<String> {
    if shared {
        return Vec::new();
    }
    let mut f: Vec<String> =
        crate::stubs::forced().iter().map(|n| format!("-Wl,--undefined={n}")).collect();
    f.push(rt.staticlib.display().to_string());
    f
}

/// What gcc's TSan pass cannot be told to record (docs/fidelity.md).
const GCC_BLIND: &str = "with gcc, loads and stores of local variables whose address never escapes are not recorded (gcc's TSan pass has no switch for them); clang-22 records them (MEMLENS_CC=clang-22, see docs/fidelity.md)";

/// One line on stderr; `MEMLENS_QUIET=1` silences it (build logs of big projects).
pub(crate) fn note(text: &str) {
    if std::env::var_os("MEMLENS_QUIET").is_none_or(|v| v != "1") {
        eprintln!("memlens: note: {text}");
    }
}

/// The LLVM major version of a clang binary (`clang-22` by its name, else asked).
fn clang_major(cc: &str) -> Option<u32> {
    let base = Path::new(cc).file_name()?.to_string_lossy().to_string();
    if let Some(v) = base.rsplit('-').next().and_then(|v| v.parse().ok()) {
        return Some(v);
    }
    let out = Command::new(cc).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let at = text.find("version ")? + "version ".len();
    text[at..].split('.').next()?.parse().ok()
}

/// memlens's pass plugin for this clang, written next to the runtime (or into the
/// user's cache when that directory is read-only); `None`, with a note saying what
/// goes unrecorded, when it cannot be used.
fn pass_plugin(cc: &str, rt: &Runtime) -> Option<PathBuf> {
    const BLIND: &str = "vector accesses wider than 16 bytes, masked and gather/scatter accesses and loads of constant data are not recorded (docs/fidelity.md)";
    if !memlens_pass::available() {
        note(&format!("this memlens was built without its LLVM pass plugin (llvm-22-dev was missing): {BLIND}; install llvm-22-dev and rebuild memlens"));
        return None;
    }
    let major = clang_major(cc);
    if major != Some(memlens_pass::LLVM_MAJOR) {
        note(&format!(
            "{cc} is not clang {} (memlens's pass plugin needs that version): {BLIND}",
            memlens_pass::LLVM_MAJOR
        ));
        return None;
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|d| d.join("memlens"));
    let mut why = String::new();
    for dir in std::iter::once(rt.dir.clone()).chain(cache) {
        match memlens_pass::install(&dir) {
            Ok(p) => return p,
            Err(e) => why = e.to_string(),
        }
    }
    note(&format!("{why}: {BLIND}"));
    None
}

fn run(cmd: &mut Command) -> Result<i32> {
    let st = cmd.status().with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    Ok(st.code().unwrap_or(1))
}

/// memlens's own part of `memlens cc --help` (the compiler's help follows).
pub const HELP: &str = "\
memlens cc / memlens c++: compile and link C and C++ with every memory access recorded
(drop-in for gcc/clang: any of their arguments; `memlens record -- ./prog` records it)

Usage: memlens cc [COMPILER ARGS]    memlens c++ [COMPILER ARGS]

As single commands for build systems (CC=... cmake/meson/configure), symlinks to memlens:
  memlens-cc, memlens-c++          the compiler MEMLENS_CC / MEMLENS_CXX picks
  memlens-gcc, memlens-g++, memlens-clang-22, memlens-clang++-22, memlens-<compiler>
                                   always that compiler (CMake's cache keeps the choice)

Environment:
  MEMLENS_CC, MEMLENS_CXX  compiler (default clang-22 when installed, else gcc / g++)
  MEMLENS_ALLOC_DEFS       DINAMITE-style alloc.in of custom allocators (when linking)
  MEMLENS_QUIET=1          no notes on stderr

Adds -fsanitize=thread (linked against memlens's runtime, not TSan's), -g, frame
pointers and a 5-byte NOP pad at function entry; with clang-22 also memlens's pass
plugin (docs/fidelity.md). A -shared library records through the executable's
runtime, and carries weak no-op fallbacks so it also loads, unrecorded, in programs
built without memlens (-Wl,--no-undefined / -Wl,-z,defs are dropped for it).
-static is not supported (record static binaries with `memlens record --dbi`).

";

/// Runs the compiler; returns its exit code.
pub fn main(lang: Lang, args: Vec<String>) -> Result<i32> {
    main_with(lang, None, args)
}

/// `memlens-<compiler> ARGS` (memlens installed under that name): `memlens cc` or
/// `c++` with that compiler, whatever MEMLENS_CC says later, so a build system
/// that caches the compiler's path caches the choice.
pub fn main_named(compiler: &str, args: Vec<String>) -> Result<i32> {
    let lang = if compiler.contains("++") { Lang::Cxx } else { Lang::C };
    main_with(lang, Some(compiler), args)
}

fn main_with(lang: Lang, named: Option<&str>, args: Vec<String>) -> Result<i32> {
    let (cc, fam) = choose_compiler(lang, named);
    if args.iter().any(|a| a == "--help") {
        print!("{HELP}The compiler's help ({cc} --help):\n\n");
        use std::io::Write;
        std::io::stdout().flush()?;
    }
    if !on_path(&cc) && !Path::new(&cc).is_file() {
        bail!(
            "compiler `{cc}` not found; install it or set {} to another compiler",
            if lang == Lang::C { "MEMLENS_CC" } else { "MEMLENS_CXX" }
        );
    }
    if args.iter().any(|a| a == "--version" || a == "-v" || a == "-dumpversion" || a == "--help") {
        return run(Command::new(&cc).args(&args));
    }
    let rt = Runtime::locate()?;
    let args = link_mode_checks(args)?;
    let p = parse(&args);
    if p.compile_only && p.asm && p.sources.is_empty() {
        return run(Command::new(&cc).args(&args));
    }
    let plugin = match fam {
        Family::Clang if !p.sources.is_empty() => pass_plugin(&cc, &rt),
        _ => None,
    };
    if fam == Family::Gcc && !p.sources.is_empty() {
        note(GCC_BLIND);
    }
    let cflags = compile_flags(fam, &p, &rt, plugin.as_deref());
    if p.compile_only {
        return run(Command::new(&cc).args(&cflags).args(&args));
    }
    let shared = args.iter().any(|a| a == "-shared");
    let mut alloc = crate::allocdefs::link_wrappers(&cc)?;
    let _fallbacks = match shared {
        true => crate::stubs::for_shared_link(&cc, &args, &mut alloc.args)?,
        false => None,
    };
    if p.sources.is_empty() {
        return run(Command::new(&cc)
            .args(link_front(&rt, shared))
            .args(&args)
            .args(reset_lang(&p))
            .args(&alloc.args)
            .args(link_flags(&rt, shared)));
    }
    if fam == Family::Clang {
        // clang can be told not to link its TSan runtime, so one command does.
        return run(Command::new(&cc)
            .args(&cflags)
            .arg("-fno-sanitize-link-runtime")
            .args(link_front(&rt, shared))
            .args(&args)
            .args(reset_lang(&p))
            .args(&alloc.args)
            .args(link_flags(&rt, shared)));
    }
    if p.has_x {
        bail!("with gcc, `-x` and linking in one command are not supported; compile with -c first, then link with memlens cc");
    }
    // Compile each source separately, then link.
    let tmp = TempDir::new()?;
    let mut link_args: Vec<OsString> = Vec::new();
    let mut compile_common: Vec<String> = Vec::new();
    let mut i = 0;
    while i < p.args.len() {
        let a = &p.args[i];
        if a == "-o" {
            i += 2;
            continue;
        }
        // Assembler files go to the link step, which assembles them.
        if !p.sources.contains(&i)
            && !is_asm(a)
            && !a.ends_with(".o")
            && !a.ends_with(".a")
            && !a.ends_with(".so")
        {
            compile_common.push(a.clone());
            if WITH_VALUE.contains(&a.as_str()) {
                if let Some(v) = p.args.get(i + 1) {
                    compile_common.push(v.clone());
                }
                i += 1;
            }
        }
        i += 1;
    }
    // Drop link-only options from the compile step: they only cause warnings there.
    let compile_common: Vec<String> = strip_link_only(&compile_common);
    for (n, &si) in p.sources.iter().enumerate() {
        let src = &p.args[si];
        let obj = tmp.path.join(format!("{n}-{}.o", file_stem(src)));
        let code = run(Command::new(&cc)
            .args(&cflags)
            .args(&compile_common)
            .arg("-c")
            .arg(src)
            .arg("-o")
            .arg(&obj))?;
        if code != 0 {
            return Ok(code);
        }
    }
    let mut i = 0;
    let mut n = 0;
    while i < p.args.len() {
        if p.sources.contains(&i) {
            let src = &p.args[i];
            link_args.push(tmp.path.join(format!("{n}-{}.o", file_stem(src))).into());
            n += 1;
        } else {
            link_args.push(p.args[i].clone().into());
        }
        i += 1;
    }
    let mut cmd = Command::new(&cc);
    if !p.has_g {
        cmd.arg("-g");
    }
    cmd.args(link_front(&rt, shared))
        .args(&link_args)
        .args(&alloc.args)
        .args(link_flags(&rt, shared));
    run(&mut cmd)
}

/// `-x none` after the user's `-x LANG`, so the objects and the runtime archive
/// memlens appends are not compiled as source of that language.
fn reset_lang(p: &Parsed) -> &'static [&'static str] {
    if p.has_x {
        &["-x", "none"]
    } else {
        &[]
    }
}

/// Link options memlens cannot honour: `-static` fails at once with what to do
/// instead; `-shared` drops `--no-undefined` / `-z defs` (meson's default), since
/// a memlens-built library leaves its callbacks for the executable's runtime.
fn link_mode_checks(args: Vec<String>) -> Result<Vec<String>> {
    let links = !args
        .iter()
        .any(|a| matches!(a.as_str(), "-c" | "-S" | "-E" | "-M" | "-MM" | "-fsyntax-only"));
    if links && args.iter().any(|a| a == "-static" || a == "-static-pie") {
        bail!("memlens cannot link static executables (-static): its runtime takes over malloc and the pthread calls through the dynamic linker; drop -static (-static-libgcc/-static-libstdc++ still work), or build without memlens and record the static binary with `memlens record --dbi`");
    }
    if !args.iter().any(|a| a == "-shared") {
        return Ok(args);
    }
    let (kept, dropped) = drop_no_undefined(args);
    if dropped {
        note("dropped -Wl,--no-undefined / -Wl,-z,defs from this -shared link: a library built with memlens leaves its recording callbacks (__tsan_*) to the executable's runtime");
    }
    Ok(kept)
}

/// `args` without the linker options that forbid undefined symbols, and whether
/// there were any.
fn drop_no_undefined(args: Vec<String>) -> (Vec<String>, bool) {
    let forbids = |o: &str| matches!(o, "--no-undefined" | "-no-undefined" | "-zdefs");
    let mut out = Vec::new();
    let mut dropped = false;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        let next = args.get(i + 1).map(String::as_str);
        if a == "-Xlinker" && next.is_some_and(forbids) {
            dropped = true;
            i += 2;
            continue;
        }
        if let Some(list) = a.strip_prefix("-Wl,") {
            let opts: Vec<&str> = list.split(',').collect();
            let mut keep = Vec::new();
            let mut j = 0;
            while j < opts.len() {
                if forbids(opts[j]) || (opts[j] == "-z" && opts.get(j + 1) == Some(&"defs")) {
                    dropped = true;
                    j += if opts[j] == "-z" { 2 } else { 1 };
                    continue;
                }
                keep.push(opts[j]);
                j += 1;
            }
            if !keep.is_empty() {
                out.push(format!("-Wl,{}", keep.join(",")));
            }
            i += 1;
            continue;
        }
        out.push(a.clone());
        i += 1;
    }
    (out, dropped)
}

fn strip_link_only(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if matches!(a.as_str(), "-l" | "-L" | "-Xlinker" | "-T" | "-u" | "-z" | "-e") {
            i += 2;
            continue;
        }
        let link_only = (a.starts_with("-l") && a.len() > 2)
            || (a.starts_with("-L") && a.len() > 2)
            || a.starts_with("-Wl,")
            || matches!(
                a.as_str(),
                "-static" | "-shared" | "-rdynamic" | "-pie" | "-no-pie" | "-s"
            );
        if !link_only {
            out.push(a.clone());
        }
        i += 1;
    }
    out
}

fn file_stem(p: &str) -> String {
    Path::new(p).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

/// A private temporary directory (mode 0700, random name, created exclusively, so
/// another user cannot plant links in it or predict it), removed on drop.
pub struct TempDir {
    /// Its path.
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl TempDir {
    /// Creates a fresh directory under the system temp dir.
    pub fn new() -> Result<TempDir> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("memlens-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .context("cannot create a temporary directory (set TMPDIR to a writable one)")?;
        Ok(TempDir { path: dir.path().to_path_buf(), _dir: dir })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sources_and_modes() {
        let a: Vec<String> =
            ["-O2", "-I", "inc", "a.c", "-o", "prog", "b.cpp", "-lm"].map(String::from).to_vec();
        let p = parse(&a);
        assert_eq!(p.sources, vec![3, 6]);
        assert_eq!(p.output.as_deref(), Some("prog"));
        assert!(!p.compile_only);
        let p = parse(&["-c".into(), "x.c".into()]);
        assert!(p.compile_only);
        assert!(!p.has_g);
        assert!(parse(&["-g3".into()]).has_g);
    }

    #[test]
    fn dash_x_makes_every_later_input_a_source() {
        let a: Vec<String> = ["-x", "c", "a.txt", "-", "-x", "none", "b.o", "-xc", "c.in"]
            .map(String::from)
            .to_vec();
        let p = parse(&a);
        assert_eq!(p.sources, vec![2, 3, 8]);
        assert!(p.has_x);
    }

    #[test]
    fn shared_links_drop_no_undefined() {
        let a: Vec<String> = [
            "-shared",
            "-Wl,--no-undefined",
            "-Wl,-O1,-z,defs,--as-needed",
            "-Xlinker",
            "-zdefs",
            "x.o",
        ]
        .map(String::from)
        .to_vec();
        let (kept, dropped) = drop_no_undefined(a);
        assert!(dropped);
        assert_eq!(kept, ["-shared", "-Wl,-O1,--as-needed", "x.o"].map(String::from).to_vec());
        let (kept, dropped) = drop_no_undefined(vec!["-Wl,-z,now".into()]);
        assert!(!dropped);
        assert_eq!(kept, vec!["-Wl,-z,now".to_string()]);
    }

    #[test]
    fn link_only_options_stay_out_of_compiles() {
        let a: Vec<String> =
            ["-O2", "-lm", "-L", "/x", "-Wl,-z,now", "-DX=1"].map(String::from).to_vec();
        assert_eq!(strip_link_only(&a), vec!["-O2".to_string(), "-DX=1".to_string()]);
    }
}
