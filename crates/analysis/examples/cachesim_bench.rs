//! Cache simulator throughput on one core, two levels (D1 32 KiB 8-way, LL 8 MiB
//! 16-way, 64-byte lines, LRU, write-back).
//!
//! `cargo run --release -p memlens-analysis --example cachesim_bench [-- MILLIONS [MIX [REPS]]]`
//!
//! Address streams (8-byte accesses, 25% stores), MIX one of:
//! - `typical`: 90% a 16 KiB hot set, 6% random over 1 MiB, 4% a sweep over 64 MiB
//! - `hot`: the hot set only (every access hits D1)
//! - `random`: random over 1 MiB (D1 misses, LL hits)
//! - `sweep`: sequential over 64 MiB (one D1 and LL miss per line)
//! - `harsh`: 5/8 hot, 2/8 random, 1/8 sweep
//! - `all` (default): each of the above
//!
//! Reported (best of REPS runs, default 3, in time on a CPU so that other processes
//! competing for the cores do not count): the bare [`Hierarchy`], and the
//! [`CacheSim`] kernel fed events as a decoder hands them over, with per-pc
//! attribution only and with per-pc plus per-64-byte-data attribution (the default).

use memlens_analysis::cachesim::{CacheConfig, CacheSim, Hierarchy};
use memlens_analysis::Kernel;
use memlens_format::{AccessKind, Addr, Event, Pc, ThreadId};
use std::time::Instant;

fn stream(n: usize, mix: &str) -> Vec<(u64, u64, bool)> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut seq = 0u64;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let kind = match mix {
            "hot" => 0,
            "random" => 1,
            "sweep" => 2,
            "harsh" => [0, 0, 0, 0, 0, 1, 1, 2][i % 8],
            _ => match i % 50 {
                0..=44 => 0,
                45..=47 => 1,
                _ => 2,
            },
        };
        let (pc, addr) = match kind {
            0 => (0x401000 + (i % 5) as u64 * 4, 0x1000_0000 + (x >> 20) % (16 << 10) / 8 * 8),
            1 => (0x402000, 0x2000_0000 + (x >> 24) % (1 << 20) / 8 * 8),
            _ => {
                seq = (seq + 8) % (64 << 20);
                (0x403000, 0x4000_0000 + seq)
            }
        };
        out.push((pc, addr, x.is_multiple_of(4)));
    }
    out
}

fn rate(n: usize, secs: f64) -> String {
    format!("{:6.1} M/s", n as f64 / secs / 1e6)
}

fn event(&(pc, a, w): &(u64, u64, bool)) -> Event {
    Event::Access {
        pc: Pc(pc),
        addr: Addr(a),
        size: 8,
        kind: if w { AccessKind::Write } else { AccessKind::Read },
        atomic: false,
        value: None,
    }
}

/// Nanoseconds this thread has spent on a CPU (from /proc; falls back to wall time),
/// so that other processes competing for the cores do not count.
struct Clock(Instant, Option<u64>);

fn oncpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

impl Clock {
    fn start() -> Clock {
        Clock(Instant::now(), oncpu_ns())
    }

    fn secs(&self) -> f64 {
        match (self.1, oncpu_ns()) {
            (Some(a), Some(b)) => (b - a) as f64 / 1e9,
            _ => self.0.elapsed().as_secs_f64(),
        }
    }
}

/// Best of `reps` runs, in seconds.
fn best(reps: usize, mut f: impl FnMut() -> f64) -> f64 {
    (0..reps).map(|_| f()).fold(f64::INFINITY, f64::min)
}

fn run(n: usize, mix: &str, reps: usize) {
    let s = stream(n, mix);
    let mut misses = (0.0, 0.0);
    let bare = best(reps, || {
        let mut h = Hierarchy::new(&CacheConfig::default()).unwrap();
        let t = Clock::start();
        let mut served = [0u64; 3];
        for &(_, a, w) in &s {
            served[h.access(0, a, w)] += 1;
        }
        let dt = t.secs();
        misses = (h.total(0).miss_ratio(), h.total(1).miss_ratio());
        dt
    });
    let kernel = |granule: u64| {
        best(reps, || {
            let cfg = CacheConfig { data_granule: granule, ..CacheConfig::default() };
            let mut sim = CacheSim::new(cfg).unwrap();
            let t = Clock::start();
            // events are built on the fly, as a decoder hands them over
            for x in &s {
                sim.process(ThreadId(0), &event(x));
            }
            let r = sim.finish();
            let dt = t.secs();
            assert!((r.levels[0].total.miss_ratio() - misses.0).abs() < 1e-12);
            dt
        })
    };
    let (per_pc, per_data) = (kernel(0), kernel(64));
    println!(
        "{mix:8} D1 miss {:5.1}%  LL miss {:5.1}%   hierarchy {}   kernel/pc {}   kernel/pc+data {}",
        100.0 * misses.0,
        100.0 * misses.1,
        rate(n, bare),
        rate(n, per_pc),
        rate(n, per_data),
    );
}

fn main() {
    let millions: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(10);
    let mix = std::env::args().nth(2).unwrap_or_else(|| "all".into());
    let reps: usize = std::env::args().nth(3).and_then(|a| a.parse().ok()).unwrap_or(3);
    let n = millions * 1_000_000;
    println!("{n} accesses per mix, D1 32KiB/8/64 + LL 8MiB/16/64 LRU write-back, one core");
    if mix == "all" {
        for m in ["typical", "hot", "random", "sweep", "harsh"] {
            run(n, m, reps);
        }
    } else {
        run(n, &mix, reps);
    }
}
