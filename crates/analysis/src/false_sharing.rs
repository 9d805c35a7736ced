//! False sharing: cache lines that one thread writes while another accesses *other*
//! bytes of the same line.
//!
//! Per line and thread the kernel keeps a mask of the bytes read and of the bytes
//! written. Two threads conflict on a line when at least one of them writes it. A
//! conflict is *true* sharing when one thread writes bytes the other touches, and
//! *false* sharing otherwise. A line with false conflicts only is reported as
//! `false`; with both kinds as `mixed`; lines with true conflicts only belong to the
//! [sharing](crate::sharing) analysis. Ownership transfers count how often the
//! writing thread changes, in the order the driver delivers events (exact once
//! streams are merged in time order). The same analysis at twice the line size
//! (128 bytes by default) predicts false sharing under adjacent-line prefetching or
//! 128-byte lines: those rows list lines that are clean at the real line size.

use crate::fxhash::FxHashMap;
use crate::names::{CodeName, Namer};
use crate::table::{Column, Render, RenderOpts, Section, Table};
use crate::{for_each_touch, Kernel};
use memlens_format::{Addr, Event, Pc, ThreadId};
use serde_json::json;
use std::collections::{BTreeSet, HashMap};
use std::ops::Range;

/// Options of [`FalseSharing`].
#[derive(Clone, Debug)]
pub struct FalseSharingConfig {
    /// Line size in bytes: a power of two from 8 to 128. Default 64.
    pub line: u64,
    /// Predict at this larger line size as well (a power of two up to 256, above
    /// `line`; 0 turns it off). Default 128.
    pub predict_line: u64,
}

impl Default for FalseSharingConfig {
    fn default() -> FalseSharingConfig {
        FalseSharingConfig { line: 64, predict_line: 128 }
    }
}

/// A set of byte offsets within a line (up to 256 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ByteMask([u64; 4]);

impl ByteMask {
    /// Adds bytes `from..to` (offsets below 256).
    #[inline]
    pub fn set(&mut self, from: u64, to: u64) {
        let mut i = from;
        while i < to {
            let w = (i / 64) as usize;
            let lo = i % 64;
            let hi = (to - w as u64 * 64).min(64);
            let bits = if hi - lo == 64 { u64::MAX } else { ((1u64 << (hi - lo)) - 1) << lo };
            self.0[w] |= bits;
            i = w as u64 * 64 + hi;
        }
    }

    /// Whether two masks share a byte.
    pub fn intersects(&self, o: &ByteMask) -> bool {
        self.0.iter().zip(&o.0).any(|(a, b)| a & b != 0)
    }

    /// Union.
    pub fn or(&self, o: &ByteMask) -> ByteMask {
        ByteMask([self.0[0] | o.0[0], self.0[1] | o.0[1], self.0[2] | o.0[2], self.0[3] | o.0[3]])
    }

    /// No bytes.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// Number of bytes.
    pub fn count(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }

    /// Maximal runs of set bytes.
    pub fn ranges(&self) -> Vec<Range<u64>> {
        let mut out = Vec::new();
        let mut start = None;
        for i in 0..256u64 {
            let on = self.0[(i / 64) as usize] >> (i % 64) & 1 == 1;
            match (on, start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    out.push(s..i);
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            out.push(s..256);
        }
        out
    }
}

/// One thread's use of a line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadUse {
    /// The thread.
    pub thread: ThreadId,
    /// Loads.
    pub reads: u64,
    /// Stores.
    pub writes: u64,
    /// Bytes loaded.
    pub read_bytes: ByteMask,
    /// Bytes stored.
    pub write_bytes: ByteMask,
    /// Accesses per code address.
    pub pcs: Vec<(Pc, u64)>,
}

impl ThreadUse {
    /// Bytes touched.
    pub fn touched(&self) -> ByteMask {
        self.read_bytes.or(&self.write_bytes)
    }
}

/// How threads share a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SharingKind {
    /// Writers and other threads use disjoint bytes only.
    False,
    /// Some conflicting threads overlap, others are disjoint.
    Mixed,
    /// Every conflict overlaps: genuinely shared data.
    True,
    /// No conflict (one thread, or readers only).
    None,
}

