//! Reuse distance and reuse time.
//!
//! The reuse distance of an access is the number of distinct cache lines touched
//! since the previous access to the same line (0 for an immediate repeat); its reuse
//! time is the number of line accesses since then (1 for an immediate repeat). The
//! first access to a line is cold. Under LRU, a fully associative cache of C lines
//! hits exactly the accesses whose distance is below C.
//!
//! Exact distances in O(log n) per access: each line has one mark at the position of
//! its last access in a Fenwick tree; the distance is the number of marks after the
//! line's previous position. When positions run out the live marks are renumbered
//! densely, so memory stays proportional to the number of distinct lines.
//!
//! Histograms use power-of-two buckets: bucket 0 holds 0, bucket k holds
//! `2^(k-1) ..= 2^k - 1`.

use crate::fxhash::FxHashMap;
use crate::names::{CodeName, Namer};
use crate::table::{ratio, Column, Render, RenderOpts, Section, Table};
use crate::{for_each_touch, Kernel, ShardKernel};
use memlens_format::{Addr, Event, Pc, ThreadId};
use serde_json::json;
use std::collections::HashMap;

/// Whose accesses a distance counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// Each thread's own stream (a private cache's view). Default; shardable.
    #[default]
    PerThread,
    /// All threads in delivery order (a shared cache's view). Exact only with a
    /// serial driver over time-ordered events; parallel shards give per-thread
    /// distances.
    Global,
}

/// Options of [`Reuse`].
#[derive(Clone, Debug)]
pub struct ReuseConfig {
    /// Line size in bytes (a power of two). Default 64.
    pub line: u64,
    /// Whose accesses count. Default per thread.
    pub scope: Scope,
    /// Keep histograms per line of data (rendered per variable). Default true.
    pub per_data: bool,
}

impl Default for ReuseConfig {
    fn default() -> ReuseConfig {
        ReuseConfig { line: 64, scope: Scope::PerThread, per_data: true }
    }
}

/// A power-of-two histogram with a cold count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    /// First accesses (no previous access).
    pub cold: u64,
    /// `buckets[k]`: values in bucket k (see the module docs).
    pub buckets: Vec<u64>,
    /// Sum of the values (for the mean).
    pub sum: u128,
}

impl Histogram {
    /// The bucket of a value.
    #[inline]
    pub fn bucket(v: u64) -> usize {
        (64 - v.leading_zeros()) as usize
    }

    /// The values bucket `k` holds, as `(low, high)` inclusive.
    pub fn bounds(k: usize) -> (u64, u64) {
        if k == 0 {
            (0, 0)
        } else {
            (1 << (k - 1), (1u64 << (k - 1)).saturating_mul(2) - 1)
        }
    }

    /// Adds a value.
    #[inline]
    pub fn add(&mut self, v: u64) {
        let b = Self::bucket(v);
        if b >= self.buckets.len() {
            self.buckets.resize(b + 1, 0);
        }
        self.buckets[b] += 1;
        self.sum += u128::from(v);
    }

    /// Values counted, cold excluded.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Mean value (cold excluded).
    pub fn mean(&self) -> f64 {
        let n = self.count();
        if n == 0 {
            0.0
        } else {
            self.sum as f64 / n as f64
        }
    }

    /// Adds another histogram.
    pub fn merge(&mut self, o: &Histogram) {
        self.cold += o.cold;
        if o.buckets.len() > self.buckets.len() {
            self.buckets.resize(o.buckets.len(), 0);
        }
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            *a += b;
        }
        self.sum += o.sum;
    }

    /// Accesses that would hit a fully associative LRU cache of `lines` lines
    /// (exact when `lines` is a power of two).
    pub fn below(&self, lines: u64) -> u64 {
        self.buckets
            .iter()
            .enumerate()
            .filter(|(k, _)| Self::bounds(*k).1 < lines)
            .map(|(_, n)| n)
            .sum()
    }
}

/// Distance and time histograms of a group of accesses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReuseStats {
    /// Reuse distance (distinct lines in between).
    pub distance: Histogram,
    /// Reuse time (line accesses in between).
    pub time: Histogram,
}

impl ReuseStats {
    /// Line accesses, cold included.
    pub fn accesses(&self) -> u64 {
        self.distance.count() + self.distance.cold
    }

