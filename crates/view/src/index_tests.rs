//! Tests of the index builder.

use super::*;
use crate::emit::KEY_MIN;
use crate::TileQuery;
use memlens_analysis::NoNames;
use memlens_format::{Addr, EventBuffer, TraceWriter};

pub(crate) fn trace_of(name: &str, addrs: &[u64]) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("view-{name}-{}.trace", std::process::id()));
    let mut w = TraceWriter::new(File::create(&path).unwrap(), 1, 1).unwrap();
    let mut buf = EventBuffer::new();
    buf.push(&Event::FuncEnter { pc: Pc(0x100), call_site: Pc(0), frame: Addr(0) });
    for &a in addrs {
        buf.push(&Event::Access {
            pc: Pc(0x10),
            addr: Addr(a),
            size: 8,
            kind: AccessKind::Read,
            atomic: false,
            value: None,
        });
    }
    buf.push(&Event::FuncExit { pc: Pc(0x100) });
    w.write_events(0, &mut buf, true).unwrap();
    w.finish(|_| {}).unwrap();
    path
}

#[test]
fn lines_enter_in_address_order_and_leave_when_their_age_runs_out() {
    // Ten lines touched once each, backwards, then line 9 again: with an age of 4,
    // at most 4 lines live at once; the first line in time is the last row.
    let addrs: Vec<u64> = (0..10).rev().map(|i| 0x1000 + 64 * i).chain([0x1000 + 64 * 9]).collect();
    let path = trace_of("ws", &addrs);
    let dir = crate::index_dir(&path);
    let r = TraceReader::open(&path).unwrap();
    let opts = BuildOptions { max_age: 4, ..BuildOptions::default() };
    let meta = crate::build(&r, &path, &dir, &NoNames, opts, &mut |_, _| {}).unwrap();
    assert_eq!(meta["ops"], 11);
    assert_eq!(meta["distinct_lines"], 10);
    assert_eq!(meta["max_rows"], 4);
    let ix = crate::Index::open(&dir).unwrap();
    assert_eq!(ix.bucket_size(0), Some(1));
    let tiles = ix.tiles(&TileQuery::all(0, 0..11)).unwrap();
    let rows = |b: usize| -> Vec<(u64, u32, bool)> {
        tiles[b]
            .1
            .chunks_exact(crate::CELL_BYTES)
            .map(|c| {
                let a = u64::from_le_bytes(c[0..8].try_into().unwrap());
                (a, u32::from_le_bytes(c[16..20].try_into().unwrap()), c[27] & 1 == 1)
            })
            .collect()
    };
    // After op 3: lines 9, 8, 7, 6 live, in address order; 6 was just touched.
    let l = |i: u64| 0x1000 + 64 * i;
    assert_eq!(rows(3), [(l(6), 0, true), (l(7), 1, false), (l(8), 2, false), (l(9), 3, false)]);
    // Op 4 brings line 5: line 9 (untouched for 4 entries) leaves, 5 enters on top.
    assert_eq!(rows(4), [(l(5), 0, true), (l(6), 1, false), (l(7), 2, false), (l(8), 3, false)]);
    // Op 10 touches line 9 again: it re-enters below 0..2.
    let last = rows(10);
    assert_eq!(last.len(), 4);
    assert_eq!(last[3], (l(9), 3, true));
    // One frame covering all 11 operations.
    assert_eq!(ix.spans(0, 11, 0, 10).unwrap().len(), 1);
    assert_eq!(ix.spans(0, 11, 0, 10).unwrap()[0].end, 11);
    // Window sums: operations 3..7 are 4 loads of 8 bytes by the one code address,
    // at every level that answers.
    for max in [u64::MAX, 4] {
        let (_, w) = ix.window(3, 7, max).unwrap().unwrap();
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].1.loads, w[0].1.stores, w[0].1.bytes), (4, 0, 32));
    }
    let (_, w) = ix.window(0, 11, u64::MAX).unwrap().unwrap();
    assert_eq!(w[0].1.loads, 11);
    // The drawing columns: bucket 4's rows and flags as in the raw cells.
    let soa =
        ix.tiles_soa_parts(&TileQuery::all(0, 4..5), crate::TileFields::Draw).unwrap().concat();
    let u = |k: usize| u32::from_le_bytes(soa[k * 4..k * 4 + 4].try_into().unwrap());
    assert_eq!((u(0), u(1), u(2), u(3)), (1, 4, 0, 4), "1 bucket (4) of 4 cells");
    assert_eq!([u(4), u(5), u(6), u(7)], [0, 1, 2, 3], "rows");
    // Ranks in address order: lines 5, 6, 7, 8 of 0..=9.
    assert_eq!([u(8), u(9), u(10), u(11)], [5, 6, 7, 8], "ranks");
    assert_eq!(soa[48 + 8..48 + 12], [1, 0, 0, 0], "flags: line 5 touched");
    // Every variable's totals for the diff (unnamed here: one row), as in the table.
    let vars = crate::vars::read_all(&dir).unwrap();
    assert_eq!(vars, meta["tables"]["variables"].as_array().unwrap()[..]);
    assert_eq!(
        vars[0],
        serde_json::json!({"variable": "(unnamed)", "loads": 11, "stores": 0, "cache_lines": 10, "threads": 1})
    );
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&path).unwrap();
}

