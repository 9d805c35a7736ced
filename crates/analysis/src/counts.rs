//! Access counts per code address and thread, and allocations per call site.

use crate::fxhash::FxHashMap;
use crate::{Kernel, ShardKernel};
use memlens_format::codec::Counted;
use memlens_format::{AccessKind, Event, Pc, ThreadId};
use std::collections::HashMap;

/// Counters of one code address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PcCounts {
    /// Loads (an RMW counts as one load and one store).
    pub loads: u64,
    /// Stores.
    pub stores: u64,
    /// Bytes loaded.
    pub bytes_read: u64,
    /// Bytes stored.
    pub bytes_written: u64,
    /// Threads that executed it (sorted, distinct).
    pub threads: Vec<ThreadId>,
}

impl PcCounts {
    fn add_thread(&mut self, t: ThreadId) {
        if let Err(i) = self.threads.binary_search(&t) {
            self.threads.insert(i, t);
        }
    }

    /// Adds another set of counters.
    pub fn merge(&mut self, o: &PcCounts) {
        crate::add_fields!(self, o; loads, stores, bytes_read, bytes_written);
        for &t in &o.threads {
            self.add_thread(t);
        }
    }
}

/// Allocations made at one call site.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocCounts {
    /// Blocks allocated (realloc counts).
    pub count: u64,
    /// Bytes requested.
    pub bytes: u64,
}

/// Per-thread totals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadCounts {
    /// Loads.
    pub loads: u64,
    /// Stores.
    pub stores: u64,
    /// Bytes loaded.
    pub bytes_read: u64,
    /// Bytes stored.
    pub bytes_written: u64,
    /// Allocations.
    pub allocs: u64,
    /// Frees.
    pub frees: u64,
    /// Function entries.
    pub calls: u64,
}

/// The counts kernel.
///
/// The public maps hold the result after [`Kernel::finish`] (or [`ShardKernel::merge`]).
/// While running, accesses accumulate per (pc, thread) in a dense vector found
/// through a small direct-mapped cache, so the common event costs a few
/// instructions and no hashing.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Memory accesses by code address.
    pub by_pc: HashMap<Pc, PcCounts>,
    /// Allocations by call site.
    pub allocs: HashMap<Pc, AllocCounts>,
    /// Totals by thread.
    pub by_thread: HashMap<ThreadId, ThreadCounts>,
    acc: Acc,
}

/// Running counters of one (pc, thread).
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    pc: u64,
    thread: u32,
    loads: u64,
    stores: u64,
    bytes_read: u64,
    bytes_written: u64,
}

const CACHE_BITS: u32 = 12;

/// The accumulation state between flushes.
#[derive(Clone, Debug, Default)]
struct Acc {
    slots: Vec<Slot>,
    index: FxHashMap<(u64, u32), u32>,
    /// Direct-mapped (pc, thread) → slot cache; empty until the first access.
    cache: Vec<(u64, u32, u32)>,
    /// Totals of the thread seen last, added to `by_thread` when it changes.
    thread: Option<(ThreadId, ThreadCounts)>,
}

impl Acc {
    #[inline(always)]
    fn slot(&mut self, pc: u64, thread: u32) -> &mut Slot {
        if self.cache.is_empty() {
            // the tag u64::MAX never matches a pc of thread u32::MAX with index 0
            self.cache = vec![(u64::MAX, u32::MAX, u32::MAX); 1 << CACHE_BITS];
        }
        let h = ((pc ^ u64::from(thread)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - CACHE_BITS))
            as usize;
        let e = self.cache[h];
        let i = if e.0 == pc && e.1 == thread && (e.2 as usize) < self.slots.len() {
            e.2 as usize
        } else {
            let slots = &mut self.slots;
            let i = *self.index.entry((pc, thread)).or_insert_with(|| {
                slots.push(Slot { pc, thread, ..Slot::default() });
                (slots.len() - 1) as u32
            }) as usize;
            self.cache[h] = (pc, thread, i as u32);
            i
        };
        &mut self.slots[i]
    }
}

impl Counts {
    #[inline(always)]
    fn thread_counts(&mut self, t: ThreadId) -> &mut ThreadCounts {
        if self.acc.thread.as_ref().is_none_or(|(x, _)| *x != t) {
            self.flush_thread();
            self.acc.thread = Some((t, ThreadCounts::default()));
        }
        &mut self.acc.thread.as_mut().expect("set above").1
    }

    fn flush_thread(&mut self) {
        if let Some((t, c)) = self.acc.thread.take() {
            add_thread_counts(self.by_thread.entry(t).or_default(), &c);
        }
    }

