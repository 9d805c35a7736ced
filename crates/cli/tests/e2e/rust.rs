//! Rust programs built with `memlens cargo`.

use crate::util::*;

#[test]
fn cargo_project_is_instrumented_and_recorded() {
    let (dir, exe) = memlens_cargo_build("rsprog");
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &[]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
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

/// rustc instruments before inlining: an inlined callee's entry and exit run in its
/// caller's frame (same stack pointer, same call site). The runtime nests them
/// instead of taking the caller for a frame left without an exit; it closed the
/// caller with a synthesized exit, whose real exit then closed the caller's
/// caller, and the stacks every reader rebuilds grew by one frame per BTreeMap node
/// split (`report --by variable` on 800,000 inserts never finished).
#[test]
fn inlined_entries_nest_in_their_callers_frame() {
    let (dir, exe) = memlens_cargo_build("rsinline");
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &["5000"]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert!(stdout(&out).starts_with("rsinline 5000 97 "), "{}", stdout(&out));
    let events = dump(&trace);
    let (mut enters, mut exits, mut synthesized, mut nested) = (0, 0, 0, 0);
    // (frame, call site) of the open entries, as the runtime saw them
    let mut open: Vec<(String, String)> = Vec::new();
    let mut deepest = 0;
    for e in &events {
        match e["event"].as_str() {
            Some("enter") => {
                enters += 1;
                let f = (e["frame"].as_str().unwrap().to_string(), e["call_site"].to_string());
                if open.last() == Some(&f) {
                    nested += 1;
                }
                open.push(f);
                deepest = deepest.max(open.len());
            }
            Some("exit") => {
                exits += 1;
                if e["pc"] == "0x0" {
                    synthesized += 1;
                }
                open.pop();
            }
            _ => {}
        }
    }
    assert!(enters > 20_000 && enters == exits, "{enters} entries, {exits} exits");
    assert!(nested > 5000, "only {nested} inlined entries: the test no longer exercises them");
    assert_eq!(synthesized, 0, "frames closed as left without an exit in a program without any");
    assert!(deepest < 40, "stack grew to {deepest} frames");
    // the program's own frame is named, once, with its locals' accesses
    let vars = variables(&trace, "variable");
    let main = vars.iter().filter(|r| r["variable"] == "rsinline::main::<frame>").count();
    assert_eq!(main, 1, "{vars:#?}");
}
