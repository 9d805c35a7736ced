//! Heap profile per allocation site, in the manner of DHAT.
//!
//! Every allocation is tracked until it is freed; every access is mapped to the live
//! block holding it. Per allocation site (call site plus the callers' return
//! addresses): blocks and bytes allocated, peak live bytes, lifetimes, accesses and
//! bytes read and written, reads and writes per allocated byte, blocks freed soon
//! after allocation, bytes never read or never written, and (when every block of the
//! site has the same size) an access count per byte offset.
//!
//! Times are event counts in delivery order: a block allocated by one thread and
//! freed by another gets the right lifetime once streams are merged in time order.
//! Per-byte detail (never-read bytes, the offset histogram) is kept for blocks of up
//! to [`HeapConfig::byte_detail_limit`] bytes, as DHAT does.

pub use crate::blocks::AllocFns;
use crate::blocks::{Blocks, Sites};
use crate::names::Namer;
use crate::table::{ratio, Column, Render, RenderOpts, Section, Table};
use crate::{for_each_touch, Kernel};
use memlens_format::{AccessKind, Event, Pc, ThreadId};
use serde_json::json;

/// Options of [`Heap`].
#[derive(Clone, Debug)]
pub struct HeapConfig {
    /// Keep per-byte access counts for blocks up to this size. Default 1024.
    pub byte_detail_limit: u64,
    /// Blocks living fewer events than this are short-lived. Default 10 000.
    pub short_lived: u64,
    /// Keep the heap over time in buckets of this many memory operations (the
    /// viewer's axis); `None`: no timeline.
    pub timeline: Option<u64>,
    /// Allocation wrappers whose callers are the sites (`--alloc-fn`).
    pub alloc_fns: AllocFns,
}

impl Default for HeapConfig {
    fn default() -> HeapConfig {
        HeapConfig {
            byte_detail_limit: 1024,
            short_lived: 10_000,
            timeline: None,
            alloc_fns: AllocFns::default(),
        }
    }
}

/// Everything known about one allocation site.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SiteStats {
    /// Call site of the allocation function.
    pub pc: Pc,
    /// Callers' return addresses, innermost first.
    pub stack: Vec<Pc>,
    /// Blocks allocated.
    pub blocks: u64,
    /// Bytes allocated.
    pub bytes: u64,
    /// Most bytes live at once.
    pub max_live_bytes: u64,
    /// Most blocks live at once.
    pub max_live_blocks: u64,
    /// Blocks still live at the end.
    pub live_at_end: u64,
    /// Bytes still live at the end.
    pub live_bytes_at_end: u64,
    /// Sum of block lifetimes in events (live blocks count until the end).
    pub lifetime_sum: u64,
    /// Blocks freed within [`HeapConfig::short_lived`] events.
    pub short_lived: u64,
    /// Loads from the site's blocks.
    pub reads: u64,
    /// Stores to them.
    pub writes: u64,
    /// Bytes loaded.
    pub bytes_read: u64,
    /// Bytes stored.
    pub bytes_written: u64,
    /// The size of every block, when all have the same size.
    pub uniform_size: Option<u64>,
    /// Bytes with per-byte detail (blocks within the detail limit).
    pub detail_bytes: u64,
    /// Of those, bytes never loaded.
    pub never_read_bytes: u64,
    /// Of those, bytes never stored.
    pub never_written_bytes: u64,
    /// Accesses per byte offset (when the size is uniform and within the limit).
    pub by_offset: Vec<u64>,
    /// Bytes live when the whole heap peaked (DHAT's "at t-gmax").
    pub at_peak_bytes: u64,
    /// Blocks live then.
    pub at_peak_blocks: u64,
    live_blocks: u64,
    live_bytes: u64,
    mixed_sizes: bool,
}

impl SiteStats {
    /// Mean block lifetime in events.
    pub fn mean_lifetime(&self) -> f64 {
        ratio(self.lifetime_sum, self.blocks)
    }
}

