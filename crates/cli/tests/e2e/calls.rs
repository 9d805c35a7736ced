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

/// `memlens record -q --trace-calls LIST -o TRACE -- EXE ARG`.
fn record_calls(list: &Path, trace: &Path, exe: &Path, arg: &str) -> std::process::Output {
    let (l, t, e) = (list.to_str().unwrap(), trace.to_str().unwrap(), exe.to_str().unwrap());
    run_memlens(&["record", "-q", "--trace-calls", l, "-o", t, "--", e, arg])
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
        let out = record_calls(&list, &trace, &exe, "3");
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

/// A name in neither the executable nor its start-up libraries may come with a
/// library opened by `dlopen`: a note before the run, a warning at its end when no
/// library defined it; the other functions are traced.
#[test]
fn unknown_traced_function_is_noted_and_warned_about() {
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
    let e = stderr(&out);
    assert!(out.status.success(), "{e}");
    assert_eq!(stdout(&out), "sum 66\n");
    let note: Vec<&str> = e.lines().filter(|l| l.contains("no_such_function")).collect();
    assert_eq!(note.len(), 2, "{e}");
    assert!(note[0].contains("note:") && note[0].contains("symbol table"), "{e}");
    assert!(note[0].contains("dlopen"), "{e}");
    assert!(note[1].contains("was in no library the program loaded"), "{e}");
    let got = calls(&amt(&trace));
    assert_eq!(got.len(), 6, "add3 called and returned three times: {got:?}");
    assert!(got.iter().all(|c| c.2 == "add3"), "{got:?}");
    // -q: no note, the warning at the end stays
    let out = record_calls(&list, &trace, &exe, "3");
    let e = stderr(&out);
    assert!(out.status.success(), "{e}");
    assert_eq!(e.lines().filter(|l| l.contains("no_such_function")).count(), 1, "{e}");
}

#[test]
fn functions_of_shared_libraries_are_traced() {
    let dir = scratch("calls-lib");
    let list = dir.join("functions.txt");
    std::fs::write(&list, "lib_mix\nlib_sum\n").unwrap();
    let p = programs();
    for cc in Cc::all() {
        let lib = dir.join(format!("{cc:?}")).join("libtraced.so");
        std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
        let d = lib.parent().unwrap().to_str().unwrap();
        let src = p.join("libtraced.c");
        let l = lib.to_str().unwrap();
        memlens_cc(cc, false, &["-O2", "-shared", "-fPIC", src.to_str().unwrap(), "-o", l]);
        let exe = dir.join(format!("tracelib-{cc:?}"));
        let rpath = format!("-Wl,-rpath,{d}");
        let main = p.join("tracelib.c");
        let e = exe.to_str().unwrap();
        memlens_cc(
            cc,
            false,
            &["-O2", main.to_str().unwrap(), "-L", d, "-ltraced", &rpath, "-o", e],
        );
        let trace = dir.join(format!("{cc:?}.trace"));
        let out = record_calls(&list, &trace, &exe, "5");
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "mix 555 sum 15\n", "{cc:?}");
        let got = calls(&amt(&trace));
        // (kind, name, numbers): lib_mix(5, 6, -5) = 555, lib_sum(5) = 15.
        let seq: Vec<(&str, &str, u64)> =
            got.iter().map(|c| (c.1.as_str(), c.2.as_str(), c.4[0])).collect();
        assert_eq!(
            seq,
            vec![
                ("fc", "lib_mix", 5),
                ("fr", "lib_mix", 555),
                ("fc", "lib_sum", 5),
                ("fr", "lib_sum", 15)
            ],
            "{cc:?}"
        );
        assert_eq!(got[0].4, vec![5, 6, 5u64.wrapping_neg()], "{cc:?}: lib_mix's arguments");
        assert!(got.iter().all(|c| c.0 == 0 && c.3 == got[0].3), "{cc:?}: {got:?}");
    }
}

