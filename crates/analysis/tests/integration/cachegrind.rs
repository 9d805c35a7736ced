//! Fidelity against cachegrind: `tests/programs/cachefid.c` runs under
//! `valgrind --tool=cachegrind`; the same address stream (the arrays' addresses as the
//! program printed them, the loops replayed in Rust) goes through a trace file and the
//! memlens simulator with the same D1/LL geometry. Per kernel function, D1 and LL
//! misses must agree within 2%.
//!
//! Skipped (with a message) when `gcc` or `valgrind` is missing.

use memlens_analysis::cachesim::{CacheConfig, CacheReport, CacheSim};
use memlens_analysis::drive_serial;
use memlens_format::{AccessKind, Addr, Event, EventBuffer, Pc, TraceReader, TraceWriter};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const D1: &str = "--D1=32768,8,64";
const LL: &str = "--LL=1048576,16,64";

const N_STRIDE: u64 = 1 << 20;
const STRIDE: u64 = 2;
const PASSES: u64 = 3;
const T: u64 = 512;
const N_RAND: u64 = 1 << 19;
const RAND_STEPS: u64 = 1_000_000;

const PC_INIT: u64 = 0x100;
const PC_STRIDE: u64 = 0x200;
const PC_TR_LOAD: u64 = 0x300;
const PC_TR_STORE: u64 = 0x304;
const PC_RANDOM: u64 = 0x400;

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success())
}

fn tmpdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("memlens-cg-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Cachegrind's per-function totals: event name to count.
fn cachegrind_functions(out: &Path) -> HashMap<String, HashMap<String, u64>> {
    let text = std::fs::read_to_string(out).unwrap();
    let mut events: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut res: HashMap<String, HashMap<String, u64>> = HashMap::new();
    for line in text.lines() {
        if let Some(e) = line.strip_prefix("events:") {
            events = e.split_whitespace().map(String::from).collect();
        } else if let Some(f) = line.strip_prefix("fn=") {
            cur = f.trim().to_string();
        } else if line.starts_with(|c: char| c.is_ascii_digit()) && !cur.is_empty() {
            let nums: Vec<u64> =
                line.split_whitespace().skip(1).map(|x| x.parse().unwrap_or(0)).collect();
            let m = res.entry(cur.clone()).or_default();
            for (i, e) in events.iter().enumerate() {
                *m.entry(e.clone()).or_default() += nums.get(i).copied().unwrap_or(0);
            }
        }
    }
    res
}

fn access(pc: u64, addr: u64, write: bool) -> Event {
    Event::Access {
        pc: Pc(pc),
        addr: Addr(addr),
        size: 8,
        kind: if write { AccessKind::Write } else { AccessKind::Read },
        atomic: false,
        value: None,
    }
}

/// The program's data accesses, in order, written as a one-thread trace.
fn replay(path: &Path, a: u64, ta: u64, tb: u64, r: u64) -> TraceReader {
    let mut w = TraceWriter::new(std::fs::File::create(path).unwrap(), 1, 1).unwrap();
    let mut buf = EventBuffer::new();
    let mut push = |w: &mut TraceWriter<std::fs::File>, e: Event| {
        buf.push(&e);
        if buf.len() > 1 << 20 {
            w.write_events(0, &mut buf, false).unwrap();
        }
    };
    for (base, n) in [(a, N_STRIDE), (ta, T * T), (tb, T * T), (r, N_RAND)] {
        for i in 0..n {
            push(&mut w, access(PC_INIT, base + 8 * i, true));
        }
    }
    for _ in 0..PASSES {
        for i in (0..N_STRIDE).step_by(STRIDE as usize) {
            push(&mut w, access(PC_STRIDE, a + 8 * i, false));
        }
    }
    for i in 0..T {
        for j in 0..T {
            push(&mut w, access(PC_TR_LOAD, ta + 8 * (i * T + j), false));
            push(&mut w, access(PC_TR_STORE, tb + 8 * (j * T + i), true));
        }
    }
    let mut x: u64 = 42;
    for _ in 0..RAND_STEPS {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        push(&mut w, access(PC_RANDOM, r + 8 * ((x >> 33) % N_RAND), false));
    }
    w.write_events(0, &mut buf, true).unwrap();
    w.finish(|_| {}).unwrap();
    TraceReader::open(path).unwrap()
}

fn misses(rep: &CacheReport, pcs: &[u64]) -> (u64, u64, u64) {
    let mut t = (0, 0, 0);
    for pc in pcs {
        let s = &rep.by_pc[&Pc(*pc)];
        t.0 += s.accesses;
        t.1 += s.misses(0);
        t.2 += s.misses(1);
    }
    t
}

fn within(ours: u64, theirs: u64, pct: f64) -> bool {
    (ours as f64 - theirs as f64).abs() <= theirs as f64 * pct / 100.0 + 1.0
}

#[test]
fn matches_cachegrind_within_two_percent() {
    if !have("gcc") || !have("valgrind") {
        eprintln!("skipped: gcc or valgrind not found");
        return;
    }
    let dir = tmpdir();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/cachefid.c");
    let exe = dir.join("cachefid");
    let st = Command::new("gcc")
        .args(["-O2", "-g", "-fno-tree-vectorize", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success(), "gcc failed");
    let cg_out = dir.join("cachegrind.out");
    let out = Command::new("valgrind")
        .args(["--tool=cachegrind", "--cache-sim=yes", "--I1=32768,8,64", D1, LL])
        .arg(format!("--cachegrind-out-file={}", cg_out.display()))
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "valgrind failed: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let addr = |name: &str| -> u64 {
        let tok =
            stdout.split_whitespace().find_map(|t| t.strip_prefix(&format!("{name}="))).unwrap();
        u64::from_str_radix(tok.trim_start_matches("0x"), 16).unwrap()
    };
    let (a, ta, tb, r) = (addr("a"), addr("ta"), addr("tb"), addr("r"));

    let cg = cachegrind_functions(&cg_out);
    let trace = replay(&dir.join("replay.trace"), a, ta, tb, r);
    let cfg = CacheConfig::from_cachegrind_args(&[D1, LL]).unwrap();
    let rep = drive_serial(&trace, CacheSim::new(cfg).unwrap(), |_| {}).unwrap();

    let mut report = String::new();
    let mut ok = true;
    for (func, pcs) in [
        ("kernel_stride", &[PC_STRIDE][..]),
        ("kernel_transpose", &[PC_TR_LOAD, PC_TR_STORE][..]),
        ("kernel_random", &[PC_RANDOM][..]),
    ] {
        let c = &cg[func];
        let (acc, d1, ll) = misses(&rep, pcs);
        let (c_acc, c_d1, c_ll) = (c["Dr"] + c["Dw"], c["D1mr"] + c["D1mw"], c["DLmr"] + c["DLmw"]);
        let good = within(d1, c_d1, 2.0) && within(ll, c_ll, 2.0);
        ok &= good;
        report += &format!(
            "{func:18} accesses {acc:>9} (cachegrind {c_acc:>9})  D1 misses {d1:>8} vs {c_d1:>8}  LL misses {ll:>8} vs {c_ll:>8}  {}\n",
            if good { "ok" } else { "MISMATCH" }
        );
    }
    eprintln!("{report}");
    std::fs::write(dir.join("comparison.txt"), &report).unwrap();
    assert!(ok, "memlens and cachegrind disagree by more than 2%:\n{report}");
    std::fs::remove_dir_all(&dir).ok();
}
