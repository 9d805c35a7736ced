//! Speed of decoding alone, without reading or decompressing: every event chunk
//! is decompressed into memory first, then decoded on one core REPS times
//! (median) by [`Decoder::next_batch`] (events) and [`Decoder::decode_columns`].
//!
//! ```sh
//! cargo run --release -p memlens-format --example decode_bench -- TRACE [REPS]
//! ```
//! Prints, per way, the median wall and CPU time and M events per CPU-second
//! (CPU time: on a shared machine wall time says little); the last line decodes
//! the chunks on every core, where M events per wall second is the figure.

use memlens_format::codec::{Columns, Decoder};
use memlens_format::{ChunkKind, Event, PayloadBuf, TraceReader, BATCH};
use std::time::Instant;

/// User + system CPU seconds of this process so far, from /proc.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<f64> = rest.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    f.get(10..12).map_or(0.0, |v| (v[0] + v[1]) / 100.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: decode_bench TRACE [REPS]")?;
    let reps: usize = args.next().map_or(Ok(3), |s| s.parse())?;
    let r = TraceReader::open(&path)?;
    let mut chunks = Vec::new();
    let mut b = PayloadBuf::new();
    let mut dec_times = Vec::new();
    for _ in 0..reps {
        chunks.clear();
        let (t, c) = (Instant::now(), cpu_secs());
        for sc in r.stream_chunks() {
            let ci = &r.chunks()[sc.chunk];
            if ci.header.kind == ChunkKind::Events {
                r.read_chunk_into(ci, &mut b)?;
                chunks.push(b.raw().to_vec());
            }
        }
        dec_times.push((t.elapsed().as_secs_f64(), cpu_secs() - c));
    }
    let events = u64::from(r.totals().events) as f64;
    let bytes: usize = chunks.iter().map(|c| c.len()).sum();
    println!(
        "{path}: {} events, {} chunks, {:.2} raw bytes/event, median of {reps}",
        events,
        chunks.len(),
        bytes as f64 / events
    );
    let line = |what: &str, t: &[(f64, f64)]| {
        let w = median(t.iter().map(|x| x.0).collect());
        let c = median(t.iter().map(|x| x.1).collect());
        println!(
            "{what:<24} {w:>7.3} s wall {:>7.1} M/s   {c:>7.2} s CPU {:>7.1} M/CPU-s",
            events / w / 1e6,
            events / c.max(0.01) / 1e6
        );
    };
    line("read+decompress", &dec_times);

    let mut times = Vec::new();
    let mut check_ev = 0u64;
    let mut batch = Vec::new();
    for _ in 0..reps {
        let (t, c) = (Instant::now(), cpu_secs());
        check_ev = 0;
        for raw in &chunks {
            let mut d = Decoder::new(&raw[..]);
            while d.next_batch(&mut batch, BATCH)? > 0 {
                for e in &batch {
                    if let Event::Access { addr, .. } = e {
                        check_ev = check_ev.wrapping_add(addr.0);
                    }
                }
            }
        }
        times.push((t.elapsed().as_secs_f64(), cpu_secs() - c));
    }
    line("events (next_batch)", &times);

    let mut times = Vec::new();
    let mut check_col = 0u64;
    let mut cols = Columns::new();
    for _ in 0..reps {
        let (t, c) = (Instant::now(), cpu_secs());
        check_col = 0;
        for raw in &chunks {
            check_col = check_col.wrapping_add(decode_sum(raw, &mut cols)?);
        }
        times.push((t.elapsed().as_secs_f64(), cpu_secs() - c));
    }
    line("columns (decode_columns)", &times);
    assert_eq!(check_ev, check_col, "the two decoders saw other addresses");

    // every core: chunks handed out one at a time (they decode independently); the
    // figure that counts here is wall time
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut times = Vec::new();
    for _ in 0..reps {
        let (t, c) = (Instant::now(), cpu_secs());
        let next = std::sync::atomic::AtomicUsize::new(0);
        let sums: Vec<u64> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..cores)
                .map(|_| {
                    s.spawn(|| -> Result<u64, memlens_format::codec::DecodeError> {
                        let (mut cols, mut sum) = (Columns::new(), 0u64);
                        let order = std::sync::atomic::Ordering::Relaxed;
                        while let Some(raw) = chunks.get(next.fetch_add(1, order)) {
                            sum = sum.wrapping_add(decode_sum(raw, &mut cols)?);
                        }
                        Ok(sum)
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().expect("decoder panicked")).collect::<Vec<_>>()
        })
        .into_iter()
        .collect::<Result<_, _>>()?;
        times.push((t.elapsed().as_secs_f64(), cpu_secs() - c));
        let sum = sums.into_iter().fold(0u64, u64::wrapping_add);
        assert_eq!(sum, check_col, "the decoders on {cores} cores saw other addresses");
    }
    line(&format!("columns, {cores} cores (wall)"), &times);
    Ok(())
}

/// Decodes one chunk into columns, batch by batch, and sums its access addresses
/// (ranges left out), so that nothing is optimised away and runs can be compared.
fn decode_sum(raw: &[u8], cols: &mut Columns) -> Result<u64, memlens_format::codec::DecodeError> {
    let (mut d, mut sum) = (Decoder::new(raw), 0u64);
    loop {
        cols.clear();
        if d.decode_columns(cols, 4 * BATCH)? == 0 {
            return Ok(sum);
        }
        for (i, a) in cols.addr.iter().enumerate() {
            if cols.kind[i] & Columns::RANGE == 0 {
                sum = sum.wrapping_add(*a);
            }
        }
    }
}
