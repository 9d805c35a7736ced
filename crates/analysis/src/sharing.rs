//! Shared data: addresses and variables touched by several threads (DINAMITE's
//! shared-variable analysis).
//!
//! Counts accesses per data address and thread (a range access counts once per
//! 8-byte word it covers), with reads, writes and the code addresses involved. Rendering
//! rolls addresses up per variable through the [`Namer`], keeps what at least two
//! threads touched, ranks by accesses and flags *uniform* sharing: with the per-thread
//! counts `A` sorted in descending order, `A[0] < 2 * A[1]` (no thread dominates).
//! With [`Sharing::with_variables`] each access is also counted under the variable
//! it was named after when it happened ([`crate::Named`]), per address: a variable
//! is shared when the same bytes of it were touched by two threads (not two blocks
//! from one allocation site, nor the same local in two threads' stacks), and its
//! row counts every access to it, as `report --by variable` does.
//! JSON rows use the common vocabulary (docs/output.md): `threads` (how many),
//! `accesses`, `loads`, `stores`, `per_thread` (`[[thread, accesses], ...]`), with
//! DINAMITE's `threadcount` and `totalcount` kept beside them as aliases.

use crate::fxhash::FxHashMap;
use crate::names::{CodeName, CurrentVariable, Namer};
use crate::table::{Column, Render, RenderOpts, Section, Table};
use crate::{for_each_touch, Kernel, ShardKernel};
use memlens_format::{Addr, Event, Pc, ThreadId};
use serde_json::json;
use std::collections::HashMap;

/// Accesses to one address (or one variable after roll-up).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SharedData {
    /// Accesses per thread, sorted by thread.
    pub threads: Vec<(ThreadId, u64)>,
    /// Loads.
    pub reads: u64,
    /// Stores.
    pub writes: u64,
    /// Accesses per code address.
    pub pcs: Vec<(Pc, u64)>,
}

impl SharedData {
    /// All accesses.
    pub fn total(&self) -> u64 {
        self.reads + self.writes
    }

    /// Number of threads.
    pub fn thread_count(&self) -> usize {
        self.threads.len()
    }

    /// Whether no thread dominates: sorted counts `A[0] < 2 * A[1]`.
    pub fn uniform(&self) -> bool {
        let mut a: Vec<u64> = self.threads.iter().map(|t| t.1).collect();
        a.sort_unstable_by(|x, y| y.cmp(x));
        a.len() >= 2 && a[0] < 2 * a[1]
    }

    /// Adds another record.
    pub fn merge(&mut self, o: &SharedData) {
        for &(t, n) in &o.threads {
            match self.threads.binary_search_by_key(&t, |x| x.0) {
                Ok(i) => self.threads[i].1 += n,
                Err(i) => self.threads.insert(i, (t, n)),
            }
        }
        for &(pc, n) in &o.pcs {
            match self.pcs.iter_mut().find(|x| x.0 == pc) {
                Some(p) => p.1 += n,
                None => self.pcs.push((pc, n)),
            }
        }
        self.reads += o.reads;
        self.writes += o.writes;
    }
}

/// One key's sums while counting, in 56 bytes with its key (a threaded trace has
/// millions): the first thread and code address inline, their counts what the others
/// leave of the total (most addresses see one of each), the others boxed.
#[derive(Clone, Debug, Default)]
struct Acc {
    thread: ThreadId,
    pc: Pc,
    reads: u64,
    writes: u64,
    more: Option<Box<More>>,
}

/// Threads and code addresses after a key's first: (thread or pc, count) in first-seen
/// order.
#[derive(Clone, Debug, Default)]
struct More {
    threads: Vec<(ThreadId, u64)>,
    pcs: Vec<(Pc, u64)>,
}

/// Adds `n` to `k`'s count in `v`.
fn bump<K: PartialEq>(v: &mut Vec<(K, u64)>, k: K, n: u64) {
    match v.iter_mut().find(|x| x.0 == k) {
        Some(x) => x.1 += n,
        None => v.push((k, n)),
    }
}