/// A library opened with `dlopen`, named in the list with `@<path>`: its listed
/// function is traced from the first call on, the unlisted one is not.
#[test]
fn functions_of_dlopened_libraries_are_traced() {
    let dir = scratch("calls-dlopen");
    let p = programs();
    for cc in Cc::all() {
        let lib = dir.join(format!("{cc:?}")).join("libtraced.so");
        std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
        let (l, src) = (lib.to_str().unwrap(), p.join("libtraced.c"));
        memlens_cc(cc, false, &["-O2", "-shared", "-fPIC", src.to_str().unwrap(), "-o", l]);
        let exe = dir.join(format!("dlopenlib-{cc:?}"));
        let main = p.join("dlopenlib.c");
        memlens_cc(
            cc,
            false,
            &["-O2", main.to_str().unwrap(), "-ldl", "-o", exe.to_str().unwrap()],
        );
        let list = dir.join(format!("{cc:?}.txt"));
        std::fs::write(&list, format!("# opened with dlopen\n@{l}\nlib_sum\n")).unwrap();
        let trace = dir.join(format!("{cc:?}.trace"));
        let (ls, t, e) = (list.to_str().unwrap(), trace.to_str().unwrap(), exe.to_str().unwrap());
        let out = run_memlens(&["record", "-q", "--trace-calls", ls, "-o", t, "--", e, l, "6"]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        // sum(1..=i) for i in 1..=6 adds up to 56; mix(1, 2, 3) = 123
        assert_eq!(stdout(&out), "total 56 mix 123\n", "{cc:?}");
        let got = calls(&amt(&trace));
        let seq: Vec<(&str, &str, u64)> =
            got.iter().map(|c| (c.1.as_str(), c.2.as_str(), c.4[0])).collect();
        let mut want = Vec::new();
        for i in 1..=6u64 {
            want.push(("fc", "lib_sum", i));
            want.push(("fr", "lib_sum", i * (i + 1) / 2));
        }
        assert_eq!(seq, want, "{cc:?}: lib_sum traced six times, lib_mix never");
    }
    // a library the list names that cannot be opened is a clear error
    let list = dir.join("missing.txt");
    std::fs::write(&list, "@/nonexistent/libnothere.so\nf\n").unwrap();
    let exe = dir.join("dlopenlib-Gcc");
    let out = record_calls(&list, &dir.join("missing.trace"), &exe, "1");
    assert!(!out.status.success());
    assert!(stderr(&out).contains("libnothere.so, which cannot be opened"), "{}", stderr(&out));
}

/// Names the CLI finds nowhere at start-up are looked up by the runtime in every
/// library `dlopen` maps: two plugins defining the same functions, the first closed
/// and opened again. Only the listed function is traced, in both plugins, with its
/// arguments and return values; a name no library defines is warned about at exit.
#[test]
fn listed_functions_of_dlopened_libraries_are_found_by_name() {
    let dir = scratch("calls-dlopen-names");
    let p = programs();
    let list = dir.join("functions.txt");
    std::fs::write(&list, "plugin_step  # in the plugins\nnot_in_any_plugin\n").unwrap();
    let n = 4u64;
    for cc in Cc::all() {
        let d = dir.join(format!("{cc:?}"));
        std::fs::create_dir_all(&d).unwrap();
        let src = p.join("dlplugin.c");
        let plugins: Vec<String> = (1..=2)
            .map(|id| {
                let lib = d.join(format!("libplugin{id}.so"));
                let (l, def) = (lib.to_str().unwrap(), format!("-DPLUGIN_ID={id}"));
                let args = ["-O2", "-shared", "-fPIC", &def, src.to_str().unwrap(), "-o", l];
                memlens_cc(cc, false, &args);
                l.to_string()
            })
            .collect();
        let exe = d.join("dlplugins");
        let (main, e) = (p.join("dlplugins.c"), exe.to_str().unwrap());
        memlens_cc(cc, false, &["-O2", main.to_str().unwrap(), "-ldl", "-o", e]);
        let trace = d.join("t.trace");
        let (l, t) = (list.to_str().unwrap(), trace.to_str().unwrap());
        let ns = n.to_string();
        let args =
            ["record", "-q", "--trace-calls", l, "-o", t, "--", e, &plugins[0], &plugins[1], &ns];
        let out = run_memlens(&args);
        let err = stderr(&out);
        assert!(out.status.success(), "{cc:?}: {err}");
        // (plugin id, a, b, c) of every plugin_step call, in order
        let step = |id: u64, a: u64, b: u64| id * 1000 + a * 100 + b * 10 + 7;
        let mut want: Vec<(u64, [u64; 3])> = (0..n).map(|i| (step(1, i, 0), [i, 0, 7])).collect();
        want.push((step(1, n, 0), [n, 0, 7]));
        want.extend((0..n).map(|i| (step(2, i, 1), [i, 1, 7])));
        let untraced: u64 = (0..n).map(|i| 2 * (i * 3) + 1 + 2).sum();
        let total: u64 = want.iter().map(|w| w.0).sum::<u64>() + untraced;
        assert_eq!(stdout(&out), format!("total {total}\n"), "{cc:?}");
        assert_eq!(err.lines().count(), 1, "{cc:?}: only the warning at exit: {err}");
        assert!(err.contains("not_in_any_plugin was in no library"), "{cc:?}: {err}");
        let got = calls(&amt(&trace));
        // nothing but plugin_step, named (plugin_untraced is not listed)
        assert!(got.iter().all(|c| c.2 == "plugin_step"), "{cc:?}: {got:?}");
        assert_eq!(got.len(), 2 * want.len(), "{cc:?}: {got:?}");
        for (k, w) in want.iter().enumerate() {
            let (c, r) = (&got[2 * k], &got[2 * k + 1]);
            assert_eq!((c.1.as_str(), &c.4[..]), ("fc", &w.1[..]), "{cc:?}: call {k}");
            assert_eq!((r.1.as_str(), r.4[0]), ("fr", w.0), "{cc:?}: return {k}");
            assert_eq!(c.3, r.3, "{cc:?}: call {k} and its return have one stack pointer");
        }
    }
}

#[test]
fn functions_of_rust_programs_are_traced() {
    let (dir, exe) = memlens_cargo_build("rscalls");
    let list = dir.join("functions.txt");
    std::fs::write(&list, "rs_mix\nrs_sum\n").unwrap();
    let trace = dir.join("t.trace");
    let out = record_calls(&list, &trace, &exe, "5");
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert_eq!(stdout(&out), "mix 555 sum 15\n");
    let got = calls(&amt(&trace));
    let seq: Vec<(&str, &str, u64)> =
        got.iter().map(|c| (c.1.as_str(), c.2.as_str(), c.4[0])).collect();
    assert_eq!(
        seq,
        vec![("fc", "rs_mix", 5), ("fr", "rs_mix", 555), ("fc", "rs_sum", 5), ("fr", "rs_sum", 15)]
    );
    assert_eq!(got[0].4, vec![5, 6, 5u64.wrapping_neg()], "rs_mix's arguments");
}
