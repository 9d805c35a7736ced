//! `heap`: bytes and blocks in use per allocation site, their peaks, and the
//! allocation and free calls charged to each, in a memlens-built target. The
//! runtime accounts every allocation to its call site and every free to the site
//! that allocated the block (crates/rt/src/liveheap.rs) while the probe is in; the
//! collector names the sites `FILE:LINE FUNCTION` from the binary's DWARF and keeps
//! each site's bytes in use over time (`heapseries.rs`): a series, the time of its
//! peak and its growth rate.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::heapseries::{History, SAMPLE_MS};
use crate::inproc::{Control, SiteRow, Values};
use crate::module::{Action, Column, ModuleInfo, Probe, ProbeModule, Table, TableRow};
use crate::target::Target;
use crate::{Error, Result};

/// The `heap` module.
#[derive(Default)]
pub struct HeapModule;

/// The requirement the in-process memory modules (`heap`, `watch`, `trace`) share.
pub(crate) const MEMLENS_BUILT: &str = "memlens-built target";

/// The target's runtime control socket, or why a `module` probe cannot be placed.
pub(crate) fn runtime(target: &Target, module: &str) -> Result<Arc<Mutex<Control>>> {
    if !target.binary().memlens_built() {
        return Err(not_memlens_built(target.binary(), module));
    }
    target.control().ok_or_else(|| {
        Error::Unavailable(format!(
            "module {module} needs the memlens runtime's control socket: start PID {} with MEMLENS_CONTROL=1, or launch it with `memlens live -- PROG`",
            target.pid()
        ))
    })
}

/// A code address outside the executable, named after the library mapped there
/// (`0x7f.. in libstdc++.so.6`): only the executable's DWARF is read.
pub(crate) fn outside(pid: i32, pc: u64) -> String {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let lib = maps.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        let (lo, hi) = w.next()?.split_once('-')?;
        let (lo, hi) = (u64::from_str_radix(lo, 16).ok()?, u64::from_str_radix(hi, 16).ok()?);
        let path = w.nth(4)?;
        (lo <= pc && pc < hi).then(|| path.rsplit('/').next().unwrap_or(path).to_owned())
    });
    match lib {
        Some(lib) => format!("{pc:#x} in {lib}"),
        None => format!("{pc:#x} (outside the executable)"),
    }
}

/// Names code addresses of the target (`FILE:LINE FUNCTION` and the line), once each:
/// the heap and watch probes' rows.
pub(crate) struct SiteNames {
    pid: i32,
    bias: u64,
    binary: Arc<crate::locate::Binary>,
    names: Mutex<std::collections::HashMap<u64, Site>>,
}

/// A named code address: its text and, when known, its source line.
pub(crate) type Site = (String, Option<(String, u64)>);

impl SiteNames {
    pub(crate) fn new(target: &Target, bias: u64) -> SiteNames {
        SiteNames {
            pid: target.pid(),
            bias,
            binary: target.shared_binary(),
            names: Mutex::default(),
        }
    }

    /// The call site `pc` (a return address in the target) names.
    pub(crate) fn get(&self, pc: u64) -> Site {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        names
            .entry(pc)
            .or_insert_with(|| {
                if pc == 1 {
                    return ("(other sites: the runtime's site table is full)".into(), None);
                }
                self.binary
                    .call_site_at(pc.wrapping_sub(self.bias))
                    .unwrap_or_else(|| (outside(self.pid, pc), None))
            })
            .clone()
    }
}

pub(crate) fn not_memlens_built(binary: &crate::Binary, module: &str) -> Error {
    Error::Unavailable(format!(
        "module {module} needs a memlens-built target: {} was not built with memlens cc (rebuild it with `memlens cc`/`memlens c++`)",
        binary.path().display()
    ))
}

impl ProbeModule for HeapModule {
    fn query(&self) -> ModuleInfo {
        ModuleInfo {
            name: "heap",
            description: "bytes and blocks in use per allocation site, their peaks and growth",
            requirements: vec![MEMLENS_BUILT],
        }
    }

    fn init(&mut self) -> std::result::Result<(), String> {
        // checked per target, when a probe is created
        Ok(())
    }

    fn actions(&self) -> Vec<Action> {
        vec![Action { name: "heap", label: "live heap by allocation site", spec: "heap" }]
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::new("bytes", "bytes"),
            Column::new("blocks", "blocks"),
            Column::new("peak_bytes", "bytes"),
        ]
    }

    fn requires_memlens_runtime(&self) -> bool {
        true
    }

    fn create(&self, target: &Target, args: &str) -> Result<Box<dyn Probe>> {
        if !args.is_empty() {
            return Err(Error::Spec(format!(
                "heap:{args}: the heap probe takes no location (it covers every allocation site): use `heap`"
            )));
        }
        let control = runtime(target, "heap")?;
        let (id, bias) = {
            let mut c = control.lock().map_err(|_| Error::Target("control lock".into()))?;
            (c.add_heap()?, c.bias)
        };
        Ok(Box::new(HeapProbe {
            control,
            id,
            names: SiteNames::new(target, bias),
            started: Instant::now(),
            seen: Mutex::default(),
        }))
    }
}