    /// Moves the running counters into the public maps.
    fn flush(&mut self) {
        self.flush_thread();
        let acc = std::mem::take(&mut self.acc);
        for s in acc.slots {
            let t = self.by_thread.entry(ThreadId(s.thread)).or_default();
            crate::add_fields!(t, s; loads, stores, bytes_read, bytes_written);
            let c = self.by_pc.entry(Pc(s.pc)).or_default();
            crate::add_fields!(c, s; loads, stores, bytes_read, bytes_written);
            c.add_thread(ThreadId(s.thread));
        }
    }

    #[inline(always)]
    fn one(&mut self, thread: ThreadId, ev: &Event) {
        // (pc, loads, stores, bytes read, bytes written)
        let (pc, l, st, br, bw) = match *ev {
            Event::Access { pc, size, kind: AccessKind::Read, .. } => {
                (pc, 1, 0, u64::from(size), 0)
            }
            Event::Access { pc, size, kind: AccessKind::Write, .. } => {
                (pc, 0, 1, 0, u64::from(size))
            }
            Event::Range { pc, len, kind: AccessKind::Read, .. } => (pc, 1, 0, len, 0),
            Event::Range { pc, len, kind: AccessKind::Write, .. } => (pc, 0, 1, 0, len),
            Event::Rmw { pc, size, op, .. } => {
                let w = u64::from(op.stores());
                (pc, 1, w, u64::from(size), w * u64::from(size))
            }
            _ => {
                self.other(thread, ev);
                return;
            }
        };
        self.add(thread, pc, l, st, br, bw);
    }

    /// Counts `n` occurrences of one event of the address-free scan
    /// ([`memlens_format::codec::Counted`]); the same sums as [`Kernel::process`] on
    /// the full events. Only plain accesses come with `n > 1`.
    #[inline(always)]
    pub fn counted(&mut self, thread: ThreadId, ev: Counted, n: u64) {
        let (pc, l, st, br, bw) = match ev {
            Counted::Access { pc, write: false, bytes } => (pc, n, 0, n * bytes, 0),
            Counted::Access { pc, write: true, bytes } => (pc, 0, n, 0, n * bytes),
            Counted::Range { pc, write: false, bytes } => (pc, n, 0, bytes, 0),
            Counted::Range { pc, write: true, bytes } => (pc, 0, n, 0, bytes),
            Counted::Rmw { pc, size, stores } => {
                let w = n * u64::from(stores);
                (pc, n, w, n * size, w * size)
            }
            Counted::Alloc { pc, size, allocates, frees } => {
                if allocates {
                    let a = self.allocs.entry(pc).or_default();
                    a.count += n;
                    a.bytes += n * size;
                }
                let tc = self.thread_counts(thread);
                tc.allocs += n * u64::from(allocates);
                tc.frees += n * u64::from(frees);
                return;
            }
            Counted::Free => {
                self.thread_counts(thread).frees += n;
                return;
            }
            Counted::Call => {
                self.thread_counts(thread).calls += n;
                return;
            }
            Counted::Other => {
                self.thread_counts(thread);
                return;
            }
        };
        self.add(thread, pc, l, st, br, bw);
    }

    /// Adds an access's loads, stores and bytes to its (pc, thread) slot; the
    /// thread's totals are the sums of its slots, taken at the flush (not per event:
    /// this is the hot path of `report`).
    #[inline(always)]
    fn add(&mut self, thread: ThreadId, pc: Pc, l: u64, st: u64, br: u64, bw: u64) {
        let s = self.acc.slot(pc.0, thread.0);
        s.loads += l;
        s.stores += st;
        s.bytes_read += br;
        s.bytes_written += bw;
    }

    #[inline(never)]
    fn other(&mut self, thread: ThreadId, ev: &Event) {
        match ev {
            Event::Alloc { pc, size, .. } | Event::Realloc { pc, size, .. } => {
                let (allocates, frees) = match ev {
                    Event::Realloc { old, new, .. } => memlens_format::realloc_counts(old.0, new.0),
                    _ => (true, false),
                };
                if allocates {
                    let a = self.allocs.entry(*pc).or_default();
                    a.count += 1;
                    a.bytes += size;
                }
                let tc = self.thread_counts(thread);
                tc.allocs += u64::from(allocates);
                tc.frees += u64::from(frees);
            }
            Event::Free { .. } => self.thread_counts(thread).frees += 1,
            Event::FuncEnter { .. } => self.thread_counts(thread).calls += 1,
            _ => {
                // every thread that produced an event has a row
                self.thread_counts(thread);
            }
        }
    }
}