impl Acc {
    #[inline]
    fn add(&mut self, t: ThreadId, pc: Pc, write: bool, n: u64) {
        if self.reads + self.writes == 0 {
            self.thread = t;
            self.pc = pc;
        } else if t != self.thread || pc != self.pc {
            let m = self.more.get_or_insert_with(Box::default);
            if t != self.thread {
                bump(&mut m.threads, t, n);
            }
            if pc != self.pc {
                bump(&mut m.pcs, pc, n);
            }
        }
        if write {
            self.writes += n;
        } else {
            self.reads += n;
        }
    }

    /// The sums as [`SharedData`]: every thread's count, sorted by thread, and every
    /// code address's, first seen first.
    fn data(&self) -> SharedData {
        fn with_first<K: Copy>(first: K, total: u64, more: &[(K, u64)]) -> Vec<(K, u64)> {
            let rest = total - more.iter().map(|x| x.1).sum::<u64>();
            std::iter::once((first, rest)).chain(more.iter().copied()).collect()
        }
        let total = self.reads + self.writes;
        if total == 0 {
            return SharedData::default();
        }
        let (more_t, more_pc) = match self.more.as_deref() {
            Some(m) => (&m.threads[..], &m.pcs[..]),
            None => (&[][..], &[][..]),
        };
        let mut threads = with_first(self.thread, total, more_t);
        threads.sort_unstable_by_key(|x| x.0);
        let pcs = with_first(self.pc, total, more_pc);
        SharedData { threads, pcs, reads: self.reads, writes: self.writes }
    }

    fn merge(&mut self, o: &Acc) {
        if self.reads + self.writes == 0 {
            *self = o.clone();
            return;
        }
        let SharedData { threads, pcs, .. } = o.data();
        for (t, n) in threads.into_iter().filter(|x| x.0 != self.thread) {
            bump(&mut self.more.get_or_insert_with(Box::default).threads, t, n);
        }
        for (pc, n) in pcs.into_iter().filter(|x| x.0 != self.pc) {
            bump(&mut self.more.get_or_insert_with(Box::default).pcs, pc, n);
        }
        self.reads += o.reads;
        self.writes += o.writes;
    }
}

/// A key's sums and the next key of its 4-byte word (1-based, 0 = none).
#[derive(Clone, Debug)]
struct Entry {
    addr: u64,
    tag: u32,
    next: u32,
    acc: Acc,
}

/// Entries per block of [`Store::entries`] (blocks, not one vector: growing a vector
/// of millions copies it and holds both copies at once).
const BLOCK: usize = 1 << 12;

/// Sums keyed by (address, tag), indexed per 64-byte line: a line's 16 words each
/// point at their first key, keys are stored in first-touch order, and the last line
/// is remembered. A sweep then finds its line once per line and its keys next to
/// each other; a hash map of addresses sent every access to a random bucket (the
/// sharing table was half of a threaded trace's index build).
#[derive(Clone, Debug, Default)]
struct Store {
    lines: FxHashMap<u64, u32>,
    words: Vec<[u32; 16]>,
    entries: Vec<Vec<Entry>>,
    len: u32,
    /// The last line looked up and its index in `words`, plus one (0 = none yet).
    last: (u64, u32),
}

impl Store {
    #[inline]
    fn entry(&mut self, at: u32) -> &mut Entry {
        let i = at as usize - 1;
        &mut self.entries[i / BLOCK][i % BLOCK]
    }

    #[inline]
    fn get(&mut self, addr: u64, tag: u32) -> &mut Acc {
        let line = addr >> 6;
        let li = if self.last.1 != 0 && self.last.0 == line {
            self.last.1 - 1
        } else {
            let n = self.words.len() as u32;
            let li = *self.lines.entry(line).or_insert(n);
            if li == n {
                self.words.push([0; 16]);
            }
            self.last = (line, li + 1);
            li
        } as usize;
        let w = ((addr >> 2) & 15) as usize;
        let head = self.words[li][w];
        let mut at = head;
        while at != 0 {
            let e = self.entry(at);
            if e.addr == addr && e.tag == tag {
                return &mut self.entry(at).acc;
            }
            at = e.next;
        }
        if (self.len as usize).is_multiple_of(BLOCK) {
            self.entries.push(Vec::with_capacity(BLOCK));
        }
        self.entries.last_mut().expect("a block").push(Entry {
            addr,
            tag,
            next: head,
            acc: Acc::default(),
        });
        self.len += 1;
        self.words[li][w] = self.len;
        &mut self.entries.last_mut().expect("a block").last_mut().expect("an entry").acc
    }

    fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().flatten()
    }

    /// The entries, each block freed once read (the report they become is as big).
    fn into_entries(self) -> impl Iterator<Item = Entry> {
        self.entries.into_iter().flatten()
    }

    fn merge(&mut self, o: &Store) {
        for e in o.iter() {
            self.get(e.addr, e.tag).merge(&e.acc);
        }
    }
}

/// The sharing kernel. Order-independent, so it shards per thread.
#[derive(Clone, Debug, Default)]
pub struct Sharing {
    /// Per address (tag 0).
    by_addr: Store,
    vars: Option<CurrentVariable>,
    /// Per (address, variable id), when `vars` is set.
    by_var: Store,
}

/// What [`Sharing`] produces: every address, shared or not (rendering filters).
#[derive(Clone, Debug, Default)]
pub struct SharingReport {
    /// Accesses by address.
    pub by_addr: HashMap<Addr, SharedData>,
    /// Accesses by (variable id, address) when accesses were named
    /// ([`Sharing::with_variables`]): one per access touch, as `report` counts.
    pub by_variable_addr: HashMap<(u32, Addr), SharedData>,
    /// The variable of each id ([`SharingReport::set_variables`]).
    pub variables: Option<Vec<String>>,
}

impl Kernel for Sharing {
    type Output = SharingReport;

    fn process(&mut self, thread: ThreadId, ev: &Event) {
        let id = self.vars.as_ref().map(CurrentVariable::get);
        self.add(thread, ev, id);
    }

    /// Each access of the run, with its body event's variable.
    fn process_run(&mut self, thread: ThreadId, body: &[Event], deltas: &[u64], reps: u64) {
        let ids = self.vars.as_ref().map(|c| c.run().clone());
        crate::expand_run(body, deltas, reps, |evs| {
            for (j, ev) in evs.iter().enumerate() {
                let id = match &ids {
                    Some(ids) if !ids.is_empty() => Some(ids[j % ids.len()]),
                    Some(_) => self.vars.as_ref().map(CurrentVariable::get),
                    None => None,
                };
                self.add(thread, ev, id);
            }
        });
    }

    fn named_runs(&self) -> bool {
        true
    }

    fn finish(self) -> SharingReport {
        // sized up front: growing a map of millions holds two tables at once
        let mut by_addr = HashMap::with_capacity(self.by_addr.len as usize);
        by_addr.extend(self.by_addr.into_entries().map(|e| (Addr(e.addr), e.acc.data())));
        let mut by_variable_addr = HashMap::with_capacity(self.by_var.len as usize);
        by_variable_addr
            .extend(self.by_var.into_entries().map(|e| ((e.tag, Addr(e.addr)), e.acc.data())));
        SharingReport { by_addr, by_variable_addr, variables: None }
    }
}

impl Sharing {
    /// Counts one event, by the variable `id` too (when counting by variables).
    fn add(&mut self, thread: ThreadId, ev: &Event, id: Option<u32>) {
        let map = &mut self.by_addr;
        for_each_touch(ev, |t| {
            if matches!(ev, Event::Range { .. }) {
                let mut w = t.addr & !7;
                while w < t.addr.saturating_add(t.len) {
                    map.get(w, 0).add(thread, t.pc, t.write, 1);
                    w += 8;
                }
            } else {
                map.get(t.addr, 0).add(thread, t.pc, t.write, 1);
            }
        });
        if let Some(id) = id {
            let by_var = &mut self.by_var;
            for_each_touch(ev, |t| {
                by_var.get(t.addr, id).add(thread, t.pc, t.write, 1);
            });
        }
    }

