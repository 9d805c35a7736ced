//! `record --trace-calls FILE` (issue 4): calls of the listed functions with their
//! first three integer arguments and stack pointer, returns with the return value,
//! as atomic-memory-trace's `fc` / `fr` lines, with gcc and clang.

use crate::util::*;
use std::path::Path;

/// The `fc` / `fr` records of the amt dump: (tid, kind, name, sp, numbers).
fn calls(amt: &str) -> Vec<(i64, String, String, u64, Vec<u64>)> {
    amt.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            if f.get(2) != Some(&"fc") && f.get(2) != Some(&"fr") {
                return None;
            }
            let nums = f[5..].iter().map(|x| x.parse::<u64>().unwrap()).collect();
            Some((f[1].parse().unwrap(), f[2].into(), f[3].into(), f[4].parse().unwrap(), nums))
        })
        .collect()
}

fn amt(trace: &Path) -> String {
    let out = run_memlens(&["dump", "--merged", "--format", "amt", trace.to_str().unwrap()]);
    assert!(out.status.success(), "dump: {}", stderr(&out));
    stdout(&out)
}

#[test]
fn listed_functions_are_traced_with_arguments_and_return_values() {
    let dir = scratch("calls");
    let list = dir.join("functions.txt");
    std::fs::write(&list, "# traced\nadd3\nfib   # recursive\n\ntail_mul\nmul\n").unwrap();
    for cc in Cc::all() {
        let exe = build(cc, "traced.c", &dir, &[]);
        let trace = dir.join(format!("{cc:?}.trace"));
        let out = run_memlens(&[
            "record",
            "-q",
            "--trace-calls",
            list.to_str().unwrap(),
            "-o",
            trace.to_str().unwrap(),
            "--",
            exe.to_str().unwrap(),
            "3",
        ]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "sum 66\n", "{cc:?}");
        let got = calls(&amt(&trace));
        // Every record is on the worker (memlens thread 1, unregistered).
        assert!(got.iter().all(|c| c.0 == 1), "{cc:?}: {got:?}");
        // (kind, name, first argument or return value), in order.
        let seq: Vec<(&str, &str, u64)> =
            got.iter().map(|c| (c.1.as_str(), c.2.as_str(), c.4[0])).collect();
        let want: Vec<(&str, &str, u64)> = vec![
            ("fc", "add3", 0),
            ("fr", "add3", 0),
            ("fc", "fib", 0),
            ("fr", "fib", 0),
            ("fc", "add3", 1),
            ("fr", "add3", 2),
            ("fc", "fib", 1),
            ("fr", "fib", 1),
            ("fc", "add3", 2),
            ("fr", "add3", 4),
            ("fc", "fib", 2),
            ("fc", "fib", 1),
            ("fr", "fib", 1),
            ("fc", "fib", 0),
            ("fr", "fib", 0),
            ("fr", "fib", 1),
            ("fc", "tail_mul", 6),
            ("fc", "mul", 7),
            ("fr", "mul", 49),
            ("fr", "tail_mul", 49),
        ];
        assert_eq!(seq, want, "{cc:?}");
        // add3's three arguments exactly: (i, 2i, -i).
        let add3: Vec<Vec<u64>> =
            got.iter().filter(|c| c.1 == "fc" && c.2 == "add3").map(|c| c.4.clone()).collect();
        let neg = |i: u64| i.wrapping_neg();
        assert_eq!(add3, vec![vec![0, 0, neg(0)], vec![1, 2, neg(1)], vec![2, 4, neg(2)]]);
        let mul: Vec<&Vec<u64>> =
            got.iter().filter(|c| c.1 == "fc" && c.2.ends_with("mul")).map(|c| &c.4).collect();
        assert_eq!((mul[0][1], mul[1][1]), (7, 7), "{cc:?}: second arguments of tail_mul, mul");
        // Each return has its call's stack pointer; nested calls are deeper.
        let mut stack: Vec<(String, u64)> = Vec::new();
        for c in &got {
            if c.1 == "fc" {
                if let Some(top) = stack.last() {
                    assert!(c.3 <= top.1, "{cc:?}: {} not below {}", c.2, top.0);
                }
                stack.push((c.2.clone(), c.3));
            } else {
                let (name, sp) = stack.pop().unwrap();
                assert_eq!((name.as_str(), sp), (c.2.as_str(), c.3), "{cc:?}");
            }
        }
        assert!(stack.is_empty());
        // The same binary without --trace-calls: no call records, same output.
        let plain = dir.join(format!("{cc:?}-plain.trace"));
        let out = record(&exe, &plain, &["3"]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "sum 66\n");
        assert!(calls(&amt(&plain)).is_empty(), "{cc:?}");
    }
}

#[test]
fn unknown_traced_function_is_a_clear_error() {
    let dir = scratch("calls-err");
    let exe = build(Cc::Gcc, "traced.c", &dir, &[]);
    let list = dir.join("functions.txt");
    std::fs::write(&list, "add3\nno_such_function\n").unwrap();
    let trace = dir.join("t.trace");
    let out = run_memlens(&[
        "record",
        "--trace-calls",
        list.to_str().unwrap(),
        "-o",
        trace.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("no_such_function") && e.contains("symbol table"), "{e}");
}
