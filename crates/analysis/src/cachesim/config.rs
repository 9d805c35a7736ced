//! Cache hierarchy configuration: builders, cachegrind-style options and a config file.
//!
//! The config file format is described at [`CacheConfig::parse`].

use super::cache::Geometry;
use super::policy::PolicyKind;
use crate::Error;
use memlens_format::ThreadId;
use std::str::FromStr;

/// When a store reaches a level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WritePolicy {
    /// Stores dirty the line; dirty victims are written back. Default.
    #[default]
    WriteBack,
    /// Stores are passed on to the next level at once; lines stay clean.
    WriteThrough,
}

/// How a level relates to the levels above it (closer to the core).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Inclusion {
    /// Filled on every miss, evicts independently (as cachegrind's LL). Default.
    #[default]
    NonInclusive,
    /// Holds everything the levels above hold: an eviction here invalidates the line
    /// above (back-invalidation).
    Inclusive,
    /// Holds only lines evicted from the level above (a victim cache); a hit moves the
    /// line up and out of this level.
    Exclusive,
}

/// One cache level.
#[derive(Clone, Debug, PartialEq)]
pub struct LevelConfig {
    /// Name in reports (`D1`, `L2`, `LL`).
    pub name: String,
    /// Size, associativity, line size.
    pub geometry: Geometry,
    /// Replacement policy. Default LRU.
    pub policy: PolicyKind,
    /// Write policy. Default write-back.
    pub write: WritePolicy,
    /// Whether a store miss fills the line. Default true.
    pub write_allocate: bool,
    /// Relation to the levels above. Default non-inclusive.
    pub inclusion: Inclusion,
}

impl LevelConfig {
    /// A write-back, write-allocate, non-inclusive LRU level.
    pub fn new(name: &str, size: u64, assoc: u32, line: u32) -> LevelConfig {
        LevelConfig {
            name: name.into(),
            geometry: Geometry { size, assoc, line },
            policy: PolicyKind::Lru,
            write: WritePolicy::WriteBack,
            write_allocate: true,
            inclusion: Inclusion::NonInclusive,
        }
    }

    /// Sets the replacement policy.
    pub fn policy(mut self, p: PolicyKind) -> LevelConfig {
        self.policy = p;
        self
    }

    /// Sets the write policy.
    pub fn write(mut self, w: WritePolicy) -> LevelConfig {
        self.write = w;
        self
    }

    /// Sets write-allocate.
    pub fn write_allocate(mut self, on: bool) -> LevelConfig {
        self.write_allocate = on;
        self
    }

    /// Sets the inclusion policy.
    pub fn inclusion(mut self, i: Inclusion) -> LevelConfig {
        self.inclusion = i;
        self
    }
}

/// Which simulated core runs a thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CoreMap {
    /// Thread `t` runs on core `t % cores`. Default.
    #[default]
    RoundRobin,
    /// Listed threads run on the given cores; others round-robin.
    Explicit(Vec<(ThreadId, usize)>),
}

impl CoreMap {
    /// The core of a thread.
    pub fn core(&self, t: ThreadId, cores: usize) -> usize {
        if let CoreMap::Explicit(v) = self {
            if let Some(&(_, c)) = v.iter().find(|(tid, _)| *tid == t) {
                return c % cores;
            }
        }
        t.0 as usize % cores
    }
}

/// A whole hierarchy.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheConfig {
    /// Levels, innermost first.
    pub levels: Vec<LevelConfig>,
    /// Simulated cores. Default 1.
    pub cores: usize,
    /// Thread to core mapping. Default round-robin.
    pub core_map: CoreMap,
    /// Index of the first level shared by all cores; levels before it are private per
    /// core (kept coherent with MESI). Default: the last level.
    pub shared_from: Option<usize>,
    /// Dirty victims are written into the next level (updating its replacement state
    /// and allocating there if absent). Default true; the cachegrind preset turns it
    /// off, as cachegrind ignores write-back traffic.
    pub writeback_fill: bool,
    /// Granularity in bytes of the per-data counters rendered per variable (a power
    /// of two; 0 turns them off). Default 64.
    pub data_granule: u64,
    /// Record the level that served each access ([`Annotation`](super::Annotation)).
    /// Default false.
    pub annotate: bool,
}

