//! Builds that just work: default cargo profiles, the user's rustc wrapper, other
//! toolchains, workspaces, meson's and static links, compilers chosen by name, and
//! the drivers' help.

use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A copy of `tests/programs/<name>` under `dir` with a Cargo.toml of only
/// `[package]` and `[workspace]`: cargo's default profiles (release: no debug info,
/// `strip = "debuginfo"`).
fn default_cargo_project(dir: &Path, name: &str) -> PathBuf {
    let proj = dir.join(name);
    std::fs::create_dir_all(proj.join("src")).unwrap();
    let src = programs().join(name);
    let toml = std::fs::read_to_string(src.join("Cargo.toml")).unwrap();
    let toml = toml.split("[profile").next().unwrap();
    assert!(toml.contains("[workspace]"));
    std::fs::write(proj.join("Cargo.toml"), toml).unwrap();
    std::fs::copy(src.join("src/main.rs"), proj.join("src/main.rs")).unwrap();
    proj
}

/// `memlens cargo ARGS` in `dir` with the environment of a user's shell (not the
/// test harness's cargo variables).
fn memlens_cargo(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    require_runtime();
    let mut cmd = Command::new(memlens());
    cmd.arg("cargo").args(args).current_dir(dir);
    for v in
        ["CARGO_TARGET_DIR", "RUSTFLAGS", "CARGO", "RUSTC", "RUSTUP_TOOLCHAIN", "RUSTC_WRAPPER"]
    {
        cmd.env_remove(v);
    }
    cmd.envs(env.iter().copied()).output().unwrap()
}

fn release_exe(root: &Path, name: &str) -> PathBuf {
    root.join(format!("target/memlens/x86_64-unknown-linux-gnu/release/{name}"))
}