#[derive(Clone, Debug)]
struct Block {
    site: u32,
    born: u64,
    reads: u64,
    writes: u64,
    bytes_read: u64,
    bytes_written: u64,
    // per byte: access count; bit 0 of `flags` read, bit 1 written
    detail: Option<(Vec<u32>, Vec<u8>)>,
}

/// The heap in one bucket of [`HeapConfig::timeline`] memory operations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapBucket {
    /// Bucket number: operations `bucket * size .. (bucket + 1) * size`.
    pub bucket: u64,
    /// Most bytes live in it.
    pub max_live: u64,
    /// Bytes live at its end.
    pub live_end: u64,
    /// Bytes allocated in it.
    pub alloc_bytes: u64,
    /// Bytes freed in it.
    pub free_bytes: u64,
    /// Allocations in it.
    pub allocs: u64,
    /// Frees in it.
    pub frees: u64,
}

/// The heap kernel. Not shardable: blocks cross threads.
#[derive(Clone, Debug, Default)]
pub struct Heap {
    cfg: HeapConfig,
    sites: Sites,
    stats: Vec<SiteStats>,
    blocks: Blocks<Block>,
    now: u64,
    ops: u64,
    live_bytes: u64,
    max_live_bytes: u64,
    peak_event: u64,
    peak_op: u64,
    /// A new peak was reached and no block was freed since: the sites' live bytes
    /// are the peak's (taken at the next free, as DHAT does).
    peak_pending: bool,
    timeline: Vec<HeapBucket>,
    heap_accesses: u64,
    other_accesses: u64,
}

/// What [`Heap`] produces.
#[derive(Clone, Debug, Default)]
pub struct HeapReport {
    /// Per allocation site.
    pub sites: Vec<SiteStats>,
    /// Most heap bytes live at once (DHAT's t-gmax).
    pub max_live_bytes: u64,
    /// Events before the allocation that first reached it.
    pub peak_event: u64,
    /// Memory operations (loads, stores, ranges, RMWs) before it: the viewer's axis.
    pub peak_op: u64,
    /// Memory operations seen.
    pub ops: u64,
    /// The heap over time ([`HeapConfig::timeline`]), buckets with an allocation or
    /// a free only (the others keep the previous bucket's live bytes).
    pub timeline: Vec<HeapBucket>,
    /// Accesses that fell into a live block.
    pub heap_accesses: u64,
    /// Accesses outside every live block (stack, globals, freed memory).
    pub other_accesses: u64,
    /// Events seen.
    pub events: u64,
}

impl Heap {
    /// A kernel with these options.
    pub fn new(cfg: HeapConfig) -> Heap {
        Heap { cfg, ..Heap::default() }
    }

    fn alloc(&mut self, pc: Pc, stack: &[Pc], addr: u64, size: u64) {
        if addr == 0 {
            return;
        }
        let (pc, stack) = self.cfg.alloc_fns.site(pc, stack);
        let site = self.sites.id(pc, stack);
        if site as usize == self.stats.len() {
            self.stats.push(SiteStats { pc, stack: stack.to_vec(), ..SiteStats::default() });
        }
        let s = &mut self.stats[site as usize];
        s.blocks += 1;
        s.bytes += size;
        s.live_blocks += 1;
        s.live_bytes += size;
        s.max_live_blocks = s.max_live_blocks.max(s.live_blocks);
        s.max_live_bytes = s.max_live_bytes.max(s.live_bytes);
        match s.uniform_size {
            None if !s.mixed_sizes => s.uniform_size = Some(size),
            Some(u) if u != size => {
                s.uniform_size = None;
                s.mixed_sizes = true;
                s.by_offset.clear();
            }
            _ => {}
        }
        self.live_bytes += size;
        if self.live_bytes > self.max_live_bytes {
            self.max_live_bytes = self.live_bytes;
            self.peak_event = self.now - 1;
            self.peak_op = self.ops;
            self.peak_pending = true;
        }
        self.tick(size, true);
        let detail = (size <= self.cfg.byte_detail_limit)
            .then(|| (vec![0u32; size as usize], vec![0u8; size as usize]));
        let b = Block {
            site,
            born: self.now,
            reads: 0,
            writes: 0,
            bytes_read: 0,
            bytes_written: 0,
            detail,
        };
        if let Some((old_size, old)) = self.blocks.insert(addr, size, b) {
            // a block at the same address was never freed: retire it now
            self.retire(old_size, old, true);
        }
    }

