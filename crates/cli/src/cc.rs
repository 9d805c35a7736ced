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

/// The compiler to run: `MEMLENS_CC`/`MEMLENS_CXX`, else clang-22 when present,
/// else gcc/g++.
fn choose_compiler(lang: Lang) -> (String, Family) {
    let (var, clang, gcc) = match lang {
        Lang::C => ("MEMLENS_CC", "clang-22", "gcc"),
        Lang::Cxx => ("MEMLENS_CXX", "clang++-22", "g++"),
    };
    let cc = match std::env::var(var) {
        Ok(v) if !v.is_empty() => v,
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
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if WITH_VALUE.contains(&a) {
            if a == "-o" {
                p.output = args.get(i + 1).cloned();
            }
            if a == "-x" {
                p.has_x = true;
                p.asm |= args.get(i + 1).is_some_and(|l| l.starts_with("assembler"));
            }
            i += 2;
            continue;
        }
        match a {
            "-c" | "-S" | "-E" | "-M" | "-MM" | "-fsyntax-only" => p.compile_only = true,
            _ if a.starts_with("-g") && a != "-g0" => p.has_g = true,
            _ if a.starts_with("-o") && a.len() > 2 => p.output = Some(a[2..].to_string()),
            _ if a.starts_with("-xassembler") => p.asm = true,
            _ if is_source(a) => p.sources.push(i),
            _ if is_asm(a) => p.asm = true,
            _ => {}
        }
        i += 1;
    }
    p
}

fn compile_flags(fam: Family, p: &Parsed, rt: &Runtime) -> Vec<String> {
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
        // clang leaves out a read followed by a write in the same block (a race
        // detector does not need it); we want every access.
        f.extend(["-mllvm", "-tsan-instrument-read-before-write=1"].map(String::from));
    }
    f.push(format!("-I{}", rt.include_dir.display()));
    f
}

/// Link arguments: the runtime for executables. A shared library is left with
/// its callbacks undefined; they resolve to the executable's runtime at load time,
/// which is why the executable exports them (also for `dlopen`ed libraries).
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

fn run(cmd: &mut Command) -> Result<i32> {
    let st = cmd.status().with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    Ok(st.code().unwrap_or(1))
}

/// Runs the compiler; returns its exit code.
pub fn main(lang: Lang, args: Vec<String>) -> Result<i32> {
    let (cc, fam) = choose_compiler(lang);
    if !on_path(&cc) && !Path::new(&cc).is_file() {
        bail!(
            "compiler `{cc}` not found; install it or set {} to another compiler",
            if lang == Lang::C { "MEMLENS_CC" } else { "MEMLENS_CXX" }
        );
    }
    let rt = Runtime::locate()?;
    let p = parse(&args);
    if args.iter().any(|a| a == "--version" || a == "-v" || a == "-dumpversion" || a == "--help") {
        return run(Command::new(&cc).args(&args));
    }
    if p.compile_only && p.asm && p.sources.is_empty() {
        return run(Command::new(&cc).args(&args));
    }
    let cflags = compile_flags(fam, &p, &rt);
    if p.compile_only {
        return run(Command::new(&cc).args(&cflags).args(&args));
    }
    let shared = args.iter().any(|a| a == "-shared");
    let alloc = crate::allocdefs::link_wrappers(&cc)?;
    if p.sources.is_empty() {
        return run(Command::new(&cc).args(&args).args(&alloc.args).args(link_flags(&rt, shared)));
    }
    if fam == Family::Clang {
        // clang can be told not to link its TSan runtime, so one command does.
        return run(Command::new(&cc)
            .args(&cflags)
            .arg("-fno-sanitize-link-runtime")
            .args(&args)
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
    cmd.args(&link_args).args(&alloc.args).args(link_flags(&rt, shared));
    run(&mut cmd)
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

/// A temporary directory removed on drop.
pub struct TempDir {
    /// Its path.
    pub path: PathBuf,
}

impl TempDir {
    /// Creates a fresh directory under the system temp dir.
    pub fn new() -> Result<TempDir> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("memlens-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&path)
            .with_context(|| format!("cannot create temporary directory {}", path.display()))?;
        Ok(TempDir { path })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
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
    fn link_only_options_stay_out_of_compiles() {
        let a: Vec<String> =
            ["-O2", "-lm", "-L", "/x", "-Wl,-z,now", "-DX=1"].map(String::from).to_vec();
        assert_eq!(strip_link_only(&a), vec!["-O2".to_string(), "-DX=1".to_string()]);
    }
}