    /// Counts accesses by the variable of each access too, read from `current`
    /// (see [`crate::Named`]).
    pub fn with_variables(current: CurrentVariable) -> Sharing {
        Sharing { vars: Some(current), ..Sharing::default() }
    }
}

impl ShardKernel for Sharing {
    fn fork(&self) -> Sharing {
        Sharing { vars: self.vars.clone(), ..Sharing::default() }
    }

    fn merge(&mut self, o: Sharing) {
        self.by_addr.merge(&o.by_addr);
        self.by_var.merge(&o.by_var);
    }
}

/// Per-address, per-thread sums: any chunk order gives the same report (the order
/// of `pcs` differs, but rendering folds them into lines sorted by count and name).
impl crate::ChunkKernel for Sharing {}

impl SharingReport {
    /// Addresses touched by at least two threads, most accessed first.
    pub fn shared(&self) -> Vec<(Addr, &SharedData)> {
        let mut v: Vec<(Addr, &SharedData)> = self
            .by_addr
            .iter()
            .filter(|(_, d)| d.thread_count() >= 2)
            .map(|(a, d)| (*a, d))
            .collect();
        v.sort_by(|a, b| (b.1.total(), a.0).cmp(&(a.1.total(), b.0)));
        v
    }

    /// Names the variable ids of `by_variable_addr` (what [`crate::Named`]
    /// finished with): `by_variable` then uses them.
    pub fn set_variables(&mut self, names: Vec<String>) {
        self.variables = Some(names);
    }

    /// Rolls addresses up per variable, keeping those touched by two threads or more,
    /// most accessed first. With named accesses: the variables some bytes of which
    /// two threads touched, with all their accesses; else the namer's variable of
    /// each address.
    pub fn by_variable(&self, namer: &dyn Namer) -> Vec<(String, SharedData)> {
        let mut v: Vec<(String, SharedData)> = if let Some(names) = &self.variables {
            let mut m: HashMap<&str, (SharedData, bool)> = HashMap::new();
            for ((id, _), d) in &self.by_variable_addr {
                let name = names.get(*id as usize).map_or("[unknown]", |n| n.as_str());
                let e = m.entry(name).or_default();
                e.0.merge(d);
                e.1 |= d.thread_count() >= 2;
            }
            m.into_iter()
                .filter(|(_, (_, shared))| *shared)
                .map(|(n, (d, _))| (n.to_string(), d))
                .collect()
        } else {
            let mut m: HashMap<String, SharedData> = HashMap::new();
            for (a, d) in &self.by_addr {
                m.entry(crate::names::variable_of(namer, *a)).or_default().merge(d);
            }
            m.into_iter().filter(|(_, d)| d.thread_count() >= 2).collect()
        };
        v.sort_by(|a, b| (b.1.total(), &a.0).cmp(&(a.1.total(), &b.0)));
        v
    }
}

fn dinamite_row(namer: &dyn Namer, variable: &str, d: &SharedData) -> crate::table::Row {
    let mut lines: HashMap<CodeName, u64> = HashMap::new();
    for &(pc, n) in &d.pcs {
        *lines.entry(namer.code(pc)).or_default() += n;
    }
    let mut lines: Vec<(CodeName, u64)> = lines.into_iter().collect();
    lines.sort_by(|a, b| (b.1, &a.0).cmp(&(a.1, &b.0)));
    let top = lines.first().map(|l| l.0.clone()).unwrap_or_default();
    let mut threads: Vec<(ThreadId, u64)> = d.threads.clone();
    threads.sort_by(|a, b| (b.1, a.0).cmp(&(a.1, b.0)));
    row! {
        "variable" => variable,
        "threads" => d.thread_count(),
        "accesses" => d.total(),
        // DINAMITE's names of the two above
        "threadcount" => d.thread_count(),
        "totalcount" => d.total(),
        "per_thread" => threads.iter().map(|(t, n)| json!([t.0, n])).collect::<Vec<_>>(),
        "uniform" => d.uniform(),
        "loads" => d.reads,
        "stores" => d.writes,
        "file" => top.file,
        "line" => top.line,
        "function" => top.function,
        "location" => top.location(),
        "lines" => lines.iter().map(|(c, n)| json!({
            "file": c.file, "line": c.line, "function": c.function, "accesses": n,
        })).collect::<Vec<_>>(),
    }
}

