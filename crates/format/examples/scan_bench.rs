//! Speed of the counts scan alone ([`Decoder::scan_counts`]), without reading or
//! decompressing: every event chunk's op stream (all the scan reads) is
//! decompressed into memory first, then scanned on one core, REPS times (median).
//!
//! ```sh
//! cargo run --release -p memlens-format --example scan_bench -- TRACE [REPS]
//! ```
//! Prints decompression time, scan time and ns per event.

use memlens_format::codec::{AccessTally, Counted, Decoder};
use memlens_format::{ChunkKind, PayloadBuf, TraceReader};
use std::hash::{Hash, Hasher};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: scan_bench TRACE [REPS]")?;
    let reps: usize = args.next().map_or(Ok(3), |s| s.parse())?;
    let r = TraceReader::open(&path)?;
    let t = Instant::now();
    let mut chunks = Vec::new();
    for sc in r.stream_chunks() {
        let c = &r.chunks()[sc.chunk];
        if c.header.kind == ChunkKind::Events {
            let mut b = PayloadBuf::new();
            r.read_chunk_ops_into(c, &mut b)?;
            chunks.push((sc.thread, b.raw().to_vec()));
        }
    }
    let read = t.elapsed().as_secs_f64();
    let bytes: usize = chunks.iter().map(|c| c.1.len()).sum();
    println!("read+decompress {:.3} s, {} chunks, {} MB raw", read, chunks.len(), bytes >> 20);
    let mut times = Vec::new();
    let mut events = 0;
    let mut check = 0u64;
    // a checksum of what the scan reports, the same whichever way it is run
    let sum = |c: Counted, n: u64| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        c.hash(&mut h);
        h.finish().wrapping_mul(n)
    };
    for _ in 0..reps {
        let t = Instant::now();
        let mut ta = AccessTally::default();
        events = 0;
        check = 0;
        for (_, raw) in &chunks {
            events += Decoder::new(&raw[..])
                .scan_counts(&mut ta, |c, n| check = check.wrapping_add(sum(c, n)))?;
        }
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let m = times[times.len() / 2];
    println!(
        "scan {:.3} s median of {reps}, {events} events, {:.2} ns/event (check {check})",
        m,
        m * 1e9 / events as f64
    );
    Ok(())
}
