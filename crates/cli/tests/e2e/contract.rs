//! One recording contract for the two recorders: `tests/programs/contract.cpp`
//! calls every interposed allocation and synchronisation entry point of
//! `memlens-contract`'s table; recorded through the compiled path (`memlens c++`)
//! and through `--dbi` (plain g++), both traces must give the exact per-entry-point
//! allocation counts, put every synchronised load after its store in `dump
//! --merged`, and carry the same recording options.

use crate::dbi::{have, plain_build, record_ok};
use crate::util::*;
use memlens_contract::entry::{ALLOC, SYNC};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const SRC: &str = "contract.cpp";
/// Times the program runs its allocation loop.
const REPS: u64 = 3;
/// Synchronised slots (one per acquire-like call, then conditions, barrier, join).
const SLOTS: u64 = 18;

/// (size, what allocates it, what frees it) for every allocation the program makes
/// with a size of its own: size `1000 + 16 * e` for row `e` of the table.
fn expected() -> BTreeMap<(String, u64), u64> {
    let rows: [(u64, &str, &str); 21] = [
        (0, "alloc malloc", "free free"),
        (1, "alloc calloc", "free free"),
        (2, "realloc", "free free"),
        (3, "realloc", "free free"),
        (5, "alloc aligned", "free free"),
        (6, "alloc aligned", "free free"),
        (7, "alloc aligned", "free free"),
        (8, "alloc aligned", "free free"),
        (9, "alloc aligned", "free free"),
        (10, "alloc new", "free delete"),
        (11, "alloc new[]", "free delete[]"),
        (12, "alloc new", "free delete"),
        (13, "alloc new[]", "free delete[]"),
        (14, "alloc new", "free delete"),
        (15, "alloc new[]", "free delete[]"),
        (16, "alloc new", "free delete"),
        (17, "alloc new[]", "free delete[]"),
        (18, "alloc new", "free delete"),
        (19, "alloc new[]", "free delete[]"),
        (20, "alloc new", "free delete"),
        (21, "alloc new[]", "free delete[]"),
    ];
    let mut m = BTreeMap::new();
    for (e, a, f) in rows {
        let size = 1000 + 16 * e;
        m.insert((a.to_string(), size), REPS);
        m.insert((f.to_string(), size), REPS);
    }
    m
}

/// Allocation events of the program's own sizes, by (event and kind, size); a free
/// counts under the size of the block it frees.
fn alloc_counts(events: &[Value]) -> BTreeMap<(String, u64), u64> {
    let own = |s: u64| (1000..1000 + 16 * 22).contains(&s) && s % 16 == 8;
    let mut live: BTreeMap<String, u64> = BTreeMap::new();
    let mut n = BTreeMap::new();
    for e in events {
        let (key, size) = match e["event"].as_str().unwrap() {
            "alloc" => {
                let size = e["size"].as_u64().unwrap();
                live.insert(e["addr"].as_str().unwrap().into(), size);
                (format!("alloc {}", e["kind"].as_str().unwrap()), size)
            }
            "realloc" => {
                let size = e["size"].as_u64().unwrap();
                live.remove(e["old"].as_str().unwrap());
                live.insert(e["addr"].as_str().unwrap().into(), size);
                ("realloc".to_string(), size)
            }
            "free" => {
                let Some(size) = live.remove(e["addr"].as_str().unwrap()) else { continue };
                (format!("free {}", e["kind"].as_str().unwrap()), size)
            }
            _ => continue,
        };
        if own(size) {
            *n.entry((key, size)).or_insert(0) += 1;
        }
    }
    n
}

/// Per slot: the merged-dump positions of its one store and one load.
fn slot_order(events: &[Value], base: u64) -> Vec<(Vec<usize>, Vec<usize>)> {
    let mut v = vec![(vec![], vec![]); SLOTS as usize];
    for (i, e) in events.iter().enumerate() {
        let ev = e["event"].as_str().unwrap();
        if ev != "read" && ev != "write" {
            continue;
        }
        let a = u64::from_str_radix(e["addr"].as_str().unwrap().trim_start_matches("0x"), 16);
        let off = a.unwrap().wrapping_sub(base);
        if off < 4 * SLOTS {
            let s = &mut v[(off / 4) as usize];
            if ev == "write" { &mut s.0 } else { &mut s.1 }.push(i);
        }
    }
    v
}

fn merged(trace: &Path) -> Vec<Value> {
    let out = run_memlens(&["dump", "--merged", "--format", "json", trace.to_str().unwrap()]);
    assert!(out.status.success(), "dump --merged: {}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] != "end_of_trace")
        .collect()
}

/// The program's `slots ADDR SUM` line.
fn slots_line(out: &str) -> (u64, u64) {
    let line = out.lines().find(|l| l.starts_with("slots ")).expect("no slots line");
    let f: Vec<&str> = line.split_whitespace().collect();
    (u64::from_str_radix(f[1].trim_start_matches("0x"), 16).unwrap(), f[2].parse().unwrap())
}

fn options(trace: &Path) -> BTreeMap<String, String> {
    let v = info(trace);
    serde_json::from_value(v["options"].clone()).expect("info has no options")
}

#[test]
fn both_recorders_see_every_entry_point_alike() {
    if !have("qemu-x86_64") {
        return;
    }
    let dir = scratch("contract");
    let plain = plain_build(&programs().join(SRC), &dir, &[]);
    // The program calls every entry point of the table (so a new row needs a call).
    let nm = Command::new("nm").args(["-D", "--undefined-only"]).arg(&plain).output().unwrap();
    let undefined: Vec<String> = stdout(&nm)
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .map(|s| s.split('@').next().unwrap().to_string())
        .collect();
    for e in ALLOC.iter().chain(SYNC) {
        assert!(undefined.iter().any(|u| u == e.symbol), "{SRC} does not call {}", e.symbol);
    }
    let compiled = build(Cc::Gcc, SRC, &dir, &["-g"]);

    let t_compiled = dir.join("compiled.trace");
    let out = record(&compiled, &t_compiled, &[]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let (base_c, sum_c) = slots_line(&stdout(&out));
    let t_dbi = dir.join("dbi.trace");
    let out = record_ok(&plain, &t_dbi, &[], &[]);
    let (base_d, sum_d) = slots_line(&stdout(&out));
    assert_eq!((sum_c, sum_d), (SLOTS * (SLOTS + 1) / 2, SLOTS * (SLOTS + 1) / 2));

    let want = expected();
    for (name, trace, base) in [("compiled", &t_compiled, base_c), ("dbi", &t_dbi, base_d)] {
        let ev = merged(trace);
        assert_eq!(alloc_counts(&ev), want, "{name}: allocations per entry point");
        for (slot, (w, r)) in slot_order(&ev, base).iter().enumerate() {
            assert_eq!((w.len(), r.len()), (1, 1), "{name}: slot {slot}: stores, loads");
            assert!(w[0] < r[0], "{name}: slot {slot}: the load comes before the store it follows");
        }
    }
    // The same recording options, by the same names.
    let (oc, od) = (options(&t_compiled), options(&t_dbi));
    for k in ["values", "stack_depth", "zstd_level", "roi", "order"] {
        assert_eq!((k, oc.get(k)), (k, od.get(k)), "option {k}");
        assert!(oc.contains_key(k), "option {k} missing");
    }
}
