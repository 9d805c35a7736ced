//! `count`: exact executions of a function entry, a line or an address. One counting
//! uprobe per point and thread (with `inherit`, so threads created later count too);
//! `read()` gives the count, children included.

use std::os::fd::OwnedFd;

use serde_json::{Map, Value};

use crate::locate::Point;
use crate::module::{Action, Column, ModuleInfo, Probe, ProbeModule};
use crate::perf::{self, FLAG_INHERIT};
use crate::target::Target;
use crate::Result;

/// The `count` module.
#[derive(Default)]
pub struct CountModule;

impl ProbeModule for CountModule {
    fn query(&self) -> ModuleInfo {
        ModuleInfo {
            name: "count",
            description:
                "exact executions of a function entry, a source line or an address (uprobe)",
            requirements: crate::module::UPROBE_OR_PAD.to_vec(),
        }
    }

    fn init(&mut self) -> std::result::Result<(), String> {
        // usable without uprobes on memlens-built targets; a uprobe probe says
        // what it lacks when it is created
        Ok(())
    }

    fn actions(&self) -> Vec<Action> {
        vec![Action { name: "count", label: "count executions here", spec: "count:{loc}" }]
    }

    fn columns(&self) -> Vec<Column> {
        vec![Column::new("count", "executions")]
    }

    fn create(&self, target: &Target, args: &str) -> Result<Box<dyn Probe>> {
        let points = target.binary().resolve(args)?;
        if target.control().is_some() {
            if let Some(pads) = crate::inproc::pads(target, &points) {
                return Ok(Box::new(crate::inproc::PadProbe::insert(
                    target, &points, &pads, false,
                )?));
            }
        }
        let tids = target.tids()?;
        let mut fds = Vec::new();
        for p in &points {
            for &tid in &tids {
                fds.push(target.open_uprobe(p, false, tid, -1, -1, &|a| a.flags = FLAG_INHERIT)?);
            }
        }
        let location = describe(target, &points);
        Ok(Box::new(CountProbe { fds, location, points: points.iter().map(|p| p.vaddr).collect() }))
    }
}

/// `label @ 0xaddr[, ...]` for display.
pub(crate) fn describe(target: &Target, points: &[Point]) -> String {
    let mut parts: Vec<String> = points
        .iter()
        .take(4)
        .map(|p| {
            let f = target.binary().function_at(p.vaddr);
            match f {
                Some(f) if f != p.label => format!("{} @ {:#x} in {f}", p.label, p.vaddr),
                _ => format!("{} @ {:#x}", p.label, p.vaddr),
            }
        })
        .collect();
    if points.len() > 4 {
        parts.push(format!("and {} more", points.len() - 4));
    }
    parts.join(", ")
}

struct CountProbe {
    fds: Vec<OwnedFd>,
    location: String,
    points: Vec<u64>,
}

impl Drop for CountProbe {
    fn drop(&mut self) {
        perf::close_all(std::mem::take(&mut self.fds));
    }
}

impl Probe for CountProbe {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn points(&self) -> Vec<u64> {
        self.points.clone()
    }

    fn values(&self) -> Map<String, Value> {
        let n: u64 = self.fds.iter().map(perf::read_count).sum();
        let mut m = Map::new();
        m.insert("count".into(), n.into());
        m
    }
}