impl Default for CacheConfig {
    /// D1 32 KiB 8-way, LL 8 MiB 16-way, 64-byte lines, LRU, write-back,
    /// write-allocate, non-inclusive, one core.
    fn default() -> CacheConfig {
        CacheConfig::new(vec![
            LevelConfig::new("D1", 32 << 10, 8, 64),
            LevelConfig::new("LL", 8 << 20, 16, 64),
        ])
    }
}

impl CacheConfig {
    /// A one-core hierarchy of these levels with default options.
    pub fn new(levels: Vec<LevelConfig>) -> CacheConfig {
        CacheConfig {
            levels,
            cores: 1,
            core_map: CoreMap::RoundRobin,
            shared_from: None,
            writeback_fill: true,
            data_granule: 64,
            annotate: false,
        }
    }

    /// Cachegrind's model: `D1` and `LL`, LRU, write-allocate, non-inclusive, and
    /// write-back traffic counted but not simulated.
    pub fn cachegrind(d1: Geometry, ll: Geometry) -> CacheConfig {
        let mut c = CacheConfig::new(vec![
            LevelConfig::new("D1", d1.size, d1.assoc, d1.line),
            LevelConfig::new("LL", ll.size, ll.assoc, ll.line),
        ]);
        c.writeback_fill = false;
        c
    }

    /// Sets the number of cores.
    pub fn cores(mut self, n: usize) -> CacheConfig {
        self.cores = n.max(1);
        self
    }

    /// Sets the first shared level.
    pub fn shared_from(mut self, level: usize) -> CacheConfig {
        self.shared_from = Some(level);
        self
    }

    /// Turns per-access annotation on or off.
    pub fn annotate(mut self, on: bool) -> CacheConfig {
        self.annotate = on;
        self
    }

    /// Sets the inclusion policy of every level but the first.
    pub fn inclusion(mut self, i: Inclusion) -> CacheConfig {
        for l in self.levels.iter_mut().skip(1) {
            l.inclusion = i;
        }
        self
    }

    /// Sets the replacement policy of every level.
    pub fn policy(mut self, p: PolicyKind) -> CacheConfig {
        for l in &mut self.levels {
            l.policy = p;
        }
        self
    }

    /// The first shared level in effect.
    pub fn first_shared(&self) -> usize {
        self.shared_from.unwrap_or(self.levels.len().saturating_sub(1)).min(self.levels.len())
    }

    /// Checks the configuration.
    pub fn validate(&self) -> Result<(), Error> {
        if self.levels.is_empty() {
            return Err(Error::Config("a cache hierarchy needs at least one level".into()));
        }
        if self.levels.len() > super::MAX_LEVELS {
            return Err(Error::Config(format!(
                "at most {} cache levels are supported",
                super::MAX_LEVELS
            )));
        }
        let mut prev_line = 0;
        for l in &self.levels {
            l.geometry.validate()?;
            if l.geometry.line < prev_line {
                return Err(Error::Config(format!(
                    "level {}: line size {} is smaller than the level above ({prev_line})",
                    l.name, l.geometry.line
                )));
            }
            prev_line = l.geometry.line;
        }
        if self.cores == 0 || self.cores > super::MAX_CORES {
            return Err(Error::Config(format!(
                "{} cores: simulate 1 to {} cores",
                self.cores,
                super::MAX_CORES
            )));
        }
        let shared_from = self.first_shared();
        let mut lines = 0u64;
        for (i, l) in self.levels.iter().enumerate() {
            let copies = if i >= shared_from { 1 } else { self.cores as u64 };
            let n = l.geometry.size / u64::from(l.geometry.line);
            lines = lines.saturating_add(n.saturating_mul(copies));
        }
        if lines > super::MAX_LINES {
            return Err(Error::Config(format!(
                "the hierarchy holds {lines} cache lines over all levels and cores; at most {} (2^27) can be simulated: use smaller caches, longer lines or fewer cores",
                super::MAX_LINES
            )));
        }
        if self.data_granule != 0 && !self.data_granule.is_power_of_two() {
            return Err(Error::Config(format!(
                "data granule {} is not a power of two",
                self.data_granule
            )));
        }
        Ok(())
    }

