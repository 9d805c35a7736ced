//! Data layout per allocation site: which offsets of a block are hot, which are used
//! together, and by which threads, with advice on reordering, splitting and padding.
//!
//! Works on heap blocks up to [`LayoutConfig::max_block`] bytes (struct-like
//! objects). A field is identified by the offset of an access from the block start
//! (names come later from a namer with type information). Two fields are co-accessed
//! when a thread touches both in the same block within a window of its last
//! [`LayoutConfig::window`] accesses. Cache lines are reckoned from the block start,
//! as if blocks were line-aligned.

use crate::blocks::{AllocFns, Blocks, Sites};
use crate::fxhash::FxHashMap;
use crate::names::Namer;
use crate::table::{ratio, Column, Render, RenderOpts, Section, Table};
use crate::{for_each_touch, Kernel};
use memlens_format::{Event, Pc, ThreadId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Options of [`Layout`].
#[derive(Clone, Debug)]
pub struct LayoutConfig {
    /// Largest block analysed, in bytes. Default 4096.
    pub max_block: u64,
    /// Co-access window, in accesses of one thread. Default 8.
    pub window: usize,
    /// Cache line size for advice. Default 64.
    pub line: u64,
    /// Allocation wrappers whose callers are the sites (`--alloc-fn`).
    pub alloc_fns: AllocFns,
}

impl Default for LayoutConfig {
    fn default() -> LayoutConfig {
        LayoutConfig { max_block: 4096, window: 8, line: 64, alloc_fns: AllocFns::default() }
    }
}

/// Use of one offset (field) of a site's blocks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldStats {
    /// Loads.
    pub reads: u64,
    /// Stores.
    pub writes: u64,
    /// Widest access at this offset, in bytes.
    pub size: u64,
    /// Threads that loaded it (bit `t % 64`).
    pub readers: u64,
    /// Threads that stored it (bit `t % 64`).
    pub writers: u64,
}

impl FieldStats {
    /// Loads and stores.
    pub fn accesses(&self) -> u64 {
        self.reads + self.writes
    }
}

/// Layout facts of one allocation site.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SiteLayout {
    /// Call site of the allocation.
    pub pc: Pc,
    /// Callers.
    pub stack: Vec<Pc>,
    /// Blocks analysed.
    pub blocks: u64,
    /// Largest block size seen.
    pub size: u64,
    /// Fields by offset.
    pub fields: BTreeMap<u64, FieldStats>,
    /// Co-access counts of offset pairs `(a, b)` with `a < b`.
    pub pairs: BTreeMap<(u64, u64), u64>,
}

impl SiteLayout {
    /// All accesses.
    pub fn accesses(&self) -> u64 {
        self.fields.values().map(|f| f.accesses()).sum()
    }

    /// Advice text for this site (empty when nothing stands out).
    pub fn advice(&self, line: u64) -> Vec<String> {
        let mut out = Vec::new();
        let total = self.accesses();
        if total == 0 || self.fields.len() < 2 {
            return out;
        }
        let hot: Vec<(u64, &FieldStats)> = self
            .fields
            .iter()
            .filter(|(_, f)| f.accesses() * 20 >= total)
            .map(|(o, f)| (*o, f))
            .collect();
        let cold: Vec<u64> = self
            .fields
            .iter()
            .filter(|(_, f)| f.accesses() * 100 < total)
            .map(|(o, _)| *o)
            .collect();
        // hot fields spread over more lines than they need
        let hot_lines: BTreeSet<u64> = hot.iter().map(|(o, _)| o / line).collect();
        let hot_bytes: u64 = hot.iter().map(|(_, f)| f.size.max(1)).sum();
        let need = hot_bytes.div_ceil(line).max(1);
        if hot_lines.len() as u64 > need {
            out.push(format!(
                "reorder: hot fields at offsets {} span {} cache lines; grouped together they fit in {need}",
                list(hot.iter().map(|h| h.0)),
                hot_lines.len()
            ));
        }
        // cold fields sharing lines with hot ones
        let cold_in_hot: Vec<u64> =
            cold.iter().copied().filter(|o| hot_lines.contains(&(o / line))).collect();
        if !cold_in_hot.is_empty() && self.size > line {
            let share: u64 = cold.iter().map(|o| self.fields[o].accesses()).sum();
            out.push(format!(
                "split: fields at offsets {} get {:.1}% of the accesses but sit in hot lines; move them to a separate cold struct",
                list(cold_in_hot.iter().copied()),
                100.0 * ratio(share, total)
            ));
        }
        // fields in one line written by different threads
        let mut padded = BTreeSet::new();
        for (a, fa) in &self.fields {
            for (b, fb) in self.fields.range(a + 1..) {
                if a / line != b / line || fa.writers == 0 || fb.writers == 0 {
                    continue;
                }
                if fa.writers & fb.writers == 0 && padded.insert((*a, *b)) {
                    out.push(format!(
                        "pad: offsets {a} and {b} share a cache line but are written by different threads ({} / {}); put them on separate {line}-byte lines",
                        thread_list(fa.writers),
                        thread_list(fb.writers)
                    ));
                }
            }
        }
        // fields used together but apart
        let mut pairs: Vec<(&(u64, u64), &u64)> =
            self.pairs.iter().filter(|((a, b), _)| a / line != b / line).collect();
        pairs.sort_by(|x, y| (y.1, x.0).cmp(&(x.1, y.0)));
        if let Some(((a, b), n)) = pairs.first() {
            if **n * 10 >= total {
                out.push(format!(
                    "group: offsets {a} and {b} are accessed together {n} times but lie in different cache lines; place them next to each other"
                ));
            }
        }
        out
    }
}