fn add_thread_counts(m: &mut ThreadCounts, c: &ThreadCounts) {
    crate::add_fields!(m, c; loads, stores, bytes_read, bytes_written, allocs, frees, calls);
}

impl Kernel for Counts {
    type Output = Counts;

    #[inline]
    fn process(&mut self, thread: ThreadId, ev: &Event) {
        self.one(thread, ev);
    }

    fn process_batch(&mut self, thread: ThreadId, evs: &[Event]) {
        for ev in evs {
            self.one(thread, ev);
        }
    }

    fn finish(mut self) -> Counts {
        self.flush();
        self
    }
}

impl ShardKernel for Counts {
    fn fork(&self) -> Self {
        Counts::default()
    }

    fn merge(&mut self, mut o: Self) {
        self.flush();
        o.flush();
        for (pc, c) in o.by_pc {
            self.by_pc.entry(pc).or_default().merge(&c);
        }
        for (pc, a) in o.allocs {
            let m = self.allocs.entry(pc).or_default();
            m.count += a.count;
            m.bytes += a.bytes;
        }
        for (t, c) in o.by_thread {
            add_thread_counts(self.by_thread.entry(t).or_default(), &c);
        }
    }
}

impl crate::ChunkKernel for Counts {}

impl crate::table::Render for Counts {
    /// Sections `by_line` (accesses per function/file/line, most first), `allocs`
    /// (per call site) and `by_thread`.
    fn render(
        &self,
        namer: &dyn crate::names::Namer,
        opts: &crate::table::RenderOpts,
    ) -> crate::table::Table {
        use crate::table::{Column, Section, Table};
        let mut lines: HashMap<crate::names::CodeName, PcCounts> = HashMap::new();
        for (pc, c) in &self.by_pc {
            lines.entry(namer.code(*pc)).or_default().merge(c);
        }
        let mut lines: Vec<_> =
            lines.into_iter().filter(|(_, c)| c.loads + c.stores >= opts.min_count).collect();
        lines.sort_by(|a, b| (b.1.loads + b.1.stores, &a.0).cmp(&(a.1.loads + a.1.stores, &b.0)));
        opts.cut(&mut lines);
        let mut by_line = Section::new(
            "by_line",
            "Accesses by source line",
            vec![
                Column::text("location", "location"),
                Column::text("function", "function"),
                Column::num("loads", "loads"),
                Column::num("stores", "stores"),
                Column::num("bytes_read", "bytes read"),
                Column::num("bytes_written", "bytes written"),
                Column::num("threads", "threads"),
            ],
        );
        for (c, n) in &lines {
            by_line.rows.push(row! {
                "function" => c.function, "file" => c.file, "line" => c.line, "location" => c.location(),
                "loads" => n.loads, "stores" => n.stores,
                "bytes_read" => n.bytes_read, "bytes_written" => n.bytes_written,
                "threads" => n.threads.len(),
            });
        }
        let mut allocs: Vec<_> = self.allocs.iter().collect();
        allocs.sort_by(|a, b| (b.1.bytes, a.0).cmp(&(a.1.bytes, b.0)));
        opts.cut(&mut allocs);
        let mut al = Section::new(
            "allocs",
            "Allocations by call site",
            vec![
                Column::text("location", "call site"),
                Column::num("blocks", "blocks"),
                Column::num("bytes", "bytes"),
            ],
        );
        for (pc, a) in allocs {
            let c = namer.code(*pc);
            al.rows.push(row! {
                "function" => c.function, "file" => c.file, "line" => c.line, "location" => c.location(),
                "blocks" => a.count, "bytes" => a.bytes,
            });
        }
        let mut threads: Vec<_> = self.by_thread.iter().collect();
        threads.sort_by_key(|(t, _)| **t);
        let mut th = Section::new(
            "by_thread",
            "By thread",
            vec![
                Column::num("thread", "thread"),
                Column::num("loads", "loads"),
                Column::num("stores", "stores"),
                Column::num("allocs", "allocs"),
                Column::num("frees", "frees"),
                Column::num("calls", "calls"),
            ],
        );
        for (t, c) in threads {
            th.rows.push(row! {
                "thread" => t.0, "loads" => c.loads, "stores" => c.stores, "bytes_read" => c.bytes_read,
                "bytes_written" => c.bytes_written, "allocs" => c.allocs, "frees" => c.frees, "calls" => c.calls,
            });
        }
        Table { sections: vec![by_line, al, th] }
    }
}