/// One line's record.
#[derive(Clone, Debug, Default)]
struct LineTrack {
    threads: Vec<ThreadUse>,
    last_writer: Option<ThreadId>,
    transfers: u64,
}

impl LineTrack {
    #[inline]
    fn add(&mut self, t: ThreadId, pc: Pc, from: u64, to: u64, write: bool) {
        let u = match self.threads.iter().position(|u| u.thread == t) {
            Some(i) => &mut self.threads[i],
            None => {
                self.threads.push(ThreadUse { thread: t, ..ThreadUse::default() });
                self.threads.last_mut().expect("just pushed")
            }
        };
        if write {
            u.writes += 1;
            u.write_bytes.set(from, to);
            if self.last_writer.is_some_and(|w| w != t) {
                self.transfers += 1;
            }
            self.last_writer = Some(t);
        } else {
            u.reads += 1;
            u.read_bytes.set(from, to);
        }
        match u.pcs.iter_mut().find(|p| p.0 == pc) {
            Some(p) => p.1 += 1,
            None => u.pcs.push((pc, 1)),
        }
    }

    fn kind(&self) -> SharingKind {
        let (mut f, mut t) = (false, false);
        for (i, a) in self.threads.iter().enumerate() {
            for b in &self.threads[i + 1..] {
                if a.write_bytes.is_empty() && b.write_bytes.is_empty() {
                    continue;
                }
                if a.write_bytes.intersects(&b.touched()) || b.write_bytes.intersects(&a.touched())
                {
                    t = true;
                } else {
                    f = true;
                }
            }
        }
        match (f, t) {
            (true, false) => SharingKind::False,
            (true, true) => SharingKind::Mixed,
            (false, true) => SharingKind::True,
            (false, false) => SharingKind::None,
        }
    }
}

/// A shared line in the result.
#[derive(Clone, Debug)]
pub struct LineReport {
    /// First byte of the line.
    pub addr: Addr,
    /// Line size.
    pub size: u64,
    /// False or mixed.
    pub kind: SharingKind,
    /// Per thread, sorted by thread.
    pub threads: Vec<ThreadUse>,
    /// Changes of the writing thread.
    pub transfers: u64,
}

impl LineReport {
    /// Loads by all threads.
    pub fn reads(&self) -> u64 {
        self.threads.iter().map(|t| t.reads).sum()
    }

    /// Stores by all threads.
    pub fn writes(&self) -> u64 {
        self.threads.iter().map(|t| t.writes).sum()
    }
}

#[derive(Clone, Debug)]
struct Tracker {
    bits: u32,
    lines: FxHashMap<u64, LineTrack>,
}

impl Tracker {
    fn new(line: u64) -> Tracker {
        Tracker { bits: line.trailing_zeros(), lines: FxHashMap::default() }
    }

    #[inline]
    fn touch(&mut self, t: ThreadId, pc: Pc, addr: u64, len: u64, write: bool) {
        let size = 1u64 << self.bits;
        let end = addr.saturating_add(len);
        let mut a = addr;
        while a < end {
            let line = a >> self.bits;
            let base = line << self.bits;
            let to = end.min(base + size);
            self.lines.entry(line).or_default().add(t, pc, a - base, to - base, write);
            a = to;
        }
    }

    fn report(self) -> Vec<LineReport> {
        let size = 1u64 << self.bits;
        let mut out = Vec::new();
        for (line, mut lt) in self.lines {
            if lt.threads.len() < 2 {
                continue;
            }
            let kind = lt.kind();
            if matches!(kind, SharingKind::False | SharingKind::Mixed) {
                lt.threads.sort_by_key(|u| u.thread);
                out.push(LineReport {
                    addr: Addr(line * size),
                    size,
                    kind,
                    threads: lt.threads,
                    transfers: lt.transfers,
                });
            }
        }
        out.sort_by(|a, b| {
            (b.transfers, b.writes(), a.addr).cmp(&(a.transfers, a.writes(), b.addr))
        });
        out
    }
}

