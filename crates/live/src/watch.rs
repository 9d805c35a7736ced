//! `watch`: loads and stores of one global variable or member (`watch:counter`,
//! `watch:cfg.limit`) in a memlens-built target, per thread and per source line,
//! which thread and line stored last, and the value the variable holds. The
//! runtime checks every instrumented access against the variable's bytes while the
//! probe is in (crates/rt/src/livewatch.rs); the variable is found in the DWARF as
//! `report --by variable` names it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};

use crate::heap::{runtime, SiteNames, MEMLENS_BUILT};
use crate::inproc::{Control, Values, WatchRows};
use crate::locate::Variable;
use crate::module::{Action, Column, ModuleInfo, Probe, ProbeModule, Table, TableRow};
use crate::target::Target;
use crate::{Error, Result};

/// The `watch` module.
#[derive(Default)]
pub struct WatchModule;

impl ProbeModule for WatchModule {
    fn query(&self) -> ModuleInfo {
        ModuleInfo {
            name: "watch",
            description: "loads and stores of a global variable or member, per thread and line",
            requirements: vec![MEMLENS_BUILT],
        }
    }

    fn init(&mut self) -> std::result::Result<(), String> {
        Ok(())
    }

    fn actions(&self) -> Vec<Action> {
        // a variable, not a line: nothing to offer in the source menu
        Vec::new()
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::new("loads", "accesses"),
            Column::new("stores", "accesses"),
            Column::new("value", ""),
        ]
    }

    fn requires_memlens_runtime(&self) -> bool {
        true
    }

    fn create(&self, target: &Target, args: &str) -> Result<Box<dyn Probe>> {
        if args.is_empty() {
            return Err(Error::Spec(
                "watch needs a global variable: watch:VARIABLE or watch:VARIABLE.member".into(),
            ));
        }
        let control = runtime(target, "watch")?;
        let var = target.binary().variable(args)?;
        let id = control
            .lock()
            .map_err(|_| Error::Target("control lock".into()))?
            .add_watch(var.vaddr, var.size)?;
        let bias = control.lock().map(|c| c.bias).unwrap_or(0);
        Ok(Box::new(WatchProbe {
            control,
            id,
            var,
            names: SiteNames::new(target, bias),
            last: Mutex::new(((0, 0, 0, 0), ((0, 0), Vec::new()))),
        }))
    }
}

struct WatchProbe {
    control: Arc<Mutex<Control>>,
    id: u32,
    var: Variable,
    /// Names the accessing lines.
    names: SiteNames,
    /// Last values read, kept when the target is gone.
    last: Mutex<(Values, WatchRows)>,
}

impl Drop for WatchProbe {
    fn drop(&mut self) {
        if let Ok(mut c) = self.control.lock() {
            let _ = c.remove(self.id);
        }
    }
}

/// Whether a DWARF base type name is a signed integer (its value is sign-extended).
fn signed(ty: &str) -> bool {
    matches!(
        ty,
        "int"
            | "long"
            | "long int"
            | "short"
            | "short int"
            | "long long"
            | "long long int"
            | "signed char"
            | "char"
            | "i8"
            | "i16"
            | "i32"
            | "i64"
            | "isize"
    ) || ty.starts_with("int") && ty.ends_with("_t")
}

impl WatchProbe {
    fn name(&self, pc: u64) -> String {
        self.names.get(pc).0
    }

    fn value(&self, raw: u64) -> Value {
        let bits = self.var.size * 8;
        let sign = self.var.ty.as_deref().is_some_and(signed);
        if sign && bits < 64 {
            let shift = 64 - bits;
            (((raw << shift) as i64) >> shift).into()
        } else if sign {
            (raw as i64).into()
        } else {
            raw.into()
        }
    }
}

impl Probe for WatchProbe {
    fn location(&self) -> String {
        let ty = self.var.ty.as_deref().map(|t| format!(", {t}")).unwrap_or_default();
        format!("{} @ {:#x} ({} bytes{ty})", self.var.name, self.var.vaddr, self.var.size)
    }