    fn free(&mut self, addr: u64) {
        if let Some((size, b)) = self.blocks.remove(addr) {
            self.retire(size, b, true);
        }
    }

    /// Keeps every site's live bytes of the peak just left.
    fn snapshot_peak(&mut self) {
        for s in self.stats.iter_mut() {
            s.at_peak_bytes = s.live_bytes;
            s.at_peak_blocks = s.live_blocks;
        }
        self.peak_pending = false;
    }

    /// An allocation (or a free) of `bytes`, already counted live (or not), in the
    /// timeline.
    fn tick(&mut self, bytes: u64, alloc: bool) {
        let Some(size) = self.cfg.timeline else { return };
        let b = self.ops / size.max(1);
        if self.timeline.last().is_none_or(|l| l.bucket != b) {
            let before = if alloc { self.live_bytes - bytes } else { self.live_bytes + bytes };
            self.timeline.push(HeapBucket { bucket: b, max_live: before, ..HeapBucket::default() });
        }
        let l = self.timeline.last_mut().expect("pushed");
        l.live_end = self.live_bytes;
        l.max_live = l.max_live.max(self.live_bytes);
        if alloc {
            l.alloc_bytes += bytes;
            l.allocs += 1;
        } else {
            l.free_bytes += bytes;
            l.frees += 1;
        }
    }

    fn retire(&mut self, size: u64, b: Block, freed: bool) {
        if freed && self.peak_pending {
            self.snapshot_peak();
        }
        let s = &mut self.stats[b.site as usize];
        let life = self.now - b.born;
        s.lifetime_sum += life;
        if freed {
            s.live_blocks -= 1;
            s.live_bytes -= size;
            self.live_bytes -= size;
            if life < self.cfg.short_lived {
                s.short_lived += 1;
            }
        } else {
            s.live_at_end += 1;
            s.live_bytes_at_end += size;
        }
        s.reads += b.reads;
        s.writes += b.writes;
        s.bytes_read += b.bytes_read;
        s.bytes_written += b.bytes_written;
        if let Some((counts, flags)) = b.detail {
            s.detail_bytes += size;
            s.never_read_bytes += flags.iter().filter(|&&f| f & 1 == 0).count() as u64;
            s.never_written_bytes += flags.iter().filter(|&&f| f & 2 == 0).count() as u64;
            if s.uniform_size == Some(size) {
                if s.by_offset.len() < counts.len() {
                    s.by_offset.resize(counts.len(), 0);
                }
                for (o, c) in s.by_offset.iter_mut().zip(&counts) {
                    *o += u64::from(*c);
                }
            }
        }
        if freed {
            self.tick(size, false);
        }
    }

    #[inline]
    fn access(&mut self, addr: u64, len: u64, write: bool) {
        let Some((start, end, b)) = self.blocks.find(addr) else {
            self.other_accesses += 1;
            return;
        };
        self.heap_accesses += 1;
        let n = len.min(end - addr);
        if write {
            b.writes += 1;
            b.bytes_written += n;
        } else {
            b.reads += 1;
            b.bytes_read += n;
        }
        if let Some((counts, flags)) = b.detail.as_mut() {
            let off = (addr - start) as usize;
            let bit = if write { 2 } else { 1 };
            for i in off..off + n as usize {
                counts[i] += 1;
                flags[i] |= bit;
            }
        }
    }
}

