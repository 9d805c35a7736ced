//! Throughput of reading a trace: decode only, and the counts kernel, serial
//! (one stream after another on one core) and by chunks on every core.
//!
//! ```sh
//! cargo run --release -p memlens-analysis --example read_bench -- TRACE [REPS]
//! ```
//! `bench/read-bench.sh` records bench programs and runs this plus `memlens report`.
//! Prints one line per variant: median wall time of REPS runs (default 3) and
//! M events/s (M accesses/s for counts).

use memlens_analysis::ShardKernel;
use memlens_analysis::{
    counts::Counts, drive_chunks, drive_counts, drive_serial, ChunkKernel, Kernel,
};
use memlens_format::{ChunkDecoder, Event, ThreadId, TraceReader};
use std::time::Instant;

/// Counts events and touches each one cheaply, so decoding cannot be optimised away.
#[derive(Default)]
struct Decode {
    events: u64,
    check: u64,
}

impl Kernel for Decode {
    type Output = (u64, u64);
    fn process(&mut self, _: ThreadId, ev: &Event) {
        self.events += 1;
        if let Some(pc) = ev.pc() {
            self.check = self.check.wrapping_add(pc.0);
        }
    }
    fn finish(self) -> (u64, u64) {
        (self.events, self.check)
    }
}

impl ShardKernel for Decode {
    fn fork(&self) -> Self {
        Decode::default()
    }
    fn merge(&mut self, o: Self) {
        self.events += o.events;
        self.check = self.check.wrapping_add(o.check);
    }
}

impl ChunkKernel for Decode {}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// User + system CPU seconds of the whole process so far (all threads), from
/// /proc: on a shared machine wall time alone says little.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<f64> = rest.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    // fields 14 and 15 (utime, stime) are the 12th and 13th after the ")"; ticks of 1/100 s
    f.get(10..12).map_or(0.0, |v| (v[0] + v[1]) / 100.0)
}

/// Median wall and CPU seconds of `reps` runs.
fn time<T>(reps: usize, mut f: impl FnMut() -> T) -> ((f64, f64), T) {
    let mut times = Vec::new();
    let mut cpus = Vec::new();
    let mut out = None;
    for _ in 0..reps {
        let c = cpu_secs();
        let t = Instant::now();
        out = Some(f());
        times.push(t.elapsed().as_secs_f64());
        cpus.push(cpu_secs() - c);
    }
    ((median(times), median(cpus)), out.expect("reps >= 1"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: read_bench TRACE [REPS]")?;
    let reps: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(3).max(1);
    let r = TraceReader::open(&path)?;
    let t = r.totals();
    let events = u64::from(t.events) as f64;
    let accesses = (u64::from(t.loads) + u64::from(t.stores)) as f64;
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    println!(
        "{path}: {} events, {} accesses, {} chunks, {} streams; {cores} cores, median of {reps}",
        t.events,
        accesses,
        r.chunks().len(),
        r.streams().len()
    );
    let line = |what: &str, (secs, cpu): (f64, f64), n: f64, unit: &str| {
        println!(
            "{what:<24} {secs:>8.3} s wall {:>8.1} M {unit}/s   {cpu:>8.2} s CPU {:>8.1} M {unit}/CPU-s",
            n / secs / 1e6,
            n / cpu.max(0.01) / 1e6
        );
    };

    let (s, (n1, c1)) = time(reps, || drive_serial(&r, Decode::default(), |_| {}).unwrap());
    line("decode, 1 core", s, events, "events");
    // the same pass through the column decoder, in batches of COLUMN_BATCH
    let (s, (n3, c3)) = time(reps, || {
        let mut dec = ChunkDecoder::new();
        let (mut n, mut check) = (0u64, 0u64);
        for c in r.stream_chunks() {
            dec.for_columns(&r, &c, |cols| {
                n += cols.events() as u64;
                check = cols.pc.iter().fold(check, |a, &pc| a.wrapping_add(pc));
                for (_, e) in &cols.other {
                    if let Some(pc) = e.pc() {
                        check = check.wrapping_add(pc.0);
                    }
                }
            })
            .unwrap();
        }
        (n, check)
    });
    line("decode, 1 core (columns)", s, events, "events");
    assert_eq!((n1, c1), (n3, c3), "the column decoder saw other events");
    let (s, (n2, c2)) = time(reps, || drive_chunks(&r, Decode::default(), cores, |_| {}).unwrap());
    line(&format!("decode, {cores} cores"), s, events, "events");
    assert_eq!((n1, c1), (n2, c2), "parallel decode saw other events");

    let (s, a) = time(reps, || drive_serial(&r, Counts::default(), |_| {}).unwrap());
    line("counts, 1 core", s, accesses, "accesses");
    let (s, b) = time(reps, || drive_chunks(&r, Counts::default(), cores, |_| {}).unwrap());
    line(&format!("counts, {cores} cores"), s, accesses, "accesses");
    assert_eq!(a.by_pc, b.by_pc, "parallel counts differ");
    assert_eq!(a.by_thread, b.by_thread, "parallel thread counts differ");
    // what `memlens report` runs: the address-free scan
    let (s, c) = time(reps, || drive_counts(&r, 1, |_| {}).unwrap());
    line("counts scan, 1 core", s, accesses, "accesses");
    let (s, d) = time(reps, || drive_counts(&r, cores, |_| {}).unwrap());
    line(&format!("counts scan, {cores} cores"), s, accesses, "accesses");
    assert_eq!((&a.by_pc, &a.by_thread), (&c.by_pc, &c.by_thread), "scan counts differ");
    assert_eq!((&c.by_pc, &c.by_thread), (&d.by_pc, &d.by_thread), "parallel scan differs");
    Ok(())
}
