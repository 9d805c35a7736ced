//! Cache simulation: an N-level hierarchy driven by the trace's loads and stores.
//!
//! Split by responsibility (as drcachesim): [`Cache`] owns geometry, tags and line
//! states; a [`ReplacementPolicy`] (one file each: LRU, FIFO, random, tree-PLRU) picks
//! victims from set and way indices only; [`LevelStats`] are the counters;
//! [`Hierarchy`] wires levels, cores, inclusion and coherence; [`CacheSim`] is the
//! kernel that feeds it events and attributes outcomes to code and data addresses.
//!
//! Every access is split at first-level line boundaries and each line is one access
//! (an RMW is a load then a store; a range access touches each of its lines).
//! Threads run on simulated cores ([`CoreMap`]); events are simulated in the order the
//! driver delivers them.
//!
//! # Example
//! ```
//! use memlens_analysis::cachesim::{CacheConfig, CacheSim};
//! use memlens_analysis::{Kernel, NoNames, Render, RenderOpts};
//! use memlens_format::{AccessKind, Addr, Event, Pc, ThreadId};
//!
//! let cfg = CacheConfig::from_cachegrind_args(&["--D1=1024,2,64", "--LL=4096,4,64"])?;
//! let mut sim = CacheSim::new(cfg)?;
//! for _pass in 0..2 {
//!     for i in 0..32u64 {
//!         let ev = Event::Access { pc: Pc(0x10), addr: Addr(0x1000 + 64 * i), size: 8,
//!             kind: AccessKind::Read, atomic: false, value: None };
//!         sim.process(ThreadId(0), &ev);
//!     }
//! }
//! let report = sim.finish();
//! // 32 lines: too many for the 1 KiB D1 (every access misses), few enough for the LL
//! assert_eq!(report.levels[0].total.misses(), 64);
//! assert_eq!(report.levels[1].total.misses(), 32);
//! let table = report.render(&NoNames, &RenderOpts::default());
//! assert_eq!(table.to_json()["levels"][1]["misses"], 32);
//! Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod annotate;
mod cache;
mod config;
mod hierarchy;
pub mod policy;
mod stats;

pub use annotate::{Annotation, LevelStream};
pub use cache::{Cache, Geometry, Slot, DIRTY, EXCL};
pub use config::{
    parse_geometry, parse_u64, CacheConfig, CoreMap, Inclusion, LevelConfig, WritePolicy,
};
pub use hierarchy::Hierarchy;
pub use policy::{PolicyKind, ReplacementPolicy};
pub use stats::LevelStats;

use crate::fxhash::FxHashMap;
use crate::names::{CodeName, CurrentVariable, Namer};
use crate::table::{ratio, Column, Render, RenderOpts, Row, Section, Table};
use crate::{Error, Kernel};
use memlens_format::{AccessKind, Addr, Event, Pc, ThreadId};
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// Most cache levels a hierarchy may have.
pub const MAX_LEVELS: usize = 6;

/// Most simulated cores: every store snoops every other core's private levels.
pub const MAX_CORES: usize = 1024;

/// Most cache lines simulated over all levels and cores: 8 bytes of state each, so
/// the simulator stays near 1 GiB whatever the geometry asked for.
pub const MAX_LINES: u64 = 1 << 27;

/// Accesses attributed to one code or data address, by the level that served them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AccessStats {
    /// Line accesses.
    pub accesses: u64,
    /// Of which stores.
    pub writes: u64,
    /// `served[k]`: accesses served by level `k`; `served[levels]` by memory.
    pub served: [u64; MAX_LEVELS + 1],
}

impl AccessStats {
    /// Loads.
    pub fn reads(&self) -> u64 {
        self.accesses - self.writes
    }

    /// Accesses that missed level `level` (were served further down).
    pub fn misses(&self, level: usize) -> u64 {
        self.served[level + 1..].iter().sum()
    }