/// The lowest and highest of `reps` addresses from `first` in steps of `delta`
/// (two's complement), or `None` when they wrap around the address space.
pub(crate) fn run_span(first: u64, delta: u64, reps: u64) -> Option<(u64, u64)> {
    let back = (delta as i64) < 0;
    let span =
        if back { delta.wrapping_neg() } else { delta }.checked_mul(reps.saturating_sub(1))?;
    if back {
        Some((first.checked_sub(span)?, first))
    } else {
        Some((first, first.checked_add(span)?))
    }
}

/// Block bookkeeping fed by [`track_allocs`] (this kernel and the DHAT exporter).
pub trait AllocTracker {
    /// A block of `size` bytes at `addr`, allocated at `pc` (call stack `stack`).
    fn alloc(&mut self, pc: Pc, stack: &[Pc], addr: u64, size: u64);
    /// The block at `addr` is freed (unknown addresses are ignored).
    fn free(&mut self, addr: u64);
}

/// Feeds `t` an allocation, reallocation or free; false for every other event.
pub fn track_allocs(t: &mut impl AllocTracker, ev: &Event) -> bool {
    match ev {
        Event::Alloc { pc, addr, size, stack, .. } => t.alloc(*pc, stack, addr.0, *size),
        Event::Realloc { pc, old, new, size, stack } => {
            if old.0 != 0 {
                t.free(old.0);
            }
            // realloc(p, 0) only frees
            if new.0 != 0 {
                t.alloc(*pc, stack, new.0, *size);
            }
        }
        Event::Free { addr, .. } => t.free(addr.0),
        _ => return false,
    }
    true
}

impl AllocTracker for Heap {
    fn alloc(&mut self, pc: Pc, stack: &[Pc], addr: u64, size: u64) {
        Heap::alloc(self, pc, stack, addr, size)
    }

    fn free(&mut self, addr: u64) {
        Heap::free(self, addr)
    }
}

impl Kernel for Heap {
    type Output = HeapReport;

    fn process(&mut self, _thread: memlens_format::ThreadId, ev: &Event) {
        self.now += 1;
        if matches!(ev, Event::Access { .. } | Event::Range { .. } | Event::Rmw { .. }) {
            self.ops += 1;
        }
        if !track_allocs(self, ev) {
            for_each_touch(ev, |t| self.access(t.addr, t.len, t.write));
        }
    }

    /// A run holds no allocation: its accesses are counted, each body event's at
    /// once when no block lies under any of its addresses.
    fn process_run(&mut self, _thread: ThreadId, body: &[Event], deltas: &[u64], reps: u64) {
        let n = reps * body.len() as u64;
        self.now += n;
        self.ops += n;
        for (ev, &d) in body.iter().zip(deltas) {
            let (addr, len, write) = match *ev {
                Event::Access { addr, size, kind, .. } => {
                    (addr.0, u64::from(size.max(1)), kind == AccessKind::Write)
                }
                Event::Range { addr, len, kind, .. } if len > 0 => {
                    (addr.0, len, kind == AccessKind::Write)
                }
                _ => continue,
            };
            let at = |k: u64| addr.wrapping_add(d.wrapping_mul(k));
            if let Some((lo, hi)) = run_span(at(1), d, reps) {
                if self.blocks.none_in(lo, hi) {
                    self.other_accesses += reps;
                    continue;
                }
            }
            for k in 1..=reps {
                self.access(at(k), len, write);
            }
        }
    }

    fn named_runs(&self) -> bool {
        true
    }

    fn wants_runs(&self) -> bool {
        true
    }

    fn finish(mut self) -> HeapReport {
        if self.peak_pending {
            self.snapshot_peak();
        }
        for (_, size, b) in self.blocks.drain() {
            self.retire(size, b, false);
        }
        HeapReport {
            sites: self.stats,
            max_live_bytes: self.max_live_bytes,
            peak_event: self.peak_event,
            peak_op: self.peak_op,
            ops: self.ops,
            timeline: self.timeline,
            heap_accesses: self.heap_accesses,
            other_accesses: self.other_accesses,
            events: self.now,
        }
    }
}