#[test]
fn cargo_release_with_default_profile_has_source_lines() {
    let dir = scratch("cargo-default");
    let proj = default_cargo_project(&dir, "rsprog");
    let out = memlens_cargo(&proj, &["build", "--release", "--quiet"], &[]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let trace = dir.join("t.trace");
    let out = record(&release_exe(&proj, "rsprog"), &trace, &[]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let rows = report(&trace, "line");
    let l = |m| line_of("rsprog/src/main.rs", m);
    assert_eq!(at_line(&rows, "rsprog/src/main.rs", l("store"), "stores"), 1000, "{rows:#?}");
    assert_eq!(at_line(&rows, "rsprog/src/main.rs", l("load"), "loads"), 1000);
}

/// A RUSTC_WRAPPER the user set, in the environment or in `.cargo/config.toml`
/// (sccache), still runs: memlens runs it with rustc and memlens's flags.
#[test]
fn cargo_runs_the_users_rustc_wrapper() {
    for how in ["env", "config"] {
        let dir = scratch("cargo-wrapper");
        let proj = default_cargo_project(&dir, "rsprog");
        let log = dir.join("wrapper.log");
        let wrapper = dir.join("mywrapper");
        std::fs::write(
            &wrapper,
            format!("#!/bin/sh\necho \"$@\" >> '{}'\nexec \"$@\"\n", log.display()),
        )
        .unwrap();
        Command::new("chmod").arg("+x").arg(&wrapper).status().unwrap();
        let w = wrapper.to_str().unwrap();
        let env: &[(&str, &str)] = if how == "env" { &[("RUSTC_WRAPPER", w)] } else { &[] };
        if how == "config" {
            std::fs::create_dir_all(proj.join(".cargo")).unwrap();
            let cfg = format!("[build]\nrustc-wrapper = \"{w}\"\n");
            std::fs::write(proj.join(".cargo/config.toml"), cfg).unwrap();
        }
        let out = memlens_cargo(&proj, &["build", "--release", "--quiet"], env);
        assert!(out.status.success(), "{how}: {}", stderr(&out));
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        let compile =
            log.lines().find(|l| l.contains("--crate-name rsprog")).unwrap_or_else(|| {
                panic!("{how}: the user's wrapper did not compile rsprog: {log}");
            });
        // The user's wrapper gets rustc with memlens's flags.
        assert!(compile.contains("passes=function(tsan)"), "{how}: {compile}");
        let trace = dir.join("t.trace");
        let out = record(&release_exe(&proj, "rsprog"), &trace, &[]);
        assert!(out.status.success(), "{how}: {}", stderr(&out));
        assert_eq!(stdout(&out), "s=999000 boxed=57 counter=4000\n");
    }
}

#[test]
fn cargo_says_at_once_when_the_project_uses_another_rustc() {
    let dir = scratch("cargo-toolchain");
    let proj = default_cargo_project(&dir, "rsprog");
    let check = |out: &Output, what: &str| {
        let err = stderr(out);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
        assert!(err.starts_with("memlens: error: this project builds with rustc "), "{err}");
        assert!(err.contains("RUSTUP_TOOLCHAIN="), "{err}");
        assert!(!err.contains("E0514"), "{err}");
        assert!(!proj.join("target").exists(), "{what}: built before checking");
    };
    // RUSTC pointing at another compiler.
    let fake = dir.join("oldrustc");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'rustc 1.70.0 (90c541806 2023-05-31)'\necho 'release: 1.70.0'\n",
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&fake).status().unwrap();
    let out = memlens_cargo(&proj, &["build", "--release"], &[("RUSTC", fake.to_str().unwrap())]);
    check(&out, "RUSTC");
    assert!(stderr(&out).contains("builds with rustc 1.70.0 (90c541806 2023-05-31)"));
    // A rust-toolchain.toml pinning another installed toolchain.
    let nightly = Command::new("rustup").args(["run", "nightly", "rustc", "-V"]).output();
    if !nightly.is_ok_and(|o| o.status.success()) {
        eprintln!("note: no nightly toolchain installed; rust-toolchain.toml case skipped");
        return;
    }
    check(&memlens_cargo(&proj, &["+nightly", "build", "--release"], &[]), "+nightly");
    std::fs::write(proj.join("rust-toolchain.toml"), "[toolchain]\nchannel = \"nightly\"\n")
        .unwrap();
    check(&memlens_cargo(&proj, &["build", "--release"], &[]), "rust-toolchain.toml");
}

#[test]
fn cargo_in_a_workspace_member_builds_in_the_workspace_root() {
    let dir = scratch("cargo-ws");
    let ws = dir.join("ws");
    let member = ws.join("app");
    std::fs::create_dir_all(member.join("src")).unwrap();
    std::fs::write(ws.join("Cargo.toml"), "[workspace]\nmembers = [\"app\"]\nresolver = \"2\"\n")
        .unwrap();
    std::fs::write(
        member.join("Cargo.toml"),
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(
        member.join("src/main.rs"),
        "fn main() { println!(\"{}\", vec![1, 2, 3].iter().sum::<i32>()); }\n",
    )
    .unwrap();
    let out = memlens_cargo(&member, &["build", "--release", "--quiet"], &[]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert!(release_exe(&ws, "app").is_file(), "not in the workspace's target/memlens");
    assert!(!member.join("target").exists(), "a second target tree in the member");
    let canon = std::fs::canonicalize(&ws).unwrap();
    assert!(
        stderr(&out).contains(&format!("under {}/target/memlens/", canon.display())),
        "{}",
        stderr(&out)
    );
}

/// meson links shared libraries with `-Wl,--no-undefined` by default; a library
/// built with memlens leaves its callbacks to the executable, and still loads.
#[test]
fn shared_libraries_link_with_no_undefined() {
    let dir = scratch("noundef");
    let p = programs();
    for cc in Cc::all() {
        let sub = dir.join(format!("{cc:?}"));
        std::fs::create_dir_all(&sub).unwrap();
        let lib = sub.join("libtraced.so");
        let (l, src) = (lib.to_str().unwrap(), p.join("libtraced.c"));
        let s = src.to_str().unwrap();
        memlens_cc(cc, false, &["-O2", "-shared", "-fPIC", "-Wl,--no-undefined", s, "-o", l]);
        memlens_cc(cc, false, &["-O2", "-shared", "-fPIC", "-Wl,-O1,-z,defs", s, "-o", l]);
        let exe = sub.join("tracelib");
        let rpath = format!("-Wl,-rpath,{}", sub.display());
        let main = p.join("tracelib.c");
        let (m, e, d) = (main.to_str().unwrap(), exe.to_str().unwrap(), sub.to_str().unwrap());
        memlens_cc(cc, false, &["-O2", m, "-L", d, "-ltraced", &rpath, "-o", e]);
        let trace = sub.join("t.trace");
        let out = record(&exe, &trace, &["5"]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "mix 555 sum 15\n", "{cc:?}");
    }
}

#[test]
fn static_links_fail_at_once_with_the_fix() {
    let dir = scratch("static");
    let exe = dir.join("counts");
    let src = programs().join("counts.c");
    let out = Command::new(memlens())
        .args(["cc", "-O2", "-static"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .env("MEMLENS_CC", "gcc")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("cannot link static executables") && err.contains("memlens record --dbi"));
    assert!(!exe.exists());
    // Compiling alone with -static in the flags (CFLAGS) is fine.
    let obj = dir.join("counts.o");
    memlens_cc(
        Cc::Gcc,
        false,
        &["-c", "-static", src.to_str().unwrap(), "-o", obj.to_str().unwrap()],
    );
}

/// `memlens-gcc` / `memlens-g++` (symlinks to memlens) always use that compiler: a
/// build system caches the path, so the choice survives a later `make`.
#[test]
fn compiler_chosen_by_memlens_own_name() {
    let dir = scratch("named-cc");
    let producer = |obj: &Path| {
        let out = Command::new("readelf").arg("--debug-dump=info").arg(obj).output().unwrap();
        let text = stdout(&out);
        let l = text.lines().find(|l| l.contains("DW_AT_producer")).unwrap_or("").to_string();
        l
    };
    for (name, src) in [("memlens-gcc", "counts.c"), ("memlens-g++", "objects.cpp")] {
        let link = dir.join(name);
        std::os::unix::fs::symlink(memlens(), &link).unwrap();
        let obj = dir.join(format!("{src}.o"));
        let out = Command::new(&link)
            .args(["-O1", "-c"])
            .arg(programs().join(src))
            .arg("-o")
            .arg(&obj)
            .env("MEMLENS_CC", "clang-22")
            .env("MEMLENS_CXX", "clang++-22")
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let prod = producer(&obj);
        let want = if src.ends_with(".cpp") { "GNU C++" } else { "GNU C" };
        assert!(prod.contains(want), "{name}: {prod}");
    }
    // Linked, the program records.
    let exe = dir.join("counts");
    let out = Command::new(dir.join("memlens-gcc"))
        .arg(dir.join("counts.c.o"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert!(record(&exe, &dir.join("t.trace"), &[]).status.success());
}

#[test]
fn drivers_show_memlens_options_before_the_tools_help() {
    let out = Command::new(memlens()).args(["cc", "--help"]).env("MEMLENS_CC", "gcc").output();
    let out = out.unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("memlens cc / memlens c++:"), "{text}");
    let ours = text.find("MEMLENS_CXX").unwrap();
    let theirs = text.find("Usage: gcc").expect("gcc's help follows");
    assert!(ours < theirs);
    assert!(text.contains("memlens-g++"), "{text}");
    let out = Command::new(memlens()).args(["cargo", "build", "--help"]).output().unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("memlens cargo:"), "{text}");
    assert!(text.find("RUSTC_WRAPPER").unwrap() < text.find("Usage: cargo build").unwrap());
    for (sub, needle) in
        [("cc", "MEMLENS_CC"), ("cargo", "target/memlens"), ("record", "--trace-calls")]
    {
        let out = run_memlens(&["help", sub]);
        assert!(out.status.success(), "help {sub}: {}", stderr(&out));
        assert!(stdout(&out).contains(needle), "help {sub}: {}", stdout(&out));
    }
}

#[test]
fn usage_errors_keep_clap_suggestions_on_one_line() {
    let check = |args: &[&str], needle: &str| {
        let out = run_memlens(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("memlens: error:") && err.contains(needle), "{args:?}: {err}");
    };
    check(&["reprot", "x.trace"], "tip: some similar subcommands exist: 'export', 'report'");
    check(
        &["report", "--by", "nonsense", "x.trace"],
        "possible values: line, function, variable, thread, alloc (see `memlens report --help`)",
    );
    check(&["analyze", "cachesimm", "x.trace"], "possible values: counts");
}

/// A program libtool links against an uninstalled library is a wrapper script that
/// sets LD_LIBRARY_PATH and execs `.libs/NAME`: `record` runs the script and checks
/// the program.
#[test]
fn libtool_wrapper_scripts_are_recorded() {
    if Command::new("libtool").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "libtool is required in CI");
        eprintln!("note: libtool not installed; test skipped");
        return;
    }
    require_runtime();
    let dir = scratch("libtool");
    std::os::unix::fs::symlink(memlens(), dir.join("memlens-gcc")).unwrap();
    let p = programs();
    let (lib, main) = (p.join("libtraced.c"), p.join("tracelib.c"));
    let steps: [&[&str]; 4] = [
        &[
            "--mode=compile",
            "./memlens-gcc",
            "-O2",
            "-c",
            lib.to_str().unwrap(),
            "-o",
            "libtraced.lo",
        ],
        &[
            "--mode=link",
            "./memlens-gcc",
            "-o",
            "libtraced.la",
            "libtraced.lo",
            "-rpath",
            "/usr/local/lib",
        ],
        &[
            "--mode=compile",
            "./memlens-gcc",
            "-O2",
            "-c",
            main.to_str().unwrap(),
            "-o",
            "tracelib.lo",
        ],
        &["--mode=link", "./memlens-gcc", "-o", "tracelib", "tracelib.lo", "libtraced.la"],
    ];
    for args in steps {
        let out = Command::new("libtool")
            .arg("--tag=CC")
            .args(args)
            .current_dir(&dir)
            .env("MEMLENS_QUIET", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "libtool {args:?}: {}", stderr(&out));
    }
    let script = dir.join("tracelib");
    assert!(std::fs::read_to_string(&script).unwrap().contains("Generated by libtool"));
    let trace = dir.join("t.trace");
    let out = record(&script, &trace, &["5"]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert_eq!(stdout(&out), "mix 555 sum 15\n");
    assert!(info(&trace)["events"].as_u64().unwrap() > 0);
}

/// The symbols `nm ARGS file` lists with type `kind`.
fn defined(file: &Path, args: &[&str], kind: &str) -> Vec<String> {
    let out = Command::new("nm").args(args).arg(file).output().unwrap();
    stdout(&out)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[1] == kind).then(|| f[2].to_string())
        })
        .collect()
}