    /// Parses cachegrind-style options: `--D1=size,assoc,line`, `--LL=...`, plus
    /// `--L2=...` / `--L3=...` for deeper hierarchies (`--I1` is accepted and ignored:
    /// traces carry no instruction fetches). Missing `--D1`/`--LL` take the defaults.
    /// The result follows [`CacheConfig::cachegrind`]'s model.
    pub fn from_cachegrind_args<S: AsRef<str>>(args: &[S]) -> Result<CacheConfig, Error> {
        let mut d1 = None;
        let mut mid: Vec<(String, Geometry)> = Vec::new();
        let mut ll = None;
        for a in args {
            let a = a.as_ref();
            let (k, v) = a.strip_prefix("--").and_then(|x| x.split_once('=')).ok_or_else(|| {
                Error::Config(format!("expected --LEVEL=size,assoc,line, got {a:?}"))
            })?;
            let g = parse_geometry(v)?;
            match k {
                "D1" => d1 = Some(g),
                "LL" => ll = Some(g),
                "L2" | "L3" => mid.push((k.to_string(), g)),
                "I1" => {}
                _ => return Err(Error::Config(format!("unknown cache level option --{k}"))),
            }
        }
        let def = CacheConfig::default();
        let d1 = d1.unwrap_or(def.levels[0].geometry);
        let ll = ll.unwrap_or(def.levels[1].geometry);
        let mut c = CacheConfig::cachegrind(d1, ll);
        mid.sort_by(|a, b| a.0.cmp(&b.0));
        for (i, (name, g)) in mid.into_iter().enumerate() {
            c.levels.insert(1 + i, LevelConfig::new(&name, g.size, g.assoc, g.line));
        }
        c.validate()?;
        Ok(c)
    }