/// Within a size budget the finest levels are left out, the coarser ones renumbered
/// from 0 and served as in the full index; the coarsest always stays.
#[test]
fn a_size_budget_leaves_out_the_finest_levels() {
    let addrs: Vec<u64> = (0..300_000u64).map(|i| 0x100000 + 64 * ((i * 7919) % 9000)).collect();
    let path = trace_of("budget", &addrs);
    let r = TraceReader::open(&path).unwrap();
    let full_dir = crate::index_dir(&path);
    let full =
        crate::build(&r, &path, &full_dir, &NoNames, BuildOptions::default(), &mut |_, _| {})
            .unwrap();
    let nl = full["levels"].as_array().unwrap().len();
    let small_dir = path.with_extension("small.mlview");
    let opts = BuildOptions { max_bytes: Some(600_000), ..BuildOptions::default() };
    let small = crate::build(&r, &path, &small_dir, &NoNames, opts, &mut |_, _| {}).unwrap();
    let size: u64 =
        std::fs::read_dir(&small_dir).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
    let kept = small["levels"].as_array().unwrap().len();
    assert!(kept < nl && kept >= 1, "{kept} of {nl} levels");
    assert!(size <= 600_000, "{size} B");
    let (a, b) = (crate::Index::open(&full_dir).unwrap(), crate::Index::open(&small_dir).unwrap());
    for l in 0..kept {
        let lf = l + nl - kept;
        assert_eq!(small["levels"][l]["bucket"], full["levels"][lf]["bucket"]);
        let n = small["levels"][l]["buckets"].as_u64().unwrap();
        assert_eq!(
            b.tiles(&TileQuery::all(l, 0..n)).unwrap(),
            a.tiles(&TileQuery::all(lf, 0..n)).unwrap()
        );
    }
    // The other files of the left-out levels are gone.
    assert!(!small_dir.join(format!("cells{kept}.bin")).exists());
    std::fs::remove_dir_all(&full_dir).unwrap();
    std::fs::remove_dir_all(&small_dir).unwrap();
    std::fs::remove_file(&path).unwrap();
}

