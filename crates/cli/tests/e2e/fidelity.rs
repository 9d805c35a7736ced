//! Every access means every access: each class of memory operation a compiler
//! leaves in an optimised program (tests/programs/fidelity.c, one marked line per
//! class) is recorded by `memlens cc` with the bytes it really reads and writes —
//! the same bytes `--dbi` sees in a plain build of the same source, and the bytes
//! the program's semantics give. Where a recorder cannot match, the difference is
//! named here and in docs/fidelity.md.

use crate::util::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const SRC: &str = "fidelity.c";

/// (bytes read, bytes written) per marked line of fidelity.c.
type Lines = BTreeMap<String, (u64, u64)>;

fn marks() -> BTreeMap<u64, String> {
    let text = std::fs::read_to_string(programs().join(SRC)).unwrap();
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let at = l.rfind("// @")?;
            Some((i as u64 + 1, l[at + 4..].trim().to_string()))
        })
        .collect()
}

fn per_line(trace: &Path) -> Lines {
    let rows = report(trace, "line");
    marks()
        .into_iter()
        .map(|(line, name)| {
            let r = at_line(&rows, SRC, line, "bytes_read");
            let w = at_line(&rows, SRC, line, "bytes_written");
            (name, (r, w))
        })
        .collect()
}

fn compiler(cc: Cc) -> &'static str {
    match cc {
        Cc::Gcc => "gcc",
        Cc::Clang => "clang-22",
    }
}

/// `memlens cc` build and recording; returns the per-line bytes and the
/// compiler's stderr.
fn compiled(cc: Cc, dir: &Path, opts: &[&str], run: &[&str]) -> (Lines, String) {
    require_runtime();
    let exe = dir.join(format!("memlens-{cc:?}"));
    let out = Command::new(memlens())
        .arg("cc")
        .args(opts)
        .arg("-g")
        .arg(programs().join(SRC))
        .arg("-o")
        .arg(&exe)
        .env("MEMLENS_CC", compiler(cc))
        .output()
        .unwrap();
    assert!(out.status.success(), "memlens cc: {}", stderr(&out));
    let trace = dir.join(format!("memlens-{cc:?}.trace"));
    let rec = record(&exe, &trace, run);
    assert!(rec.status.success(), "{}", stderr(&rec));
    (per_line(&trace), stderr(&out))
}

/// A plain build of the same source under `--dbi`; `None` without qemu.
fn under_dbi(cc: Cc, dir: &Path, opts: &[&str]) -> Option<Lines> {
    if !crate::dbi::have("qemu-x86_64") {
        return None;
    }
    let exe = dir.join(format!("plain-{cc:?}"));
    let out = Command::new(compiler(cc))
        .args(opts)
        .arg("-g")
        .arg(programs().join(SRC))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let trace = dir.join(format!("plain-{cc:?}.trace"));
    crate::dbi::record_ok(&exe, &trace, &[], &[]);
    Some(per_line(&trace))
}