    fn merge(&mut self, o: &ReuseStats) {
        self.distance.merge(&o.distance);
        self.time.merge(&o.time);
    }

    #[inline]
    fn add(&mut self, d: Option<(u64, u64)>) {
        match d {
            Some((dist, time)) => {
                self.distance.add(dist);
                self.time.add(time);
            }
            None => {
                self.distance.cold += 1;
                self.time.cold += 1;
            }
        }
    }
}

/// A Fenwick tree of 0/1 marks.
#[derive(Clone, Debug)]
struct Fenwick {
    t: Vec<u32>,
}

impl Fenwick {
    fn new(n: usize) -> Fenwick {
        Fenwick { t: vec![0; n + 1] }
    }

    /// A tree with marks at positions 0..n-1 of a capacity.
    fn full(n: usize, cap: usize) -> Fenwick {
        let mut t = vec![0u32; cap + 1];
        for i in 1..=cap {
            if i <= n {
                t[i] += 1;
            }
            let j = i + (i & i.wrapping_neg());
            if j <= cap {
                t[j] += t[i];
            }
        }
        Fenwick { t }
    }

    fn cap(&self) -> usize {
        self.t.len() - 1
    }

    #[inline]
    fn add(&mut self, pos: usize, delta: i32) {
        let mut i = pos + 1;
        while i < self.t.len() {
            self.t[i] = self.t[i].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// Marks in positions `0..pos`.
    #[inline]
    fn prefix(&self, pos: usize) -> u64 {
        let mut i = pos;
        let mut s = 0u64;
        while i > 0 {
            s += u64::from(self.t[i]);
            i &= i - 1;
        }
        s
    }
}

const MIN_CAP: usize = 1 << 12;

/// Exact reuse distances of one access stream.
#[derive(Clone, Debug)]
pub struct ReuseTracker {
    // line -> (position of its mark, access index)
    last: FxHashMap<u64, (u64, u64)>,
    tree: Fenwick,
    next_pos: u64,
    accesses: u64,
}

impl Default for ReuseTracker {
    fn default() -> ReuseTracker {
        ReuseTracker::new()
    }
}

impl ReuseTracker {
    /// An empty stream.
    pub fn new() -> ReuseTracker {
        ReuseTracker {
            last: FxHashMap::default(),
            tree: Fenwick::new(MIN_CAP),
            next_pos: 0,
            accesses: 0,
        }
    }

    /// Records an access to `line`; returns `(distance, time)`, or `None` when cold.
    #[inline]
    pub fn access(&mut self, line: u64) -> Option<(u64, u64)> {
        if self.next_pos as usize == self.tree.cap() {
            self.compact();
        }
        let pos = self.next_pos;
        let now = self.accesses;
        self.accesses += 1;
        self.next_pos += 1;
        let r = match self.last.insert(line, (pos, now)) {
            Some((p, t)) => {
                let d = self.tree.prefix(pos as usize) - self.tree.prefix(p as usize + 1);
                self.tree.add(p as usize, -1);
                Some((d, now - t))
            }
            None => None,
        };
        self.tree.add(pos as usize, 1);
        r
    }

    /// Distinct lines seen.
    pub fn distinct(&self) -> usize {
        self.last.len()
    }

    /// Renumbers live marks densely and resizes the tree.
    fn compact(&mut self) {
        let mut live: Vec<(u64, u64)> = self.last.iter().map(|(&l, &(p, _))| (p, l)).collect();
        live.sort_unstable();
        let n = live.len();
        let cap = (2 * n).max(MIN_CAP);
        for (i, (_, l)) in live.iter().enumerate() {
            if let Some(e) = self.last.get_mut(l) {
                e.0 = i as u64;
            }
        }
        self.tree = Fenwick::full(n, cap);
        self.next_pos = n as u64;
    }
}

/// The reuse kernel.
#[derive(Clone, Debug)]
pub struct Reuse {
    cfg: ReuseConfig,
    line_bits: u32,
    trackers: Vec<ReuseTracker>,
    overall: ReuseStats,
    by_pc: FxHashMap<Pc, ReuseStats>,
    by_line: FxHashMap<u64, ReuseStats>,
    by_thread: FxHashMap<ThreadId, ReuseStats>,
}

impl Reuse {
    /// A kernel with these options; the line size must be a power of two.
    pub fn new(cfg: ReuseConfig) -> Result<Reuse, crate::Error> {
        if !cfg.line.is_power_of_two() {
            return Err(crate::Error::Config(format!(
                "line size {} is not a power of two",
                cfg.line
            )));
        }
        Ok(Reuse {
            line_bits: cfg.line.trailing_zeros(),
            cfg,
            trackers: Vec::new(),
            overall: ReuseStats::default(),
            by_pc: FxHashMap::default(),
            by_line: FxHashMap::default(),
            by_thread: FxHashMap::default(),
        })
    }

    #[inline]
    fn record(&mut self, thread: ThreadId, pc: Pc, line: u64) {
        let d = self.tracker(thread).access(line);
        self.overall.add(d);
        self.by_pc.entry(pc).or_default().add(d);
        self.by_thread.entry(thread).or_default().add(d);
        if self.cfg.per_data {
            self.by_line.entry(line).or_default().add(d);
        }
    }

    fn tracker(&mut self, t: ThreadId) -> &mut ReuseTracker {
        let i = match self.cfg.scope {
            Scope::PerThread => t.0 as usize,
            Scope::Global => 0,
        };
        if i >= self.trackers.len() {
            self.trackers.resize_with(i + 1, ReuseTracker::new);
        }
        &mut self.trackers[i]
    }
}

impl Default for Reuse {
    fn default() -> Reuse {
        Reuse::new(ReuseConfig::default()).expect("default line size is a power of two")
    }
}

/// What [`Reuse`] produces.
#[derive(Clone, Debug, Default)]
pub struct ReuseReport {
    /// Line size used.
    pub line: u64,
    /// All accesses.
    pub overall: ReuseStats,
    /// By code address.
    pub by_pc: HashMap<Pc, ReuseStats>,
    /// By line of data (key: the line's first byte), when kept.
    pub by_data: HashMap<Addr, ReuseStats>,
    /// By thread.
    pub by_thread: HashMap<ThreadId, ReuseStats>,
    /// Distinct lines seen (summed over per-thread streams).
    pub distinct_lines: u64,
}

impl Kernel for Reuse {
    type Output = ReuseReport;

    fn process(&mut self, thread: ThreadId, ev: &Event) {
        let bits = self.line_bits;
        for_each_touch(ev, |t| {
            let first = t.addr >> bits;
            let last = t.addr.saturating_add(t.len - 1) >> bits;
            for l in first..=last {
                self.record(thread, t.pc, l);
            }
        });
    }

    fn finish(self) -> ReuseReport {
        let bits = self.line_bits;
        ReuseReport {
            line: self.cfg.line,
            overall: self.overall,
            by_pc: self.by_pc.into_iter().collect(),
            by_data: self.by_line.into_iter().map(|(l, s)| (Addr(l << bits), s)).collect(),
            by_thread: self.by_thread.into_iter().collect(),
            distinct_lines: self.trackers.iter().map(|t| t.distinct() as u64).sum(),
        }
    }
}

impl ShardKernel for Reuse {
    fn fork(&self) -> Reuse {
        Reuse::new(self.cfg.clone()).expect("validated")
    }

    fn merge(&mut self, o: Reuse) {
        self.overall.merge(&o.overall);
        for (k, v) in o.by_pc {
            self.by_pc.entry(k).or_default().merge(&v);
        }
        for (k, v) in o.by_line {
            self.by_line.entry(k).or_default().merge(&v);
        }
        for (k, v) in o.by_thread {
            self.by_thread.entry(k).or_default().merge(&v);
        }
        self.trackers.extend(o.trackers);
    }
}

fn hist_json(h: &Histogram) -> serde_json::Value {
    json!(h.buckets)
}

fn bucket_label(k: usize) -> String {
    let (lo, hi) = Histogram::bounds(k);
    if lo == hi {
        lo.to_string()
    } else {
        format!("{lo}-{hi}")
    }
}

impl Render for ReuseReport {
    /// Sections `summary`, `histogram` (overall distance and time per bucket),
    /// `by_line` (code, ranked by accesses) and `by_variable` (data lines grouped by
    /// variable); rows carry `distance` and `time` bucket arrays.
    fn render(&self, namer: &dyn Namer, opts: &RenderOpts) -> Table {
        let o = &self.overall;
        let mut summary = Section::new(
            "summary",
            "Reuse",
            vec![
                Column::num("accesses", "accesses"),
                Column::num("cold", "cold"),
                Column::num("distinct_cache_lines", "distinct lines"),
                Column::num("mean_distance", "mean distance"),
                Column::num("mean_time", "mean time"),
            ],
        );
        summary.rows.push(row! {
            "line_size" => self.line,
            "accesses" => o.accesses(),
            "cold" => o.distance.cold,
            "distinct_cache_lines" => self.distinct_lines,
            "mean_distance" => o.distance.mean(),
            "mean_time" => o.time.mean(),
        });

        let mut hist = Section::new(
            "histogram",
            "Reuse distance and time (power-of-two buckets)",
            vec![
                Column::text("bucket", "range"),
                Column::num("distance", "distance"),
                Column::num("distance_cum", "cum %"),
                Column::num("time", "time"),
            ],
        );
        let n = o.distance.count().max(1);
        let mut cum = 0;
        let nb = o.distance.buckets.len().max(o.time.buckets.len());
        for k in 0..nb {
            let d = o.distance.buckets.get(k).copied().unwrap_or(0);
            let t = o.time.buckets.get(k).copied().unwrap_or(0);
            cum += d;
            let (lo, hi) = Histogram::bounds(k);
            hist.rows.push(row! {
                "bucket" => bucket_label(k), "low" => lo, "high" => hi,
                "distance" => d, "distance_cum" => 100.0 * ratio(cum, n), "time" => t,
            });
        }

        let mut lines: HashMap<CodeName, ReuseStats> = HashMap::new();
        for (pc, s) in &self.by_pc {
            lines.entry(namer.code(*pc)).or_default().merge(s);
        }
        let mut lines: Vec<_> =
            lines.into_iter().filter(|(_, s)| s.accesses() >= opts.min_count).collect();
        lines.sort_by(|a, b| (b.1.accesses(), &a.0).cmp(&(a.1.accesses(), &b.0)));
        opts.cut(&mut lines);
        let cols = |first: Vec<Column>| {
            let mut c = first;
            c.extend([
                Column::num("accesses", "accesses"),
                Column::num("cold", "cold"),
                Column::num("mean_distance", "mean distance"),
                Column::num("mean_time", "mean time"),
            ]);
            c
        };
        let mut by_line = Section::new(
            "by_line",
            "By source line",
            cols(vec![Column::text("location", "location"), Column::text("function", "function")]),
        );
        for (c, s) in &lines {
            by_line.rows.push(row! {
                "function" => c.function, "file" => c.file, "line" => c.line, "location" => c.location(),
                "accesses" => s.accesses(), "cold" => s.distance.cold,
                "mean_distance" => s.distance.mean(), "mean_time" => s.time.mean(),
                "distance_histogram" => hist_json(&s.distance), "time_histogram" => hist_json(&s.time),
            });
        }

        let mut vars: HashMap<String, ReuseStats> = HashMap::new();
        for (a, s) in &self.by_data {
            vars.entry(crate::names::variable_of(namer, *a)).or_default().merge(s);
        }
        let mut vars: Vec<_> =
            vars.into_iter().filter(|(_, s)| s.accesses() >= opts.min_count).collect();
        vars.sort_by(|a, b| (b.1.accesses(), &a.0).cmp(&(a.1.accesses(), &b.0)));
        opts.cut(&mut vars);
        let mut by_var = Section::new(
            "by_variable",
            "By variable",
            cols(vec![Column::text("variable", "variable")]),
        );
        for (v, s) in &vars {
            by_var.rows.push(row! {
                "variable" => v, "accesses" => s.accesses(), "cold" => s.distance.cold,
                "mean_distance" => s.distance.mean(), "mean_time" => s.time.mean(),
                "distance_histogram" => hist_json(&s.distance), "time_histogram" => hist_json(&s.time),
            });
        }
        Table { sections: vec![summary, hist, by_line, by_var] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use crate::{drive_parallel, drive_serial, NoNames};

    /// Distances by brute force: distinct lines since the previous access.
    fn brute(seq: &[u64]) -> Vec<Option<u64>> {
        (0..seq.len())
            .map(|i| {
                let p = seq[..i].iter().rposition(|&x| x == seq[i])?;
                let mut d: Vec<u64> = seq[p + 1..i].to_vec();
                d.sort_unstable();
                d.dedup();
                Some(d.len() as u64)
            })
            .collect()
    }

    #[test]
    fn tracker_matches_brute_force_across_compactions() {
        let mut x = 12345u64;
        let seq: Vec<u64> = (0..20_000)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (x >> 33) % 300
            })
            .collect();
        let want = brute(&seq[..3000]);
        let mut t = ReuseTracker::new();
        let got: Vec<Option<u64>> = seq.iter().map(|&l| t.access(l).map(|d| d.0)).collect();
        assert_eq!(&got[..3000], &want[..]);
        // positions were renumbered several times (capacity 4096, 20000 accesses)
        assert_eq!(t.distinct(), 300);
        let tail = brute(&seq[15_000..]);
        let mut t2 = ReuseTracker::new();
        let _: Vec<_> = seq[..15_000].iter().map(|&l| t2.access(l)).collect();
        let got2: Vec<Option<u64>> =
            seq[15_000..].iter().map(|&l| t2.access(l).map(|d| d.0)).collect();
        // after the warm prefix every line is warm; compare the warm ones
        for (g, w) in got2.iter().zip(&tail) {
            if let Some(w) = w {
                assert_eq!(g, &Some(*w));
            }
        }
    }

    #[test]
    fn cyclic_pattern_has_distance_k_minus_1() {
        // K = 100 lines, 50 rounds, two threads with the same pattern
        let k = 100u64;
        let evs: Vec<Event> = (0..50 * k).map(|i| rd(0x10, 0x10_0000 + 64 * (i % k), 8)).collect();
        let r = trace(&[(0, evs.clone()), (1, evs)]);
        let rep = drive_serial(&r, Reuse::default(), |_| {}).unwrap();
        let d = &rep.overall.distance;
        assert_eq!(d.cold, 2 * k);
        assert_eq!(d.count(), 2 * 49 * k);
        // every warm access: distance exactly 99 (bucket 7 = 64..=127), time exactly 100
        assert_eq!(d.sum, u128::from(2 * 49 * k * (k - 1)));
        assert_eq!(d.buckets[Histogram::bucket(k - 1)], 2 * 49 * k);
        assert_eq!(rep.overall.time.sum, u128::from(2 * 49 * k * k));
        assert_eq!(rep.distinct_lines, 2 * k);
        // parallel shards agree (per-thread scope)
        let par = drive_parallel(&r, Reuse::default(), 2).unwrap();
        assert_eq!(par.overall, rep.overall);
        // a global scope sees the two threads' streams one after the other here
        let g = Reuse::new(ReuseConfig { scope: Scope::Global, ..ReuseConfig::default() }).unwrap();
        let rep = drive_serial(&r, g, |_| {}).unwrap();
        assert_eq!(rep.overall.distance.cold, k);
        assert_eq!(rep.overall.distance.sum, u128::from((2 * 50 - 1) * k * (k - 1)));
    }

    #[test]
    fn immediate_repeat_split_lines_and_render() {
        // loads at 0x1000 and 0x1008 (same line: distance 0, time 1), a load spanning
        // lines 0x1000 and 0x1040, then a load of line 0x1040
        let evs = vec![
            rd(0x10, 0x1000, 8),
            rd(0x10, 0x1008, 8),
            rd(0x20, 0x103c, 8),
            rd(0x30, 0x1040, 8),
        ];
        let rep = drive_serial(&trace(&[(0, evs)]), Reuse::default(), |_| {}).unwrap();
        let pc10 = &rep.by_pc[&Pc(0x10)];
        assert_eq!((pc10.distance.cold, pc10.distance.buckets[0], pc10.time.sum), (1, 1, 1));
        let pc20 = &rep.by_pc[&Pc(0x20)];
        assert_eq!((pc20.accesses(), pc20.distance.cold), (2, 1));
        // 0x1040's line was touched by the previous access: distance 0, time 1
        assert_eq!(rep.by_pc[&Pc(0x30)].distance.buckets, [1]);
        assert_eq!(rep.by_data[&Addr(0x1000)].accesses(), 3);
        let t = rep.render(&NoNames, &RenderOpts::default());
        let j = t.to_json();
        assert_eq!(j["summary"][0]["accesses"], 5);
        assert_eq!(j["summary"][0]["cold"], 2);
        assert_eq!(j["histogram"][0]["distance"], 3);
        assert_eq!(j["by_line"][0]["function"], "0x10");
    }
}
