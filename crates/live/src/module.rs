//! The probe-module extension point. A module answers a query (name, description,
//! requirements), checks its requirements in `init` (the collector excludes a module
//! whose `init` fails, with the reason), names the actions it offers and the data
//! columns it produces, and creates probes; each probe aggregates its own values.

use serde_json::{Map, Value};

use crate::target::Target;
use crate::Result;

/// What a module says about itself.
#[derive(Clone, Debug)]
pub struct ModuleInfo {
    /// The name used in SPECs (`count` in `count:work`).
    pub name: &'static str,
    /// One line.
    pub description: &'static str,
    /// What it needs, in words ("root or CAP_PERFMON", "hardware PMU").
    pub requirements: Vec<&'static str>,
}

/// The requirements of a module that places uprobes, or pads on memlens-built targets.
pub(crate) const UPROBE_OR_PAD: [&str; 2] = [
    "root or CAP_PERFMON and the uprobe PMU (any program)",
    "or nothing, on a function of a memlens-built program (pad)",
];

/// Something a user can do with a module at a location ("count executions here").
#[derive(Clone, Debug)]
pub struct Action {
    /// Machine name.
    pub name: &'static str,
    /// What a menu shows.
    pub label: &'static str,
    /// The SPEC it produces: `{loc}` stands for a line (`FILE:LINE`) or a function,
    /// `{func}` for a function only, `{start}` and `{stop}` for two lines.
    pub spec: &'static str,
}

/// One value a module's probes report.
#[derive(Clone, Debug)]
pub struct Column {
    /// Key in the probe's values.
    pub name: &'static str,
    /// Unit (`calls`, `ns`, ...).
    pub unit: &'static str,
    /// How a table's cells of this column are drawn.
    pub kind: ColumnKind,
}

/// What the cells of a [`Table`] column hold, so the GUI draws them knowing no
/// module.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ColumnKind {
    /// A number or a string, shown as text.
    #[default]
    Value,
    /// A time series `[[ms, value], ...]` (or `null`), drawn as a sparkline.
    Series,
}

impl ColumnKind {
    /// The name the table protocol uses (`"kind"` of a column).
    pub fn name(self) -> &'static str {
        match self {
            ColumnKind::Value => "value",
            ColumnKind::Series => "series",
        }
    }

    /// The kind named `name`; `None` for an unknown one.
    pub fn parse(name: &str) -> Option<ColumnKind> {
        match name {
            "value" => Some(ColumnKind::Value),
            "series" => Some(ColumnKind::Series),
            _ => None,
        }
    }
}

impl Column {
    /// A column of numbers or strings.
    pub const fn new(name: &'static str, unit: &'static str) -> Column {
        Column { name, unit, kind: ColumnKind::Value }
    }

    /// A column of time series (`[[ms, value], ...]` cells), drawn as sparklines.
    pub const fn series(name: &'static str, unit: &'static str) -> Column {
        Column { name, unit, kind: ColumnKind::Series }
    }
}

/// A titled table a probe publishes next to its values (the heap probe's allocation
/// sites, the watch probe's threads): the GUI draws one panel per table, knowing no
/// module.
#[derive(Clone, Debug)]
pub struct Table {
    /// What the panel is titled.
    pub title: String,
    /// Its column headers, with units.
    pub columns: Vec<Column>,
    /// The rows, in the order the probe sorted them.
    pub rows: Vec<TableRow>,
    /// The column the rows are sorted by (descending) until the user picks another;
    /// `None`: the order of `rows`.
    pub sort: Option<usize>,
}

/// One row of a [`Table`].
#[derive(Clone, Debug)]
pub struct TableRow {
    /// One cell per column: a number or a string.
    pub cells: Vec<Value>,
    /// The source line the row is about (`(FILE, LINE)`), when it has one.
    pub at: Option<(String, u64)>,
}

impl Table {
    /// The table as the collector serves it: `{"title", "columns":
    /// [{"name","unit","kind"}], "rows": [{"cells": [...], "at": [FILE, LINE] | null}],
    /// "sort": COLUMN | null}` (`kind`: `value` or `series`).
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "title": self.title,
            "columns": self.columns.iter()
                .map(|c| serde_json::json!({"name": c.name, "unit": c.unit, "kind": c.kind.name()}))
                .collect::<Vec<_>>(),
            "rows": self.rows.iter()
                .map(|r| serde_json::json!({"cells": r.cells, "at": r.at}))
                .collect::<Vec<_>>(),
            "sort": self.sort,
        })
    }
}

/// A probe module.
pub trait ProbeModule: Send {
    /// Name, description and requirements.
    fn query(&self) -> ModuleInfo;
    /// Checks the requirements on this machine; `Err` says why the module is unusable.
    fn init(&mut self) -> std::result::Result<(), String>;
    /// The actions offered.
    fn actions(&self) -> Vec<Action>;
    /// The data columns its probes produce.
    fn columns(&self) -> Vec<Column>;
    /// Whether its probes live in the memlens runtime (a memlens-built target),
    /// so a target without it is refused before anything is launched.
    fn requires_memlens_runtime(&self) -> bool {
        false
    }
    /// Resolves `args` (the SPEC after `MODULE:`) against the target's binary and
    /// inserts the probe. Nothing touches the target until everything resolved.
    fn create(&self, target: &Target, args: &str) -> Result<Box<dyn Probe>>;
}

