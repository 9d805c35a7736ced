//! The column decoder equals the event decoder on real recordings: every chunk of
//! a multi-chunk, multi-thread program, a call-heavy one, an allocating one and a
//! `--values` recording decodes to the same events through `ChunkDecoder::decode`,
//! `ChunkDecoder::decode_columns` and `ChunkDecoder::for_columns`, numbered by their index in the stream.

use crate::util::*;
use memlens_format::codec::Columns;
use memlens_format::{ChunkDecoder, Event, TraceReader};
use std::path::Path;
use std::process::Command;

/// Decodes every chunk both ways and compares; returns (rows, other events, values).
fn compare(trace: &Path) -> (usize, usize, usize) {
    let r = TraceReader::open(trace).unwrap();
    let mut dec = ChunkDecoder::new();
    let (mut rows, mut other, mut values) = (0, 0, 0);
    let mut cols = Columns::new();
    for c in r.stream_chunks() {
        let mut want: Vec<(u64, Event)> = Vec::new();
        dec.decode(&r, &c, |evs| {
            for e in evs {
                want.push((c.first_index + want.len() as u64, e.clone()));
            }
        })
        .unwrap();
        cols.clear();
        let n = dec.decode_columns(&r, &c, &mut cols).unwrap();
        assert_eq!(n, want.len(), "{}: chunk {}", trace.display(), c.chunk);
        assert_eq!(cols.to_events(), want, "{}: chunk {}", trace.display(), c.chunk);
        // in cache-sized batches: the same events
        let mut batched = Vec::new();
        dec.for_columns(&r, &c, |b| batched.extend(b.to_events())).unwrap();
        assert_eq!(batched, want, "{}: chunk {} in batches", trace.display(), c.chunk);
        rows += cols.len();
        other += cols.other.len();
        values += cols.kind.iter().filter(|&&k| k & Columns::VALUE != 0).count();
    }
    (rows, other, values)
}

#[test]
fn columns_decode_like_events_on_recordings() {
    for cc in Cc::all() {
        let dir = scratch("columns");
        for (src, min_rows) in [("manychunks.c", 2_400_000), ("calls.c", 1), ("reallocs.c", 1)] {
            let exe = build(cc, src, &dir, &[]);
            let trace = dir.join(format!("{src}.trace"));
            let out = record(&exe, &trace, &[]);
            assert!(out.status.success(), "{cc:?} {src}: {}", stderr(&out));
            let (rows, other, _) = compare(&trace);
            assert!(rows >= min_rows, "{cc:?} {src}: {rows} rows");
            assert!(other > 0, "{cc:?} {src}: no thread or call events");
        }
        let exe = build(cc, "mutexvals.c", &dir, &[]);
        let trace = dir.join("values.trace");
        let out = Command::new(memlens())
            .args(["record", "-q", "--values", "-o"])
            .arg(&trace)
            .arg("--")
            .arg(&exe)
            .args(["4", "500"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{cc:?} mutexvals: {}", stderr(&out));
        let (_, _, values) = compare(&trace);
        // at least the 2000 stores to the counter carry their values
        assert!(values >= 2000, "{cc:?}: {values} values");
    }
}