    #[inline]
    fn record(&mut self, level: usize, write: bool) {
        self.accesses += 1;
        self.writes += u64::from(write);
        self.served[level] += 1;
    }

    fn add(&mut self, o: &AccessStats) {
        self.accesses += o.accesses;
        self.writes += o.writes;
        for (a, b) in self.served.iter_mut().zip(&o.served) {
            *a += b;
        }
    }
}

/// One level of the result.
#[derive(Clone, Debug)]
pub struct LevelReport {
    /// Level name.
    pub name: String,
    /// Shared by all cores (else one instance per core).
    pub shared: bool,
    /// Counters summed over instances.
    pub total: LevelStats,
    /// Counters per instance (per core for private levels).
    pub per_instance: Vec<LevelStats>,
}

/// What [`CacheSim`] produces.
#[derive(Clone, Debug)]
pub struct CacheReport {
    /// The configuration simulated.
    pub config: CacheConfig,
    /// Per level, innermost first.
    pub levels: Vec<LevelReport>,
    /// Line accesses simulated (first-level demand accesses).
    pub accesses: u64,
    /// Trace access events (accesses, ranges, RMWs) simulated.
    pub events: u64,
    /// Outcomes by code address.
    pub by_pc: HashMap<Pc, AccessStats>,
    /// Outcomes by data granule ([`CacheConfig::data_granule`] bytes each). Empty
    /// when the granule is 0.
    pub by_data: DataStats,
    /// Levels per access, when [`CacheConfig::annotate`] was set.
    pub annotation: Option<Annotation>,
    /// Outcomes by the variable of each access, by id, when the simulator named
    /// accesses ([`CacheSim::with_variables`]); one per access event (an RMW is a
    /// load and a store), as `report --by variable` counts.
    pub by_variable_id: Vec<AccessStats>,
    /// The variable of each id of `by_variable_id` ([`CacheReport::set_variables`]).
    pub variables: Option<Vec<String>>,
}

/// The cache simulation kernel. Not shardable: cores share levels, so the whole trace
/// goes through one hierarchy. `Clone` gives live snapshots (see [`crate::live`]).
#[derive(Clone)]
pub struct CacheSim {
    cfg: CacheConfig,
    hier: Hierarchy,
    line_bits: u32,
    cores: Vec<u32>,
    pc_index: FxHashMap<Pc, u32>,
    pcs: Vec<(Pc, AccessStats)>,
    // direct-mapped front of pc_index
    pc_front: Box<[(Pc, u32); PC_FRONT]>,
    data: Option<DataCounters>,
    annotation: Option<Annotation>,
    accesses: u64,
    events: u64,
    vars: Option<CurrentVariable>,
    by_var: Vec<AccessStats>,
}

impl CacheSim {
    /// A simulator of this configuration.
    pub fn new(cfg: CacheConfig) -> Result<CacheSim, Error> {
        let hier = Hierarchy::new(&cfg)?;
        let levels = hier.levels();
        let line_bits = hier.line_size().trailing_zeros();
        let granule_bits = (cfg.data_granule != 0).then(|| cfg.data_granule.trailing_zeros());
        let annotation =
            cfg.annotate.then(|| Annotation { levels: hier.levels() as u32, threads: Vec::new() });
        Ok(CacheSim {
            cfg,
            hier,
            line_bits,
            cores: Vec::new(),
            pc_index: FxHashMap::default(),
            pcs: Vec::new(),
            pc_front: Box::new([(Pc(u64::MAX), 0); PC_FRONT]),
            data: granule_bits.map(|g| DataCounters::new(g, levels)),
            annotation,
            accesses: 0,
            events: 0,
            vars: None,
            by_var: Vec::new(),
        })
    }

    /// Counts outcomes by the variable of each access too, read from `current`
    /// (see [`crate::Named`]): the same names as `report --by variable`.
    pub fn with_variables(mut self, current: CurrentVariable) -> CacheSim {
        self.vars = Some(current);
        self
    }

