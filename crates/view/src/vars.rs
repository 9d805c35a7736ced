//! The "top variables" table when the namer names each access: every access is
//! counted under the variable it was named after when it happened (the namer of
//! `report --by variable`), not under the first byte of its cache line.

use crate::fx::FxSet;
use crate::Error;
use memlens_analysis::CurrentVariable;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;

#[derive(Default)]
struct Stat {
    loads: u64,
    stores: u64,
    /// Bit `t % 64` per thread.
    threads: u64,
    lines: FxSet<u64>,
}

/// Accesses per variable id, read from the [`CurrentVariable`] the namer sets.
#[derive(Default)]
pub(crate) struct VarCounts {
    current: Option<CurrentVariable>,
    stats: Vec<Stat>,
}

impl VarCounts {
    pub(crate) fn new(current: Option<CurrentVariable>) -> VarCounts {
        VarCounts { current, stats: Vec::new() }
    }

    /// Counts the access being processed; returns its variable's id, whose
    /// [`VarCounts::line`]s the caller then adds (it knows which are new to it).
    #[inline]
    pub(crate) fn begin(&mut self, tbit: u64, loads: u32, stores: u32) -> Option<u32> {
        let id = self.current.as_ref()?.get();
        self.begin_as(id, tbit, u64::from(loads), u64::from(stores))
    }

    /// [`VarCounts::begin`] for accesses of variable `id` (from a run's
    /// [`VarCounts::run_ids`]).
    #[inline]
    pub(crate) fn begin_as(&mut self, id: u32, tbit: u64, loads: u64, stores: u64) -> Option<u32> {
        if id == CurrentVariable::NONE || self.current.is_none() {
            return None;
        }
        let i = id as usize;
        if i >= self.stats.len() {
            self.stats.resize_with(i + 1, Stat::default);
        }
        let s = &mut self.stats[i];
        s.loads += loads;
        s.stores += stores;
        s.threads |= tbit;
        Some(id)
    }

    /// The variables of the body of the run being processed (empty when not named).
    pub(crate) fn run_ids(&self) -> Vec<u32> {
        self.current.as_ref().map_or_else(Vec::new, |c| c.run().clone())
    }

    /// Cache line `line` holds variable `id` (from [`VarCounts::begin`]).
    #[inline]
    pub(crate) fn line(&mut self, id: u32, line: u64) {
        self.stats[id as usize].lines.insert(line);
    }

    /// The `top` most accessed variables, named by id from `names` (ties by name).
    pub(crate) fn top(&self, names: &[String], top: usize) -> Vec<Value> {
        let mut per: HashMap<&str, Stat> = HashMap::new();
        for (id, s) in self.stats.iter().enumerate() {
            if s.loads + s.stores == 0 {
                continue;
            }
            let e = per.entry(names.get(id).map_or("[unknown]", |n| n.as_str())).or_default();
            e.loads += s.loads;
            e.stores += s.stores;
            e.threads |= s.threads;
            e.lines.extend(&s.lines);
        }
        let mut v: Vec<(&str, Stat)> = per.into_iter().collect();
        v.sort_by_key(|(n, s)| (std::cmp::Reverse(s.loads + s.stores), *n));
        v.truncate(top);
        v.into_iter()
            .map(|(n, s)| {
                json!({"variable": n, "loads": s.loads, "stores": s.stores,
                    "cache_lines": s.lines.len(), "threads": s.threads.count_ones()})
            })
            .collect()
    }
}

/// Loads, stores, cache lines, thread mask of one variable.
type VarSums = (u64, u64, u64, u64);

/// The variables table without a per-access namer: each cache line's accesses go to
/// the variable of its first byte. `lines` gives (variable, loads, stores, thread
/// mask) per cache line; most accessed first, ties by name.
pub(crate) fn from_lines<'a>(lines: impl Iterator<Item = (&'a str, u64, u64, u64)>) -> Vec<Value> {
    let mut per: HashMap<&str, VarSums> = HashMap::new();
    for (v, l, s, t) in lines {
        let e = per.entry(v).or_default();
        e.0 += l;
        e.1 += s;
        e.2 += 1;
        e.3 |= t;
    }
    let mut v: Vec<(&str, VarSums)> = per.into_iter().collect();
    v.sort_by_key(|(n, c)| (std::cmp::Reverse(c.0 + c.1), *n));
    v.into_iter()
        .map(|(n, c)| {
            json!({"variable": if n.is_empty() { "(unnamed)" } else { n },
                "loads": c.0, "stores": c.1, "cache_lines": c.2, "threads": c.3.count_ones()})
        })
        .collect()
}

/// The index file with every variable's row (`meta.json` keeps only the top ones).
pub(crate) const VARIABLES_FILE: &str = "variables.json";

/// Writes `value` as the index file `name` in `dir`; returns the bytes written.
pub(crate) fn write_json(
    dir: &Path,
    name: &str,
    value: &impl serde::Serialize,
) -> Result<u64, Error> {
    let p = dir.join(name);
    let text = serde_json::to_vec(value).map_err(|e| Error::Io(e.to_string()))?;
    std::fs::write(&p, &text)
        .map_err(|e| Error::Io(format!("cannot write {}: {e}", p.display())))?;
    Ok(text.len() as u64)
}

/// Reads the index file `name` in `dir` back.
pub(crate) fn read_json(dir: &Path, name: &str) -> Result<Value, Error> {
    let p = dir.join(name);
    let b = std::fs::read(&p).map_err(|e| {
        Error::BadIndex(format!(
            "cannot read {}: {e} (memlens view --reindex rebuilds the index)",
            p.display()
        ))
    })?;
    serde_json::from_slice(&b).map_err(|e| {
        Error::BadIndex(format!(
            "damaged index file {} (memlens view --reindex rebuilds it): {e}",
            p.display()
        ))
    })
}

/// Reads every variable's row back from the index in `dir`.
pub(crate) fn read_all(dir: &Path) -> Result<Vec<Value>, Error> {
    match read_json(dir, VARIABLES_FILE)? {
        Value::Array(rows) => Ok(rows),
        _ => Err(Error::BadIndex(format!(
            "damaged index file {} (memlens view --reindex rebuilds it): not a list",
            dir.join(VARIABLES_FILE).display()
        ))),
    }
}
