//! Access counts per code address and thread, and allocations per call site.

use crate::{Kernel, ShardKernel};
use memlens_format::{Event, Pc, ThreadId};
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
        self.loads += o.loads;
        self.stores += o.stores;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
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
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Memory accesses by code address.
    pub by_pc: HashMap<Pc, PcCounts>,
    /// Allocations by call site.
    pub allocs: HashMap<Pc, AllocCounts>,
    /// Totals by thread.
    pub by_thread: HashMap<ThreadId, ThreadCounts>,
    // the last pc seen, to skip the hash lookup in straight-line repeats
    last: Option<(Pc, ThreadId)>,
    last_counts: PcCounts,
}

impl Counts {
    fn flush_last(&mut self) {
        if let Some((pc, t)) = self.last.take() {
            let c = self.by_pc.entry(pc).or_default();
            c.merge(&std::mem::take(&mut self.last_counts));
            c.add_thread(t);
        }
    }
}

impl Kernel for Counts {
    type Output = Counts;

    fn process(&mut self, thread: ThreadId, ev: &Event) {
        let tc = self.by_thread.entry(thread).or_default();
        match ev {
            Event::Access { pc, .. } | Event::Range { pc, .. } | Event::Rmw { pc, .. } => {
                let (l, s) = ev.loads_stores();
                let (br, bw) = ev.bytes_read_written();
                tc.loads += l;
                tc.stores += s;
                tc.bytes_read += br;
                tc.bytes_written += bw;
                if self.last != Some((*pc, thread)) {
                    self.flush_last();
                    self.last = Some((*pc, thread));
                }
                let c = &mut self.last_counts;
                c.loads += l;
                c.stores += s;
                c.bytes_read += br;
                c.bytes_written += bw;
            }
            Event::Alloc { pc, size, .. } | Event::Realloc { pc, size, .. } => {
                let a = self.allocs.entry(*pc).or_default();
                a.count += 1;
                a.bytes += size;
                tc.allocs += 1;
                if matches!(ev, Event::Realloc { .. }) {
                    tc.frees += 1;
                }
            }
            Event::Free { .. } => tc.frees += 1,
            Event::FuncEnter { .. } => tc.calls += 1,
            _ => {}
        }
    }

    fn finish(mut self) -> Counts {
        self.flush_last();
        self
    }
}

impl ShardKernel for Counts {
    fn fork(&self) -> Self {
        Counts::default()
    }

    fn merge(&mut self, mut o: Self) {
        self.flush_last();
        o.flush_last();
        for (pc, c) in o.by_pc {
            self.by_pc.entry(pc).or_default().merge(&c);
        }
        for (pc, a) in o.allocs {
            let m = self.allocs.entry(pc).or_default();
            m.count += a.count;
            m.bytes += a.bytes;
        }
        for (t, c) in o.by_thread {
            let m = self.by_thread.entry(t).or_default();
            m.loads += c.loads;
            m.stores += c.stores;
            m.bytes_read += c.bytes_read;
            m.bytes_written += c.bytes_written;
            m.allocs += c.allocs;
            m.frees += c.frees;
            m.calls += c.calls;
        }
    }
}

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
                Column::num("count", "blocks"),
                Column::num("bytes", "bytes"),
            ],
        );
        for (pc, a) in allocs {
            let c = namer.code(*pc);
            al.rows.push(row! {
                "function" => c.function, "file" => c.file, "line" => c.line, "location" => c.location(),
                "count" => a.count, "bytes" => a.bytes,
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
