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

/// Loop folding (trace format 3) on a real recording: every chunk of an unfolded
/// recording folded again by `Folder` decodes to the same events by the event
/// decoder, the columns and the counts scan; a folded recording decodes alike
/// through every path; and both recordings count the same per function.
#[test]
fn folded_recordings_decode_like_unfolded() {
    use memlens_format::codec::{self, Decoder, Folder};
    let cc = Cc::all()[0];
    let dir = scratch("folded");
    let exe = build(cc, "manychunks.c", &dir, &[]);
    let (plain, folded) = (dir.join("plain.trace"), dir.join("folded.trace"));
    for (t, fold) in [(&plain, "0"), (&folded, "1")] {
        let out = Command::new(memlens())
            .env("MEMLENS_FOLD", fold)
            .args(["record", "-q", "-o"])
            .arg(t)
            .arg("--")
            .arg(&exe)
            .output()
            .unwrap();
        assert!(out.status.success(), "fold={fold}: {}", stderr(&out));
    }
    let r = TraceReader::open(&plain).unwrap();
    let mut b = memlens_format::PayloadBuf::new();
    let mut folder = Folder::new();
    let (mut before, mut after, mut chunks) = (0usize, 0usize, 0usize);
    let all = |raw: &[u8]| Decoder::new(raw).collect::<Result<Vec<Event>, _>>().unwrap();
    let counts = |raw: &[u8]| {
        let mut got = std::collections::BTreeMap::<String, u64>::new();
        let mut tally = codec::AccessTally::default();
        Decoder::new(raw)
            .scan_counts(&mut tally, |c, k| *got.entry(format!("{c:?}")).or_default() += k)
            .unwrap();
        got
    };
    for ci in r.chunks() {
        if ci.header.kind != memlens_format::ChunkKind::Events {
            continue;
        }
        r.read_chunk_into(ci, &mut b).unwrap();
        let raw = b.raw().to_vec();
        let mut at = 0;
        let n = memlens_format::varint::get(&raw, &mut at).unwrap() as usize;
        let (ops, side) = (&raw[at..at + n], &raw[at + n..]);
        before += raw.len();
        let Some(f) = folder.fold(ops, side) else {
            after += raw.len();
            continue;
        };
        chunks += 1;
        let f = f.to_raw();
        after += f.len();
        assert_eq!(all(&f), all(&raw), "chunk at {}", ci.offset);
        assert_eq!(counts(&f), counts(&raw), "chunk at {}", ci.offset);
        let mut cols = Columns::new();
        let mut d = Decoder::new(&f[..]);
        while d.decode_columns(&mut cols, 1000).unwrap() > 0 {}
        let evs: Vec<Event> = cols.to_events().into_iter().map(|x| x.1).collect();
        assert_eq!(evs, all(&raw), "chunk at {} as columns", ci.offset);
    }
    assert!(chunks > 0 && after * 4 < before, "{chunks} chunks folded: {before} -> {after} bytes");
    // the folded recording: every path alike, and the same counts per function
    let (rows, _, _) = compare(&folded);
    assert!(rows >= 2_400_000, "{rows} rows");
    let by_fn = |t: &Path| {
        let v = json(&[
            "report",
            "--by",
            "function",
            "--top",
            "0",
            "--format",
            "json",
            t.to_str().unwrap(),
        ]);
        let rows = v.as_array().cloned().unwrap_or_default();
        let mut m: Vec<(String, String, String)> = rows
            .iter()
            .map(|r| (r["function"].to_string(), r["loads"].to_string(), r["stores"].to_string()))
            .collect();
        m.sort();
        m
    };
    let (p, f) = (by_fn(&plain), by_fn(&folded));
    assert!(p.iter().any(|r| r.0.contains("work")), "{p:?}");
    assert_eq!(p, f);
}