/// The false-sharing kernel.
#[derive(Clone, Debug)]
pub struct FalseSharing {
    line: Tracker,
    predict: Option<Tracker>,
}

impl FalseSharing {
    /// A kernel with these options.
    pub fn new(cfg: FalseSharingConfig) -> Result<FalseSharing, crate::Error> {
        let ok_line = cfg.line.is_power_of_two() && (8..=128).contains(&cfg.line);
        let ok_pred = cfg.predict_line == 0
            || (cfg.predict_line.is_power_of_two()
                && cfg.predict_line > cfg.line
                && cfg.predict_line <= 256);
        if !ok_line || !ok_pred {
            return Err(crate::Error::Config(format!(
                "false sharing needs a power-of-two line of 8 to 128 bytes and a larger prediction line \
                 up to 256 (got {} and {})",
                cfg.line, cfg.predict_line
            )));
        }
        Ok(FalseSharing {
            line: Tracker::new(cfg.line),
            predict: (cfg.predict_line > 0).then(|| Tracker::new(cfg.predict_line)),
        })
    }
}

impl Default for FalseSharing {
    fn default() -> FalseSharing {
        FalseSharing::new(FalseSharingConfig::default()).expect("valid defaults")
    }
}

/// What [`FalseSharing`] produces.
#[derive(Clone, Debug, Default)]
pub struct FalseSharingReport {
    /// Falsely shared (or mixed) lines, most transfers first.
    pub lines: Vec<LineReport>,
    /// Lines of the prediction size that are falsely shared while none of their
    /// real-size lines is.
    pub predicted: Vec<LineReport>,
}

impl Kernel for FalseSharing {
    type Output = FalseSharingReport;

    fn process(&mut self, thread: ThreadId, ev: &Event) {
        let (line, predict) = (&mut self.line, &mut self.predict);
        for_each_touch(ev, |t| {
            line.touch(thread, t.pc, t.addr, t.len, t.write);
            if let Some(p) = predict.as_mut() {
                p.touch(thread, t.pc, t.addr, t.len, t.write);
            }
        });
    }

    fn named_runs(&self) -> bool {
        true
    }

    fn finish(self) -> FalseSharingReport {
        let step = 1u64 << self.line.bits;
        let lines = self.line.report();
        let flagged: BTreeSet<u64> = lines.iter().map(|l| l.addr.0).collect();
        let predicted = match self.predict {
            Some(p) => p
                .report()
                .into_iter()
                .filter(|big| {
                    !(0..big.size / step).any(|k| flagged.contains(&(big.addr.0 + k * step)))
                })
                .collect(),
            None => Vec::new(),
        };
        FalseSharingReport { lines, predicted }
    }
}

/// Names of the data in `ranges` of the line at `base`: element names and variables.
fn names_in(namer: &dyn Namer, base: u64, ranges: &[Range<u64>]) -> (Vec<String>, Vec<String>) {
    let mut names = BTreeSet::new();
    let mut vars = BTreeSet::new();
    for r in ranges {
        match namer.data(Addr(base + r.start)) {
            Some(d) => {
                names.insert(d.name);
                vars.insert(d.variable);
            }
            None => {
                names.insert(format!("{:#x}", base + r.start));
            }
        }
    }
    (names.into_iter().collect(), vars.into_iter().collect())
}

fn fmt_ranges(r: &[Range<u64>]) -> String {
    let parts: Vec<String> = r.iter().map(|r| format!("{}-{}", r.start, r.end - 1)).collect();
    parts.join(",")
}