    /// Adds an access served by `level` to its variable's counters.
    #[inline]
    fn count_var(&mut self, level: usize, write: bool) {
        if let Some(c) = &self.vars {
            let id = c.get();
            if id != CurrentVariable::NONE {
                let i = id as usize;
                if i >= self.by_var.len() {
                    self.by_var.resize(i + 1, AccessStats::default());
                }
                self.by_var[i].record(level, write);
            }
        }
    }

    /// The hierarchy (counters so far).
    pub fn hierarchy(&self) -> &Hierarchy {
        &self.hier
    }

    #[inline]
    fn core_of(&mut self, t: ThreadId) -> usize {
        let i = t.0 as usize;
        if let Some(&c) = self.cores.get(i) {
            if c != u32::MAX {
                return c as usize;
            }
        }
        if i >= self.cores.len() {
            self.cores.resize(i + 1, u32::MAX);
        }
        let c = self.cfg.core_map.core(t, self.hier.cores());
        self.cores[i] = c as u32;
        c
    }

    #[inline]
    fn pc_slot(&mut self, pc: Pc) -> usize {
        let f = ((pc.0 ^ (pc.0 >> 7)) as usize) & (PC_FRONT - 1);
        if self.pc_front[f].0 == pc {
            return self.pc_front[f].1 as usize;
        }
        let n = self.pcs.len() as u32;
        let i = *self.pc_index.entry(pc).or_insert(n);
        if i == n {
            self.pcs.push((pc, AccessStats::default()));
        }
        self.pc_front[f] = (pc, i);
        i as usize
    }

    /// Simulates `len` bytes at `addr`; returns the deepest level reached.
    #[inline]
    fn touch(&mut self, core: usize, pc: Pc, addr: u64, len: u64, write: bool) -> usize {
        let bits = self.line_bits;
        let first = addr >> bits;
        let last = addr.saturating_add(len.max(1) - 1) >> bits;
        let p = self.pc_slot(pc);
        if first == last {
            let level = self.hier.access(core, addr, write);
            self.pcs[p].1.record(level, write);
            if let Some(d) = self.data.as_mut() {
                d.record(addr, level, write);
            }
            self.accesses += 1;
            return level;
        }
        let mut worst = 0;
        let mut a = addr;
        for line in first..=last {
            let level = self.hier.access(core, a, write);
            worst = worst.max(level);
            self.pcs[p].1.record(level, write);
            if let Some(d) = self.data.as_mut() {
                d.record(a, level, write);
            }
            a = (line + 1) << bits;
        }
        self.accesses += last - first + 1;
        worst
    }
}

const PC_FRONT: usize = 256;

/// Per-granule counters in pages of 64 granules: one hash lookup per page change
/// (fewer with the direct-mapped front), all pages in one arena.
#[derive(Clone)]
struct DataCounters {
    granule_bits: u32,
    // per granule: accesses, writes, then misses of each level
    stride: usize,
    levels: usize,
    index: FxHashMap<u64, u32>,
    keys: Vec<u64>,
    arena: Vec<u64>,
    // direct-mapped front of `index`: page, arena offset
    front: Box<[(u64, usize); PAGE_FRONT]>,
}

const PAGE_FRONT: usize = 1024;
const PAGE_GRANULES: u64 = 64;

impl DataCounters {
    fn new(granule_bits: u32, levels: usize) -> DataCounters {
        DataCounters {
            granule_bits,
            stride: 2 + levels,
            levels,
            index: FxHashMap::default(),
            keys: Vec::new(),
            arena: Vec::new(),
            front: Box::new([(u64::MAX, 0); PAGE_FRONT]),
        }
    }