/// Sites beyond this many (by bytes in use) carry `series: null`: a snapshot of a
/// program with thousands of sites stays small.
const SERIES_SITES: usize = 64;

struct HeapProbe {
    control: Arc<Mutex<Control>>,
    id: u32,
    /// Names the sites.
    names: SiteNames,
    /// When the probe was inserted: the series' time 0.
    started: Instant,
    /// What the reads found, kept when the target is gone.
    seen: Mutex<Seen>,
}

/// The last read and every site's history.
#[derive(Default)]
struct Seen {
    totals: Values,
    sites: Vec<SiteRow>,
    history: HashMap<u64, History>,
    /// The last sample's time, and when the next one is due (ms).
    last_sample: Option<u64>,
    next_sample: u64,
}

/// A site of the last read with its name and history, as the values and the table
/// show it.
struct Row {
    site: Site,
    counts: SiteRow,
    peak_ms: u64,
    growth_bps: i64,
    series: Value,
}

impl Drop for HeapProbe {
    fn drop(&mut self) {
        if let Ok(mut c) = self.control.lock() {
            let _ = c.remove(self.id);
        }
    }
}

impl HeapProbe {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Reads the runtime's counts (after the target exited: the last ones it sent);
    /// a sample of every site's bytes in use when one is due.
    fn read(&self, seen: &mut Seen) {
        let read = self.control.lock().ok().and_then(|mut c| {
            let totals = c.read().ok()?.get(&self.id).copied()?;
            Some((totals, c.heap().ok()?))
        });
        let Some((totals, sites)) = read else { return };
        let ms = self.now_ms();
        let sample = ms >= seen.next_sample;
        for r in &sites {
            let h = seen.history.entry(r.pc).or_default();
            h.saw_peak(ms, r.peak);
            if sample {
                // every sample lists every site it saw: one without points was not
                // there at the last sample, so it had no bytes in use then
                if let (true, Some(prev)) = (h.is_empty(), seen.last_sample) {
                    h.push(prev, 0);
                }
                h.push(ms, r.bytes);
            }
        }
        if sample {
            seen.last_sample = Some(ms);
            seen.next_sample = ms + SAMPLE_MS;
        }
        seen.totals = totals;
        seen.sites = sites;
    }

    /// The sites of the last read, named, by bytes in use (then peak, then name).
    fn rows(&self, seen: &Seen) -> Vec<Row> {
        let none = History::default();
        let mut rows: Vec<Row> = seen
            .sites
            .iter()
            .map(|r| {
                let h = seen.history.get(&r.pc).unwrap_or(&none);
                Row {
                    site: self.names.get(r.pc),
                    counts: *r,
                    peak_ms: h.peak_ms(),
                    growth_bps: h.growth_bps(),
                    series: Value::Null,
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            (b.counts.bytes.cmp(&a.counts.bytes))
                .then(b.counts.peak.cmp(&a.counts.peak))
                .then(a.site.0.cmp(&b.site.0))
        });
        for r in rows.iter_mut().take(SERIES_SITES) {
            r.series = seen.history.get(&r.counts.pc).unwrap_or(&none).series();
        }
        rows
    }
}

impl Probe for HeapProbe {
    fn location(&self) -> String {
        "every allocation site (in-process)".into()
    }

    /// Samples the sites when a sample is due, whoever asks for values.
    fn poll(&mut self) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if self.now_ms() >= seen.next_sample {
            self.read(&mut seen);
        }
    }

    fn values(&self) -> Map<String, Value> {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        self.read(&mut seen);
        let (bytes, blocks, peak, dropped) = seen.totals;
        let mut m = Map::new();
        m.insert("bytes".into(), bytes.into());
        m.insert("blocks".into(), blocks.into());
        m.insert("peak_bytes".into(), peak.into());
        m.insert("dropped".into(), dropped.into());
        m.insert(
            "sites".into(),
            self.rows(&seen)
                .into_iter()
                .map(|r| {
                    let c = r.counts;
                    json!({"site": r.site.0, "bytes": c.bytes, "blocks": c.blocks,
                        "peak_bytes": c.peak, "allocs": c.allocs, "frees": c.frees,
                        "peak_ms": r.peak_ms, "growth_bps": r.growth_bps, "series": r.series})
                })
                .collect(),
        );
        m
    }

    fn tables(&self) -> Vec<Table> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let rows = self
            .rows(&seen)
            .into_iter()
            .map(|r| {
                let c = r.counts;
                TableRow {
                    cells: vec![
                        r.site.0.into(),
                        c.bytes.into(),
                        c.blocks.into(),
                        c.peak.into(),
                        c.allocs.into(),
                        c.frees.into(),
                        r.growth_bps.into(),
                        r.series,
                    ],
                    at: r.site.1,
                }
            })
            .collect();
        vec![Table {
            title: "allocation sites".into(),
            columns: vec![
                Column::new("site", ""),
                Column::new("bytes", "bytes"),
                Column::new("blocks", "blocks"),
                Column::new("peak_bytes", "bytes"),
                Column::new("allocs", "calls"),
                Column::new("frees", "calls"),
                Column::new("growth B/s", "bytes per second, least squares over the last 10 s"),
                Column::series("bytes in use", "bytes, one point per 250 ms sample"),
            ],
            rows,
            sort: Some(1),
        }]
    }
}