fn list(v: impl Iterator<Item = u64>) -> String {
    let parts: Vec<String> = v.map(|o| o.to_string()).collect();
    parts.join(", ")
}

/// The thread indices of a mask.
fn threads(mask: u64) -> Vec<u32> {
    (0..64).filter(|i| mask >> i & 1 == 1).collect()
}

/// The threads of a mask as text: `T0,T2`.
fn thread_list(mask: u64) -> String {
    let parts: Vec<String> = threads(mask).iter().map(|i| format!("T{i}")).collect();
    parts.join(",")
}

#[derive(Clone, Debug)]
struct Live {
    site: u32,
}

/// The layout kernel. Not shardable: blocks cross threads.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    cfg: LayoutConfig,
    sites: Sites,
    layouts: Vec<SiteLayout>,
    blocks: Blocks<Live>,
    // per thread: recent (block start, offset)
    recent: FxHashMap<ThreadId, VecDeque<(u64, u64)>>,
}

/// What [`Layout`] produces.
#[derive(Clone, Debug, Default)]
pub struct LayoutReport {
    /// Line size used for advice.
    pub line: u64,
    /// Sites with at least one analysed access.
    pub sites: Vec<SiteLayout>,
}

impl Layout {
    /// A kernel with these options.
    pub fn new(cfg: LayoutConfig) -> Layout {
        Layout { cfg, ..Layout::default() }
    }

    fn alloc(&mut self, pc: Pc, stack: &[Pc], addr: u64, size: u64) {
        if addr == 0 || size == 0 || size > self.cfg.max_block {
            return;
        }
        let (pc, stack) = self.cfg.alloc_fns.site(pc, stack);
        let site = self.sites.id(pc, stack);
        if site as usize == self.layouts.len() {
            self.layouts.push(SiteLayout { pc, stack: stack.to_vec(), ..SiteLayout::default() });
        }
        let l = &mut self.layouts[site as usize];
        l.blocks += 1;
        l.size = l.size.max(size);
        self.blocks.insert(addr, size, Live { site });
    }

    fn access(&mut self, t: ThreadId, addr: u64, len: u64, write: bool) {
        let Some((start, end, live)) = self.blocks.find(addr) else { return };
        let site = live.site as usize;
        let off = addr - start;
        let l = &mut self.layouts[site];
        let f = l.fields.entry(off).or_default();
        let bit = 1u64 << (t.0 % 64);
        if write {
            f.writes += 1;
            f.writers |= bit;
        } else {
            f.reads += 1;
            f.readers |= bit;
        }
        f.size = f.size.max(len.min(end - addr));
        let w = self.recent.entry(t).or_default();
        let mut seen = BTreeSet::new();
        for &(s, o) in w.iter() {
            if s == start && o != off && seen.insert(o) {
                *l.pairs.entry((o.min(off), o.max(off))).or_default() += 1;
            }
        }
        w.push_back((start, off));
        if w.len() > self.cfg.window {
            w.pop_front();
        }
    }
}

impl Kernel for Layout {
    type Output = LayoutReport;

    fn process(&mut self, thread: ThreadId, ev: &Event) {
        match ev {
            Event::Alloc { pc, addr, size, stack, .. } => self.alloc(*pc, stack, addr.0, *size),
            Event::Realloc { pc, old, new, size, stack } => {
                self.blocks.remove(old.0);
                self.alloc(*pc, stack, new.0, *size);
            }
            Event::Free { addr, .. } => {
                self.blocks.remove(addr.0);
            }
            _ => for_each_touch(ev, |x| self.access(thread, x.addr, x.len, x.write)),
        }
    }

    fn finish(self) -> LayoutReport {
        LayoutReport {
            line: self.cfg.line,
            sites: self.layouts.into_iter().filter(|l| !l.fields.is_empty()).collect(),
        }
    }
}