    #[inline]
    fn record(&mut self, addr: u64, level: usize, write: bool) {
        let g = addr >> self.granule_bits;
        let page = g / PAGE_GRANULES;
        let f = (page as usize) & (PAGE_FRONT - 1);
        let at = if self.front[f].0 == page { self.front[f].1 } else { self.page(page, f) };
        let base = at + (g % PAGE_GRANULES) as usize * self.stride;
        let c = &mut self.arena[base..base + self.stride];
        c[0] += 1;
        c[1] += u64::from(write);
        // a fixed trip count (the levels), not one that depends on the outcome: the
        // outcome's branch would be mispredicted on every miss
        for (l, m) in c[2..].iter_mut().enumerate() {
            *m += u64::from(level > l);
        }
    }

    #[inline(never)]
    fn page(&mut self, page: u64, f: usize) -> usize {
        let n = self.keys.len() as u32;
        let i = *self.index.entry(page).or_insert(n);
        let len = PAGE_GRANULES as usize * self.stride;
        if i == n {
            self.keys.push(page);
            self.arena.resize(self.arena.len() + len, 0);
        }
        let at = i as usize * len;
        self.front[f] = (page, at);
        at
    }

    fn finish(self) -> DataStats {
        let len = PAGE_GRANULES as usize * self.stride;
        let mut pages: Vec<(u64, Box<[u64]>)> = self
            .keys
            .iter()
            .enumerate()
            .map(|(i, &k)| (k, self.arena[i * len..(i + 1) * len].into()))
            .collect();
        pages.sort_unstable_by_key(|p| p.0);
        DataStats {
            granule_bits: self.granule_bits,
            stride: self.stride,
            levels: self.levels,
            pages,
        }
    }
}

/// Outcomes per data granule, stored compactly (pages of 64 granules, in address
/// order).
#[derive(Clone, Debug, Default)]
pub struct DataStats {
    granule_bits: u32,
    stride: usize,
    levels: usize,
    pages: Vec<(u64, Box<[u64]>)>,
}

impl DataStats {
    fn stats(&self, g: &[u64]) -> AccessStats {
        let mut s = AccessStats { accesses: g[0], writes: g[1], ..AccessStats::default() };
        // served[k] = misses(k - 1) - misses(k), with misses(-1) = accesses
        let mut above = g[0];
        for l in 0..self.levels {
            s.served[l] = above - g[2 + l];
            above = g[2 + l];
        }
        s.served[self.levels] = above;
        s
    }

    /// Granules with accesses, in address order: first byte and counters.
    pub fn iter(&self) -> impl Iterator<Item = (Addr, AccessStats)> + '_ {
        self.pages.iter().flat_map(move |(page, c)| {
            c.chunks(self.stride.max(1)).enumerate().filter(|(_, g)| g[0] > 0).map(move |(k, g)| {
                (Addr((page * PAGE_GRANULES + k as u64) << self.granule_bits), self.stats(g))
            })
        })
    }

    /// The counters of the granule holding `addr`.
    pub fn get(&self, addr: Addr) -> Option<AccessStats> {
        let g = addr.0 >> self.granule_bits;
        let i = self.pages.binary_search_by_key(&(g / PAGE_GRANULES), |p| p.0).ok()?;
        let base = (g % PAGE_GRANULES) as usize * self.stride;
        let c = &self.pages[i].1[base..base + self.stride];
        (c[0] > 0).then(|| self.stats(c))
    }

    /// Number of granules with accesses.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// No granule was accessed.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }
}

impl Kernel for CacheSim {
    type Output = CacheReport;

    #[inline]
    fn process(&mut self, thread: ThreadId, ev: &Event) {
        let level = match *ev {
            Event::Access { pc, addr, size, kind, .. } => {
                let core = self.core_of(thread);
                let w = kind == AccessKind::Write;
                let l = self.touch(core, pc, addr.0, u64::from(size), w);
                self.count_var(l, w);
                l
            }
            Event::Rmw { pc, addr, size, op, .. } => {
                let core = self.core_of(thread);
                let r = self.touch(core, pc, addr.0, u64::from(size), false);
                self.count_var(r, false);
                if op.stores() {
                    let w = self.touch(core, pc, addr.0, u64::from(size), true);
                    self.count_var(w, true);
                    r.max(w)
                } else {
                    r
                }
            }
            Event::Range { pc, addr, len, kind } if len > 0 => {
                let core = self.core_of(thread);
                let w = kind == AccessKind::Write;
                let l = self.touch(core, pc, addr.0, len, w);
                self.count_var(l, w);
                l
            }
            _ => return,
        };
        self.events += 1;
        if let Some(a) = self.annotation.as_mut() {
            a.push(thread, level as u8);
        }
    }