/// A library built with `memlens cc -shared` loads in a program built without
/// memlens (its weak fallbacks do the atomics and memset, record nothing), and is
/// recorded in a program built with memlens (the executable's runtime wins).
#[test]
fn shared_libraries_load_without_memlens() {
    let dir = scratch("fallbacks");
    let p = programs();
    let (lib_src, main_src) = (p.join("fallbacklib.c"), p.join("fallbackmain.c"));
    let rt = memlens().parent().unwrap().join("libmemlens_rt.a");
    let entry: Vec<String> = defined(&rt, &["-g", "--defined-only"], "T")
        .into_iter()
        .filter(|s| {
            ["__tsan_", "__sanitizer_cov_", "__memlens_", "memlens_"]
                .iter()
                .any(|p| s.starts_with(p))
        })
        .collect();
    assert!(entry.len() > 100, "{entry:?}");
    for cc in Cc::all() {
        let sub = dir.join(format!("{cc:?}"));
        std::fs::create_dir_all(&sub).unwrap();
        let lib = sub.join("libfallback.so");
        let (l, s) = (lib.to_str().unwrap(), lib_src.to_str().unwrap());
        memlens_cc(cc, false, &["-O2", "-shared", "-fPIC", s, "-o", l]);
        // Every entry point of the runtime has its fallback in the library.
        let weak = defined(&lib, &["-D"], "W");
        let missing: Vec<_> = entry.iter().filter(|e| !weak.contains(*e)).collect();
        assert!(missing.is_empty(), "{cc:?}: no fallback for {missing:?}");
        let rpath = format!("-Wl,-rpath,{}", sub.display());
        let (d, m) = (sub.to_str().unwrap(), main_src.to_str().unwrap());
        let plain = sub.join("plain");
        let out = Command::new("gcc")
            .args(["-O2", m, "-L", d, "-lfallback", &rpath, "-o"])
            .arg(&plain)
            .output()
            .unwrap();
        assert!(out.status.success(), "{cc:?}: plain link: {}", stderr(&out));
        let out = Command::new(&plain).output().unwrap();
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "84\n", "{cc:?}");
        let exe = sub.join("inst");
        memlens_cc(
            cc,
            false,
            &["-O2", m, "-L", d, "-lfallback", &rpath, "-o", exe.to_str().unwrap()],
        );
        let trace = sub.join("t.trace");
        let out = record(&exe, &trace, &[]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "84\n", "{cc:?}");
        let rows = report(&trace, "line");
        let line = line_of("fallbacklib.c", "rmw");
        assert_eq!(at_line(&rows, "fallbacklib.c", line, "stores"), 10, "{cc:?}: {rows:#?}");
        // (gcc puts part of its vectorised loop's reads on other lines)
        let run = line_of("fallbacklib.c", "run");
        let clang = matches!(cc, Cc::Clang);
        if clang {
            assert_eq!(at_line(&rows, "fallbacklib.c", run, "bytes_read"), 80, "{rows:#?}");
        }
        // A version script hiding all but the API would hide the fallbacks too and
        // bind the library to them: it gets none, and is recorded.
        let vs = sub.join("v");
        std::fs::create_dir_all(&vs).unwrap();
        std::fs::write(vs.join("v.map"), "V1 { global: bump; local: *; };\n").unwrap();
        let lib = vs.join("libfallback.so");
        let script = format!("-Wl,--version-script={}", vs.join("v.map").display());
        memlens_cc(
            cc,
            false,
            &["-O2", "-shared", "-fPIC", &script, s, "-o", lib.to_str().unwrap()],
        );
        let rpath = format!("-Wl,-rpath,{}", vs.display());
        let exe = vs.join("inst");
        let (d, e) = (vs.to_str().unwrap(), exe.to_str().unwrap());
        memlens_cc(cc, false, &["-O2", m, "-L", d, "-lfallback", &rpath, "-o", e]);
        let out = record(&exe, &trace, &[]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        let rows = report(&trace, "line");
        assert_eq!(at_line(&rows, "fallbacklib.c", line, "stores"), 10, "{cc:?}: version script");
        if clang {
            assert_eq!(at_line(&rows, "fallbacklib.c", run, "bytes_read"), 80, "version script");
        }
    }
}

