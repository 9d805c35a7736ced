//! memlens-annotate (the Rust annotation API): a Rust program registers and names
//! its threads and marks a region of interest; recorded with `--roi` only the
//! region's accesses appear; built with plain cargo it runs with no runtime.

use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Copies `tests/programs/rsannotate` to `dir`, pointing its path dependency at
/// this workspace's crate.
fn project(dir: &Path) -> PathBuf {
    let proj = dir.join("rsannotate");
    std::fs::create_dir_all(proj.join("src")).unwrap();
    let src = programs().join("rsannotate");
    let annotate = Path::new(env!("CARGO_MANIFEST_DIR")).join("../annotate");
    let annotate = annotate.canonicalize().unwrap();
    let toml = std::fs::read_to_string(src.join("Cargo.toml")).unwrap();
    let toml = toml.replace("../../../crates/annotate", annotate.to_str().unwrap());
    std::fs::write(proj.join("Cargo.toml"), toml).unwrap();
    std::fs::copy(src.join("src/main.rs"), proj.join("src/main.rs")).unwrap();
    proj
}

fn cargo_build(proj: &Path, memlens_cargo: bool) -> Command {
    let mut c = if memlens_cargo {
        let mut c = Command::new(memlens());
        c.arg("cargo");
        c
    } else {
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
    };
    c.args(["build", "--release", "--quiet", "--offline"])
        .current_dir(proj)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC_WRAPPER");
    c
}

#[test]
fn rust_annotations_register_name_and_bound_the_roi() {
    require_runtime();
    let dir = scratch("annotate");
    let proj = project(&dir);
    let out = cargo_build(&proj, true).output().unwrap();
    assert!(out.status.success(), "memlens cargo failed:\n{}", stderr(&out));
    let exe = proj.join("target/memlens/x86_64-unknown-linux-gnu/release/rsannotate");
    let f = "rsannotate/src/main.rs";
    let l = |m| line_of("rsannotate/src/main.rs", m);

    // Everything recorded: 2 × 100 stores outside, 2 × 500 inside.
    let all = dir.join("all.trace");
    let out = record(&exe, &all, &[]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert_eq!(stdout(&out), "runtime=true\n");
    let rows = report(&all, "line");
    assert_eq!(at_line(&rows, f, l("out"), "stores"), 200);
    assert_eq!(at_line(&rows, f, l("in"), "stores"), 1000);

    // --roi: only the region's accesses.
    let roi = dir.join("roi.trace");
    let out = run_memlens(&[
        "record",
        "-q",
        "--roi",
        "-o",
        roi.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let rows = report(&roi, "line");
    assert_eq!(at_line(&rows, f, l("out"), "stores"), 0);
    assert_eq!(at_line(&rows, f, l("in"), "stores"), 1000);

    // Registered ids are the amt tids; the ROI brackets the workers.
    let amt = run_memlens(&["dump", "--merged", "--format", "amt", roi.to_str().unwrap()]);
    assert!(amt.status.success(), "{}", stderr(&amt));
    let ctl: Vec<String> = stdout(&amt)
        .lines()
        .filter(|l| !l.contains("\tm\t"))
        .map(|l| l.split_once('\t').unwrap().1.to_string())
        .collect();
    let pos =
        |s: &str| ctl.iter().position(|l| l == s).unwrap_or_else(|| panic!("no `{s}` in {ctl:?}"));
    for s in ["100\ttr", "10\ttr", "11\ttr", "10\ttf", "11\ttf", "100\tstart_roi"] {
        assert_eq!(ctl.iter().filter(|l| *l == s).count(), 1, "`{s}` in {ctl:?}");
    }
    assert!(pos("100\ttr") < pos("100\tstart_roi"));
    assert!(pos("100\tstart_roi") < pos("10\ttr") && pos("10\ttf") < pos("100\tend_roi"));
    assert!(pos("100\tstart_roi") < pos("11\ttr") && pos("11\ttf") < pos("100\tend_roi"));

    // Thread names.
    let mut names: Vec<String> = dump(&roi)
        .iter()
        .filter(|e| e["event"] == "thread_name")
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["boss", "worker-0", "worker-1"]);

    // Plain cargo: no runtime, the calls are no-ops.
    let out = cargo_build(&proj, false).output().unwrap();
    assert!(out.status.success(), "cargo build failed:\n{}", stderr(&out));
    let plain = proj.join("target/release/rsannotate");
    let out = Command::new(&plain).output().unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert_eq!(stdout(&out), "runtime=false\n");
}