    fn finish(self) -> CacheReport {
        let levels = (0..self.hier.levels())
            .map(|i| LevelReport {
                name: self.hier.name(i).to_string(),
                shared: self.hier.is_shared(i),
                total: self.hier.total(i),
                per_instance: self.hier.stats(i).to_vec(),
            })
            .collect();
        CacheReport {
            levels,
            accesses: self.accesses,
            events: self.events,
            by_pc: self.pcs.into_iter().collect(),
            by_data: self.data.map(DataCounters::finish).unwrap_or_default(),
            annotation: self.annotation,
            config: self.cfg,
            by_variable_id: self.by_var,
            variables: None,
        }
    }
}

impl CacheReport {
    /// Names the ids of `by_variable_id` (what [`crate::Named`] finished with):
    /// the by-variable table then counts per access.
    pub fn set_variables(&mut self, names: Vec<String>) {
        self.variables = Some(names);
    }

    /// The level with this name.
    pub fn level(&self, name: &str) -> Option<&LevelReport> {
        self.levels.iter().find(|l| l.name == name)
    }

    fn misses_obj(&self, s: &AccessStats) -> Value {
        let mut m = Map::new();
        for (i, l) in self.levels.iter().enumerate() {
            m.insert(l.name.clone(), json!(s.misses(i)));
        }
        Value::Object(m)
    }

    fn level_row(&self, name: &str, s: &LevelStats, shared: bool) -> Row {
        let mut r = row! {
            "name" => name,
            "shared" => shared,
            "accesses" => s.accesses(),
            "hits" => s.hits(),
            "misses" => s.misses(),
            "loads" => s.reads,
            "stores" => s.writes,
            "load_misses" => s.read_misses,
            "store_misses" => s.write_misses,
            "invalidations" => s.invalidations,
            "back_invalidations" => s.back_invalidations,
            "writebacks" => s.writebacks,
            "miss_ratio" => s.miss_ratio(),
            "mpka" => 1000.0 * ratio(s.misses(), self.accesses),
        };
        if let Some(l) = self.config.levels.iter().find(|l| l.name == name) {
            r.insert("size".into(), json!(l.geometry.size));
            r.insert("assoc".into(), json!(l.geometry.assoc));
            r.insert("line_size".into(), json!(l.geometry.line));
            r.insert("policy".into(), json!(l.policy.name()));
            r.insert("write_policy".into(), json!(l.write.name()));
            r.insert("write_allocate".into(), json!(l.write_allocate));
            r.insert("inclusion".into(), json!(l.inclusion.name()));
        }
        r
    }

    fn stat_columns(&self, first: Vec<Column>) -> Vec<Column> {
        let mut cols = first;
        cols.push(Column::num("accesses", "accesses"));
        for l in &self.levels {
            cols.push(Column::num(&format!("misses.{}", l.name), &format!("{} misses", l.name)));
        }
        cols
    }
}

