//! Working set over time: distinct cache lines and pages touched per interval of N
//! accesses, over all threads (in delivery order) and per thread (in each thread's
//! own order).
//!
//! An access is one trace access event (access, range or RMW); a range adds every
//! line and page it covers. The last, partial interval is kept (its `accesses` is
//! below the interval). The overall series depends on the order events arrive in, so
//! this kernel is not sharded.

use crate::fxhash::FxHashSet;
use crate::names::Namer;
use crate::table::{Column, Render, RenderOpts, Section, Table};
use crate::{for_each_touch, Kernel};
use memlens_format::{Event, ThreadId};
use std::collections::BTreeMap;

/// Options of [`WorkingSet`].
#[derive(Clone, Debug)]
pub struct WorkingSetConfig {
    /// Accesses per interval. Default 100 000.
    pub interval: u64,
    /// Line size in bytes (a power of two). Default 64.
    pub line: u64,
    /// Page size in bytes (a power of two). Default 4096.
    pub page: u64,
    /// Keep a series per thread too. Default true.
    pub per_thread: bool,
}

impl Default for WorkingSetConfig {
    fn default() -> WorkingSetConfig {
        WorkingSetConfig { interval: 100_000, line: 64, page: 4096, per_thread: true }
    }
}

/// One interval of a series.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Interval {
    /// Index (in the series' own access count) of the interval's first access.
    pub start: u64,
    /// Accesses in the interval (the configured interval, or fewer for the last).
    pub accesses: u64,
    /// Distinct lines touched.
    pub lines: u64,
    /// Distinct pages touched.
    pub pages: u64,
}

#[derive(Clone, Debug, Default)]
struct Series {
    seen: u64,
    cur_lines: FxHashSet<u64>,
    cur_pages: FxHashSet<u64>,
    points: Vec<Interval>,
}

impl Series {
    #[inline]
    fn touch(&mut self, first_line: u64, last_line: u64, page_shift: u32) {
        for l in first_line..=last_line {
            self.cur_lines.insert(l);
            self.cur_pages.insert(l >> page_shift);
        }
    }

    #[inline]
    fn end_access(&mut self, interval: u64) {
        self.seen += 1;
        if self.seen.is_multiple_of(interval) {
            self.close(interval);
        }
    }

    fn close(&mut self, len: u64) {
        self.points.push(Interval {
            start: self.seen - len,
            accesses: len,
            lines: self.cur_lines.len() as u64,
            pages: self.cur_pages.len() as u64,
        });
        self.cur_lines.clear();
        self.cur_pages.clear();
    }

    fn finish(mut self, interval: u64) -> Vec<Interval> {
        let rest = self.seen % interval;
        if rest > 0 {
            self.close(rest);
        }
        self.points
    }
}

/// The working-set kernel.
#[derive(Clone, Debug)]
pub struct WorkingSet {
    cfg: WorkingSetConfig,
    line_bits: u32,
    page_shift: u32,
    overall: Series,
    threads: BTreeMap<ThreadId, Series>,
    all_lines: FxHashSet<u64>,
}

impl WorkingSet {
    /// A kernel with these options.
    pub fn new(cfg: WorkingSetConfig) -> Result<WorkingSet, crate::Error> {
        if !cfg.line.is_power_of_two()
            || !cfg.page.is_power_of_two()
            || cfg.page < cfg.line
            || cfg.interval == 0
        {
            return Err(crate::Error::Config(format!(
                "working set needs power-of-two line ({}) <= page ({}) sizes and a non-zero interval",
                cfg.line, cfg.page
            )));
        }
        Ok(WorkingSet {
            line_bits: cfg.line.trailing_zeros(),
            page_shift: cfg.page.trailing_zeros() - cfg.line.trailing_zeros(),
            cfg,
            overall: Series::default(),
            threads: BTreeMap::new(),
            all_lines: FxHashSet::default(),
        })
    }
}

impl Default for WorkingSet {
    fn default() -> WorkingSet {
        WorkingSet::new(WorkingSetConfig::default()).expect("valid defaults")
    }
}

/// What [`WorkingSet`] produces.
#[derive(Clone, Debug, Default)]
pub struct WorkingSetReport {
    /// Accesses per interval.
    pub interval: u64,
    /// Line size.
    pub line: u64,
    /// Page size.
    pub page: u64,
    /// All threads, in delivery order.
    pub overall: Vec<Interval>,
    /// Per thread (when kept).
    pub threads: BTreeMap<ThreadId, Vec<Interval>>,
    /// Distinct lines over the whole run.
    pub footprint_lines: u64,
}

impl Kernel for WorkingSet {
    type Output = WorkingSetReport;

    fn process(&mut self, thread: ThreadId, ev: &Event) {
        if !ev.is_access() {
            return;
        }
        let (bits, ps) = (self.line_bits, self.page_shift);
        let per_thread = self.cfg.per_thread;
        let mut th = if per_thread { Some(self.threads.entry(thread).or_default()) } else { None };
        let overall = &mut self.overall;
        let all = &mut self.all_lines;
        let mut any = false;
        for_each_touch(ev, |t| {
            let first = t.addr >> bits;
            let last = t.addr.saturating_add(t.len - 1) >> bits;
            overall.touch(first, last, ps);
            if let Some(s) = th.as_mut() {
                s.touch(first, last, ps);
            }
            for l in first..=last {
                all.insert(l);
            }
            any = true;
        });
        if any {
            self.overall.end_access(self.cfg.interval);
            if let Some(s) = th {
                s.end_access(self.cfg.interval);
            }
        }
    }

