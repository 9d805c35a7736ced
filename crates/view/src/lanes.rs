//! Wall-clock lanes: each thread's `Time` stamps (trace-format.md, "Time") with the
//! memory operations done by then, so the page can draw one lane per thread on a
//! time axis. One stamp per ≥ 4,096 events: 24 bytes each in `lanes.bin`.

use crate::Error;
use memlens_format::ThreadId;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// Bytes of one stamp in `lanes.bin`: ns, merged op index, the thread's own op count.
pub(crate) const STAMP_BYTES: usize = 24;

/// One stamp: CLOCK_MONOTONIC ns, memory operations of all threads before it in the
/// merged order, memory operations of its thread before it.
pub(crate) type Stamp = [u64; 3];

#[derive(Default)]
struct Lane {
    tid: u32,
    name: String,
    stamps: Vec<Stamp>,
}

/// Collects the lanes during the index's merged pass.
#[derive(Default)]
pub(crate) struct LaneBuilder {
    lanes: BTreeMap<u32, Lane>,
}

impl LaneBuilder {
    pub(crate) fn start(&mut self, t: ThreadId, tid: u32, name: &str) {
        let l = self.lanes.entry(t.0).or_default();
        l.tid = tid;
        l.name = name.to_string();
    }

    pub(crate) fn rename(&mut self, t: ThreadId, name: &str) {
        self.lanes.entry(t.0).or_default().name = name.to_string();
    }

    /// A `Time(ns)` of thread `t` after `gop` operations in all and `top` of its own.
    pub(crate) fn stamp(&mut self, t: ThreadId, ns: u64, gop: u64, top: u64) {
        let l = self.lanes.entry(t.0).or_default();
        // stamps never decrease within a stream; a damaged one is clamped
        let ns = l.stamps.last().map_or(ns, |s| ns.max(s[0]));
        l.stamps.push([ns, gop, top]);
    }

    /// Writes `lanes.bin` into `dir`; returns the `lanes` and `time` entries of
    /// meta.json and the bytes written. `ops` is each thread's operation count and
    /// `end` the trace's: a thread's operations after its last stamp get an end
    /// stamp at its average rate (threads the runtime finished end with a stamp).
    pub(crate) fn finish(
        mut self,
        dir: &Path,
        ops: impl Fn(u32) -> u64,
        end: u64,
        clock_offset: Option<i64>,
    ) -> Result<(Value, Value, u64), Error> {
        let (mut sum_ns, mut sum_ops) = (0u64, 0u64);
        for l in self.lanes.values() {
            if let (Some(a), Some(b)) = (l.stamps.first(), l.stamps.last()) {
                sum_ns += b[0] - a[0];
                sum_ops += b[2] - a[2];
            }
        }
        let global_rate = if sum_ops > 0 { sum_ns as f64 / sum_ops as f64 } else { 1.0 };
        let mut bytes = Vec::new();
        let mut lanes = Vec::new();
        let (mut t0, mut t1) = (u64::MAX, 0u64);
        for (&t, l) in self.lanes.iter_mut() {
            let (Some(&a), Some(&b)) = (l.stamps.first(), l.stamps.last()) else { continue };
            let total = ops(t);
            if total > b[2] {
                let rate = if b[2] > a[2] {
                    (b[0] - a[0]) as f64 / (b[2] - a[2]) as f64
                } else {
                    global_rate
                };
                let ns = b[0] + ((total - b[2]) as f64 * rate).ceil() as u64;
                l.stamps.push([ns, end, total]);
            }
            let first = bytes.len() / STAMP_BYTES;
            for s in &l.stamps {
                for v in s {
                    bytes.extend_from_slice(&v.to_le_bytes());
                }
            }
            t0 = t0.min(a[0]);
            t1 = t1.max(l.stamps.last().map_or(0, |s| s[0]));
            lanes.push(json!({"thread": t, "tid": l.tid, "name": l.name,
                "first": first, "count": l.stamps.len()}));
        }
        let p = dir.join("lanes.bin");
        std::fs::write(&p, &bytes)
            .map_err(|e| Error::Io(format!("cannot write {}: {e}", p.display())))?;
        let time = if lanes.is_empty() {
            Value::Null
        } else {
            json!({"t0": t0, "t1": t1.max(t0 + 1), "clock_offset": clock_offset})
        };
        Ok((Value::Array(lanes), time, bytes.len() as u64))
    }
}

/// The lanes of an opened index.
#[derive(Default)]
pub(crate) struct Lanes {
    /// (thread, stamps), in meta.json's order.
    lanes: Vec<(u64, Vec<Stamp>)>,
}