    /// Parses a config file.
    ///
    /// A small TOML subset (plain `key = value` lines, `#` comments, values quoted or not).
    /// Top-level keys set hierarchy options; each `[NAME]` section adds one level, innermost
    /// first, named `NAME`:
    ///
    /// ```text
    /// cores = 4                 # simulated cores (default 1)
    /// core_map = round-robin    # or "0:0,1:0,2:1" (thread:core pairs; others round-robin)
    /// shared_from = 2           # first shared level (default: the last level)
    /// writeback_fill = true     # dirty victims are written into the next level (default true)
    /// data_granule = 64         # bytes per per-variable counter (default 64, 0: off)
    ///
    /// [D1]
    /// size = 32K                # bytes, K/M/G suffixes allowed
    /// assoc = 8
    /// line = 64
    /// policy = lru              # lru, fifo, random[:seed], plru
    /// write = back              # back or through
    /// write_allocate = true
    /// inclusion = non-inclusive # of the levels above: inclusive, exclusive, non-inclusive
    ///
    /// [LL]
    /// size = 8M
    /// assoc = 16
    /// line = 64
    /// ```
    pub fn parse(text: &str) -> Result<CacheConfig, Error> {
        let mut c = CacheConfig::new(Vec::new());
        let mut cur: Option<LevelConfig> = None;
        let mut have_geom = (false, false, false);
        let finish = |cur: &mut Option<LevelConfig>, c: &mut CacheConfig, g: (bool, bool, bool)| {
            if let Some(l) = cur.take() {
                if !(g.0 && g.1 && g.2) {
                    return Err(Error::Config(format!(
                        "level [{}] needs size, assoc and line",
                        l.name
                    )));
                }
                c.levels.push(l);
            }
            Ok(())
        };
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |why: String| Error::Config(format!("cache config line {}: {why}", n + 1));
            if let Some(name) = line.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
                finish(&mut cur, &mut c, have_geom)?;
                let name = name.trim().trim_matches('"');
                cur = Some(LevelConfig::new(name, 0, 0, 0));
                have_geom = (false, false, false);
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| err(format!("expected key = value, got {line:?}")))?;
            let k = k.trim();
            let v = v.trim().trim_matches('"');
            let e = |x: Error| err(x.to_string());
            match (&mut cur, k) {
                (None, "cores") => {
                    c.cores = usize::try_from(parse_u64(v).map_err(e)?).unwrap_or(usize::MAX)
                }
                (None, "core_map") => c.core_map = parse_core_map(v).map_err(e)?,
                (None, "shared_from") => c.shared_from = Some(parse_u64(v).map_err(e)? as usize),
                (None, "writeback_fill") => c.writeback_fill = parse_bool(v).map_err(e)?,
                (None, "data_granule") => c.data_granule = parse_u64(v).map_err(e)?,
                (None, "annotate") => c.annotate = parse_bool(v).map_err(e)?,
                (Some(l), "size") => {
                    l.geometry.size = parse_u64(v).map_err(e)?;
                    have_geom.0 = true;
                }
                (Some(l), "assoc") => {
                    l.geometry.assoc = parse_u32(v).map_err(e)?;
                    have_geom.1 = true;
                }
                (Some(l), "line") => {
                    l.geometry.line = parse_u32(v).map_err(e)?;
                    have_geom.2 = true;
                }
                (Some(l), "policy") => l.policy = PolicyKind::parse(v).map_err(e)?,
                (Some(l), "write") => {
                    l.write = match v {
                        "back" | "write-back" => WritePolicy::WriteBack,
                        "through" | "write-through" => WritePolicy::WriteThrough,
                        _ => return Err(err(format!("write must be back or through, not {v:?}"))),
                    }
                }
                (Some(l), "write_allocate") => l.write_allocate = parse_bool(v).map_err(e)?,
                (Some(l), "inclusion") => {
                    l.inclusion = match v {
                        "inclusive" => Inclusion::Inclusive,
                        "exclusive" => Inclusion::Exclusive,
                        "non-inclusive" | "noninclusive" | "nine" => Inclusion::NonInclusive,
                        _ => return Err(err(format!("unknown inclusion {v:?}"))),
                    }
                }
                _ => return Err(err(format!("unknown key {k:?}"))),
            }
        }
        finish(&mut cur, &mut c, have_geom)?;
        c.validate()?;
        Ok(c)
    }
}

impl WritePolicy {
    /// `write-back` or `write-through`.
    pub fn name(self) -> &'static str {
        match self {
            WritePolicy::WriteBack => "write-back",
            WritePolicy::WriteThrough => "write-through",
        }
    }
}

impl Inclusion {
    /// `non-inclusive`, `inclusive` or `exclusive`.
    pub fn name(self) -> &'static str {
        match self {
            Inclusion::NonInclusive => "non-inclusive",
            Inclusion::Inclusive => "inclusive",
            Inclusion::Exclusive => "exclusive",
        }
    }
}

impl FromStr for CacheConfig {
    type Err = Error;

    fn from_str(s: &str) -> Result<CacheConfig, Error> {
        CacheConfig::parse(s)
    }
}

/// Parses `size,assoc,line`.
pub fn parse_geometry(v: &str) -> Result<Geometry, Error> {
    let p: Vec<&str> = v.split(',').map(str::trim).collect();
    if p.len() != 3 {
        return Err(Error::Config(format!("expected size,assoc,line, got {v:?}")));
    }
    let g = Geometry { size: parse_u64(p[0])?, assoc: parse_u32(p[1])?, line: parse_u32(p[2])? };
    g.validate()?;
    Ok(g)
}