/// A trace without memory operations still gives an index that opens and answers.
#[test]
fn a_trace_without_accesses_opens() {
    let path = trace_of("empty", &[]);
    let dir = crate::index_dir(&path);
    let r = TraceReader::open(&path).unwrap();
    let meta =
        crate::build(&r, &path, &dir, &NoNames, BuildOptions::default(), &mut |_, _| {}).unwrap();
    assert_eq!(meta["ops"], 0);
    let ix = crate::Index::open(&dir).unwrap();
    assert!(ix.tiles(&TileQuery::all(0, 0..10)).unwrap().is_empty());
    assert_eq!(ix.cell_count(0, 0, 10).unwrap(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&path).unwrap();
}

/// The sharing tables list only data two threads touched: a one-thread trace's are
/// empty, so the builder skipping their kernels ([`Gate`]) leaves them unchanged.
#[test]
fn skipping_the_sharing_kernels_of_a_one_thread_trace_changes_no_table() {
    let addrs: Vec<u64> = (0..5000u64).map(|i| 0x4000 + 8 * ((i * 13) % 700)).collect();
    let path = trace_of("gate", &addrs);
    let r = TraceReader::open(&path).unwrap();
    let fed =
        memlens_analysis::drive_merged(&r, (Sharing::default(), FalseSharing::default()), |_| {})
            .unwrap();
    let gated =
        (Gate { on: false, k: Sharing::default() }, Gate { on: false, k: FalseSharing::default() });
    let skipped = memlens_analysis::drive_merged(&r, gated, |_| {}).unwrap();
    assert!(!fed.0.by_addr.is_empty(), "the fed kernel saw the accesses");
    let opts = RenderOpts::top(100);
    assert_eq!(
        fed.0.render(&NoNames, &opts).to_json(),
        skipped.0.render(&NoNames, &opts).to_json()
    );
    assert_eq!(
        fed.1.render(&NoNames, &opts).to_json(),
        skipped.1.render(&NoNames, &opts).to_json()
    );
    std::fs::remove_file(&path).unwrap();
}

/// Names every code address by its value and every 4 bytes of data apart (variables
/// of 1 KiB), so that a cell's names say which access it kept.
struct ByAddr;

impl memlens_analysis::Namer for ByAddr {
    fn code(&self, pc: Pc) -> memlens_analysis::CodeName {
        memlens_analysis::CodeName {
            function: format!("{:#x}", pc.0),
            file: String::new(),
            line: 0,
        }
    }

    fn data(&self, a: Addr) -> Option<memlens_analysis::DataName> {
        Some(memlens_analysis::DataName {
            name: format!("e{}", a.0 / 4),
            variable: format!("v{}", a.0 / 1024),
        })
    }
}

/// A line in the model: in the working set while `stamp` is less than `max_age`
/// insertions old.
#[derive(Default)]
struct MLine {
    live: bool,
    stamp: u64,
    mask: u64,
    thread: u8,
    /// Where its first access started (its name when untouched).
    first: u64,
    loads: u64,
    stores: u64,
    threads: u64,
}

/// A map cell as the model expects it: address, (pc, loads, stores, offset) when
/// touched, element name, bytes used, last thread, age left in 1/255.
type MCell = (u64, Option<(u64, u16, u16, u8)>, String, u8, u8, u8);

/// The working-set map from its definition, plainly (every line in one ordered
/// map, every bucket's rows from a walk over it), fed in the builder's merged order.
struct Model {
    bs: u64,
    max_age: u64,
    op: u64,
    ins: u64,
    lines: BTreeMap<u64, MLine>,
    /// The current bucket's touches: pc, loads, stores, address of the last access.
    touched: BTreeMap<u64, (u64, u32, u32, u64)>,
    buckets: Vec<Vec<MCell>>,
}

impl Model {
    fn flush(&mut self) {
        let name = |a: u64| format!("e{}", a / 4);
        let mut rows = Vec::new();
        for (&addr, l) in self.lines.iter().filter(|(_, l)| l.live) {
            let left = self.max_age - (self.ins - l.stamp);
            let age = (left * 255 / self.max_age) as u8;
            let used = l.mask.count_ones() as u8;
            let (touch, n) = match self.touched.get(&addr) {
                Some(&(pc, ld, st, last)) => {
                    let t = (pc, ld.min(65535) as u16, st.min(65535) as u16, (last - addr) as u8);
                    (Some(t), name(last))
                }
                None => (None, name(l.first)),
            };
            rows.push((addr, touch, n, used, l.thread, age));
        }
        self.buckets.push(rows);
        self.touched.clear();
    }

    fn access(&mut self, t: ThreadId, pc: u64, addr: u64, len: u64, loads: u32, stores: u32) {
        while self.op >= (self.buckets.len() as u64 + 1) * self.bs {
            self.flush();
        }
        let end = addr + len.max(1);
        let first = addr >> 6;
        let last = ((end - 1) >> 6).min(first + 4095);
        for line in first..=last {
            let base = line << 6;
            let (lo, hi) = (base.max(addr), (base + 64).min(end));
            let bits =
                if hi - lo >= 64 { u64::MAX } else { ((1u64 << (hi - lo)) - 1) << (lo - base) };
            let l = self.lines.entry(base).or_insert(MLine { first: lo, ..MLine::default() });
            l.thread = t.0.min(254) as u8;
            l.loads += loads as u64;
            l.stores += stores as u64;
            l.threads |= 1 << (t.0 % 64);
            let e = self.touched.entry(base).or_default();
            *e = (pc, e.1 + loads, e.2 + stores, lo);
            if l.live {
                l.mask |= bits;
                l.stamp = self.ins;
                continue;
            }
            self.ins += 1;
            let (ins, max_age) = (self.ins, self.max_age);
            for o in self.lines.values_mut() {
                if o.live && o.stamp + max_age <= ins {
                    o.live = false;
                }
            }
            let l = self.lines.get_mut(&base).unwrap();
            (l.live, l.stamp, l.mask) = (true, ins, bits);
        }
        self.op += 1;
    }
}

impl memlens_analysis::Kernel for Model {
    type Output = Model;

    fn process(&mut self, t: ThreadId, ev: &Event) {
        let rw = |k: &AccessKind| if *k == AccessKind::Read { (1, 0) } else { (0, 1) };
        match ev {
            Event::Access { pc, addr, size, kind, .. } => {
                let (l, s) = rw(kind);
                self.access(t, pc.0, addr.0, *size as u64, l, s)
            }
            Event::Range { pc, addr, len, kind } => {
                let (l, s) = rw(kind);
                self.access(t, pc.0, addr.0, *len, l, s)
            }
            Event::Rmw { pc, addr, size, .. } => self.access(t, pc.0, addr.0, *size as u64, 1, 1),
            _ => {}
        }
    }

    fn finish(mut self) -> Model {
        if self.op > self.buckets.len() as u64 * self.bs {
            self.flush();
        }
        self
    }
}

/// Three threads' pseudo-random loads, stores, ranges across lines and atomics over
/// a few hundred lines, written in several chunks each.
fn mixed_trace(name: &str, per_thread: u64) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("view-{name}-{}.trace", std::process::id()));
    let mut w = TraceWriter::new(File::create(&path).unwrap(), 1, 1).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for chunk in 0..4 {
        for t in 0..3u32 {
            let mut buf = EventBuffer::new();
            let mut hot = 0x10000 + 64 * (next() % 300);
            for _ in 0..per_thread / 4 {
                let r = next();
                // mostly near the last access, sometimes anywhere
                if r % 8 == 0 {
                    hot = 0x10000 + 64 * (next() % 300);
                }
                let addr = hot + (r >> 8) % 192;
                let pc = Pc(0x400 + 4 * ((r >> 20) % 11));
                let kind = if (r >> 30) % 3 == 0 { AccessKind::Write } else { AccessKind::Read };
                buf.push(&match (r >> 40) % 16 {
                    0 => Event::Range { pc, addr: Addr(addr), len: (r >> 44) % 300, kind },
                    1 => Event::Rmw {
                        pc,
                        addr: Addr(addr & !7),
                        size: 8,
                        op: memlens_format::RmwOp::FetchAdd,
                        value: None,
                    },
                    _ => Event::Access {
                        pc,
                        addr: Addr(addr),
                        size: 1 << ((r >> 48) % 4),
                        kind,
                        atomic: false,
                        value: None,
                    },
                });
            }
            w.write_events(t, &mut buf, chunk == 3).unwrap();
        }
    }
    w.finish(|_| {}).unwrap();
    path
}

