//! `perf`: perf_event counters read at a function's entry and return (or a start and
//! a stop line), per thread: the uprobes lead a counter group and every hit samples
//! the whole group (PERF_SAMPLE_READ), so each call gets the counters' difference.
//! Software counters work everywhere; hardware counters need a hardware PMU and are
//! refused with the reason on machines without one.

use serde_json::{Map, Value};

use crate::module::{Action, Column, ModuleInfo, Probe, ProbeModule};
use crate::perf::{Sample, TYPE_HARDWARE, TYPE_SOFTWARE};
use crate::target::Target;
use crate::timer::{SpanProbe, Spans};
use crate::{Error, Result};

/// (name, type, config) of every counter the module knows.
const COUNTERS: &[(&str, u32, u64)] = &[
    ("task-clock", TYPE_SOFTWARE, 1),
    ("page-faults", TYPE_SOFTWARE, 2),
    ("context-switches", TYPE_SOFTWARE, 3),
    ("cpu-migrations", TYPE_SOFTWARE, 4),
    ("cycles", TYPE_HARDWARE, 0),
    ("instructions", TYPE_HARDWARE, 1),
    ("cache-misses", TYPE_HARDWARE, 3),
];

const DEFAULT: &str = "task-clock,page-faults";

/// The `perf` module.
#[derive(Default)]
pub struct PerfModule {
    /// Why hardware counters are unavailable, when they are.
    no_pmu: Option<String>,
}

fn counter(name: &str) -> Result<(u32, u64)> {
    COUNTERS.iter().find(|c| c.0 == name).map(|c| (c.1, c.2)).ok_or_else(|| {
        let names: Vec<&str> = COUNTERS.iter().map(|c| c.0).collect();
        Error::Spec(format!("unknown counter `{name}` (counters: {})", names.join(", ")))
    })
}

/// Splits `LOCATION[:COUNTERS]`: the last `:` part is the counter list unless it is a
/// line number.
fn split_args(args: &str) -> (&str, &str) {
    match args.rsplit_once(':') {
        Some((loc, tail))
            if !tail.is_empty()
                && tail.parse::<u64>().is_err()
                && !(loc.starts_with('/') && !loc.ends_with('/') && loc.len() > 1) =>
        {
            (loc, tail)
        }
        _ => (args, DEFAULT),
    }
}

impl ProbeModule for PerfModule {
    fn query(&self) -> ModuleInfo {
        ModuleInfo {
            name: "perf",
            description: "perf counters (task-clock, page-faults, ...; cycles, instructions, cache-misses with a PMU) per call, per thread",
            requirements: vec!["root or CAP_PERFMON", "uprobe PMU", "hardware PMU for hardware counters"],
        }
    }

    fn init(&mut self) -> std::result::Result<(), String> {
        crate::module::uprobe_requirements()?;
        self.no_pmu = crate::perf::hardware_pmu().err();
        Ok(())
    }

    fn actions(&self) -> Vec<Action> {
        vec![Action {
            name: "perf-function",
            label: "read counters at entry and return",
            spec: "perf:{func}:task-clock,page-faults",
        }]
    }

    fn columns(&self) -> Vec<Column> {
        let mut v = vec![Column::new("count", "calls")];
        v.extend(
            COUNTERS
                .iter()
                .map(|c| Column::new(c.0, if c.0 == "task-clock" { "ns" } else { "events" })),
        );
        v
    }

    fn create(&self, target: &Target, args: &str) -> Result<Box<dyn Probe>> {
        let (loc, list) = split_args(args);
        let mut counters = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let (ty, config) = counter(name)?;
            if ty == TYPE_HARDWARE {
                if let Some(why) = &self.no_pmu {
                    return Err(Error::Unavailable(format!(
                        "counter {name} is unavailable: {why}"
                    )));
                }
            }
            counters.push((ty, config, COUNTERS.iter().find(|c| c.0 == name).map_or("", |c| c.0)));
        }
        let probe = SpanProbe::open(target, loc, &counters, |npoints| PerfSpans {
            names: counters.iter().map(|c| c.2.to_owned()).collect(),
            npoints,
            calls: 0,
            sums: vec![0; counters.len()],
            unmatched: 0,
        })?;
        Ok(Box::new(probe))
    }
}

/// Per call, the counters' differences between entry and return, summed.
struct PerfSpans {
    names: Vec<String>,
    /// Values of a sample before the counters'.
    npoints: usize,
    calls: u64,
    sums: Vec<u64>,
    unmatched: u64,
}

impl PerfSpans {
    fn counters(&self, s: &Sample) -> Vec<u64> {
        s.values.iter().skip(self.npoints).copied().collect()
    }
}

impl Spans for PerfSpans {
    /// The counter values at the entry.
    type Start = Vec<u64>;

    fn start(&self, s: &Sample) -> Vec<u64> {
        self.counters(s)
    }

    fn stop(&mut self, v0: Vec<u64>, s: &Sample) {
        let vals = self.counters(s);
        self.calls += 1;
        for (k, sum) in self.sums.iter_mut().enumerate() {
            let (a, b) = (v0.get(k).copied().unwrap_or(0), vals.get(k).copied().unwrap_or(0));
            *sum += b.saturating_sub(a);
        }
    }

    fn unmatched(&mut self) {
        self.unmatched += 1;
    }

    fn values(&self, m: &mut Map<String, Value>) {
        m.insert("count".into(), self.calls.into());
        for (n, v) in self.names.iter().zip(&self.sums) {
            m.insert(n.clone(), (*v).into());
        }
        m.insert("unmatched".into(), self.unmatched.into());
    }
}

#[cfg(test)]
mod tests {
    use super::split_args;

    #[test]
    fn counters_follow_the_last_colon_unless_it_is_a_line() {
        assert_eq!(split_args("work:task-clock,page-faults"), ("work", "task-clock,page-faults"));
        assert_eq!(split_args("work"), ("work", super::DEFAULT));
        assert_eq!(split_args("p.c:40..p.c:47"), ("p.c:40..p.c:47", super::DEFAULT));
        assert_eq!(split_args("p.c:40..p.c:47:task-clock"), ("p.c:40..p.c:47", "task-clock"));
    }
}