impl Render for HeapReport {
    /// Sections `summary` and `sites` (ranked by bytes allocated). Site rows carry the
    /// allocation point and its callers (`stack`) as named by the namer, and
    /// `accesses_by_offset` when the site's blocks all have one size.
    fn render(&self, namer: &dyn Namer, opts: &RenderOpts) -> Table {
        let mut summary = Section::new(
            "summary",
            "Heap",
            vec![
                Column::num("blocks", "blocks"),
                Column::num("bytes", "bytes"),
                Column::num("max_live_bytes", "max live bytes"),
                Column::num("heap_accesses", "heap accesses"),
                Column::num("other_accesses", "other accesses"),
            ],
        );
        summary.rows.push(row! {
            "sites" => self.sites.len(),
            "blocks" => self.sites.iter().map(|s| s.blocks).sum::<u64>(),
            "bytes" => self.sites.iter().map(|s| s.bytes).sum::<u64>(),
            "max_live_bytes" => self.max_live_bytes,
            "peak_event" => self.peak_event,
            "leaked_bytes" => self.sites.iter().map(|s| s.live_bytes_at_end).sum::<u64>(),
            "heap_accesses" => self.heap_accesses,
            "other_accesses" => self.other_accesses,
        });
        let mut sites: Vec<&SiteStats> =
            self.sites.iter().filter(|s| s.bytes >= opts.min_count).collect();
        sites.sort_by(|a, b| (b.bytes, b.blocks, a.pc).cmp(&(a.bytes, a.blocks, b.pc)));
        opts.cut(&mut sites);
        let mut sec = Section::new(
            "sites",
            "Allocation sites",
            vec![
                Column::text("site", "site"),
                Column::num("blocks", "blocks"),
                Column::num("bytes", "bytes"),
                Column::num("max_live_bytes", "max live"),
                Column::num("mean_lifetime", "lifetime"),
                Column::num("bytes_read_per_byte", "read/B"),
                Column::num("bytes_written_per_byte", "written/B"),
                Column::num("never_read_bytes", "never read"),
                Column::num("never_written_bytes", "never written"),
                Column::num("short_lived", "short-lived"),
                Column::num("live_at_end", "live at end"),
            ],
        );
        for s in sites {
            let site = namer.code(s.pc);
            let stack: Vec<String> = s.stack.iter().map(|&p| namer.code(p).location()).collect();
            let mut r = row! {
                "site" => format!("{} ({})", site.location(), site.function),
                "function" => site.function, "file" => site.file, "line" => site.line,
                "stack" => stack,
                "blocks" => s.blocks, "bytes" => s.bytes, "avg_size" => ratio(s.bytes, s.blocks),
                "max_live_blocks" => s.max_live_blocks, "max_live_bytes" => s.max_live_bytes,
                "mean_lifetime" => s.mean_lifetime(), "short_lived" => s.short_lived,
                "live_at_end" => s.live_at_end, "live_bytes_at_end" => s.live_bytes_at_end,
                "loads" => s.reads, "stores" => s.writes,
                "bytes_read" => s.bytes_read, "bytes_written" => s.bytes_written,
                "bytes_read_per_byte" => ratio(s.bytes_read, s.bytes),
                "bytes_written_per_byte" => ratio(s.bytes_written, s.bytes),
                "detail_bytes" => s.detail_bytes,
                "never_read_bytes" => s.never_read_bytes,
                "never_written_bytes" => s.never_written_bytes,
                "uniform_size" => s.uniform_size,
                "at_peak_bytes" => s.at_peak_bytes, "at_peak_blocks" => s.at_peak_blocks,
            };
            if s.uniform_size.is_some() && !s.by_offset.is_empty() {
                r.insert("accesses_by_offset".into(), json!(s.by_offset));
            }
            sec.rows.push(r);
        }
        let at_peak = self.site_section(
            namer,
            opts,
            ("at_peak", "Live at the peak (t-gmax)"),
            ("at_peak_bytes", "bytes at peak"),
            ("at_peak_blocks", "blocks at peak"),
            |s| (s.at_peak_bytes, s.at_peak_blocks),
        );
        let leaks = self.site_section(
            namer,
            opts,
            ("leaks", "Live at exit (leaks)"),
            ("live_bytes_at_end", "bytes at exit"),
            ("live_at_end", "blocks at exit"),
            |s| (s.live_bytes_at_end, s.live_at_end),
        );
        Table { sections: vec![summary, sec, at_peak, leaks] }
    }
}

