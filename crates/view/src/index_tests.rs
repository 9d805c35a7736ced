//! Tests of the index builder.

use super::*;
use crate::TileQuery;
use memlens_analysis::NoNames;
use memlens_format::{EventBuffer, TraceWriter};

pub(crate) fn trace_of(name: &str, addrs: &[u64]) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("view-{name}-{}.trace", std::process::id()));
    let mut w = TraceWriter::new(File::create(&path).unwrap(), 1, 1).unwrap();
    let mut buf = EventBuffer::new();
    buf.push(&Event::FuncEnter { pc: Pc(0x100), call_site: Pc(0), frame: Addr(0) });
    for &a in addrs {
        buf.push(&Event::Access {
            pc: Pc(0x10),
            addr: Addr(a),
            size: 8,
            kind: AccessKind::Read,
            atomic: false,
            value: None,
        });
    }
    buf.push(&Event::FuncExit { pc: Pc(0x100) });
    w.write_events(0, &mut buf, true).unwrap();
    w.finish(|_| {}).unwrap();
    path
}

#[test]
fn lines_enter_in_address_order_and_leave_when_their_age_runs_out() {
    // Ten lines touched once each, backwards, then line 9 again: with an age of 4,
    // at most 4 lines live at once; the first line in time is the last row.
    let addrs: Vec<u64> = (0..10).rev().map(|i| 0x1000 + 64 * i).chain([0x1000 + 64 * 9]).collect();
    let path = trace_of("ws", &addrs);
    let dir = crate::index_dir(&path);
    let r = TraceReader::open(&path).unwrap();
    let opts = BuildOptions { max_age: 4, ..BuildOptions::default() };
    let meta = crate::build(&r, &path, &dir, &NoNames, opts, &mut |_, _| {}).unwrap();
    assert_eq!(meta["ops"], 11);
    assert_eq!(meta["distinct_lines"], 10);
    assert_eq!(meta["max_rows"], 4);
    let ix = crate::Index::open(&dir).unwrap();
    assert_eq!(ix.bucket_size(0), Some(1));
    let tiles = ix.tiles(&TileQuery::all(0, 0..11)).unwrap();
    let rows = |b: usize| -> Vec<(u64, u32, bool)> {
        tiles[b]
            .1
            .chunks_exact(crate::CELL_BYTES)
            .map(|c| {
                let a = u64::from_le_bytes(c[0..8].try_into().unwrap());
                (a, u32::from_le_bytes(c[16..20].try_into().unwrap()), c[27] & 1 == 1)
            })
            .collect()
    };
    // After op 3: lines 9, 8, 7, 6 live, in address order; 6 was just touched.
    let l = |i: u64| 0x1000 + 64 * i;
    assert_eq!(rows(3), [(l(6), 0, true), (l(7), 1, false), (l(8), 2, false), (l(9), 3, false)]);
    // Op 4 brings line 5: line 9 (untouched for 4 entries) leaves, 5 enters on top.
    assert_eq!(rows(4), [(l(5), 0, true), (l(6), 1, false), (l(7), 2, false), (l(8), 3, false)]);
    // Op 10 touches line 9 again: it re-enters below 0..2.
    let last = rows(10);
    assert_eq!(last.len(), 4);
    assert_eq!(last[3], (l(9), 3, true));
    // One frame covering all 11 operations.
    assert_eq!(ix.spans(0, 11, 0, 10).unwrap().len(), 1);
    assert_eq!(ix.spans(0, 11, 0, 10).unwrap()[0].end, 11);
    // Window sums: operations 3..7 are 4 loads of 8 bytes by the one code address,
    // at every level that answers.
    for max in [u64::MAX, 4] {
        let (_, w) = ix.window(3, 7, max).unwrap().unwrap();
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].1.loads, w[0].1.stores, w[0].1.bytes), (4, 0, 32));
    }
    let (_, w) = ix.window(0, 11, u64::MAX).unwrap().unwrap();
    assert_eq!(w[0].1.loads, 11);
    // The drawing columns: bucket 4's rows and flags as in the raw cells.
    let soa =
        ix.tiles_soa_parts(&TileQuery::all(0, 4..5), crate::TileFields::Draw).unwrap().concat();
    let u = |k: usize| u32::from_le_bytes(soa[k * 4..k * 4 + 4].try_into().unwrap());
    assert_eq!((u(0), u(1), u(2), u(3)), (1, 4, 0, 4), "1 bucket (4) of 4 cells");
    assert_eq!([u(4), u(5), u(6), u(7)], [0, 1, 2, 3], "rows");
    // Ranks in address order: lines 5, 6, 7, 8 of 0..=9.
    assert_eq!([u(8), u(9), u(10), u(11)], [5, 6, 7, 8], "ranks");
    assert_eq!(soa[48 + 8..48 + 12], [1, 0, 0, 0], "flags: line 5 touched");
    // Every variable's totals for the diff (unnamed here: one row), as in the table.
    let vars = crate::vars::read_all(&dir).unwrap();
    assert_eq!(vars, meta["tables"]["variables"].as_array().unwrap()[..]);
    assert_eq!(
        vars[0],
        serde_json::json!({"variable": "(unnamed)", "loads": 11, "stores": 0, "cache_lines": 10, "threads": 1})
    );
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&path).unwrap();
}

