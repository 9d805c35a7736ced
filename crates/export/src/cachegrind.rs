//! `cachegrind.out` per source line, for cg_annotate and KCachegrind.
//!
//! Columns (`events:`):
//! - `Ir`: memory-access operations executed at the line — each traced load, store,
//!   `memcpy`/`memset` range and atomic read-modify-write counts once. memlens does
//!   not see other instructions, so this is not cachegrind's instruction count.
//! - `Dr`, `Dw`: loads and stores as `memlens report` counts them (an atomic RMW is
//!   one of each, a copy range one of each kind).
//! - with a cache simulation, `D1mr D1mw DLmr DLmw`: read and write misses of the
//!   first and last simulated level, from the analysis crate's cache hierarchy fed
//!   in the merged global order. As in `memlens analyze cachesim`, an access that
//!   spans several cache lines counts a miss per line that missed.
//!
//! Counters are kept per code address while the trace streams by, then named and
//! summed per (file, function, line).

use crate::{DynNamer, Error, Summary};
use memlens_analysis::cachesim::{CacheConfig, Hierarchy};
use memlens_analysis::{drive_merged, Kernel};
use memlens_format::{AccessKind, Event, Pc, ThreadId, TraceReader};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufWriter, Write};

/// Options of [`cachegrind`].
#[derive(Clone, Debug, Default)]
pub struct CachegrindOpts {
    /// Simulate this cache hierarchy and add the miss columns.
    pub cache: Option<CacheConfig>,
}

/// Counters of one code address (or line): Ir Dr Dw D1mr D1mw DLmr DLmw.
type Costs = [u64; 7];

struct Sim {
    hier: Hierarchy,
    cfg: CacheConfig,
    line_bits: u32,
    last: usize,
}

struct Lines {
    sim: Option<Sim>,
    by_pc: HashMap<Pc, Costs>,
}

impl Lines {
    /// Simulates `len` bytes at `addr`, line by line, into `c`.
    fn touch(&mut self, t: ThreadId, pc: Pc, addr: u64, len: u64, write: bool) {
        let Some(sim) = self.sim.as_mut() else { return };
        let core = sim.cfg.core_map.core(t, sim.hier.cores());
        let first = addr >> sim.line_bits;
        let last = addr.saturating_add(len.max(1) - 1) >> sim.line_bits;
        let (mut d1, mut dl) = (0, 0);
        for line in first..=last {
            let a = if line == first { addr } else { line << sim.line_bits };
            let level = sim.hier.access(core, a, write);
            d1 += u64::from(level >= 1);
            dl += u64::from(level > sim.last);
        }
        let c = self.by_pc.entry(pc).or_default();
        let w = usize::from(write);
        c[3 + w] += d1;
        c[5 + w] += dl;
    }
}

impl Kernel for Lines {
    type Output = Lines;

    fn process(&mut self, t: ThreadId, ev: &Event) {
        let pc = match ev {
            Event::Access { pc, .. } | Event::Range { pc, .. } | Event::Rmw { pc, .. } => *pc,
            _ => return,
        };
        let (l, s) = ev.loads_stores();
        let c = self.by_pc.entry(pc).or_default();
        c[0] += 1;
        c[1] += l;
        c[2] += s;
        match *ev {
            Event::Access { addr, size, kind, .. } => {
                self.touch(t, pc, addr.0, u64::from(size), kind == AccessKind::Write)
            }
            Event::Range { addr, len, kind, .. } if len > 0 => {
                self.touch(t, pc, addr.0, len, kind == AccessKind::Write)
            }
            Event::Rmw { addr, size, op, .. } => {
                self.touch(t, pc, addr.0, u64::from(size), false);
                if op.stores() {
                    self.touch(t, pc, addr.0, u64::from(size), true);
                }
            }
            _ => {}
        }
    }

    fn finish(self) -> Lines {
        self
    }
}

fn geometry_desc(cfg: &CacheConfig, i: usize) -> String {
    let l = &cfg.levels[i];
    let g = &l.geometry;
    format!("{} cache:         {} B, {} B, {}-way associative", l.name, g.size, g.line, g.assoc)
}