/// What the program's semantics give, at any optimisation level where the line's
/// locals live in registers (N = 1024, REPS = 1000 in fidelity.c).
fn semantic() -> Lines {
    [
        ("local_fill", (256 * 4, 256 * 4)),
        ("local_read", (1000 * 4, 0)),
        ("struct_x", (8 * 4, 8 * 4)),
        ("struct_w", (8 * 4, 8 * 4)),
        ("struct_read", (100 * 8, 0)),
        ("vadd", (1024 * 8, 1024 * 4)),
        // mask -1,-1,0,-1,0,0,-1,-1: 5 of 8 floats per 8.
        ("maskload", (128 * 20, 0)),
        ("maskstore", (0, 128 * 20)),
        ("gather_idx", (1024 * 4, 0)),
        ("gather", (1024 * 4, 0)),
        ("gather_store", (0, 1024 * 4)),
        ("long_double", (64 * 10, 0)),
        ("const_table", (256 * 4, 0)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn check_semantic(what: &str, got: &Lines, skip: &[&str]) {
    for (name, want) in semantic() {
        if skip.contains(&name.as_str()) {
            continue;
        }
        assert_eq!(got[&name], want, "{what}: line @{name} (bytes read, written)");
    }
}

/// Lines whose loads the code generator may fold into a neighbouring line's
/// instruction (the indices of the bitfield loop): compared as one sum.
const FOLDED: &[&str] = &["bitfield_store", "bitfield_load"];

fn check_against_dbi(what: &str, ours: &Lines, dbi: &Lines, skip: &[&str]) {
    for (name, got) in ours {
        if skip.contains(&name.as_str()) || FOLDED.contains(&name.as_str()) {
            continue;
        }
        if name.starts_with("avx512") {
            continue; // QEMU 7.2 does not emulate AVX-512
        }
        assert_eq!(*got, dbi[name], "{what}: line @{name} (bytes read, written) vs --dbi");
    }
    let sum = |l: &Lines| FOLDED.iter().map(|n| l[*n]).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert_eq!(sum(ours), sum(dbi), "{what}: bitfield lines vs --dbi");
}

#[test]
fn clang_records_every_access_left_in_the_optimised_program() {
    if !Cc::all().iter().any(|c| matches!(c, Cc::Clang)) {
        return;
    }
    for opts in [&["-O2"][..], &["-O3", "-march=x86-64-v3"], &["-O0"]] {
        let dir = scratch("fidelity-clang");
        let what = format!("clang {}", opts.join(" "));
        let (ours, note) = compiled(Cc::Clang, &dir, opts, &[]);
        assert!(!note.contains("not recorded"), "{what}: unexpected note: {note}");
        // QEMU reads a masked load's whole width (the machine reads the active
        // lanes only); at -O0 the struct copy, memset and memcpy are libc calls
        // (outside the executable, so outside --dbi's default filter), and the
        // register allocator spills around the gather and the 128-bit multiply.
        let mut dbi_skip = vec!["maskload"];
        if opts == ["-O0"] {
            dbi_skip.extend(["struct_copy", "local_memset", "local_memcpy", "gather", "int128"]);
            // Loop counters live on the stack at -O0, so the semantic bytes of
            // loop bodies do not apply; --dbi is the reference there.
        } else {
            check_semantic(&what, &ours, &[]);
        }
        // The struct copy is one 96-byte read and write however it is compiled.
        assert_eq!(ours["struct_copy"], (96, 96), "{what}: struct copy");
        if let Some(dbi) = under_dbi(Cc::Clang, &dir, opts) {
            check_against_dbi(&what, &ours, &dbi, &dbi_skip);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn cxx_with_clang_records_the_same_bytes_as_c() {
    if !Cc::all().iter().any(|c| matches!(c, Cc::Clang)) {
        return;
    }
    let dir = scratch("fidelity-cxx");
    let (c, _) = compiled(Cc::Clang, &dir, &["-O3", "-march=x86-64-v3"], &[]);
    let exe = dir.join("cxx");
    let out = Command::new(memlens())
        .args(["c++", "-O3", "-march=x86-64-v3", "-g"])
        .arg(programs().join("fidelity.cpp"))
        .arg("-o")
        .arg(&exe)
        .env("MEMLENS_CXX", "clang++-22")
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let trace = dir.join("cxx.trace");
    assert!(record(&exe, &trace, &[]).status.success());
    assert_eq!(per_line(&trace), c);
}

#[test]
fn avx512_and_its_masks_are_recorded_at_their_width() {
    if !Cc::all().iter().any(|c| matches!(c, Cc::Clang)) {
        return;
    }
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    if !cpu.split_whitespace().any(|f| f == "avx512f") {
        eprintln!("note: no AVX-512 on this machine; skipping");
        return;
    }
    let dir = scratch("fidelity-avx512");
    let (ours, _) = compiled(Cc::Clang, &dir, &["-O2"], &["avx512"]);
    // 64 iterations: a 64-byte load, and a store of lanes 0-3 and 8-11 (mask 0x0f0f).
    assert_eq!(ours["avx512_load"], (64 * 64, 0));
    assert_eq!(ours["avx512_mask_store"], (0, 64 * 32));
    let trace = dir.join(format!("memlens-{:?}.trace", Cc::Clang));
    let rows = report(&trace, "line");
    let line = line_of(SRC, "avx512_mask_store");
    assert_eq!(at_line(&rows, SRC, line, "stores"), 128, "one event per run of active lanes");
    let line = line_of(SRC, "avx512_load");
    assert_eq!(at_line(&rows, SRC, line, "loads"), 64, "one event per 64-byte load");
}

#[test]
fn gcc_says_at_compile_time_what_it_cannot_see() {
    let dir = scratch("fidelity-gcc");
    for opts in [&["-O2"][..], &["-O3", "-march=x86-64-v3"], &["-O0"]] {
        let what = format!("gcc {}", opts.join(" "));
        let (ours, note) = compiled(Cc::Gcc, &dir, opts, &[]);
        assert!(note.contains("local variables whose address never escapes"), "{what}: {note}");
        // What gcc does see is exact at every level (its TSan pass runs before the
        // vectoriser, and at -O0 the invisible locals are the loop counters only):
        // global arrays, struct copies, wide stores.
        assert_eq!(ours["vadd"], (1024 * 8, 1024 * 4), "{what}");
        assert_eq!(ours["gather_store"], (0, 1024 * 4), "{what}");
        assert_eq!(ours["struct_copy"], (96, 96), "{what}");
        // ... and what the note names is indeed missing: optimised, the local
        // array's reads; at -O0 the array is seen but not the loop counter `k`
        // beside it (--dbi: 12,000 bytes read on that line).
        let want = if opts == ["-O0"] { (1000 * 4, 0) } else { (0, 0) };
        assert_eq!(ours["local_read"], want, "{what}");
    }
    let quiet = Command::new(memlens())
        .args(["cc", "-O2", "-c"])
        .arg(programs().join(SRC))
        .arg("-o")
        .arg(dir.join("q.o"))
        .env("MEMLENS_CC", "gcc")
        .env("MEMLENS_QUIET", "1")
        .output()
        .unwrap();
    assert!(quiet.status.success());
    assert!(stderr(&quiet).is_empty(), "MEMLENS_QUIET=1: {}", stderr(&quiet));
}