impl Render for SharingReport {
    /// Sections `by_variable` (roll-up) and `by_address`, both keeping data touched
    /// by two threads or more, ranked by accesses; `top` and `min_count` apply.
    fn render(&self, namer: &dyn Namer, opts: &RenderOpts) -> Table {
        let cols = |first: Column| {
            vec![
                first,
                Column::num("threads", "threads"),
                Column::num("accesses", "accesses"),
                Column::num("loads", "loads"),
                Column::num("stores", "stores"),
                Column::text("uniform", "uniform"),
                Column::text("location", "top line"),
            ]
        };
        let mut vars = self.by_variable(namer);
        vars.retain(|(_, d)| d.total() >= opts.min_count);
        opts.cut(&mut vars);
        let mut by_var = Section::new(
            "by_variable",
            "Shared variables",
            cols(Column::text("variable", "variable")),
        );
        for (v, d) in &vars {
            by_var.rows.push(dinamite_row(namer, v, d));
        }
        let mut addrs = self.shared();
        addrs.retain(|(_, d)| d.total() >= opts.min_count);
        opts.cut(&mut addrs);
        let mut by_addr = Section::new(
            "by_address",
            "Shared addresses",
            cols(Column::text("addr", "address"))
                .into_iter()
                .chain([Column::text("variable", "variable")])
                .collect(),
        );
        for (a, d) in &addrs {
            let mut r = dinamite_row(namer, &crate::names::name_of(namer, *a), d);
            r.insert("addr".into(), json!(format!("{a}")));
            by_addr.rows.push(r);
        }
        Table { sections: vec![by_var, by_addr] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::DataName;
    use crate::testutil::*;
    use crate::{drive_parallel, drive_serial};

    struct Vars;
    impl Namer for Vars {
        fn code(&self, pc: Pc) -> CodeName {
            CodeName { function: "work".into(), file: "s.c".into(), line: pc.0 as u32 }
        }
        fn data(&self, a: Addr) -> Option<DataName> {
            match a.0 {
                0x1000..=0x103f => Some(DataName {
                    name: format!("stats.v[{}]", (a.0 - 0x1000) / 8),
                    variable: "stats".into(),
                }),
                0x2000..=0x2007 => {
                    Some(DataName { name: "counter".into(), variable: "counter".into() })
                }
                _ => None,
            }
        }
    }

    #[test]
    fn shared_variables_dinamite_rows() {
        // three threads hit stats.v[tid] (100, 90, 80 times) and counter (t0 10x,
        // t1 once); private data at 0x9000 + tid
        let mut streams = Vec::new();
        for (t, n) in [(0u32, 100u64), (1, 90), (2, 80)] {
            let mut evs = Vec::new();
            for i in 0..n {
                evs.push(if i % 2 == 0 {
                    rd(10, 0x1000 + 8 * u64::from(t), 8)
                } else {
                    wr(11, 0x1000 + 8 * u64::from(t), 8)
                });
            }
            let c = match t {
                0 => 10,
                1 => 1,
                _ => 0,
            };
            for _ in 0..c {
                evs.push(rmw(20, 0x2000, 8));
            }
            evs.push(wr(30, 0x9000 + 64 * u64::from(t), 8));
            streams.push((t, evs));
        }
        let r = trace(&streams);
        let rep = drive_serial(&r, Sharing::default(), |_| {}).unwrap();
        // per address: stats.v[i] each private, counter shared by t0 and t1
        let shared = rep.shared();
        assert_eq!(shared.len(), 1);
        assert_eq!(shared[0].0, Addr(0x2000));
        assert_eq!(shared[0].1.threads, [(ThreadId(0), 20), (ThreadId(1), 2)]);
        assert!(!shared[0].1.uniform());
        // per variable: stats is shared by three threads, uniformly
        let t = rep.render(&Vars, &RenderOpts::default());
        let j = t.to_json();
        let v = &j["by_variable"][0];
        assert_eq!(v["variable"], "stats");
        assert_eq!((v["threads"].as_u64(), v["threadcount"].as_u64()), (Some(3), Some(3)));
        assert_eq!((v["accesses"].as_u64(), v["totalcount"].as_u64()), (Some(270), Some(270)));
        assert_eq!(v["per_thread"], json!([[0, 100], [1, 90], [2, 80]]));
        assert_eq!(v["uniform"], true);
        assert_eq!((v["loads"].as_u64(), v["stores"].as_u64()), (Some(135), Some(135)));
        assert_eq!(v["file"], "s.c");
        assert_eq!(v["lines"].as_array().unwrap().len(), 2);
        let c = &j["by_variable"][1];
        assert_eq!(
            (c["variable"].as_str(), c["accesses"].as_u64(), c["uniform"].as_bool()),
            (Some("counter"), Some(22), Some(false))
        );
        assert_eq!(c["line"], 20);
        assert_eq!(j["by_variable"].as_array().unwrap().len(), 2);
        assert_eq!(j["by_address"][0]["variable"], "counter");
        // shards merge to the same answer
        let par = drive_parallel(&r, Sharing::default(), 2).unwrap();
        assert_eq!(par.by_addr, rep.by_addr);
    }

    #[test]
    fn sums_match_a_plain_count() {
        // 4 threads, 6 code addresses, addresses packed into few lines (unaligned ones and
        // several in one word) and some far apart: every path of the store
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // per address: accesses per thread, per code address, loads, stores
        type Sums = (Vec<(ThreadId, u64)>, HashMap<Pc, u64>, u64, u64);
        let mut want: HashMap<Addr, Sums> = HashMap::new();
        let mut streams = Vec::new();
        for t in 0..4u32 {
            let mut evs = Vec::new();
            for _ in 0..3000 {
                let r = next();
                let addr = match r % 4 {
                    0 => 0x1000 + r % 40,
                    1 => 0x1000 + (r >> 8) % 4096,
                    2 => 0x7fff_0000_0000 + ((r >> 8) % 64) * 4096,
                    _ => 0x2000 + u64::from(t) * 8,
                };
                let pc = 10 + (r >> 20) % 6;
                let write = (r >> 30) % 3 == 0;
                evs.push(if write { wr(pc, addr, 4) } else { rd(pc, addr, 4) });
                let w = want.entry(Addr(addr)).or_default();
                match w.0.iter_mut().find(|e| e.0 == ThreadId(t)) {
                    Some(e) => e.1 += 1,
                    None => w.0.push((ThreadId(t), 1)),
                }
                *w.1.entry(Pc(pc)).or_default() += 1;
                if write {
                    w.3 += 1;
                } else {
                    w.2 += 1;
                }
            }
            streams.push((t, evs));
        }
        let r = trace(&streams);
        let serial = drive_serial(&r, Sharing::default(), |_| {}).unwrap();
        let par = drive_parallel(&r, Sharing::default(), 3).unwrap();
        for rep in [&serial, &par] {
            assert_eq!(rep.by_addr.len(), want.len());
            for (a, (threads, pcs, reads, writes)) in &want {
                let got = &rep.by_addr[a];
                let mut threads = threads.clone();
                threads.sort();
                assert_eq!(got.threads, threads, "{a}");
                let got_pcs: HashMap<Pc, u64> = got.pcs.iter().copied().collect();
                assert_eq!((&got_pcs, got.pcs.len()), (pcs, pcs.len()), "{a}");
                assert_eq!((got.reads, got.writes), (*reads, *writes), "{a}");
            }
        }
    }

    #[test]
    fn ranges_count_per_word() {
        let r = trace(&[(0, vec![range_wr(1, 0x1004, 12)]), (1, vec![rd(2, 0x1008, 4)])]);
        let rep = drive_serial(&r, Sharing::default(), |_| {}).unwrap();
        assert_eq!(rep.by_addr.len(), 2);
        assert_eq!(rep.shared()[0].0, Addr(0x1008));
    }
}
