//! `timer`: time between a function's entry and its return, or between a start and a
//! stop point (`FILE:L1..FILE:L2`). Each thread has a stack of open timers, so nested
//! and recursive calls pair correctly; count, sum, min, max and a log2 histogram.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::locate::Point;
use crate::module::{Action, Column, ModuleInfo, Probe, ProbeModule};
use crate::perf::Sample;
use crate::sampler::Sampler;
use crate::target::Target;
use crate::{Error, Result};

/// The `timer` module.
#[derive(Default)]
pub struct TimerModule;

/// `START..STOP`, split at the `..` that ends a `FILE:LINE` when there is one (a path
/// may hold `..` itself), else at the first.
fn split_range(args: &str) -> Option<(&str, &str)> {
    let after_line = args.match_indices("..").map(|(i, _)| i).find(|&i| {
        args[..i]
            .rsplit_once(':')
            .is_some_and(|(_, l)| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()))
    });
    let i = after_line.or_else(|| args.find(".."))?;
    Some((&args[..i], &args[i + 2..]))
}

/// A location pair: (start points, stop points as (point, return probe)).
pub(crate) fn start_stop(target: &Target, args: &str) -> Result<Vec<(Point, bool, bool)>> {
    let b = target.binary();
    // A /REGEX/ may hold `..`; an absolute FILE:LINE (what the GUI sends) starts with / too.
    let regex = args.len() >= 2 && args.starts_with('/') && args.ends_with('/');
    if let Some((a, z)) = split_range(args).filter(|_| !regex) {
        let mut v: Vec<(Point, bool, bool)> =
            b.resolve(a)?.into_iter().map(|p| (p, false, false)).collect();
        v.extend(b.resolve(z)?.into_iter().map(|p| (p, false, true)));
        return Ok(v);
    }
    if args.rsplit_once(':').is_some_and(|(_, l)| l.parse::<u64>().is_ok()) {
        return Err(Error::Spec(format!(
            "{args}: a timer at a line needs a stop line too: FILE:L1..FILE:L2"
        )));
    }
    let entries = b.resolve(args)?;
    let mut v: Vec<(Point, bool, bool)> =
        entries.iter().map(|p| (p.clone(), false, false)).collect();
    v.extend(entries.into_iter().map(|p| (p, true, true)));
    Ok(v)
}

impl ProbeModule for TimerModule {
    fn query(&self) -> ModuleInfo {
        ModuleInfo {
            name: "timer",
            description:
                "time of a function's calls (entry to return) or between two lines, per thread",
            requirements: crate::module::UPROBE_OR_PAD.to_vec(),
        }
    }

    fn init(&mut self) -> std::result::Result<(), String> {
        // usable without uprobes on memlens-built targets; a uprobe probe says
        // what it lacks when it is created
        Ok(())
    }

    fn actions(&self) -> Vec<Action> {
        vec![
            Action { name: "time-function", label: "time this function", spec: "timer:{func}" },
            Action {
                name: "time-range",
                label: "start timer here, stop at another line",
                spec: "timer:{start}..{stop}",
            },
        ]
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::new("count", "calls"),
            Column::new("sum_ns", "ns"),
            Column::new("min_ns", "ns"),
            Column::new("max_ns", "ns"),
        ]
    }

    fn create(&self, target: &Target, args: &str) -> Result<Box<dyn Probe>> {
        if target.control().is_some() && !args.contains("..") {
            let points = target.binary().resolve(args)?;
            if let Some(pads) = crate::inproc::pads(target, &points) {
                return Ok(Box::new(crate::inproc::PadProbe::insert(
                    target, &points, &pads, true,
                )?));
            }
        }
        Ok(Box::new(SpanProbe::open(target, args, &[], |_| Agg::default())?))
    }
}

/// count/sum/min/max and a log2 histogram of durations.
#[derive(Clone, Debug)]
pub(crate) struct Agg {
    pub count: u64,
    pub sum: u64,
    pub min: u64,
    pub max: u64,
    pub hist: [u64; 65],
    /// Stops with no open start on their thread (a probe inserted mid-call).
    pub unmatched: u64,
}

impl Default for Agg {
    fn default() -> Agg {
        Agg { count: 0, sum: 0, min: u64::MAX, max: 0, hist: [0; 65], unmatched: 0 }
    }
}

impl Agg {
    pub(crate) fn add(&mut self, ns: u64) {
        self.count += 1;
        self.sum += ns;
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
        self.hist[(64 - ns.leading_zeros()) as usize] += 1;
    }

