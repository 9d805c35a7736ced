//! One namer for every command: `report --by variable`, `analyze cachesim`'s
//! "By variable", `analyze sharing` and the viewer's variables table give every
//! variable the same access counts, each access named where and when it happened.

use crate::util::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// (loads, stores) per variable of `report --by variable`.
fn report_counts(trace: &Path) -> BTreeMap<String, (u64, u64)> {
    let mut m = BTreeMap::new();
    for r in variables(trace, "variable") {
        let e = m.entry(r["variable"].as_str().unwrap().to_string()).or_insert((0, 0));
        e.0 += r["loads"].as_u64().unwrap();
        e.1 += r["stores"].as_u64().unwrap();
    }
    m
}

fn analyze(trace: &Path, kernel: &str) -> Value {
    json(&["analyze", kernel, "--top", "0", "--format", "json", trace.to_str().unwrap()])
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The viewer's `tables.variables`, through its server's `/api/meta`.
fn viewer_variables(trace: &Path) -> Vec<Value> {
    let mut child = Command::new(memlens())
        .args(["view", "--port", "0"])
        .arg(trace)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let _server = Server(child);
    let rest = first.trim().strip_prefix("memlens view: http://127.0.0.1:").expect("no URL");
    let port: u16 = rest.split('/').next().unwrap().parse().unwrap();
    let token = rest.split("token=").nth(1).unwrap();
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET /api/meta?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let end = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&all[..end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(!head.contains("transfer-encoding: chunked"), "{head}");
    let meta: Value = serde_json::from_slice(&all[end..]).unwrap();
    meta["tables"]["variables"].as_array().unwrap().clone()
}

/// Every command's per-variable counts against `report --by variable`'s; the
/// variables `analyze sharing` lists as shared.
fn check_agreement(trace: &Path) -> Vec<String> {
    let report = report_counts(trace);
    assert!(!report.is_empty());
    let cachesim = analyze(trace, "cachesim");
    let rows = cachesim["by_variable"].as_array().unwrap();
    let mut sim: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for r in rows {
        let (a, w) = (r["accesses"].as_u64().unwrap(), r["stores"].as_u64().unwrap());
        sim.insert(r["variable"].as_str().unwrap().to_string(), (a - w, w));
    }
    assert_eq!(sim, report, "cachesim by variable");
    let viewer: BTreeMap<String, (u64, u64)> = viewer_variables(trace)
        .iter()
        .map(|r| {
            let n = r["variable"].as_str().unwrap().to_string();
            (n, (r["loads"].as_u64().unwrap(), r["stores"].as_u64().unwrap()))
        })
        .collect();
    assert_eq!(viewer, report, "viewer variables");
    let sharing = analyze(trace, "sharing");
    let mut shared = Vec::new();
    for r in sharing["by_variable"].as_array().unwrap() {
        let v = r["variable"].as_str().unwrap();
        let got = (r["loads"].as_u64().unwrap(), r["stores"].as_u64().unwrap());
        assert_eq!(Some(&got), report.get(v), "sharing: {v}");
        assert_eq!(r["accesses"].as_u64(), Some(got.0 + got.1), "sharing: {v}");
        assert!(r["threads"].as_u64().unwrap() >= 2, "sharing: {v}");
        shared.push(v.to_string());
    }
    shared
}

#[test]
fn every_command_names_variables_like_report_on_hotspots() {
    for cc in Cc::all() {
        let dir = scratch("agree-hotspots");
        let exe = dir.join("hotspots");
        let compiler = match cc {
            Cc::Gcc => "gcc",
            Cc::Clang => "clang-22",
        };
        require_runtime();
        let out = Command::new(memlens())
            .args(["cc", "-O2", "-pthread"])
            .arg(programs().join("../../examples/hotspots.c"))
            .arg("-o")
            .arg(&exe)
            .env("MEMLENS_CC", compiler)
            .output()
            .unwrap();
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &[]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        let shared = check_agreement(&trace);
        // the contended atomic is its own variable, not part of `matrix`'s line
        let report = report_counts(&trace);
        // 4 threads x 10000 atomic adds (a load and a store each), and the final load
        assert_eq!(report.get("hits"), Some(&(40_001, 40_000)), "{cc:?}: {report:?}");
        assert!(shared.contains(&"hits".to_string()), "{cc:?}: {shared:?}");
    }
}

#[test]
fn every_command_names_variables_like_report_on_threads() {
    for cc in Cc::all() {
        let t = build_and_record(cc, "agree-sharing", "sharing.c");
        let shared = check_agreement(&t.trace);
        // the same bytes of `stats` are shared; each thread's row of `priv` is its
        // own (one variable, but no byte two threads touched)
        assert!(shared.contains(&"stats".to_string()), "{cc:?}: {shared:?}");
        assert!(!shared.contains(&"priv".to_string()), "{cc:?}: {shared:?}");
    }
}

/// The benchmark suite's C and C++ programs (bench/programs, at sizes below the
/// suite's `small` ones): loops over arrays, a linked list, std::map, a hash
/// table, sorting, allocation churn and four threads sharing data.
#[test]
fn every_command_names_variables_like_report_on_the_bench_suite() {
    require_runtime();
    let bench = programs().join("../../bench/programs");
    let suite: [(&str, &[&str]); 8] = [
        ("matmul.c", &["40"]),
        ("stencil.c", &["64", "4"]),
        ("llist.c", &["5000", "3"]),
        ("tree.cpp", &["2000"]),
        ("hashtab.c", &["10000"]),
        ("sort.c", &["5000"]),
        ("alloc.c", &["3000"]),
        ("mt.c", &["5000", "2"]),
    ];
    let dir = scratch("agree-suite");
    for (src, args) in suite {
        let name = src.split('.').next().unwrap();
        let exe = dir.join(name);
        let driver = if src.ends_with(".cpp") { "c++" } else { "cc" };
        let out = Command::new(memlens())
            .args([driver, "-O2", "-g", "-pthread"])
            .arg(bench.join(src))
            .arg("-o")
            .arg(&exe)
            .arg("-lm")
            .output()
            .unwrap();
        assert!(out.status.success(), "{src}: {}", stderr(&out));
        let trace = dir.join(format!("{name}.trace"));
        let out = record(&exe, &trace, args);
        assert!(out.status.success(), "{src}: {}", stderr(&out));
        let shared = check_agreement(&trace);
        if name == "mt" {
            // the mutex-protected histogram and the atomic counter are what the four
            // threads share
            for v in ["histogram", "events"] {
                assert!(shared.iter().any(|s| s == v), "{src}: {v} not shared: {shared:?}");
            }
        }
    }
}
