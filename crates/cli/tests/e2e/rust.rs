//! Rust programs built with `memlens cargo`.

use crate::util::*;
use std::process::Command;

#[test]
fn cargo_project_is_instrumented_and_recorded() {
    require_runtime();
    let dir = scratch("rust");
    // Build a copy, so the source tree stays clean.
    let proj = dir.join("rsprog");
    std::fs::create_dir_all(proj.join("src")).unwrap();
    let src = programs().join("rsprog");
    std::fs::copy(src.join("Cargo.toml"), proj.join("Cargo.toml")).unwrap();
    std::fs::copy(src.join("src/main.rs"), proj.join("src/main.rs")).unwrap();
    let out = Command::new(memlens())
        .args(["cargo", "build", "--release", "--quiet"])
        .current_dir(&proj)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap();
    assert!(out.status.success(), "memlens cargo failed:\n{}", stderr(&out));
    let exe = proj.join("target/memlens/x86_64-unknown-linux-gnu/release/rsprog");
    assert!(exe.is_file());
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "s=999000 boxed=57 counter=4000\n");
    let rows = report(&trace, "line");
    let f = "rsprog/src/main.rs";
    let l = |m| line_of("rsprog/src/main.rs", m);
    assert_eq!(at_line(&rows, f, l("store"), "stores"), 1000);
    assert_eq!(at_line(&rows, f, l("load"), "loads"), 1000);
    assert_eq!(at_line(&rows, f, l("rmw"), "loads"), 4000);
    assert_eq!(at_line(&rows, f, l("rmw"), "stores"), 4000);
    let i = info(&trace);
    assert_eq!(i["threads"], 5);
    let allocs = report(&trace, "alloc");
    assert!(!allocs.is_empty());
    let vars = variables(&trace, "field");
    assert_eq!(
        var(&vars, "rsprog::GLOBAL").map(|r| r["stores"].as_u64().unwrap()),
        Some(1000),
        "{vars:#?}"
    );
    let funcs = report(&trace, "function");
    assert!(funcs.iter().any(|r| r["function"] == "rsprog::stores"), "{funcs:#?}");
}