/// Writes per-line costs in cachegrind's output format.
pub fn cachegrind(
    r: &TraceReader,
    namer: DynNamer<'_>,
    opts: &CachegrindOpts,
    out: impl Write,
) -> Result<Summary, Error> {
    let sim = match &opts.cache {
        Some(cfg) => {
            let hier = Hierarchy::new(cfg)?;
            let line_bits = hier.line_size().trailing_zeros();
            let last = hier.levels() - 1;
            Some(Sim { hier, cfg: cfg.clone(), line_bits, last })
        }
        None => None,
    };
    let with_sim = sim.is_some();
    let lines = drive_merged(r, Lines { sim, by_pc: HashMap::new() }, |_| {})?;
    // file -> function -> line -> costs; BTreeMaps give a stable, sorted file.
    let mut files: BTreeMap<String, BTreeMap<String, BTreeMap<u32, Costs>>> = BTreeMap::new();
    let mut total: Costs = [0; 7];
    for (pc, c) in &lines.by_pc {
        let n = namer.code(*pc);
        let file = if n.file.is_empty() { "???".to_string() } else { n.file };
        let row = files.entry(file).or_default().entry(n.function).or_default();
        let acc = row.entry(n.line).or_default();
        for k in 0..7 {
            acc[k] += c[k];
            total[k] += c[k];
        }
    }
    let cols = if with_sim { 7 } else { 3 };
    let mut out = BufWriter::new(out);
    if let Some(cfg) = &opts.cache {
        writeln!(out, "desc: {}", geometry_desc(cfg, 0))?;
        writeln!(out, "desc: {}", geometry_desc(cfg, cfg.levels.len() - 1))?;
    }
    writeln!(
        out,
        "desc: Ir = memory-access operations (memlens does not count other instructions)"
    )?;
    // cg_annotate takes the rest of the line as the command.
    writeln!(out, "cmd: {}", crate::command(r).replace('\n', " "))?;
    let events = ["Ir", "Dr", "Dw", "D1mr", "D1mw", "DLmr", "DLmw"];
    writeln!(out, "events: {}", events[..cols].join(" "))?;
    let mut sum = Summary { threads: r.streams().len() as u64, ..Summary::default() };
    for (file, fns) in &files {
        writeln!(out, "fl={file}")?;
        for (func, rows) in fns {
            writeln!(out, "fn={func}")?;
            sum.frames += 1;
            for (line, c) in rows {
                sum.calls += 1;
                write!(out, "{line}")?;
                for v in &c[..cols] {
                    write!(out, " {v}")?;
                }
                writeln!(out)?;
            }
        }
    }
    write!(out, "summary:")?;
    for v in &total[..cols] {
        write!(out, " {v}")?;
    }
    writeln!(out)?;
    out.flush()?;
    sum.operations = total[1] + total[2];
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use memlens_format::Addr;

    #[test]
    fn costs_per_line_with_and_without_misses() {
        // two pcs on line 5 of f1, one on line 7 of f2; the second pass over the
        // same 2 lines hits in D1
        let evs = vec![
            rd(0x105, 0x1000),
            rd(0x105, 0x1040),
            wr(0x205, 0x1000),
            wr(0x207, 0x1080),
            Event::Range { pc: Pc(0x105), addr: Addr(0x1000), len: 128, kind: AccessKind::Read },
        ];
        let r = trace(&[(0, evs)]);
        let mut out = Vec::new();
        let s = cachegrind(&r, &ByPc, &CachegrindOpts::default(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "desc: Ir = memory-access operations (memlens does not count other instructions)\n\
             cmd: \nevents: Ir Dr Dw\nfl=/src/f.c\nfn=f1\n5 3 3 0\nfn=f2\n5 1 0 1\n7 1 0 1\n\
             summary: 5 3 2\n"
        );
        assert_eq!((s.calls, s.frames, s.operations), (3, 2, 5));

        let opts = CachegrindOpts { cache: Some(CacheConfig::default()) };
        let mut out = Vec::new();
        cachegrind(&r, &ByPc, &opts, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("desc: D1 cache:"), "{text}");
        assert!(text.contains("events: Ir Dr Dw D1mr D1mw DLmr DLmw\n"), "{text}");
        // f1 line 5: 2 cold read misses, then the range over both lines hits
        assert!(text.contains("fn=f1\n5 3 3 0 2 0 2 0\n"), "{text}");
        assert!(text.contains("fn=f2\n5 1 0 1 0 0 0 0\n7 1 0 1 0 1 0 1\n"), "{text}");
        assert!(text.ends_with("summary: 5 3 2 2 1 2 1\n"), "{text}");
    }
}