fn line_row(namer: &dyn Namer, l: &LineReport, cfg_line: u64) -> crate::table::Row {
    let base = l.addr.0;
    let mut all_names = BTreeSet::new();
    let mut per_thread_vars: Vec<Vec<String>> = Vec::new();
    let mut threads = Vec::new();
    let mut code: HashMap<CodeName, u64> = HashMap::new();
    for u in &l.threads {
        let ranges = u.touched().ranges();
        let (names, vars) = names_in(namer, base, &ranges);
        all_names.extend(names.iter().cloned());
        per_thread_vars.push(vars);
        threads.push(json!({
            "thread": u.thread.0,
            "loads": u.reads,
            "stores": u.writes,
            "byte_ranges": fmt_ranges(&ranges),
            "stored_byte_ranges": fmt_ranges(&u.write_bytes.ranges()),
            "variables": names,
        }));
        for &(pc, n) in &u.pcs {
            *code.entry(namer.code(pc)).or_default() += n;
        }
    }
    let mut code: Vec<(CodeName, u64)> = code.into_iter().collect();
    code.sort_by(|a, b| (b.1, &a.0).cmp(&(a.1, &b.0)));
    let distinct_vars: BTreeSet<&String> = per_thread_vars.iter().flatten().collect();
    let names: Vec<String> = all_names.into_iter().collect();
    let fix = if l.kind == SharingKind::Mixed {
        format!(
            "part of this line is truly shared; move the per-thread parts ({}) to their own {cfg_line}-byte lines",
            names.join(", ")
        )
    } else if distinct_vars.len() >= 2 && per_thread_vars.iter().all(|v| v.len() == 1) {
        let v: Vec<&str> = distinct_vars.iter().map(|s| s.as_str()).collect();
        format!("align: give {} separate {cfg_line}-byte lines (alignas({cfg_line}) or padding between them)", v.join(" and "))
    } else if distinct_vars.len() == 1 {
        let v = distinct_vars.iter().next().map_or("", |s| s.as_str());
        format!(
            "pad: {v} holds per-thread data ({}) in one line; pad each thread's part to {cfg_line} bytes or split {v} per thread",
            names.join(", ")
        )
    } else {
        format!(
            "pad/split: keep each thread's bytes ({}) on separate {cfg_line}-byte lines",
            names.join(", ")
        )
    };
    row! {
        "line_addr" => format!("{}", l.addr),
        "line_size" => l.size,
        "kind" => l.kind,
        "variables" => names,
        "per_thread" => threads,
        "threads" => l.threads.len(),
        "loads" => l.reads(),
        "stores" => l.writes(),
        "transfers" => l.transfers,
        "lines" => code.iter().map(|(c, n)| json!({"file": c.file, "line": c.line, "function": c.function, "accesses": n})).collect::<Vec<_>>(),
        "fix" => fix,
    }
}

