//! Every access and allocation counted as valgrind counts it (issue 18): realloc's
//! roles, assembler pass-through, and the `--dbi` defects found on real binaries.

use crate::dbi::{have, record_ok, setup, Src};
use crate::util::*;
use std::path::Path;
use std::process::Command;

/// memcheck's "total heap usage: A allocs, F frees".
fn memcheck_heap(exe: &Path) -> Option<(u64, u64)> {
    if !have("valgrind") {
        return None;
    }
    let out = Command::new("valgrind").arg(exe).output().unwrap();
    let err = stderr(&out);
    let line = err.lines().find(|l| l.contains("total heap usage:")).expect("memcheck summary");
    let n: Vec<u64> = line
        .split("usage:")
        .nth(1)
        .unwrap()
        .split(',')
        .take(2)
        .map(|p| p.split_whitespace().next().unwrap().replace(',', "").parse().unwrap())
        .collect();
    Some((n[0], n[1]))
}

/// realloc(NULL, n) allocates, realloc(p, n) allocates and frees, realloc(p, 0) frees:
/// `info` and `report --by alloc` agree with memcheck on both paths.
fn check_reallocs(trace: &Path, what: &str) {
    let i = info(trace);
    assert_eq!((i["allocs"].as_u64(), i["frees"].as_u64()), (Some(200), Some(200)), "{what}");
    let threads = report(trace, "thread");
    assert_eq!(threads[0]["allocs"], 200, "{what}: {threads:?}");
    assert_eq!(threads[0]["frees"], 200, "{what}: {threads:?}");
    let src = "reallocs.c";
    let allocs = report(trace, "alloc");
    assert_eq!(at_line(&allocs, src, line_of(src, "realloc-null"), "blocks"), 100, "{what}");
    assert_eq!(at_line(&allocs, src, line_of(src, "realloc-grow"), "blocks"), 100, "{what}");
    assert_eq!(at_line(&allocs, src, line_of(src, "realloc-zero"), "blocks"), 0, "{what}");
}

#[test]
fn realloc_counts_as_memcheck_counts_it() {
    for cc in Cc::all() {
        let t = build_and_record(cc, "reallocs", "reallocs.c");
        check_reallocs(&t.trace, &format!("{cc:?}"));
    }
    let Some((dir, exe)) = setup("dbi-reallocs", Src::Program("reallocs.c"), &[]) else {
        return;
    };
    // The plain build (the memlens runtime allocates for itself too, unrecorded).
    if let Some(m) = memcheck_heap(&exe) {
        assert_eq!(m, (200, 200), "memcheck");
    }
    let trace = dir.join("t.trace");
    record_ok(&exe, &trace, &[], &[]);
    check_reallocs(&trace, "--dbi");
}

const ASM_MAIN: &str = "#include <stdio.h>\nlong add3(long, long, long);\n\
int main(void) { printf(\"%ld\\n\", add3(1, 2, 3)); return 0; }\n";
const ASM_ADD: &str = "#if FOO\n  .text\n  .globl add3\nadd3:\n  lea (%rdi,%rsi), %rax\n\
  add %rdx, %rax\n  ret\n#endif\n  .section .note.GNU-stack,\"\",@progbits\n";

/// `memlens` with the compiler chosen by `cc`, in `dir`.
fn memlens_in(cc: Cc, dir: &Path, args: &[&str]) -> std::process::Output {
    let (var, compiler) = match cc {
        Cc::Gcc => ("MEMLENS_CC", "gcc"),
        Cc::Clang => ("MEMLENS_CC", "clang-22"),
    };
    Command::new(memlens()).args(args).current_dir(dir).env(var, compiler).output().unwrap()
}

