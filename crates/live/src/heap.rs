//! `heap`: bytes and blocks in use per allocation site, and their peaks, in a
//! memlens-built target. The runtime accounts every allocation to its call site
//! and every free to the site that allocated the block (crates/rt/src/liveheap.rs)
//! while the probe is in; the collector names the sites `FILE:LINE FUNCTION` from
//! the binary's DWARF. Growth over time is the series of snapshots
//! (`--json-stream`).

use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};

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
            description: "bytes and blocks in use per allocation site, and their peaks",
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
            Column { name: "bytes", unit: "bytes" },
            Column { name: "blocks", unit: "blocks" },
            Column { name: "peak_bytes", unit: "bytes" },
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
            last: Mutex::new(((0, 0, 0, 0), Vec::new())),
        }))
    }
}

struct HeapProbe {
    control: Arc<Mutex<Control>>,
    id: u32,
    /// Names the sites.
    names: SiteNames,
    /// Last values read, kept when the target is gone.
    last: Mutex<(Values, Vec<SiteRow>)>,
}

impl Drop for HeapProbe {
    fn drop(&mut self) {
        if let Ok(mut c) = self.control.lock() {
            let _ = c.remove(self.id);
        }
    }
}

impl HeapProbe {
    /// The sites of the last read, named, by bytes in use (then peak, then name).
    fn rows(&self, sites: &[SiteRow]) -> Vec<(Site, u64, u64, u64)> {
        let mut rows: Vec<(Site, u64, u64, u64)> =
            sites.iter().map(|&(pc, b, n, p)| (self.names.get(pc), b, n, p)).collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(b.3.cmp(&a.3)).then(a.0 .0.cmp(&b.0 .0)));
        rows
    }
}

impl Probe for HeapProbe {
    fn location(&self) -> String {
        "every allocation site (in-process)".into()
    }

    fn values(&self) -> Map<String, Value> {
        let read = self.control.lock().ok().and_then(|mut c| {
            let totals = c.read().ok()?.get(&self.id).copied()?;
            Some((totals, c.heap().ok()?))
        });
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = read {
            *last = r;
        }
        let ((bytes, blocks, peak, dropped), sites) = &*last;
        let rows = self.rows(sites);
        let mut m = Map::new();
        m.insert("bytes".into(), (*bytes).into());
        m.insert("blocks".into(), (*blocks).into());
        m.insert("peak_bytes".into(), (*peak).into());
        m.insert("dropped".into(), (*dropped).into());
        m.insert(
            "sites".into(),
            rows.into_iter()
                .map(|((site, _), b, n, p)| {
                    json!({"site": site, "bytes": b, "blocks": n, "peak_bytes": p})
                })
                .collect(),
        );
        m
    }

    fn tables(&self) -> Vec<Table> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let rows = self
            .rows(&last.1)
            .into_iter()
            .map(|((site, at), b, n, p)| TableRow {
                cells: vec![site.into(), b.into(), n.into(), p.into()],
                at,
            })
            .collect();
        vec![Table {
            title: "allocation sites".into(),
            columns: vec![
                Column { name: "site", unit: "" },
                Column { name: "bytes", unit: "bytes" },
                Column { name: "blocks", unit: "blocks" },
                Column { name: "peak_bytes", unit: "bytes" },
            ],
            rows,
            sort: Some(1),
        }]
    }
}