impl Render for FalseSharingReport {
    /// Sections `lines` and `predicted`, one row per line with the variables and byte
    /// ranges per thread, reads, writes, ownership transfers, source lines and a
    /// suggested fix. The fix also goes into the text notes.
    fn render(&self, namer: &dyn Namer, opts: &RenderOpts) -> Table {
        let cols = || {
            vec![
                Column::text("line_addr", "line"),
                Column::text("kind", "kind"),
                Column::num("threads", "threads"),
                Column::num("loads", "loads"),
                Column::num("stores", "stores"),
                Column::num("transfers", "transfers"),
                Column::text("variables", "variables"),
            ]
        };
        let mut sections = Vec::new();
        for (name, title, list) in [
            ("cache_lines", "False sharing", &self.lines),
            ("predicted", "Predicted false sharing at the larger line size", &self.predicted),
        ] {
            let mut s = Section::new(name, title, cols());
            let mut v: Vec<&LineReport> =
                list.iter().filter(|l| l.reads() + l.writes() >= opts.min_count).collect();
            opts.cut(&mut v);
            for l in v {
                let r = line_row(namer, l, l.size);
                if let Some(f) = r.get("fix").and_then(|f| f.as_str()) {
                    s.notes.push(format!("{}: {f}", l.addr));
                }
                s.rows.push(r);
            }
            sections.push(s);
        }
        Table { sections }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drive_serial;
    use crate::names::DataName;
    use crate::testutil::*;

    #[test]
    fn masks() {
        let mut m = ByteMask::default();
        m.set(4, 8);
        m.set(60, 70);
        m.set(200, 256);
        assert_eq!(m.count(), 4 + 10 + 56);
        assert_eq!(m.ranges(), [4..8, 60..70, 200..256]);
        let mut o = ByteMask::default();
        o.set(8, 60);
        assert!(!m.intersects(&o));
        o.set(69, 70);
        assert!(m.intersects(&o));
    }

    struct Counters;
    impl Namer for Counters {
        fn code(&self, pc: Pc) -> CodeName {
            CodeName { function: "worker".into(), file: "fs.c".into(), line: pc.0 as u32 }
        }
        fn data(&self, a: Addr) -> Option<DataName> {
            (0x1000..0x1040).contains(&a.0).then(|| DataName {
                name: format!("counts[{}]", (a.0 - 0x1000) / 8),
                variable: "counts".into(),
            })
        }
    }

    #[test]
    fn per_thread_counters_in_one_line() {
        // threads 0..3 each increment counts[tid] (8 bytes) 5 times; interleaved
        let mut k = FalseSharing::default();
        for _ in 0..5 {
            for t in 0..4u32 {
                let a = 0x1000 + 8 * u64::from(t);
                k.process(ThreadId(t), &rd(7, a, 8));
                k.process(ThreadId(t), &wr(8, a, 8));
            }
        }
        // a truly shared line: both threads write the same word
        k.process(ThreadId(0), &wr(9, 0x2000, 8));
        k.process(ThreadId(1), &wr(9, 0x2000, 8));
        // a line read by both, written by none
        k.process(ThreadId(0), &rd(9, 0x3000, 8));
        k.process(ThreadId(1), &rd(9, 0x3008, 8));
        // adjacent 64-byte lines written by different threads: predicted at 128
        k.process(ThreadId(0), &wr(9, 0x4000, 8));
        k.process(ThreadId(1), &wr(9, 0x4040, 8));
        let rep = k.finish();
        assert_eq!(rep.lines.len(), 1);
        let l = &rep.lines[0];
        assert_eq!((l.addr, l.kind, l.threads.len()), (Addr(0x1000), SharingKind::False, 4));
        assert_eq!((l.reads(), l.writes()), (20, 20));
        // writer changes on every write but the first
        assert_eq!(l.transfers, 19);
        assert_eq!(l.threads[2].write_bytes.ranges(), vec![16..24]);
        assert_eq!(rep.predicted.len(), 1);
        assert_eq!(rep.predicted[0].addr, Addr(0x4000));

        let j = rep.render(&Counters, &RenderOpts::default()).to_json();
        let row = &j["cache_lines"][0];
        assert_eq!(row["line_addr"], "0x1000");
        assert_eq!(row["kind"], "false");
        assert_eq!(row["variables"], json!(["counts[0]", "counts[1]", "counts[2]", "counts[3]"]));
        assert_eq!(row["per_thread"][1]["byte_ranges"], "8-15");
        assert_eq!((row["threads"].as_u64(), row["loads"].as_u64()), (Some(4), Some(20)));
        assert_eq!(row["transfers"], 19);
        assert_eq!(row["lines"].as_array().unwrap().len(), 2);
        assert!(row["fix"].as_str().unwrap().starts_with("pad: counts"), "{}", row["fix"]);
        assert_eq!(j["predicted"][0]["line_addr"], "0x4000");
        assert!(j["predicted"][0]["fix"].as_str().unwrap().contains("128-byte"));
    }

    #[test]
    fn mixed_line_and_serial_order() {
        // t0 writes bytes 0-7 and t1 reads them (true), t2 writes 32-39 (false vs both)
        let r = trace(&[
            (0, vec![wr(1, 0x5000, 8), wr(1, 0x5000, 8)]),
            (1, vec![rd(2, 0x5000, 8)]),
            (2, vec![wr(3, 0x5020, 8)]),
        ]);
        let rep = drive_serial(&r, FalseSharing::default(), |_| {}).unwrap();
        assert_eq!(rep.lines.len(), 1);
        assert_eq!(rep.lines[0].kind, SharingKind::Mixed);
        // stream order: t0, t0, then t2: one change of writer
        assert_eq!(rep.lines[0].transfers, 1);
    }
}