/// Within a size budget the finest levels are left out, the coarser ones renumbered
/// from 0 and served as in the full index; the coarsest always stays.
#[test]
fn a_size_budget_leaves_out_the_finest_levels() {
    let addrs: Vec<u64> = (0..300_000u64).map(|i| 0x100000 + 64 * ((i * 7919) % 9000)).collect();
    let path = trace_of("budget", &addrs);
    let r = TraceReader::open(&path).unwrap();
    let full_dir = crate::index_dir(&path);
    let full =
        crate::build(&r, &path, &full_dir, &NoNames, BuildOptions::default(), &mut |_, _| {})
            .unwrap();
    let nl = full["levels"].as_array().unwrap().len();
    let small_dir = path.with_extension("small.mlview");
    let opts = BuildOptions { max_bytes: Some(600_000), ..BuildOptions::default() };
    let small = crate::build(&r, &path, &small_dir, &NoNames, opts, &mut |_, _| {}).unwrap();
    let size: u64 =
        std::fs::read_dir(&small_dir).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    let kept = small["levels"].as_array().unwrap().len();
    assert!(kept < nl && kept >= 1, "{kept} of {nl} levels");
    assert!(size <= 600_000, "{size} B");
    let (a, b) = (crate::Index::open(&full_dir).unwrap(), crate::Index::open(&small_dir).unwrap());
    for l in 0..kept {
        let lf = l + nl - kept;
        assert_eq!(small["levels"][l]["bucket"], full["levels"][lf]["bucket"]);
        let n = small["levels"][l]["buckets"].as_u64().unwrap();
        assert_eq!(
            b.tiles(&TileQuery::all(l, 0..n)).unwrap(),
            a.tiles(&TileQuery::all(lf, 0..n)).unwrap()
        );
    }
    // The other files of the left-out levels are gone.
    assert!(!small_dir.join(format!("cells{kept}.bin")).exists());
    std::fs::remove_dir_all(&full_dir).unwrap();
    std::fs::remove_dir_all(&small_dir).unwrap();
    std::fs::remove_file(&path).unwrap();
}

/// A trace without memory operations still gives an index that opens and answers.
#[test]
fn a_trace_without_accesses_opens() {
    let path = trace_of("empty", &[]);
    let dir = crate::index_dir(&path);
    let r = TraceReader::open(&path).unwrap();
    let meta =
        crate::build(&r, &path, &dir, &NoNames, BuildOptions::default(), &mut |_, _| {}).unwrap();
    assert_eq!(meta["ops"], 0);
    let ix = crate::Index::open(&dir).unwrap();
    assert!(ix.tiles(&TileQuery::all(0, 0..10)).unwrap().is_empty());
    assert_eq!(ix.cell_count(0, 0, 10).unwrap(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&path).unwrap();
}

/// The sharing tables list only data two threads touched: a one-thread trace's are
/// empty, so the builder skipping their kernels ([`Gate`]) leaves them unchanged.
#[test]
fn skipping_the_sharing_kernels_of_a_one_thread_trace_changes_no_table() {
    let addrs: Vec<u64> = (0..5000u64).map(|i| 0x4000 + 8 * ((i * 13) % 700)).collect();
    let path = trace_of("gate", &addrs);
    let r = TraceReader::open(&path).unwrap();
    let fed =
        memlens_analysis::drive_merged(&r, (Sharing::default(), FalseSharing::default()), |_| {})
            .unwrap();
    let gated =
        (Gate { on: false, k: Sharing::default() }, Gate { on: false, k: FalseSharing::default() });
    let skipped = memlens_analysis::drive_merged(&r, gated, |_| {}).unwrap();
    assert!(!fed.0.by_addr.is_empty(), "the fed kernel saw the accesses");
    let opts = RenderOpts::top(100);
    assert_eq!(
        fed.0.render(&NoNames, &opts).to_json(),
        skipped.0.render(&NoNames, &opts).to_json()
    );
    assert_eq!(
        fed.1.render(&NoNames, &opts).to_json(),
        skipped.1.render(&NoNames, &opts).to_json()
    );
    std::fs::remove_file(&path).unwrap();
}
