//! The viewer's index: its size, `view --clean`, and that the tiles it serves are the
//! working set of the trace, computed here independently from `dump --merged`.

use crate::util::*;
use crate::view::{get_raw, serve_in_background};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Per live line after one operation: (stamp, byte mask, last thread).
type Ws = BTreeMap<u64, (u64, u64, u64)>;

/// One cell as compared: addr, row, loads, stores, used, thread, age, touched, offset.
type Cell = [u64; 9];

/// Every memory operation of the trace in the merged order, as
/// `(thread, addr, len, loads, stores)`.
fn operations(trace: &Path) -> Vec<(u64, u64, u64, u64, u64)> {
    let out = run_memlens(&["dump", "--merged", "--format", "json", trace.to_str().unwrap()]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let hex = |v: &Value| u64::from_str_radix(&v.as_str().unwrap()[2..], 16).unwrap();
    stdout(&out)
        .lines()
        .filter_map(|l| {
            let e: Value = serde_json::from_str(l).unwrap();
            let (ld, st) = match e["event"].as_str()? {
                "read" | "range_read" => (1, 0),
                "write" | "range_write" => (0, 1),
                "rmw" => (1, 1),
                _ => return None,
            };
            let t = e["thread"].as_u64().unwrap();
            Some((t, hex(&e["addr"]), e["size"].as_u64().unwrap(), ld, st))
        })
        .collect()
}

/// The working-set map of `ops` (ExpertMemer's scheme with the index's defaults:
/// 64-byte lines, age 256), cut into buckets of `bs` operations: per bucket every
/// live line in address order with what the bucket did to it.
fn expected(ops: &[(u64, u64, u64, u64, u64)], bs: usize) -> Vec<Vec<Cell>> {
    const AGE: u64 = 256;
    let (mut ws, mut ins) = (Ws::new(), 0u64);
    let mut out = Vec::new();
    for chunk in ops.chunks(bs) {
        // line → (loads, stores, offset of the last access)
        let mut touch: BTreeMap<u64, (u64, u64, u64)> = BTreeMap::new();
        for &(t, addr, len, ld, st) in chunk {
            let len = len.max(1);
            let (first, last) = (addr >> 6, (addr + len - 1) >> 6);
            for line in first..=last.min(first + 4095) {
                let lo = (line << 6).max(addr);
                let hi = ((line + 1) << 6).min(addr + len);
                let n = hi - lo;
                let bits = if n >= 64 { u64::MAX } else { ((1u64 << n) - 1) << (lo & 63) };
                match ws.get_mut(&line) {
                    Some(e) => *e = (ins, e.1 | bits, t.min(254)),
                    None => {
                        ins += 1;
                        ws.retain(|_, e| ins - e.0 < AGE);
                        ws.insert(line, (ins, bits, t.min(254)));
                    }
                }
                let e = touch.entry(line).or_default();
                *e = (e.0 + ld, e.1 + st, lo & 63);
            }
        }
        let cells = ws
            .iter()
            .enumerate()
            .map(|(row, (&line, &(stamp, mask, t)))| {
                let (ld, st, off) = touch.get(&line).copied().unwrap_or_default();
                let age = (AGE - (ins - stamp)) * 255 / AGE;
                let used = mask.count_ones() as u64;
                [line << 6, row as u64, ld, st, used, t, age, u64::from(ld + st > 0), off]
            })
            .collect();
        out.push(cells);
    }
    out
}

/// The tiles of a level as served (`fields=all`): per bucket its cells.
fn served(port: u16, token: &str, level: usize, buckets: u64) -> Vec<Vec<Cell>> {
    let host = format!("Host: 127.0.0.1:{port}\r\n");
    let mut out = Vec::new();
    let mut b0 = 0;
    while b0 < buckets {
        let b1 = (b0 + 4096).min(buckets);
        let path = format!("/api/tiles?token={token}&level={level}&b0={b0}&b1={b1}&fields=all");
        let (st, _, body) = get_raw(port, &path, &host);
        assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
        let u = |o: usize, n: usize| {
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(&body[o..o + n]);
            u64::from_le_bytes(b)
        };
        assert_eq!(u(0, 4), b1 - b0);
        let mut p = 4;
        for b in b0..b1 {
            assert_eq!(u(p, 4), b);
            let n = u(p + 4, 4) as usize;
            p += 8;
            let cells = (0..n)
                .map(|k| {
                    let c = p + 32 * k;
                    let f = |o: usize, w: usize| u(c + o, w);
                    [
                        f(0, 8),
                        f(16, 4),
                        f(20, 2),
                        f(22, 2),
                        f(24, 1),
                        f(25, 1),
                        f(26, 1),
                        f(27, 1),
                        f(28, 1),
                    ]
                })
                .collect();
            p += 32 * n;
            out.push(cells);
        }
        assert_eq!(p, body.len());
        b0 = b1;
    }
    out
}

/// The index of a small recorded program stays within the trace's size + 16 MiB,
/// serves at every level exactly the working set computed from `dump --merged`, and
/// `view --clean` removes it (and refuses an index directory that is a link).
#[test]
fn view_index_is_small_serves_the_working_set_and_clean_removes_it() {
    let dir = scratch("view-index");
    let exe = build(Cc::Gcc, "viewwalk.c", &dir, &["-pthread"]);
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &[]);
    assert!(out.status.success(), "record failed: {}", stderr(&out));
    let t = trace.to_str().unwrap();
    let out = run_memlens(&["view", "--no-serve", t]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let index = dir.join("t.trace.mlview");
    let size: u64 =
        std::fs::read_dir(&index).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    let trace_size = std::fs::metadata(&trace).unwrap().len();
    assert!(size <= trace_size + (16 << 20), "index {size} B beside a {trace_size} B trace");

    let ops = operations(&trace);
    assert!(ops.len() > 8000 && ops.len() < 65536, "{} operations", ops.len());
    let fine = expected(&ops, 1);
    assert!(fine.iter().map(Vec::len).max().unwrap() > 200, "a working set that fills up");
    let (_server, port, token) = serve_in_background(&trace, &[], None);
    let (st, _, meta) =
        get_raw(port, &format!("/api/meta?token={token}"), &format!("Host: 127.0.0.1:{port}\r\n"));
    assert_eq!(st, 200);
    let meta: Value = serde_json::from_slice(&meta).unwrap();
    assert_eq!(meta["ops"].as_u64().unwrap() as usize, ops.len());
    let levels = meta["levels"].as_array().unwrap();
    assert!(levels.len() >= 4, "{levels:?}");
    for (l, lv) in levels.iter().enumerate() {
        let bs = lv["bucket"].as_u64().unwrap() as usize;
        let want = expected(&ops, bs);
        let got = served(port, &token, l, lv["buckets"].as_u64().unwrap());
        assert_eq!(got.len(), want.len(), "level {l}");
        for (b, (g, w)) in got.iter().zip(&want).enumerate() {
            // A coarse cell keeps the offset of the last access: compared at level 0.
            let strip = |v: &Vec<Cell>| -> Vec<Cell> {
                v.iter()
                    .map(|c| {
                        if bs > 1 {
                            [c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], 0]
                        } else {
                            *c
                        }
                    })
                    .collect()
            };
            assert_eq!(strip(g), strip(w), "level {l} (bucket of {bs}) bucket {b}");
        }
    }
    drop(_server);

    // --clean removes it, and says so; a second time there is nothing to remove.
    let out = run_memlens(&["view", "--clean", t]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert!(stderr(&out).contains("removed"), "{}", stderr(&out));
    assert!(!index.exists());
    let out = run_memlens(&["view", "--clean", t]);
    assert!(out.status.success() && stderr(&out).contains("no index"), "{}", stderr(&out));
    // A link in its place is refused in one line, and what it points to stays.
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("keep"), "x").unwrap();
    std::os::unix::fs::symlink(&elsewhere, &index).unwrap();
    let out = run_memlens(&["view", "--clean", t]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert!(elsewhere.join("keep").exists());
}