/// Parses a decimal or `0x` number with an optional K/M/G (binary) suffix.
pub fn parse_u64(v: &str) -> Result<u64, Error> {
    let v = v.trim();
    let bad = || Error::Config(format!("not a number: {v:?}"));
    if let Some(h) = v.strip_prefix("0x") {
        return u64::from_str_radix(h, 16).map_err(|_| bad());
    }
    let (num, mul) = match v.char_indices().last() {
        Some((i, 'k' | 'K')) => (&v[..i], 1u64 << 10),
        Some((i, 'm' | 'M')) => (&v[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&v[..i], 1 << 30),
        _ => (v, 1),
    };
    let n: u64 = num.trim().parse().map_err(|_| bad())?;
    n.checked_mul(mul).ok_or_else(bad)
}

/// [`parse_u64`] for a value that must fit 32 bits (no silent truncation).
fn parse_u32(v: &str) -> Result<u32, Error> {
    u32::try_from(parse_u64(v)?)
        .map_err(|_| Error::Config(format!("{v} is too large (at most {})", u32::MAX)))
}

fn parse_bool(v: &str) -> Result<bool, Error> {
    match v {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => Err(Error::Config(format!("expected true or false, got {v:?}"))),
    }
}

fn parse_core_map(v: &str) -> Result<CoreMap, Error> {
    if v == "round-robin" || v == "rr" {
        return Ok(CoreMap::RoundRobin);
    }
    let mut pairs = Vec::new();
    for p in v.split(',') {
        let (t, c) = p
            .split_once(':')
            .ok_or_else(|| Error::Config(format!("core_map entry {p:?} is not thread:core")))?;
        pairs.push((ThreadId(parse_u64(t)? as u32), parse_u64(c)? as usize));
    }
    Ok(CoreMap::Explicit(pairs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cachegrind_args() {
        let c = CacheConfig::from_cachegrind_args(&[
            "--D1=16384,4,64",
            "--LL=1M,16,64",
            "--I1=32768,8,64",
        ])
        .unwrap();
        assert_eq!(c.levels.len(), 2);
        assert_eq!(c.levels[0].geometry, Geometry { size: 16384, assoc: 4, line: 64 });
        assert_eq!(c.levels[1].geometry.size, 1 << 20);
        assert!(!c.writeback_fill);
        assert!(CacheConfig::from_cachegrind_args(&["--D1=1000,3,64"]).is_err());
        assert!(CacheConfig::from_cachegrind_args(&["--X1=1,1,1"]).is_err());
    }

    #[test]
    fn documented_example_parses() {
        let c = CacheConfig::parse(
            "cores = 4\ncore_map = round-robin\nshared_from = 2\nwriteback_fill = true\ndata_granule = 64\n\n\
             [D1]\nsize = 32K\nassoc = 8\nline = 64\npolicy = lru\nwrite = back\nwrite_allocate = true\n\
             inclusion = non-inclusive\n\n[LL]\nsize = 8M\nassoc = 16\nline = 64\n",
        )
        .unwrap();
        assert_eq!(c.levels.len(), 2);
        assert_eq!(c.levels[1].geometry.size, 8 << 20);
        assert_eq!((c.cores, c.first_shared()), (4, 2));
    }

    #[test]
    fn config_file() {
        let c = CacheConfig::parse(
            "cores = 2\ncore_map = \"0:1,1:0\"\n[L1]\nsize = 32K # d\nassoc = 8\nline = 64\npolicy = plru\n\
             [L2]\nsize=256K\nassoc=4\nline=64\nwrite=through\nwrite_allocate=false\ninclusion=exclusive\n\
             [L3]\nsize = \"2M\"\nassoc = 16\nline = 64\ninclusion = inclusive\npolicy = random:7\n",
        )
        .unwrap();
        assert_eq!(c.cores, 2);
        assert_eq!(c.core_map.core(ThreadId(0), 2), 1);
        assert_eq!(c.core_map.core(ThreadId(2), 2), 0);
        assert_eq!(c.levels.len(), 3);
        assert_eq!(c.levels[0].policy, PolicyKind::TreePlru);
        assert_eq!(c.levels[1].write, WritePolicy::WriteThrough);
        assert!(!c.levels[1].write_allocate);
        assert_eq!(c.levels[1].inclusion, Inclusion::Exclusive);
        assert_eq!(c.levels[2].policy, PolicyKind::Random { seed: 7 });
        assert_eq!(c.first_shared(), 2);
        let e = CacheConfig::parse("[L1]\nsize = 32K\n").unwrap_err().to_string();
        assert!(e.contains("needs size, assoc and line"), "{e}");
        let e = CacheConfig::parse("bogus = 1").unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
    }
}
