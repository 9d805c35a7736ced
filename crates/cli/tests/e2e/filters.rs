//! `record --functions/--files` and `analyze --function/--file`: one glob matcher,
//! one meaning, exact counts.

use crate::util::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds tests/programs/filtered as a project with sources under `src/` (compiled
/// from the project root, so the debug info says `src/main.cpp`).
pub(crate) fn build_project(cc: Cc, dir: &Path) -> PathBuf {
    let root = programs().join("filtered");
    for sub in ["src", "lib"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        for e in std::fs::read_dir(root.join(sub)).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dir.join(sub).join(e.file_name())).unwrap();
        }
    }
    require_runtime();
    let (var, compiler) = match cc {
        Cc::Gcc => ("MEMLENS_CXX", "g++"),
        Cc::Clang => ("MEMLENS_CXX", "clang++-22"),
    };
    let out = Command::new(memlens())
        .current_dir(dir)
        .args(["c++", "-O2", "src/main.cpp", "src/util.cpp", "-o", "prog"])
        .env(var, compiler)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    dir.join("prog")
}

fn record_with(exe: &Path, trace: &Path, filter: &[&str]) -> std::process::Output {
    Command::new(memlens())
        .arg("record")
        .args(filter)
        .arg("-q")
        .arg("-o")
        .arg(trace)
        .arg("--")
        .arg(exe)
        .output()
        .unwrap()
}

/// (file, line) -> (loads, stores) of report rows (or analyze counts' `by_line`).
fn by_line(rows: &[Value]) -> std::collections::BTreeMap<(String, u64), (u64, u64)> {
    let mut m = std::collections::BTreeMap::new();
    for r in rows {
        let e = m
            .entry((r["file"].as_str().unwrap().to_string(), r["line"].as_u64().unwrap()))
            .or_insert((0, 0));
        e.0 += r["loads"].as_u64().unwrap();
        e.1 += r["stores"].as_u64().unwrap();
    }
    m
}

fn in_src(file: &str) -> bool {
    file.ends_with("src/main.cpp") || file.ends_with("src/util.cpp")
}

#[test]
fn files_glob_records_the_accesses_of_a_subdirectory() {
    for cc in Cc::all() {
        let dir = scratch("files-glob");
        let exe = build_project(cc, &dir);
        let full = dir.join("full.trace");
        assert!(record(&exe, &full, &[]).status.success());
        let part = dir.join("part.trace");
        let out = record_with(&exe, &part, &["--files", "src/*.cpp"]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{cc:?}");
        let want: Vec<_> =
            by_line(&report(&full, "line")).into_iter().filter(|((f, _), _)| in_src(f)).collect();
        let got: Vec<_> = by_line(&report(&part, "line")).into_iter().collect();
        assert_eq!(got, want, "{cc:?}");
        // the program's three loops are all there; lib/outside.h's is not
        for (src, marker) in
            [("main.cpp", "main_loop"), ("main.cpp", "fill"), ("util.cpp", "util_loop")]
        {
            let line = line_of(&format!("filtered/src/{src}"), marker);
            assert!(
                got.iter().any(|((f, l), _)| f.ends_with(src) && *l == line),
                "{cc:?} {src}:{line}"
            );
        }
        let outside = line_of("filtered/lib/outside.h", "outside");
        assert!(!got.iter().any(|((f, l), _)| f.ends_with("outside.h") && *l == outside));
        assert_eq!(
            got.iter()
                .find(|((_, l), _)| *l == line_of("filtered/src/main.cpp", "main_loop"))
                .unwrap()
                .1,
            (20000, 0)
        );
    }
}

#[test]
fn analyze_file_keeps_every_access_report_puts_on_its_lines() {
    for cc in Cc::all() {
        let dir = scratch("analyze-file");
        let exe = build_project(cc, &dir);
        let t = dir.join("t.trace");
        assert!(record(&exe, &t, &[]).status.success());
        let want: Vec<_> = by_line(&report(&t, "line"))
            .into_iter()
            .filter(|((f, _), _)| f.ends_with("main.cpp"))
            .map(|((_, l), c)| (l, c))
            .collect();
        let v = json(&[
            "analyze",
            "counts",
            "--top",
            "0",
            "--file",
            "main.cpp",
            "--format",
            "json",
            t.to_str().unwrap(),
        ]);
        let got: Vec<_> = by_line(v["by_line"].as_array().unwrap())
            .into_iter()
            .filter(|((f, _), _)| f.ends_with("main.cpp"))
            .map(|((_, l), c)| (l, c))
            .collect();
        assert_eq!(got, want, "{cc:?}");
        // the vector's fill, inlined from the C++ headers, counts for main.cpp's line
        let fill = line_of("filtered/src/main.cpp", "fill");
        assert!(got.iter().any(|(l, c)| *l == fill && c.1 > 0), "{cc:?}: {got:?}");
    }
}

#[test]
fn a_filter_matching_nothing_warns_once_and_a_bad_glob_is_refused() {
    let dir = scratch("filter-warn");
    let exe = build_project(Cc::Gcc, &dir);
    let t = dir.join("t.trace");
    let out = record_with(&exe, &t, &["--files", "src/*.cpp,nothing/*.c", "--functions", "nofn"]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert_eq!(
        stderr(&out),
        format!(
            "memlens: warning: --functions nofn, --files nothing/*.c match nothing in {}\n",
            std::fs::canonicalize(&exe).unwrap().display()
        )
    );
    let ts = t.to_str().unwrap();
    let out = run_memlens(&["analyze", "counts", "--file", "main.cpp,nothing.c", ts]);
    assert!(out.status.success());
    assert_eq!(
        stderr(&out),
        "memlens: warning: --file nothing.c matches nothing in the traced program\n"
    );
    for args in [
        vec!["record", "--files", "[", "-o", ts, "--", exe.to_str().unwrap()],
        vec!["record", "--dbi", "--functions", "a[", "-o", ts, "--", exe.to_str().unwrap()],
        vec!["analyze", "counts", "--file", "[", ts],
    ] {
        let out = run_memlens(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let e = stderr(&out);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(
            e.starts_with("memlens: error: bad glob '") && e.contains("unclosed character class"),
            "{e}"
        );
        assert!(stdout(&out).is_empty());
    }
}