impl Lanes {
    /// Reads `lanes.bin` as meta.json's `lanes` describe it (absent: no lanes).
    pub(crate) fn open(dir: &Path, meta: &Value) -> Result<Lanes, Error> {
        let Some(list) = meta["lanes"].as_array().filter(|l| !l.is_empty()) else {
            return Ok(Lanes::default());
        };
        let p = dir.join("lanes.bin");
        let bytes = std::fs::read(&p)
            .map_err(|e| Error::BadIndex(format!("cannot read {}: {e}", p.display())))?;
        let all: Vec<Stamp> = bytes
            .chunks_exact(STAMP_BYTES)
            .map(|c| {
                let w = |i: usize| {
                    u64::from_le_bytes(c[i * 8..i * 8 + 8].try_into().unwrap_or_default())
                };
                [w(0), w(1), w(2)]
            })
            .collect();
        let bad = || Error::BadIndex(format!("damaged index {} (lanes)", dir.display()));
        let mut lanes = Vec::new();
        for l in list {
            let first = l["first"].as_u64().ok_or_else(bad)? as usize;
            let n = l["count"].as_u64().ok_or_else(bad)? as usize;
            let s = all.get(first..first.saturating_add(n)).ok_or_else(bad)?;
            if !s.windows(2).all(|w| w[0][0] <= w[1][0]) {
                return Err(bad());
            }
            lanes.push((l["thread"].as_u64().ok_or_else(bad)?, s.to_vec()));
        }
        Ok(Lanes { lanes })
    }

    /// Every stamp as (merged operation, ns), sorted by operation, the times made
    /// non-decreasing: what maps the merged order onto wall-clock time.
    pub(crate) fn op_clock(&self) -> Vec<(u64, u64)> {
        let mut c: Vec<(u64, u64)> =
            self.lanes.iter().flat_map(|(_, s)| s.iter().map(|x| (x[1], x[0]))).collect();
        c.sort_unstable();
        let mut max = 0;
        for x in c.iter_mut() {
            max = max.max(x.1);
            x.1 = max;
        }
        c
    }

    /// Each lane's stamps that cover `t0..t1` (the last before and first after
    /// included), at most about `n` of them per lane: every k-th, which keeps the
    /// operation counts exact at the points kept.
    pub(crate) fn window(&self, t0: u64, t1: u64, n: usize) -> Value {
        let n = n.clamp(2, 1 << 16);
        let lanes: Vec<Value> = self
            .lanes
            .iter()
            .map(|(t, s)| {
                let a = s.partition_point(|x| x[0] < t0).saturating_sub(1);
                let b = (s.partition_point(|x| x[0] <= t1) + 1).min(s.len());
                let w = &s[a..b.max(a)];
                let step = w.len().div_ceil(n).max(1);
                let mut out: Vec<Value> = w.iter().step_by(step).map(|x| json!(x)).collect();
                if let Some(last) = w.last() {
                    if (w.len() - 1) % step != 0 {
                        out.push(json!(last));
                    }
                }
                json!({"thread": t, "stamps": out})
            })
            .collect();
        json!({"t0": t0, "t1": t1, "lanes": lanes})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_round_trip_and_window_keeps_the_ends() {
        let dir = std::env::temp_dir().join(format!("memlens-lanes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut b = LaneBuilder::default();
        b.start(ThreadId(0), 100, "main");
        for i in 0..1000u64 {
            b.stamp(ThreadId(0), 1_000 + 10 * i, 2 * i, i);
        }
        b.start(ThreadId(1), 101, "worker");
        b.stamp(ThreadId(1), 5_000, 7, 0);
        // thread 1 did 50 operations after its only stamp: extrapolated at the
        // average rate of the stamped threads (10 ns per operation)
        let (lanes, time, n) =
            b.finish(&dir, |t| if t == 0 { 999 } else { 50 }, 2000, Some(-3)).unwrap();
        assert_eq!(n, (1000 + 2) * STAMP_BYTES as u64);
        assert_eq!(time["t0"], 1_000);
        assert_eq!(time["t1"], 10_990);
        assert_eq!(lanes[1]["count"], 2);
        let meta = json!({"lanes": lanes});
        let l = Lanes::open(&dir, &meta).unwrap();
        assert_eq!(l.lanes[1].1, vec![[5_000, 7, 0], [5_500, 2000, 50]]);
        let w = l.window(2_000, 3_000, 10);
        let s = w["lanes"][0]["stamps"].as_array().unwrap();
        assert!(s.len() <= 12, "{}", s.len());
        assert_eq!(s[0], json!([1_990, 198, 99]));
        assert_eq!(s[s.len() - 1], json!([3_010, 402, 201]));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