    fn finish(self) -> WorkingSetReport {
        let n = self.cfg.interval;
        WorkingSetReport {
            interval: n,
            line: self.cfg.line,
            page: self.cfg.page,
            overall: self.overall.finish(n),
            threads: self.threads.into_iter().map(|(t, s)| (t, s.finish(n))).collect(),
            footprint_lines: self.all_lines.len() as u64,
        }
    }
}

fn point_row(p: &Interval, i: usize, line: u64) -> crate::table::Row {
    row! {
        "interval" => i, "start" => p.start, "accesses" => p.accesses,
        "cache_lines" => p.lines, "pages" => p.pages, "bytes" => p.lines * line,
    }
}

impl Render for WorkingSetReport {
    /// Sections `summary`, `overall` (the series) and `by_thread` (one row per thread
    /// and interval). Series are never cut by `top`.
    fn render(&self, _namer: &dyn Namer, _opts: &RenderOpts) -> Table {
        let mut summary = Section::new(
            "summary",
            "Working set",
            vec![
                Column::num("interval_accesses", "interval"),
                Column::num("footprint_cache_lines", "footprint lines"),
                Column::num("footprint_bytes", "footprint bytes"),
                Column::num("max_cache_lines", "max lines/interval"),
                Column::num("max_pages", "max pages/interval"),
            ],
        );
        summary.rows.push(row! {
            "interval_accesses" => self.interval, "line_size" => self.line, "page_size" => self.page,
            "footprint_cache_lines" => self.footprint_lines, "footprint_bytes" => self.footprint_lines * self.line,
            "max_cache_lines" => self.overall.iter().map(|p| p.lines).max().unwrap_or(0),
            "max_pages" => self.overall.iter().map(|p| p.pages).max().unwrap_or(0),
        });
        let cols = |first: Vec<Column>| {
            let mut c = first;
            c.extend([
                Column::num("interval", "interval"),
                Column::num("start", "start"),
                Column::num("accesses", "accesses"),
                Column::num("cache_lines", "lines"),
                Column::num("pages", "pages"),
            ]);
            c
        };
        let mut overall = Section::new("overall", "All threads", cols(Vec::new()));
        for (i, p) in self.overall.iter().enumerate() {
            overall.rows.push(point_row(p, i, self.line));
        }
        let mut by_thread =
            Section::new("by_thread", "Per thread", cols(vec![Column::num("thread", "thread")]));
        for (t, s) in &self.threads {
            for (i, p) in s.iter().enumerate() {
                let mut r = point_row(p, i, self.line);
                r.insert("thread".into(), t.0.into());
                by_thread.rows.push(r);
            }
        }
        Table { sections: vec![summary, overall, by_thread] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use crate::{drive_serial, NoNames};

    #[test]
    fn intervals_lines_and_pages() {
        // thread 0: 10 loads over lines 0..10 of one page, then 10 loads one per page
        let mut t0: Vec<Event> = (0..10u64).map(|i| rd(0x10, 0x10_0000 + 64 * i, 8)).collect();
        t0.extend((0..10u64).map(|i| rd(0x10, 0x20_0000 + 4096 * i, 8)));
        // thread 1: 5 loads of one line, and a 256-byte range over 4 lines
        let mut t1: Vec<Event> = (0..5).map(|_| rd(0x20, 0x30_0000, 8)).collect();
        t1.push(range_rd(0x20, 0x30_0fc0, 256)); // 1 line in page 0x300, 3 in 0x301
        let cfg = WorkingSetConfig { interval: 8, ..WorkingSetConfig::default() };
        let rep = drive_serial(&trace(&[(0, t0), (1, t1)]), WorkingSet::new(cfg).unwrap(), |_| {})
            .unwrap();
        let lp =
            |v: &[Interval]| v.iter().map(|p| (p.accesses, p.lines, p.pages)).collect::<Vec<_>>();
        assert_eq!(lp(&rep.threads[&ThreadId(0)]), [(8, 8, 1), (8, 8, 7), (4, 4, 4)]);
        assert_eq!(lp(&rep.threads[&ThreadId(1)]), [(6, 5, 2)]);
        // overall: t0's 20 then t1's 6 accesses
        assert_eq!(lp(&rep.overall), [(8, 8, 1), (8, 8, 7), (8, 5, 5), (2, 5, 2)]);
        assert_eq!(rep.overall[3].start, 24);
        assert_eq!(rep.footprint_lines, 20 + 5);
        let j = rep.render(&NoNames, &RenderOpts::default()).to_json();
        assert_eq!(j["overall"].as_array().unwrap().len(), 4);
        assert_eq!(j["by_thread"][3]["thread"], 1);
        assert_eq!(j["summary"][0]["max_pages"], 7);
    }
}