/// Every cell of every bucket at the three finest levels, and the variables table,
/// as the plain model of the map gives them: the builder's bookkeeping (line ids,
/// per-level touch sets, remembered names, key frames) changes no answer.
#[test]
fn the_map_matches_a_plain_model_of_the_working_set() {
    let path = mixed_trace("model", 24_000);
    let r = TraceReader::open(&path).unwrap();
    let dir = crate::index_dir(&path);
    let ops: u64 = r.streams().iter().map(|s| s.counts.loads as u64 + s.counts.stores as u64).sum();
    let opts = BuildOptions { max_age: 16, max_buckets: ops, ..BuildOptions::default() };
    let meta = crate::build(&r, &path, &dir, &ByAddr, opts, &mut |_, _| {}).unwrap();
    let ix = crate::Index::open(&dir).unwrap();
    let text = |v: &Value| v.as_str().unwrap().to_string();
    let pc_name = |id: u32| text(&meta["pcs"][id as usize][0]);
    let var_name = |id: u32| text(&meta["vars"][id as usize][0]);
    assert!(meta["levels"].as_array().unwrap().len() >= 3);
    for (level, bs) in [(0, 1), (1, 4), (2, 16)] {
        assert_eq!(ix.bucket_size(level), Some(bs));
        let m = Model {
            bs,
            max_age: 16,
            op: 0,
            ins: 0,
            lines: BTreeMap::new(),
            touched: BTreeMap::new(),
            buckets: Vec::new(),
        };
        let m = memlens_analysis::drive_merged(&r, m, |_| {}).unwrap();
        if level == 0 {
            assert_eq!(meta["ops"], m.op);
            assert_eq!(meta["distinct_lines"], m.lines.len());
            // a few key frames per level: blocks are replayed from them
            assert!(m.op > 2 * KEY_MIN, "{} operations", m.op);
            // every line's totals, by the variable of its first access
            let mut want: BTreeMap<String, (u64, u64, u64, u64)> = BTreeMap::new();
            for l in m.lines.values() {
                let e = want.entry(format!("v{}", l.first / 1024)).or_default();
                (e.0, e.1, e.2, e.3) = (e.0 + l.loads, e.1 + l.stores, e.2 + 1, e.3 | l.threads);
            }
            let got: BTreeMap<String, (u64, u64, u64, u64)> = crate::vars::read_all(&dir)
                .unwrap()
                .iter()
                .map(|v| {
                    let n = |k: &str| v[k].as_u64().unwrap();
                    (
                        text(&v["variable"]),
                        (n("loads"), n("stores"), n("cache_lines"), n("threads")),
                    )
                })
                .collect();
            let want: BTreeMap<_, _> = want
                .into_iter()
                .map(|(k, v)| (k, (v.0, v.1, v.2, v.3.count_ones() as u64)))
                .collect();
            assert_eq!(got, want);
        }
        let n = m.buckets.len() as u64;
        let tiles = ix.tiles(&TileQuery::all(level, 0..n)).unwrap();
        assert_eq!(tiles.len() as u64, n, "level {level}");
        for ((b, cells), want) in tiles.iter().zip(&m.buckets) {
            let got: Vec<MCell> = cells
                .chunks_exact(crate::CELL_BYTES)
                .map(|c| {
                    let u32at = |o: usize| u32::from_le_bytes(c[o..o + 4].try_into().unwrap());
                    let u16at = |o: usize| u16::from_le_bytes(c[o..o + 2].try_into().unwrap());
                    let addr = u64::from_le_bytes(c[0..8].try_into().unwrap());
                    let pc = u64::from_str_radix(&pc_name(u32at(8))[2..], 16).unwrap();
                    let touch = (c[27] & 1 == 1).then(|| (pc, u16at(20), u16at(22), c[28]));
                    (addr, touch, var_name(u32at(12)), c[24], c[25], c[26])
                })
                .collect();
            assert_eq!(&got, want, "level {level} bucket {b}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&path).unwrap();
}

/// Two threads' loops (strided, backwards, line-crossing ranges, a fixed
/// address) between calls, clocks and scattered accesses: written with every
/// loop folded into `repeat`s when `fold`, else as plain events.
fn loop_trace(name: &str, fold: bool) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("view-{name}-{}.trace", std::process::id()));
    let mut w = TraceWriter::new(File::create(&path).unwrap(), 0, 1).unwrap();
    let acc = |pc: u64, addr: u64, size: u8, write: bool| Event::Access {
        pc: Pc(pc),
        addr: Addr(addr),
        size,
        kind: if write { AccessKind::Write } else { AccessKind::Read },
        atomic: false,
        value: None,
    };
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for t in 0..2u32 {
        let mut buf = EventBuffer::new();
        let base = 0x10_0000 + 0x4_0000 * u64::from(t);
        buf.push(&Event::FuncEnter { pc: Pc(0x100), call_site: Pc(0), frame: Addr(0x7000) });
        for round in 0..30u64 {
            buf.push(&Event::Clock(1 + 2 * round + u64::from(t)));
            buf.push(&Event::FuncEnter {
                pc: Pc(0x200),
                call_site: Pc(0x104),
                frame: Addr(0x6f00),
            });
            let n = 150 + 61 * ((round * 5 + u64::from(t)) % 9);
            for i in 0..n {
                buf.push(&acc(0x210, base + 8 * i, 8, false));
                buf.push(&acc(0x214, base + 0x2_0000 - 16 * i, 4, true));
                buf.push(&acc(0x218, base + 0x1_0000 + 72 * i, 8, false));
                buf.push(&Event::Range {
                    pc: Pc(0x21c),
                    addr: Addr(base + 0x3_0000 + 24 * i),
                    len: 24,
                    kind: AccessKind::Write,
                });
            }
            for _ in 0..40 + round {
                buf.push(&acc(0x220, base + 0x3_8000, 8, true));
            }
            buf.push(&Event::FuncExit { pc: Pc(0x200) });
            for _ in 0..50 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                buf.push(&acc(
                    0x230 + 4 * (x % 7),
                    base + (x >> 20) % 0x4_0000,
                    8,
                    x.is_multiple_of(3),
                ));
            }
        }
        buf.push(&Event::FuncExit { pc: Pc(0x100) });
        let (raw, counts) = buf.take();
        let mut folder = memlens_format::codec::Folder::new();
        let folded = if fold { folder.fold(&raw.ops, &raw.side).cloned() } else { None };
        assert_eq!(folded.is_some(), fold, "the loops fold");
        let s = folded.unwrap_or(raw);
        w.write_encoded(t, true, counts, 0, &s.ops, &s.side).unwrap();
    }
    w.finish(|_| {}).unwrap();
    path
}