impl Render for CacheReport {
    /// Sections `levels`, `by_line` (code grouped by function, file and line),
    /// `by_variable` (data granules grouped by the namer's variable), and with
    /// `verbose` `by_core`. Lines and variables rank by first-level misses.
    fn render(&self, namer: &dyn Namer, opts: &RenderOpts) -> Table {
        let mut levels = Section::new(
            "levels",
            "Cache levels",
            vec![
                Column::text("name", "level"),
                Column::num("accesses", "accesses"),
                Column::num("misses", "misses"),
                Column::num("miss_ratio", "miss ratio"),
                Column::num("load_misses", "load misses"),
                Column::num("store_misses", "store misses"),
                Column::num("writebacks", "writebacks"),
                Column::num("invalidations", "invalidations"),
                Column::num("mpka", "misses/1k"),
            ],
        );
        for l in &self.levels {
            levels.rows.push(self.level_row(&l.name, &l.total, l.shared));
        }

        // by line
        let mut lines: HashMap<CodeName, AccessStats> = HashMap::new();
        for (pc, s) in &self.by_pc {
            lines.entry(namer.code(*pc)).or_default().add(s);
        }
        let mut lines: Vec<(CodeName, AccessStats)> =
            lines.into_iter().filter(|(_, s)| s.accesses >= opts.min_count).collect();
        lines.sort_by(|a, b| {
            (b.1.misses(0), b.1.accesses, &a.0).cmp(&(a.1.misses(0), a.1.accesses, &b.0))
        });
        opts.cut(&mut lines);
        let mut by_line = Section::new(
            "by_line",
            "By source line",
            self.stat_columns(vec![
                Column::text("location", "location"),
                Column::text("function", "function"),
            ]),
        );
        for (c, s) in &lines {
            by_line.rows.push(row! {
                "function" => c.function,
                "file" => c.file,
                "line" => c.line,
                "location" => c.location(),
                "accesses" => s.accesses,
                "loads" => s.reads(),
                "stores" => s.writes,
                "misses" => self.misses_obj(s),
            });
        }

        // by variable: per access when the accesses were named, else per granule
        let mut vars: HashMap<String, AccessStats> = HashMap::new();
        if let Some(names) = &self.variables {
            for (id, s) in self.by_variable_id.iter().enumerate() {
                if s.accesses > 0 {
                    let name = names.get(id).cloned().unwrap_or_else(|| format!("#{id}"));
                    vars.entry(name).or_default().add(s);
                }
            }
        } else {
            for (a, s) in self.by_data.iter() {
                vars.entry(crate::names::variable_of(namer, a)).or_default().add(&s);
            }
        }
        let mut vars: Vec<(String, AccessStats)> =
            vars.into_iter().filter(|(_, s)| s.accesses >= opts.min_count).collect();
        vars.sort_by(|a, b| {
            (b.1.misses(0), b.1.accesses, &a.0).cmp(&(a.1.misses(0), a.1.accesses, &b.0))
        });
        opts.cut(&mut vars);
        let mut by_var = Section::new(
            "by_variable",
            "By variable",
            self.stat_columns(vec![Column::text("variable", "variable")]),
        );
        for (v, s) in &vars {
            by_var.rows.push(row! {
                "variable" => v,
                "accesses" => s.accesses,
                "loads" => s.reads(),
                "stores" => s.writes,
                "misses" => self.misses_obj(s),
            });
        }
        if self.config.data_granule > 0 && self.variables.is_none() {
            by_var.notes.push(format!(
                "data is counted per {}-byte granule, named after its first byte",
                self.config.data_granule
            ));
        }

        let mut t = Table { sections: vec![levels, by_line, by_var] };
        if opts.verbose {
            let mut by_core = Section::new(
                "by_core",
                "Private levels by core",
                vec![
                    Column::text("name", "level"),
                    Column::num("core", "core"),
                    Column::num("accesses", "accesses"),
                    Column::num("misses", "misses"),
                    Column::num("writebacks", "writebacks"),
                    Column::num("invalidations", "invalidations"),
                    Column::num("back_invalidations", "back-inval"),
                ],
            );
            for l in self.levels.iter().filter(|l| !l.shared) {
                for (c, s) in l.per_instance.iter().enumerate() {
                    let mut r = self.level_row(&l.name, s, false);
                    r.insert("core".into(), json!(c));
                    by_core.rows.push(r);
                }
            }
            t.sections.push(by_core);
        }
        t
    }
}

#[cfg(test)]
mod tests;
