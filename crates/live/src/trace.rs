//! `trace`: the full memlens trace of a function's dynamic extent while the probe
//! is in (`trace:FUNC`), or of everything from now until it is removed
//! (`trace:now`), in a memlens-built target that runs without a trace. The
//! runtime starts its recorder on demand and finishes the file at removal
//! (crates/rt/src/livetrace.rs): `memlens info`, `report`, `dump` read it as any
//! trace. `trace:LOC:OUT` names the file (relative to the collector's directory);
//! by default it is `memlens-live-PID-ID.trace` there, created new.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use crate::heap::{runtime, MEMLENS_BUILT};
use crate::inproc::{Control, Values};
use crate::module::{Action, Column, ModuleInfo, Probe, ProbeModule, Table, TableRow};
use crate::target::Target;
use crate::{Error, Result};

/// The `trace` module.
#[derive(Default)]
pub struct TraceModule;

/// `LOC[:OUT]` split at the last `:` that is not part of a C++ `::`.
fn split_out(args: &str) -> (&str, Option<&str>) {
    let b = args.as_bytes();
    let at = (0..b.len()).rev().find(|&i| {
        b[i] == b':' && (i == 0 || b[i - 1] != b':') && b.get(i + 1).is_none_or(|&c| c != b':')
    });
    match at {
        Some(i) => (&args[..i], Some(&args[i + 1..])),
        None => (args, None),
    }
}

impl ProbeModule for TraceModule {
    fn query(&self) -> ModuleInfo {
        ModuleInfo {
            name: "trace",
            description: "the full memlens trace of a function while it runs, or from now until removed, into a trace file",
            requirements: vec![MEMLENS_BUILT],
        }
    }

    fn init(&mut self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn actions(&self) -> Vec<Action> {
        vec![Action {
            name: "trace",
            label: "record this function's full trace",
            spec: "trace:{func}",
        }]
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::new("events", "events"),
            Column::new("bytes", "bytes"),
            Column::new("dropped", "events"),
        ]
    }

    fn requires_memlens_runtime(&self) -> bool {
        true
    }

    fn create(&self, target: &Target, args: &str) -> Result<Box<dyn Probe>> {
        let (loc, out) = split_out(args);
        if loc.is_empty() {
            return Err(Error::Spec(
                "trace needs a function or `now`: trace:FUNC[:OUT.trace] or trace:now[:OUT.trace]"
                    .into(),
            ));
        }
        let control = runtime(target, "trace")?;
        // the function's pad, or `now`
        let (pad, location, points) = if loc == "now" {
            (None, "everything, from insertion to removal (in-process)".to_string(), Vec::new())
        } else {
            let pts = target.binary().resolve(loc)?;
            let [p] = pts.as_slice() else {
                return Err(Error::Spec(format!(
                    "trace:{loc}: {} functions match; a trace probe takes one function",
                    pts.len()
                )));
            };
            let pad = target.binary().pad_at(p).ok_or_else(|| {
                Error::Location(format!(
                    "trace:{loc}: {} has no NOP pad at its entry (was it built with memlens cc?)",
                    p.label
                ))
            })?;
            let loc = format!("{} (pad)", crate::count::describe(target, &pts));
            (Some(pad), loc, vec![p.vaddr])
        };
        let id = target.next_probe_id();
        let name = format!("memlens-live-{}-{id}.trace", target.pid());
        let path = absolute(Path::new(out.filter(|o| !o.is_empty()).unwrap_or(&name)))?;
        let rid = control
            .lock()
            .map_err(|_| Error::Target("control lock".into()))?
            .add_trace(pad, &path)?;
        Ok(Box::new(TraceProbe {
            control,
            id: rid,
            location: format!("{location} -> {}", path.display()),
            path,
            points,
            last: Mutex::new((0, 0, 0, 0)),
        }))
    }
}

/// `p` against the collector's working directory.
fn absolute(p: &Path) -> Result<PathBuf> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    let cwd = std::env::current_dir().map_err(|e| Error::io("the current directory", e))?;
    Ok(cwd.join(p))
}

struct TraceProbe {
    control: Arc<Mutex<Control>>,
    id: u32,
    location: String,
    path: PathBuf,
    points: Vec<u64>,
    /// Last values read, kept when the target is gone.
    last: Mutex<Values>,
}

impl Drop for TraceProbe {
    fn drop(&mut self) {
        // the runtime finishes the file before it answers
        if let Ok(mut c) = self.control.lock() {
            let _ = c.remove(self.id);
        }
    }
}

impl Probe for TraceProbe {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn points(&self) -> Vec<u64> {
        self.points.clone()
    }

    fn values(&self) -> Map<String, Value> {
        let read = self.control.lock().ok().and_then(|mut c| c.read().ok());
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = read.and_then(|all| all.get(&self.id).copied()) {
            *last = v;
        }
        let (events, bytes, dropped, _) = *last;
        let mut m = Map::new();
        m.insert("events".into(), events.into());
        m.insert("bytes".into(), bytes.into());
        m.insert("dropped".into(), dropped.into());
        m.insert("path".into(), self.path.display().to_string().into());
        m
    }

    fn tables(&self) -> Vec<Table> {
        let (events, bytes, dropped, _) = *self.last.lock().unwrap_or_else(|e| e.into_inner());
        vec![Table {
            title: "trace file".into(),
            columns: vec![
                Column::new("path", ""),
                Column::new("events", "events"),
                Column::new("bytes", "bytes"),
                Column::new("dropped", "events"),
            ],
            rows: vec![TableRow {
                cells: vec![
                    self.path.display().to_string().into(),
                    events.into(),
                    bytes.into(),
                    dropped.into(),
                ],
                at: None,
            }],
            sort: None,
        }]
    }
}