/// Whether a build tool is installed (required in CI).
fn have(tool: &str) -> bool {
    let ok = Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "{tool} is required in CI");
        eprintln!("note: {tool} not installed; test skipped");
    }
    ok
}

/// meson with its defaults (`-Wl,--no-undefined`, `--as-needed`, `--start-group`)
/// builds a shared library and a program with `CC=memlens-cc`, and it records.
#[test]
fn meson_builds_a_shared_library_and_a_program() {
    if !have("meson") || !have("ninja") {
        return;
    }
    require_runtime();
    let dir = scratch("meson");
    let cc = dir.join("memlens-cc");
    std::os::unix::fs::symlink(memlens(), &cc).unwrap();
    for f in ["libtraced.c", "tracelib.c"] {
        std::fs::copy(programs().join(f), dir.join(f)).unwrap();
    }
    std::fs::write(
        dir.join("meson.build"),
        "project('mt', 'c')\nlib = shared_library('traced', 'libtraced.c')\n\
         executable('tracelib', 'tracelib.c', link_with: lib)\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(args[0])
            .args(&args[1..])
            .current_dir(&dir)
            .env("CC", &cc)
            .env("MEMLENS_QUIET", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}{}", stdout(&out), stderr(&out));
    };
    run(&["meson", "setup", "build"]);
    run(&["ninja", "-C", "build"]);
    let trace = dir.join("t.trace");
    let out = record(&dir.join("build/tracelib"), &trace, &["5"]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert_eq!(stdout(&out), "mix 555 sum 15\n");
}

/// CMake caches the compiler's path, not MEMLENS_CC: with `CC=memlens-gcc` a later
/// `make` still compiles with gcc whatever MEMLENS_CC says then.
#[test]
fn cmake_keeps_the_compiler_memlens_is_named_after() {
    if !have("cmake") {
        return;
    }
    require_runtime();
    let dir = scratch("cmake");
    let cc = dir.join("memlens-gcc");
    std::os::unix::fs::symlink(memlens(), &cc).unwrap();
    std::fs::copy(programs().join("counts.c"), dir.join("counts.c")).unwrap();
    std::fs::write(
        dir.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.10)\nproject(cm C)\nadd_executable(counts counts.c)\n",
    )
    .unwrap();
    let out = Command::new("cmake")
        .args(["-S", ".", "-B", "build"])
        .current_dir(&dir)
        .env("CC", &cc)
        .env("MEMLENS_QUIET", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "cmake: {}{}", stdout(&out), stderr(&out));
    let out = Command::new("make")
        .args(["-C", "build"])
        .current_dir(&dir)
        .env_remove("CC")
        .env("MEMLENS_CC", "clang-22")
        .env("MEMLENS_QUIET", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "make: {}{}", stdout(&out), stderr(&out));
    let obj = dir.join("build/CMakeFiles/counts.dir/counts.c.o");
    let out = Command::new("readelf").arg("--debug-dump=info").arg(&obj).output().unwrap();
    let text = stdout(&out);
    let producer = text.lines().find(|l| l.contains("DW_AT_producer")).unwrap_or("");
    assert!(producer.contains("GNU C"), "{producer}");
    let out = record(&dir.join("build/counts"), &dir.join("t.trace"), &[]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
}
