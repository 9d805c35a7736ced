//! `report` and `analyze counts` decode chunks on every core: counts over a trace
//! of many chunks per thread must be exact, and the same for every grouping.

use crate::util::*;

#[test]
fn counts_over_many_chunks_are_exact() {
    const N: u64 = 600_000;
    for cc in Cc::all() {
        let dir = scratch("manychunks");
        let exe = build(cc, "manychunks.c", &dir, &[]);
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &[]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        // sum of 0..N, once per worker: the (i * 7919) % N walk is a permutation
        assert_eq!(stdout(&out), format!("sum={}\n", N * (N - 1)), "{cc:?}");
        let i = info(&trace);
        let streams = i["streams"].as_array().unwrap();
        let workers: Vec<_> =
            streams.iter().filter(|s| s["loads"].as_u64().unwrap() >= N).collect();
        assert_eq!(workers.len(), 2, "{cc:?}: {i}");
        assert!(
            workers.iter().all(|s| s["chunks"].as_u64().unwrap() >= 2),
            "{cc:?}: the test needs several chunks per thread: {i}"
        );

        let src = "manychunks.c";
        let rows = report(&trace, "line");
        assert_eq!(at_line(&rows, src, line_of(src, "store"), "stores"), 2 * N, "{cc:?}");
        assert_eq!(at_line(&rows, src, line_of(src, "store"), "bytes_written"), 16 * N);
        assert_eq!(at_line(&rows, src, line_of(src, "load"), "loads"), 2 * N, "{cc:?}");
        assert_eq!(at_line(&rows, src, line_of(src, "load"), "stores"), 0, "{cc:?}");
        let store_row = rows.iter().find(|r| r["line"] == line_of(src, "store")).unwrap();
        assert_eq!(store_row["threads"], 2, "{cc:?}");

        let funcs = report(&trace, "function");
        let work = funcs.iter().find(|r| r["function"] == "work").expect("work in the report");
        assert_eq!((work["loads"].as_u64(), work["stores"].as_u64()), (Some(2 * N), Some(2 * N)));

        // per thread: the report's totals equal the chunk counters the runtime wrote
        let threads = report(&trace, "thread");
        for s in streams {
            let row = threads.iter().find(|r| r["thread"] == s["thread"]).unwrap();
            assert_eq!(row["loads"], s["loads"], "{cc:?}");
            assert_eq!(row["stores"], s["stores"], "{cc:?}");
        }

        // analyze counts (by chunks) and with a window (merged order) agree
        let t = trace.to_str().unwrap();
        let fast = json(&["analyze", "counts", "--top", "0", "--format", "json", t]);
        let slow =
            json(&["analyze", "counts", "--top", "0", "--window", "0..", "--format", "json", t]);
        assert_eq!(fast["by_line"], slow["by_line"], "{cc:?}");
        assert_eq!(fast["by_thread"], slow["by_thread"], "{cc:?}");
        let line = fast["by_line"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["line"] == line_of(src, "load"))
            .unwrap();
        assert_eq!(line["loads"], 2 * N, "{cc:?}");
    }
}