impl Render for LayoutReport {
    /// Sections `sites` (ranked by accesses, with `advice`), `fields` (per site and
    /// offset: accesses, share, size, threads) and `pairs` (the most co-accessed
    /// offsets per site). Advice also goes into the text notes.
    fn render(&self, namer: &dyn Namer, opts: &RenderOpts) -> Table {
        let mut sites: Vec<&SiteLayout> =
            self.sites.iter().filter(|s| s.accesses() >= opts.min_count).collect();
        sites.sort_by(|a, b| (b.accesses(), a.pc).cmp(&(a.accesses(), b.pc)));
        opts.cut(&mut sites);
        let mut sec = Section::new(
            "sites",
            "Layout by allocation site",
            vec![
                Column::text("site", "site"),
                Column::num("blocks", "blocks"),
                Column::num("size", "size"),
                Column::num("accesses", "accesses"),
                Column::num("fields", "fields"),
            ],
        );
        let mut fields = Section::new(
            "fields",
            "Fields (offsets) by site",
            vec![
                Column::text("site", "site"),
                Column::num("offset", "offset"),
                Column::num("size", "size"),
                Column::num("loads", "loads"),
                Column::num("stores", "stores"),
                Column::num("share", "share %"),
                Column::num("threads", "threads"),
                Column::text("stored_by", "stored by"),
            ],
        );
        let mut pairs = Section::new(
            "pairs",
            "Co-accessed offsets",
            vec![
                Column::text("site", "site"),
                Column::num("a", "offset a"),
                Column::num("b", "offset b"),
                Column::num("co_accesses", "co-accesses"),
            ],
        );
        for s in sites {
            let code = namer.code(s.pc);
            let name = format!("{} ({})", code.location(), code.function);
            let total = s.accesses();
            let advice = s.advice(self.line);
            for a in &advice {
                sec.notes.push(format!("{name}: {a}"));
            }
            sec.rows.push(row! {
                "site" => name, "function" => code.function, "file" => code.file, "line" => code.line,
                "stack" => s.stack.iter().map(|&p| namer.code(p).location()).collect::<Vec<_>>(),
                "blocks" => s.blocks, "size" => s.size, "accesses" => total, "fields" => s.fields.len(),
                "advice" => advice,
            });
            let mut fl: Vec<(&u64, &FieldStats)> = s.fields.iter().collect();
            fl.sort_by(|a, b| (b.1.accesses(), a.0).cmp(&(a.1.accesses(), b.0)));
            for (o, f) in fl {
                fields.rows.push(row! {
                    "site" => name, "offset" => o, "size" => f.size, "loads" => f.reads, "stores" => f.writes,
                    "share" => 100.0 * ratio(f.accesses(), total),
                    "threads" => (f.readers | f.writers).count_ones(),
                    "loaded_by" => threads(f.readers), "stored_by" => threads(f.writers),
                });
            }
            let mut pl: Vec<(&(u64, u64), &u64)> = s.pairs.iter().collect();
            pl.sort_by(|a, b| (b.1, a.0).cmp(&(a.1, b.0)));
            pl.truncate(10);
            for ((a, b), n) in pl {
                pairs.rows.push(row! { "site" => name, "a" => a, "b" => b, "co_accesses" => n });
            }
        }
        Table { sections: vec![sec, fields, pairs] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use crate::{drive_serial, NoNames};

    #[test]
    fn hot_cold_pairs_and_advice() {
        // 256-byte objects: offsets 0 and 192 are hot and always used together, 64 is
        // cold; 128 and 136 are written by two different threads
        let mut t0 = vec![alloc(0x10, 0x10000, 256, &[])];
        for _ in 0..50 {
            t0.push(rd(0x20, 0x10000, 8));
            t0.push(wr(0x21, 0x10000 + 192, 8));
        }
        t0.push(rd(0x22, 0x10000 + 64, 4));
        t0.push(wr(0x23, 0x10000 + 128, 8));
        let t1 = vec![wr(0x24, 0x10000 + 136, 8)];
        // a big block is ignored
        t0.push(alloc(0x11, 0x40000, 1 << 20, &[]));
        t0.push(rd(0x25, 0x40000, 8));
        // thread 1's access comes after thread 0's stream, while the block is live
        let rep = drive_serial(&trace(&[(0, t0), (1, t1)]), Layout::default(), |_| {}).unwrap();
        assert_eq!(rep.sites.len(), 1);
        let s = &rep.sites[0];
        assert_eq!((s.blocks, s.size, s.accesses()), (1, 256, 103));
        assert_eq!(s.fields[&0].reads, 50);
        assert_eq!(s.fields[&192].writes, 50);
        // each access pairs with the other hot offset in the window (once per access)
        assert_eq!(s.pairs[&(0, 192)], 99);
        assert_eq!(s.fields[&136].writers, 0b10);
        let advice = s.advice(64);
        assert!(
            advice.iter().any(|a| a.starts_with("reorder: hot fields at offsets 0, 192 span 2")),
            "{advice:?}"
        );
        assert!(advice.iter().any(|a| a.starts_with("pad: offsets 128 and 136")), "{advice:?}");
        assert!(advice.iter().any(|a| a.starts_with("group: offsets 0 and 192")), "{advice:?}");
        let j = rep.render(&NoNames, &RenderOpts::default()).to_json();
        assert_eq!(j["sites"][0]["accesses"], 103);
        assert_eq!(j["fields"][0]["share"].as_f64().map(|x| x.round()), Some(49.0));
        assert_eq!(j["pairs"][0]["co_accesses"], 99);
    }
}