/// Assembler files pass straight through: as CMake compiles them with
/// `CC="memlens cc"` (`memlens -D... -c x.S`, its ASM language drops the `cc`), with
/// `-x assembler-with-cpp`, and mixed with C sources in one command.
#[test]
fn assembler_invocations_pass_through() {
    require_runtime();
    for cc in Cc::all() {
        let dir = scratch("asm");
        std::fs::write(dir.join("main.c"), ASM_MAIN).unwrap();
        std::fs::write(dir.join("add.S"), ASM_ADD).unwrap();
        std::fs::write(dir.join("add.asm"), ASM_ADD).unwrap();
        let ok = |args: &[&str]| {
            let out = memlens_in(cc, &dir, args);
            assert!(out.status.success(), "{cc:?} memlens {args:?}: {}", stderr(&out));
        };
        ok(&["-DFOO=1", "-o", "add.o", "-c", "add.S"]);
        ok(&["cc", "-x", "assembler-with-cpp", "-DFOO=1", "-c", "add.asm", "-o", "add2.o"]);
        ok(&["cc", "-O2", "main.c", "add.o", "-o", "p1"]);
        ok(&["cc", "-O2", "main.c", "add2.o", "-o", "p2"]);
        ok(&["cc", "-O2", "-DFOO=1", "main.c", "add.S", "-o", "p3"]);
        for p in ["p1", "p2", "p3"] {
            let trace = dir.join(format!("{p}.trace"));
            let out = record(&dir.join(p), &trace, &[]);
            assert!(out.status.success(), "{cc:?} {p}: {}", stderr(&out));
            assert_eq!(stdout(&out), "6\n", "{cc:?} {p}");
            // main.c is instrumented: its call of printf is recorded.
            assert!(info(&trace)["events"].as_u64().unwrap() > 0);
        }
    }
    // Anything else still goes to the command line parser.
    let out = run_memlens(&["-DFOO=1", "-c", "main.c"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

const STRIP_LIB: &str = "\
static __attribute__((noinline)) int helper(const int *a, int i) { return a[i] * 3 + 1; }
int lib_leaf(const int *a, int n) {
    int s = 0;
    for (int i = 0; i < n; i++) s += helper(a, i);
    return s;
}
int lib_tail(const int *a, int n) { return lib_leaf(a, n - 1); }
";
const STRIP_MAIN: &str = "\
#include <stdio.h>
int lib_leaf(const int *a, int n);
int lib_tail(const int *a, int n);
int a[64];
int main(void) {
    long s = 0;
    for (int i = 0; i < 64; i++) a[i] = i;
    for (int i = 0; i < 50; i++) s += lib_leaf(a, 64);
    for (int i = 0; i < 50; i++) s += lib_tail(a, 64);
    printf(\"%ld\\n\", s);
    return 0;
}
";

/// Function entries and exits per name in a dump.
fn calls_by_name(trace: &Path) -> std::collections::BTreeMap<(String, String), u64> {
    let mut m = std::collections::BTreeMap::new();
    for e in dump(trace) {
        let ev = e["event"].as_str().unwrap_or("");
        if ev == "enter" || ev == "exit" {
            let f = e["function"].as_str().unwrap_or("?").to_string();
            *m.entry((ev.to_string(), f)).or_default() += 1;
        }
    }
    m
}

/// A stripped library (exported functions only have symbols; its static helper and
/// the exported function reached by a tail call through the PLT do not return on
/// their own): one exit per recorded entry, none for functions without a symbol.
#[test]
fn dbi_stripped_library_calls_balance() {
    if !have("qemu-x86_64") {
        return;
    }
    let dir = scratch("dbi-strip");
    std::fs::write(dir.join("lib.c"), STRIP_LIB).unwrap();
    std::fs::write(dir.join("main.c"), STRIP_MAIN).unwrap();
    let d = dir.display().to_string();
    let gcc = |args: &[&str]| {
        let out = Command::new("gcc").args(args).current_dir(&dir).output().unwrap();
        assert!(out.status.success(), "gcc {args:?}: {}", stderr(&out));
    };
    gcc(&["-O2", "-fPIC", "-shared", "-s", "lib.c", "-o", "libstrip.so"]);
    let rpath = format!("-Wl,-rpath,{d}");
    gcc(&["-O2", "-g", "main.c", "-o", "main", "-L.", "-lstrip", &rpath]);
    let exe = dir.join("main");
    let trace = dir.join("t.trace");
    let out = record_ok(&exe, &trace, &[], &["--dbi-filter", "lib:libstrip"]);
    assert_eq!(stdout(&out), "601700\n");
    let m = calls_by_name(&trace);
    let n = |ev: &str, f: &str| m.get(&(ev.to_string(), f.to_string())).copied().unwrap_or(0);
    // 50 direct calls of lib_leaf, 50 of lib_tail, each tail-calling lib_leaf
    assert_eq!((n("enter", "lib_leaf"), n("enter", "lib_tail")), (100, 50), "{m:?}");
    let enters: u64 = m.iter().filter(|(k, _)| k.0 == "enter").map(|(_, v)| v).sum();
    let exits: u64 = m.iter().filter(|(k, _)| k.0 == "exit").map(|(_, v)| v).sum();
    assert_eq!((enters, exits), (150, 150), "{m:?}");
    let threads = report(&trace, "thread");
    assert_eq!(threads[0]["calls"], 150);
}

type Tally = (u64, u64, u64, u64);

/// lackey's loads, stores, bytes read and written per source line of `exe`
/// (instruction addresses named with addr2line; M counts as a load and a store).
fn lackey_by_line(exe: &Path, src: &str) -> std::collections::HashMap<u64, Tally> {
    let out = Command::new("valgrind")
        .args(["--tool=lackey", "--trace-mem=yes", "--log-fd=1"])
        .arg(exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "valgrind: {}", stderr(&out));
    let mut per_insn: std::collections::BTreeMap<u64, Tally> = Default::default();
    let mut cur = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let (kind, rest) = line.split_at(line.len().min(3));
        let mut f = rest.split(',');
        let addr = u64::from_str_radix(f.next().unwrap_or("").trim(), 16).unwrap_or(0);
        let size: u64 = f.next().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
        let t = per_insn.entry(cur).or_default();
        match kind {
            "I  " => cur = addr,
            " L " => (t.0, t.2) = (t.0 + 1, t.2 + size),
            " S " => (t.1, t.3) = (t.1 + 1, t.3 + size),
            " M " => *t = (t.0 + 1, t.1 + 1, t.2 + size, t.3 + size),
            _ => {}
        }
    }
    per_insn.retain(|&a, t| a > 0 && a < 0x1000000 && *t != (0, 0, 0, 0));
    let addrs: Vec<String> = per_insn.keys().map(|a| format!("{a:#x}")).collect();
    let names = Command::new("addr2line").arg("-e").arg(exe).args(&addrs).output().unwrap();
    let mut by_line: std::collections::HashMap<u64, Tally> = Default::default();
    for (t, name) in per_insn.values().zip(stdout(&names).lines()) {
        let Some(loc) = name.split_whitespace().next().filter(|l| l.contains(src)) else {
            continue;
        };
        let line: u64 = loc.rsplit(':').next().unwrap().parse().unwrap_or(0);
        let e = by_line.entry(line).or_default();
        *e = (e.0 + t.0, e.1 + t.1, e.2 + t.2, e.3 + t.3);
    }
    by_line
}

/// One event per access at its real width under `--dbi` (QEMU 7.2 splits vector
/// accesses into 8-byte pieces), scalar loads of adjacent elements never merged,
/// string instructions one access per element: as lackey counts them, line by line.
/// A masked load is the one difference (docs/dbi.md): QEMU reads the whole vector.
#[test]
fn dbi_access_widths_match_lackey() {
    let Some((dir, exe)) = setup("dbi-wide", Src::Program("wide.c"), &["-mavx2", "-no-pie"]) else {
        return;
    };
    let trace = dir.join("t.trace");
    let out = record_ok(&exe, &trace, &[], &[]);
    assert_eq!(stdout(&out), "0\n");
    let src = "wide.c";
    let expected: [(&str, Tally); 10] = [
        ("y-load", (2000, 0, 64000, 0)),
        ("y-store", (0, 2000, 0, 64000)),
        ("x-load", (2000, 0, 32000, 0)),
        ("x-insert", (2000, 0, 32000, 0)),
        ("addsd", (2000, 0, 16000, 0)),
        ("mask-load", (100, 0, 3200, 0)),
        ("mask-store", (0, 400, 0, 1600)),
        ("gather", (800, 0, 3200, 0)),
        ("rep-movsb", (10000, 10000, 10000, 10000)),
        ("rep-stosq", (0, 1000, 0, 8000)),
    ];
    let rows = report(&trace, "line");
    let lk = have("valgrind").then(|| lackey_by_line(&exe, src));
    for (m, want) in expected {
        let l = line_of(src, m);
        let got = (
            at_line(&rows, src, l, "loads"),
            at_line(&rows, src, l, "stores"),
            at_line(&rows, src, l, "bytes_read"),
            at_line(&rows, src, l, "bytes_written"),
        );
        assert_eq!(got, want, "{m}");
        let Some(lk) = &lk else { continue };
        let lackey = lk.get(&l).copied().unwrap_or_default();
        if m == "mask-load" {
            // lackey: only the 4 lanes whose mask bit is set, 4 bytes each
            assert_eq!(lackey, (400, 0, 1600, 0), "lackey {m}");
        } else {
            assert_eq!(got, lackey, "memlens against lackey at {m}");
        }
    }
}

/// Entries, exits and the deepest call stack of thread 0 as the namer rebuilds it
/// (an exit closes the innermost open frame of its function; unmatched: ignored).
fn call_depth(trace: &Path) -> (u64, u64, usize) {
    let (mut enters, mut exits, mut max) = (0, 0, 0);
    let mut open: Vec<String> = Vec::new();
    for e in dump(trace) {
        if e["thread"] != 0 {
            continue;
        }
        let f = e["function"].as_str().unwrap_or("?").to_string();
        match e["event"].as_str() {
            Some("enter") => {
                enters += 1;
                open.push(f);
                max = max.max(open.len());
            }
            Some("exit") => {
                exits += 1;
                if let Some(i) = open.iter().rposition(|o| *o == f) {
                    open.truncate(i);
                }
            }
            _ => {}
        }
    }
    (enters, exits, max)
}

/// A program whose functions tail-call each other (`jmp`): under `--dbi` the call
/// stack stays as deep as the program's (_start, main, step, hop, step, leaf) as the
/// input doubles, and entries and exits balance, each exit naming the function it
/// leaves (the tail-called ones return through leaf's `ret`). (Exits of every `ret` made it grow by
/// two frames per call, and `info` / `report --by variable` quadratic.)
#[test]
fn dbi_tail_calls_keep_the_stack_bounded() {
    let Some((dir, exe)) = setup("dbi-tail", Src::Program("tailcalls.c"), &[]) else {
        return;
    };
    let mut seen = Vec::new();
    for n in [500u64, 1000, 2000] {
        let trace = dir.join(format!("t{n}.trace"));
        let out = record_ok(&exe, &trace, &[&n.to_string()], &[]);
        assert_eq!(stdout(&out), format!("{}\n", n * (n + 1) / 2 + n / 2));
        let (enters, exits, depth) = call_depth(&trace);
        // _start, main, then per i: step, leaf (even i) or step, hop, step, leaf (odd i)
        assert_eq!(enters, 2 + n / 2 * 2 + n / 2 * 4, "n={n}");
        assert_eq!(exits, enters - 1, "n={n}: all but _start's, which never returns");
        seen.push(depth);
    }
    assert_eq!(seen, vec![6, 6, 6]);
}

const THREAD_NAMES: &str = r#"#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
static char names[3][32];
static void comm(char *out) {
    FILE *f = fopen("/proc/thread-self/comm", "r");
    if (!f || !fgets(out, 32, f)) strcpy(out, "?");
    if (f) fclose(f);
    out[strcspn(out, "\n")] = 0;
}
static void *named(void *a) { pthread_setname_np(pthread_self(), "worker-1"); comm(names[1]); return a; }
static void *plain(void *a) { comm(names[2]); return a; }
int main(void) {
    pthread_t t;
    pthread_create(&t, 0, named, 0);
    pthread_join(t, 0);
    pthread_create(&t, 0, plain, 0);
    pthread_join(t, 0);
    comm(names[0]);
    printf("%s %s %s\n", names[0], names[1], names[2]);
    return 0;
}
"#;

/// Threads are named as the kernel names them natively (`comm`): the program's file
/// name, inherited by new threads, and what `pthread_setname_np` sets; not QEMU's.
#[test]
fn dbi_threads_are_named_after_the_guest() {
    let Some((dir, exe)) = setup("dbi-names", Src::Inline("threadnames.c", THREAD_NAMES), &[])
    else {
        return;
    };
    let native = stdout(&Command::new(&exe).output().unwrap());
    assert_eq!(native, "threadnames worker-1 threadnames\n");
    let trace = dir.join("t.trace");
    record_ok(&exe, &trace, &[], &[]);
    let mut rows = report(&trace, "thread");
    rows.sort_by_key(|r| r["thread"].as_u64());
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap_or("")).collect();
    assert_eq!(names.join(" ") + "\n", native, "{rows:?}");
}

const LOCALS: &str = "#include <stdio.h>
__attribute__((noinline)) int fill(int n) {
    volatile int loc[64];
    for (int i = 0; i < 64; i++) loc[i] = i * n;
    int s = 0;
    for (int i = 0; i < 64; i++) s += loc[i];
    return s;
}
int main(void) {
    int s = 0;
    for (int k = 0; k < 10; k++) s += fill(k);
    printf(\"%d\\n\", s);
    return 0;
}
";

/// With `--dbi-filter all` the loader runs traced before the preload library reports
/// the main thread's stack: the stream's start waits for it, so stack accesses are
/// named after the stack.
#[test]
fn dbi_filter_all_knows_the_main_stack() {
    let Some((dir, exe)) = setup("dbi-all", Src::Inline("locals.c", LOCALS), &[]) else {
        return;
    };
    let trace = dir.join("t.trace");
    let out = record_ok(&exe, &trace, &[], &["--dbi-filter", "all"]);
    assert_eq!(stdout(&out), "90720\n");
    let ev = dump(&trace);
    let start = ev.iter().find(|e| e["event"] == "thread_start").unwrap();
    assert_ne!(start["stack_hi"], "0x0", "{start}");
    let mut names = std::collections::BTreeMap::new();
    for e in ev.iter().filter(|e| e["function"] == "fill" && e["event"] == "write") {
        *names.entry(e["variable"].as_str().unwrap_or("").to_string()).or_insert(0) += 1;
    }
    assert_eq!(names.get("[stack of T0]"), Some(&640), "{names:?}");
}

/// The loader and the preload library run before the preload library reports the
/// modules: they are found in QEMU's `/proc/self/maps` when their code is first
/// translated, so `lib:ld-linux` traces the loader's start-up (relocation, symbol
/// lookup), and `all` never traces memlens's own preload library, nor the libc code
/// it calls for itself.
#[test]
fn dbi_loader_traced_and_preload_not() {
    let Some((dir, exe)) = setup("dbi-ld", Src::Inline("locals.c", LOCALS), &[]) else {
        return;
    };
    let funcs = |filter: &str| {
        let trace = dir.join(format!("{}.trace", filter.replace(':', "_")));
        record_ok(&exe, &trace, &[], &["--dbi-filter", filter]);
        report(&trace, "function")
    };
    let ld = funcs("lib:ld-linux");
    let loads = |rows: &[serde_json::Value], f: &str| {
        rows.iter()
            .filter(|r| r["function"] == f)
            .map(|r| r["loads"].as_u64().unwrap())
            .sum::<u64>()
    };
    assert!(loads(&ld, "_dl_relocate_object") > 100, "{:?}", &ld[..ld.len().min(10)]);
    assert!(loads(&ld, "_dl_lookup_symbol_x") > 100, "{:?}", &ld[..ld.len().min(10)]);
    let all = funcs("all");
    assert!(loads(&all, "_dl_relocate_object") > 100);
    // nor libc working for it: pthread_getattr_np parses /proc/self/maps with sscanf
    // (the program itself never scans)
    assert_eq!(loads(&all, "__vfscanf_internal"), 0);
    // the preload library's code (its malloc, its stack report) is not traced: no
    // pc between its load address and the next module's
    let trace = dir.join("all.trace");
    let hex = |v: &serde_json::Value| u64::from_str_radix(&v.as_str().unwrap()[2..], 16).unwrap();
    let mods = info(&trace)["modules"].as_array().unwrap().clone();
    let pre = mods.iter().find(|m| m["path"].as_str().unwrap().ends_with("preload.so")).unwrap();
    let lo = hex(&pre["base"]);
    let hi = mods.iter().map(|m| hex(&m["base"])).filter(|&b| b > lo).min().unwrap();
    let theirs = dump(&trace)
        .into_iter()
        .filter(|e| e["event"] == "read" || e["event"] == "write")
        .filter(|e| (lo..hi).contains(&hex(&e["pc"])))
        .count();
    assert_eq!(theirs, 0);
}

/// PLT stubs are named `name@plt` as objdump names them (`.plt`, `.plt.got`), not
/// after the symbol before them (`_init`).
#[test]
fn dbi_plt_stubs_are_named() {
    let Some((dir, exe)) = setup("dbi-plt", Src::Inline("locals.c", LOCALS), &[]) else {
        return;
    };
    let trace = dir.join("t.trace");
    record_ok(&exe, &trace, &[], &[]);
    let funcs = report(&trace, "function");
    let loads = |f: &str| {
        funcs
            .iter()
            .filter(|r| r["function"] == f)
            .map(|r| r["loads"].as_u64().unwrap())
            .sum::<u64>()
    };
    // each stub loads its GOT slot once: one call of printf, one of __cxa_finalize
    assert_eq!(loads("printf@plt"), 1, "{funcs:?}");
    assert_eq!(loads("__cxa_finalize@plt"), 1, "{funcs:?}");
    // _init's own: the __gmon_start__ slot and its return address
    assert_eq!(loads("_init"), 2, "{funcs:?}");
}