    fn values(&self) -> Map<String, Value> {
        let read = self.control.lock().ok().and_then(|mut c| {
            let totals = c.read().ok()?.get(&self.id).copied()?;
            Some((totals, c.watch().ok()?))
        });
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = read {
            *last = r;
        }
        let ((loads, stores, dropped, raw), ((last_tid, last_pc), rows)) = &*last;
        let mut threads: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        let mut lines: HashMap<String, (u64, u64)> = HashMap::new();
        for &(tid, pc, l, s) in rows {
            let t = threads.entry(tid).or_default();
            (t.0, t.1) = (t.0 + l, t.1 + s);
            let e = lines.entry(self.name(pc)).or_default();
            (e.0, e.1) = (e.0 + l, e.1 + s);
        }
        let mut lines: Vec<(String, (u64, u64))> = lines.into_iter().collect();
        lines.sort_by(|a, b| (b.1 .0 + b.1 .1).cmp(&(a.1 .0 + a.1 .1)).then(a.0.cmp(&b.0)));
        let mut m = Map::new();
        m.insert("loads".into(), (*loads).into());
        m.insert("stores".into(), (*stores).into());
        if self.var.size <= 8 {
            m.insert("value".into(), self.value(*raw));
        }
        m.insert("dropped".into(), (*dropped).into());
        let last_store = if *last_tid == 0 {
            Value::Null
        } else {
            json!({"thread": last_tid, "line": self.name(*last_pc)})
        };
        m.insert("last_store".into(), last_store);
        m.insert(
            "threads".into(),
            threads
                .into_iter()
                .map(|(t, (l, s))| json!({"thread": t, "loads": l, "stores": s}))
                .collect(),
        );
        m.insert(
            "lines".into(),
            lines
                .into_iter()
                .map(|(n, (l, s))| json!({"line": n, "loads": l, "stores": s}))
                .collect(),
        );
        m
    }

    fn tables(&self) -> Vec<Table> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let ((_, _, _, raw), ((last_tid, last_pc), rows)) = &*last;
        let col = Column::new;
        let mut threads: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        // (thread, line) -> loads, stores, the line's source location
        type ByLine = BTreeMap<(u32, String), (u64, u64, Option<(String, u64)>)>;
        let mut by_line = ByLine::new();
        for &(tid, pc, l, s) in rows {
            let t = threads.entry(tid).or_default();
            (t.0, t.1) = (t.0 + l, t.1 + s);
            let (name, at) = self.names.get(pc);
            let e = by_line.entry((tid, name)).or_insert((0, 0, at));
            (e.0, e.1) = (e.0 + l, e.1 + s);
        }
        let threads = threads
            .into_iter()
            .map(|(t, (l, s))| TableRow { cells: vec![t.into(), l.into(), s.into()], at: None })
            .collect();
        let mut lines: Vec<TableRow> = by_line
            .into_iter()
            .map(|((t, name), (l, s, at))| TableRow {
                cells: vec![t.into(), name.into(), l.into(), s.into()],
                at,
            })
            .collect();
        let total =
            |r: &TableRow| r.cells[2].as_u64().unwrap_or(0) + r.cells[3].as_u64().unwrap_or(0);
        lines.sort_by_key(|r| std::cmp::Reverse(total(r)));
        let value = if self.var.size <= 8 { self.value(*raw) } else { Value::Null };
        let last_store = if *last_tid == 0 {
            TableRow { cells: vec![Value::Null, "(no store yet)".into(), value], at: None }
        } else {
            let (name, at) = self.names.get(*last_pc);
            TableRow { cells: vec![(*last_tid).into(), name.into(), value], at }
        };
        vec![
            Table {
                title: "accesses per thread".into(),
                columns: vec![
                    col("thread", ""),
                    col("loads", "accesses"),
                    col("stores", "accesses"),
                ],
                rows: threads,
                sort: None,
            },
            Table {
                title: "accesses per thread and line".into(),
                columns: vec![
                    col("thread", ""),
                    col("line", ""),
                    col("loads", "accesses"),
                    col("stores", "accesses"),
                ],
                rows: lines,
                sort: None,
            },
            Table {
                title: "last store and value".into(),
                columns: vec![col("thread", ""), col("line", ""), col("value", "")],
                rows: vec![last_store],
                sort: None,
            },
        ]
    }
}
