//! The "top variables" table when the namer names each access: every access is
//! counted under the variable it was named after when it happened (the namer of
//! `report --by variable`), not under the first byte of its cache line.

use memlens_analysis::CurrentVariable;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::ops::RangeInclusive;

#[derive(Default)]
struct Stat {
    loads: u64,
    stores: u64,
    /// Bit `t % 64` per thread.
    threads: u64,
    lines: HashSet<u64>,
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

    /// Counts the access being processed (touching cache lines `lines`).
    #[inline]
    pub(crate) fn add(&mut self, tbit: u64, loads: u32, stores: u32, lines: RangeInclusive<u64>) {
        let Some(c) = &self.current else { return };
        let id = c.get();
        if id == CurrentVariable::NONE {
            return;
        }
        let i = id as usize;
        if i >= self.stats.len() {
            self.stats.resize_with(i + 1, Stat::default);
        }
        let s = &mut self.stats[i];
        s.loads += u64::from(loads);
        s.stores += u64::from(stores);
        s.threads |= tbit;
        s.lines.extend(lines);
    }

    /// The `top` most accessed variables, named by id from `names`.
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