impl HeapReport {
    /// The sites with bytes by `key` (bytes, blocks), most first: the peak's and the
    /// leaks' tables.
    fn site_section(
        &self,
        namer: &dyn Namer,
        opts: &RenderOpts,
        (key, title): (&str, &str),
        (bytes_col, bytes_title): (&'static str, &str),
        (blocks_col, blocks_title): (&'static str, &str),
        by: impl Fn(&SiteStats) -> (u64, u64),
    ) -> Section {
        let mut sites: Vec<&SiteStats> = self.sites.iter().filter(|s| by(s).0 > 0).collect();
        sites.sort_by(|a, b| (by(b), a.pc).cmp(&(by(a), b.pc)));
        opts.cut(&mut sites);
        let mut sec = Section::new(
            key,
            title,
            vec![
                Column::text("site", "site"),
                Column::num(bytes_col, bytes_title),
                Column::num(blocks_col, blocks_title),
                Column::num("bytes", "allocated"),
            ],
        );
        for s in sites {
            let site = namer.code(s.pc);
            let stack: Vec<String> = s.stack.iter().map(|&p| namer.code(p).location()).collect();
            let (b, n) = by(s);
            sec.rows.push(row! {
                "site" => format!("{} ({})", site.location(), site.function),
                "function" => site.function, "file" => site.file, "line" => site.line,
                "stack" => stack, bytes_col => b, blocks_col => n,
                "bytes" => s.bytes, "blocks" => s.blocks,
            });
        }
        sec
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use crate::{drive_serial, NoNames};

    #[test]
    fn the_peak_its_sites_the_timeline_and_the_leaks() {
        let evs = vec![
            alloc(0x10, 0x1000, 16, &[]),
            rd(0x50, 0x1000, 8),
            alloc(0x20, 0x2000, 32, &[]),
            rd(0x50, 0x1000, 8),
            rd(0x50, 0x1000, 8),
            free(0x60, 0x1000),
            alloc(0x10, 0x3000, 8, &[]),
            rd(0x50, 0x3000, 8),
        ];
        let cfg = HeapConfig { timeline: Some(2), ..HeapConfig::default() };
        let rep = drive_serial(&trace(&[(0, evs)]), Heap::new(cfg), |_| {}).unwrap();
        assert_eq!((rep.max_live_bytes, rep.peak_event, rep.peak_op, rep.ops), (48, 2, 1, 4));
        let at: Vec<(u64, u64)> =
            rep.sites.iter().map(|s| (s.at_peak_bytes, s.at_peak_blocks)).collect();
        assert_eq!(at, [(16, 1), (32, 1)]);
        let b = |bucket, max_live, live_end, alloc_bytes, free_bytes, allocs, frees| HeapBucket {
            bucket,
            max_live,
            live_end,
            alloc_bytes,
            free_bytes,
            allocs,
            frees,
        };
        assert_eq!(rep.timeline, [b(0, 48, 48, 48, 0, 2, 0), b(1, 48, 40, 8, 16, 1, 1)]);
        let j = rep.render(&NoNames, &RenderOpts::default()).to_json();
        assert_eq!(j["at_peak"][0]["at_peak_bytes"], 32);
        assert_eq!(j["at_peak"][1]["at_peak_bytes"], 16);
        assert_eq!(j["leaks"][0]["live_bytes_at_end"], 32);
        assert_eq!(j["leaks"][1]["live_bytes_at_end"], 8);
        assert_eq!(j["summary"][0]["leaked_bytes"], 40);
    }

    #[test]
    fn sites_blocks_lifetimes_and_bytes() {
        let mut evs = Vec::new();
        // site A (pc 0x10 from 0x100): three 16-byte blocks; field 0..8 read twice,
        // field 8..12 written once, bytes 12..16 never touched; freed at once
        for k in 0..3u64 {
            let a = 0x1000 + 0x100 * k;
            evs.push(alloc(0x10, a, 16, &[0x100]));
            evs.push(rd(0x50, a, 8));
            evs.push(rd(0x50, a, 8));
            evs.push(wr(0x51, a + 8, 4));
            evs.push(free(0x60, a));
        }
        // site B (pc 0x10 from 0x200: another stack): one 4000-byte block, never freed
        evs.push(alloc(0x10, 0x9000, 4000, &[0x200]));
        evs.push(range_wr(0x52, 0x9000, 4000));
        evs.push(rd(0x53, 0x9f9c, 8)); // 4 bytes inside, 4 past the end
        evs.push(rd(0x54, 0x20000, 8)); // not heap
        let rep =
            drive_serial(&trace(&[(0, evs)]), Heap::new(HeapConfig::default()), |_| {}).unwrap();
        assert_eq!(rep.sites.len(), 2);
        let a = &rep.sites[0];
        assert_eq!((a.blocks, a.bytes, a.max_live_bytes, a.max_live_blocks), (3, 48, 16, 1));
        assert_eq!((a.reads, a.writes, a.bytes_read, a.bytes_written), (6, 3, 48, 12));
        // alloc at event i, free at i + 4: lifetime 4 events each
        assert_eq!((a.lifetime_sum, a.short_lived, a.live_at_end), (12, 3, 0));
        assert_eq!(a.uniform_size, Some(16));
        assert_eq!((a.detail_bytes, a.never_read_bytes, a.never_written_bytes), (48, 24, 36));
        let mut want = vec![6u64; 8];
        want.extend([3, 3, 3, 3, 0, 0, 0, 0]);
        assert_eq!(a.by_offset, want);
        let b = &rep.sites[1];
        assert_eq!((b.blocks, b.live_at_end, b.live_bytes_at_end, b.short_lived), (1, 1, 4000, 0));
        assert_eq!((b.bytes_written, b.bytes_read), (4000, 4));
        assert_eq!(b.detail_bytes, 0);
        assert_eq!(rep.max_live_bytes, 4000);
        assert_eq!((rep.heap_accesses, rep.other_accesses), (9 + 2, 1));
        let j = rep.render(&NoNames, &RenderOpts::default()).to_json();
        assert_eq!(j["sites"][0]["bytes"], 4000);
        assert_eq!(j["sites"][0]["stack"], json!(["0x200"]));
        assert_eq!(j["sites"][1]["accesses_by_offset"][0], 6);
        assert_eq!(j["sites"][1]["bytes_read_per_byte"], 1.0);
        assert_eq!(j["summary"][0]["blocks"], 4);
    }

    #[test]
    fn realloc_and_mixed_sizes() {
        let evs = vec![
            alloc(0x10, 0x1000, 8, &[]),
            wr(0x50, 0x1000, 8),
            Event::Realloc {
                pc: Pc(0x10),
                old: memlens_format::Addr(0x1000),
                new: memlens_format::Addr(0x2000),
                size: 32,
                stack: vec![],
            },
            wr(0x50, 0x2010, 8),
            rd(0x50, 0x1000, 8), // the old block is gone
        ];
        let rep = drive_serial(&trace(&[(0, evs)]), Heap::default(), |_| {}).unwrap();
        let s = &rep.sites[0];
        assert_eq!((s.blocks, s.bytes, s.uniform_size), (2, 40, None));
        assert!(s.by_offset.is_empty());
        assert_eq!((s.writes, s.live_at_end), (2, 1));
        assert_eq!(rep.other_accesses, 1);
    }
}