    pub(crate) fn to_json(&self, m: &mut Map<String, Value>) {
        m.insert("count".into(), self.count.into());
        m.insert("sum_ns".into(), self.sum.into());
        m.insert("min_ns".into(), if self.count == 0 { 0 } else { self.min }.into());
        m.insert("max_ns".into(), self.max.into());
        // [lower bound in ns, calls] for each non-empty power-of-two bucket.
        let hist: Vec<Value> = self
            .hist
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(b, &n)| serde_json::json!([if b == 0 { 0 } else { 1u64 << (b - 1) }, n]))
            .collect();
        m.insert("hist".into(), hist.into());
        m.insert("unmatched".into(), self.unmatched.into());
    }
}

/// What a start/stop probe makes of its pairs (the timer: durations; `perf`:
/// counter differences).
pub(crate) trait Spans: Send {
    /// What is kept for an open start.
    type Start: Send;
    /// The value kept at a start.
    fn start(&self, s: &Sample) -> Self::Start;
    /// A stop closing `start`, the innermost open start of its thread.
    fn stop(&mut self, start: Self::Start, s: &Sample);
    /// A stop with no open start on its thread (a probe inserted mid-call).
    fn unmatched(&mut self);
    /// The values so far (the probe adds `lost`).
    fn values(&self, m: &mut Map<String, Value>);
}

impl Spans for Agg {
    type Start = u64;
    fn start(&self, s: &Sample) -> u64 {
        s.time
    }
    fn stop(&mut self, t0: u64, s: &Sample) {
        self.add(s.time.saturating_sub(t0));
    }
    fn unmatched(&mut self) {
        self.unmatched += 1;
    }
    fn values(&self, m: &mut Map<String, Value>) {
        self.to_json(m);
    }
}

/// A probe at start and stop points ([`start_stop`]). Each thread has a stack of
/// open starts, so nested and recursive calls pair correctly.
pub(crate) struct SpanProbe<S: Spans> {
    location: String,
    starts: Vec<u64>,
    sampler: Sampler,
    stop: Vec<bool>,
    stacks: HashMap<u32, Vec<S::Start>>,
    spans: S,
}

impl<S: Spans> SpanProbe<S> {
    /// Inserts the probe at `args`' points, each hit sampling `counters`;
    /// `spans(points)` is given the number of points (the first values of a sample).
    pub(crate) fn open(
        target: &Target,
        args: &str,
        counters: &[(u32, u64, &str)],
        spans: impl FnOnce(usize) -> S,
    ) -> Result<SpanProbe<S>> {
        let pts = start_stop(target, args)?;
        let stop: Vec<bool> = pts.iter().map(|p| p.2).collect();
        let points: Vec<(Point, bool)> = pts.iter().map(|(p, r, _)| (p.clone(), *r)).collect();
        let starts: Vec<Point> = pts.iter().filter(|p| !p.2).map(|p| p.0.clone()).collect();
        let sampler = Sampler::open(target, &points, counters)?;
        Ok(SpanProbe {
            location: crate::count::describe(target, &starts),
            starts: starts.iter().map(|p| p.vaddr).collect(),
            sampler,
            stop,
            stacks: HashMap::new(),
            spans: spans(points.len()),
        })
    }
}

impl<S: Spans> Probe for SpanProbe<S> {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn points(&self) -> Vec<u64> {
        self.starts.clone()
    }

    fn poll(&mut self) {
        for (i, s) in self.sampler.drain() {
            let stack = self.stacks.entry(s.tid).or_default();
            if !self.stop[i] {
                stack.push(self.spans.start(&s));
            } else if let Some(v0) = stack.pop() {
                self.spans.stop(v0, &s);
            } else {
                self.spans.unmatched();
            }
        }
    }

    fn values(&self) -> Map<String, Value> {
        let mut m = Map::new();
        self.spans.values(&mut m);
        m.insert("lost".into(), self.sampler.lost.into());
        m
    }
}

#[cfg(test)]
mod tests {
    use super::split_range;

    #[test]
    fn ranges_split_after_the_start_line() {
        assert_eq!(split_range("p.c:4..p.c:9"), Some(("p.c:4", "p.c:9")));
        assert_eq!(split_range("/a/p.c:4../a/p.c:9"), Some(("/a/p.c:4", "/a/p.c:9")));
        assert_eq!(split_range("/a/../p.c:4../a/../p.c:9"), Some(("/a/../p.c:4", "/a/../p.c:9")));
        assert_eq!(split_range("f..g"), Some(("f", "g")));
        assert_eq!(split_range("work"), None);
    }
}