/// An inserted probe. Dropping it removes it from the target (its descriptors close
/// and the kernel restores the original instructions).
pub trait Probe: Send {
    /// Where it is, resolved (`work @ 0x1139`).
    fn location(&self) -> String;
    /// Takes pending kernel data (ring buffers) into the aggregate.
    fn poll(&mut self) {}
    /// The thread-summed values, keyed by column name.
    fn values(&self) -> Map<String, Value>;
    /// The ELF addresses it probes (the GUI shows its values at their source lines).
    fn points(&self) -> Vec<u64> {
        Vec::new()
    }
    /// Its detailed rows as titled tables, from the data the last `values()` read
    /// (the collector calls `values()` first).
    fn tables(&self) -> Vec<Table> {
        Vec::new()
    }
}

/// The built-in modules, in the order `memlens probe modules` lists them.
pub fn builtin_modules() -> Vec<Box<dyn ProbeModule>> {
    vec![
        Box::new(crate::count::CountModule),
        Box::new(crate::timer::TimerModule),
        Box::new(crate::perfmod::PerfModule::default()),
        Box::new(crate::heap::HeapModule),
        Box::new(crate::watch::WatchModule),
        Box::new(crate::trace::TraceModule),
    ]
}

/// The modules a collector loaded, each usable or excluded with a reason.
pub struct Modules {
    list: Vec<(Box<dyn ProbeModule>, std::result::Result<(), String>)>,
}

impl Modules {
    /// Loads and initialises `modules`.
    pub fn init(modules: Vec<Box<dyn ProbeModule>>) -> Modules {
        let list = modules
            .into_iter()
            .map(|mut m| {
                let r = m.init();
                (m, r)
            })
            .collect();
        Modules { list }
    }

    /// The module named `name`, if it is usable.
    pub fn get(&self, name: &str) -> Result<&dyn ProbeModule> {
        match self.list.iter().find(|(m, _)| m.query().name == name) {
            Some((m, Ok(()))) => Ok(m.as_ref()),
            Some((_, Err(why))) => {
                Err(crate::Error::Unavailable(format!("module {name} is unavailable: {why}")))
            }
            None => {
                let names: Vec<&str> = self.list.iter().map(|(m, _)| m.query().name).collect();
                Err(crate::Error::Spec(format!(
                    "unknown probe module `{name}` (modules: {})",
                    names.join(", ")
                )))
            }
        }
    }

    /// Checks `specs` against `binary` before a target is touched: a module that
    /// lives in the memlens runtime refuses a program not built with memlens.
    pub fn precheck(&self, specs: &[String], binary: &crate::Binary) -> Result<()> {
        for spec in specs {
            let name = spec.split_once(':').map_or(spec.as_str(), |(n, _)| n);
            let m = self.get(name)?;
            if m.requires_memlens_runtime() && !binary.memlens_built() {
                return Err(crate::heap::not_memlens_built(binary, name));
            }
        }
        Ok(())
    }

    /// Every module as JSON: name, description, requirements, actions, columns,
    /// available and (when not) why.
    pub fn describe(&self) -> Value {
        let rows: Vec<Value> = self
            .list
            .iter()
            .map(|(m, r)| {
                let q = m.query();
                let mut o = Map::new();
                o.insert("name".into(), q.name.into());
                o.insert("description".into(), q.description.into());
                o.insert("requirements".into(), q.requirements.into());
                o.insert(
                    "actions".into(),
                    m.actions()
                        .iter()
                        .map(|a| serde_json::json!({"name": a.name, "label": a.label, "spec": a.spec}))
                        .collect(),
                );
                o.insert(
                    "columns".into(),
                    m.columns()
                        .iter()
                        .map(|c| serde_json::json!({"name": c.name, "unit": c.unit}))
                        .collect(),
                );
                o.insert("available".into(), r.is_ok().into());
                if let Err(why) = r {
                    o.insert("reason".into(), why.clone().into());
                }
                Value::Object(o)
            })
            .collect();
        Value::Array(rows)
    }

    /// Whether any module is usable; `Err` joins the reasons.
    pub fn any_available(&self) -> std::result::Result<(), String> {
        if self.list.iter().any(|(_, r)| r.is_ok()) {
            return Ok(());
        }
        Err(self
            .list
            .iter()
            .filter_map(|(m, r)| r.as_ref().err().map(|e| format!("{}: {e}", m.query().name)))
            .collect::<Vec<_>>()
            .join("; "))
    }
}

/// The requirement check shared by the uprobe modules.
pub(crate) fn uprobe_requirements() -> std::result::Result<(), String> {
    crate::perf::uprobe_type().map_err(|e| {
        format!("the kernel has no uprobe PMU (/sys/bus/event_source/devices/uprobe/type: {e})")
    })?;
    crate::perf::privilege()
}
