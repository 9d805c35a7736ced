//! Rust programs built with `memlens cargo`.

use crate::util::*;

#[test]
fn cargo_project_is_instrumented_and_recorded() {
    let (dir, exe) = memlens_cargo_build("rsprog");
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