/// A trace whose loops the decoder hands over as runs (each kernel's
/// `process_run`: the map builder, the call tree, the heap and sharing tables)
/// indexes byte for byte as the same events written out one by one.
#[test]
fn folded_loops_index_as_their_events() {
    let mut dirs = Vec::new();
    for fold in [false, true] {
        let path = loop_trace(if fold { "runs-folded" } else { "runs-plain" }, fold);
        let r = TraceReader::open(&path).unwrap();
        if fold {
            // the decoder does leave runs
            let mut ev = r.events(r.streams()[0].thread);
            let (mut b, mut runs, mut folded) = (Vec::new(), Default::default(), 0);
            while ev.next_batch_runs(&mut b, &mut runs, 4096).unwrap() > 0 {
                folded += runs.events();
            }
            let events = u64::from(r.streams()[0].counts.events);
            assert!(folded * 10 > events * 7, "{folded} of {events} events in runs");
        }
        let dir = crate::index_dir(&path);
        let opts = BuildOptions { max_age: 64, max_buckets: 4096, ..BuildOptions::default() };
        crate::build(&r, &path, &dir, &ByAddr, opts, &mut |_, _| {}).unwrap();
        std::fs::remove_file(&path).unwrap();
        dirs.push(dir);
    }
    let mut names: Vec<_> =
        std::fs::read_dir(&dirs[0]).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert!(names.len() > 10);
    for n in &names {
        let (a, b) =
            (std::fs::read(dirs[0].join(n)).unwrap(), std::fs::read(dirs[1].join(n)).unwrap());
        if n == "meta.json" {
            let strip = |v: &[u8]| {
                let mut m: Value = serde_json::from_slice(v).unwrap();
                m.as_object_mut().unwrap().remove("trace");
                m
            };
            assert_eq!(strip(&a), strip(&b));
        } else {
            assert!(a == b, "{n:?} differs");
        }
    }
    for d in dirs {
        std::fs::remove_dir_all(d).unwrap();
    }
}
