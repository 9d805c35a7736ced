//! Property: the chunk-parallel attribution gives exactly the serial attributor's
//! answer, on random synthetic traces (several threads and chunks each; nested,
//! unmatched and longjmp-skipped frames; heap blocks allocated, freed, reallocated
//! and reused across threads; stack, heap, freed and unknown addresses).

use memlens_format::{
    AccessKind, Addr, AllocKind, Event, EventBuffer, FreeKind, Pc, RmwOp, ThreadId, TraceReader,
    TraceWriter,
};
use memlens_names::{
    attribute_trace, attribute_trace_serial, Attribution, Attributor, Granularity, HeapIndex,
    Naming,
};
use memlens_symbols::Symbolizer;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const STACK: u64 = 0x10_0000;

/// One thread's events.
fn stream(rng: &mut Rng, t: u32, n: usize) -> Vec<Event> {
    let lo = 0x7f00_0000_0000 + u64::from(t) * STACK;
    let mut evs = vec![Event::ThreadStart {
        os_tid: 100 + t,
        parent: None,
        name: String::new(),
        stack_lo: Addr(lo),
        stack_hi: Addr(lo + STACK),
        tls: Addr(0),
    }];
    // open frames: (function pc, frame pointer)
    let mut frames: Vec<(u64, u64)> = Vec::new();
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut dead: Vec<(u64, u64)> = Vec::new();
    let access = |rng: &mut Rng, addr: u64| {
        let pc = Pc(0x40_1000 + rng.below(24) * 4);
        match rng.below(8) {
            0 => Event::Rmw { pc, addr: Addr(addr), size: 8, op: RmwOp::FetchAdd, value: None },
            1 => Event::Range { pc, addr: Addr(addr), len: 24, kind: AccessKind::Write },
            k => Event::Access {
                pc,
                addr: Addr(addr),
                size: 8,
                kind: if k % 2 == 0 { AccessKind::Read } else { AccessKind::Write },
                atomic: false,
                value: None,
            },
        }
    };
    while evs.len() < n {
        match rng.below(13) {
            0 | 1 => {
                let below = frames.last().map_or(lo + STACK - 256, |f| f.1);
                let rbp = below - 64 - rng.below(4) * 16;
                let f = 0x40_0000 + rng.below(6) * 0x100;
                let call_site = Pc(0x40_2000 + rng.below(32));
                evs.push(Event::FuncEnter { pc: Pc(f + 4), call_site, frame: Addr(rbp) });
                frames.push((f, rbp));
            }
            2 => {
                // a matched exit, a synthesised one, or one of no open frame
                let pc = match rng.below(4) {
                    0 => 0,
                    1 => 0x40_0000 + rng.below(6) * 0x100 + 8,
                    _ => frames.last().map_or(0, |f| f.0 + 8),
                };
                frames.pop();
                evs.push(Event::FuncExit { pc: Pc(pc) });
            }
            3 => {
                // longjmp: an entry above some open frames, without their exits
                if frames.len() > 2 {
                    let keep = rng.below(frames.len() as u64) as usize;
                    let rbp = frames[keep].1 + 16;
                    frames.truncate(keep);
                    let f = 0x40_0000 + rng.below(6) * 0x100;
                    let call_site = Pc(0x40_2000);
                    evs.push(Event::FuncEnter { pc: Pc(f + 4), call_site, frame: Addr(rbp) });
                    frames.push((f, rbp));
                }
            }
            4 => {
                // blocks come from a small shared pool of addresses: reused over time
                // and by other threads
                let addr = 0x5000_0000 + rng.below(32) * 0x100;
                let size = 16 + rng.below(15) * 16;
                let site = Pc(0x40_3000 + rng.below(5) * 8);
                let stack = vec![Pc(0x40_4000 + rng.below(3))];
                evs.push(Event::Alloc {
                    pc: site,
                    addr: Addr(addr),
                    size,
                    kind: AllocKind::Malloc,
                    stack,
                });
                live.push((addr, size));
            }
            5 if !live.is_empty() => {
                let b = live.swap_remove(rng.below(live.len() as u64) as usize);
                if rng.below(3) == 0 {
                    let new = 0x5000_0000 + rng.below(32) * 0x100;
                    let size = 16 + rng.below(15) * 16;
                    evs.push(Event::Realloc {
                        pc: Pc(0x40_3100),
                        old: Addr(b.0),
                        new: Addr(new),
                        size,
                        stack: Vec::new(),
                    });
                    live.push((new, size));
                } else {
                    evs.push(Event::Free {
                        pc: Pc(0x40_3200),
                        addr: Addr(b.0),
                        kind: FreeKind::Free,
                    });
                }
                dead.push(b);
            }
            6 | 7 if !live.is_empty() => {
                let b = live[rng.below(live.len() as u64) as usize];
                let a = b.0 + rng.below(b.1 / 8) * 8;
                let e = access(rng, a);
                evs.push(e);
            }
            8 if !dead.is_empty() => {
                let b = dead[rng.below(dead.len() as u64) as usize];
                let a = b.0 + rng.below(b.1 / 8) * 8;
                let e = access(rng, a);
                evs.push(e);
            }
            9 | 10 => {
                let top = frames.last().map_or(lo + STACK - 256, |f| f.1);
                let a = top - 128 + rng.below(40) * 8;
                let e = access(rng, a);
                evs.push(e);
            }
            12 => {
                // a loop (the writer folds it into a repeat; `par` counts its
                // iterations as a run): each access walks a heap block and past
                // it into other blocks, the stack, unknown memory, or stays put
                let top = frames.last().map_or(lo + STACK - 256, |f| f.1);
                let body: Vec<(u64, u64, bool)> = (0..1 + rng.below(3))
                    .map(|_| {
                        let stride = [8, 8, 16, 0, 8u64.wrapping_neg()][rng.below(5) as usize];
                        let base = match rng.below(4) {
                            0 if !live.is_empty() => live[rng.below(live.len() as u64) as usize].0,
                            0 | 1 => 0x5000_0000 + rng.below(32) * 0x100 + rng.below(4) * 8,
                            2 => top - 128 + rng.below(40) * 8,
                            _ => 0x6000_0000 + rng.below(64) * 8,
                        };
                        (base, stride, rng.below(2) == 0)
                    })
                    .collect();
                for k in 0..20 + rng.below(300) {
                    for (j, &(base, stride, w)) in body.iter().enumerate() {
                        evs.push(Event::Access {
                            pc: Pc(0x40_5000 + j as u64 * 0x40),
                            addr: Addr(base.wrapping_add(stride.wrapping_mul(k))),
                            size: 8,
                            kind: if w { AccessKind::Write } else { AccessKind::Read },
                            atomic: false,
                            value: None,
                        });
                    }
                }
            }
            _ => {
                let a = 0x6000_0000 + rng.below(64) * 8;
                let e = access(rng, a);
                evs.push(e);
            }
        }
    }
    evs
}

/// Runs (a loop's repeated iterations left whole by the column decoder) in the
/// trace's chunks.
fn runs(r: &TraceReader) -> usize {
    let mut dec = memlens_format::ChunkDecoder::new();
    dec.keep_runs(true);
    let mut n = 0;
    for c in r.stream_chunks() {
        dec.for_columns(r, &c, |cols| n += cols.runs.len()).unwrap();
    }
    n
}

fn write(path: &std::path::Path, rng: &mut Rng) {
    let mut w = TraceWriter::new(std::fs::File::create(path).unwrap(), 1, 1).unwrap();
    for t in 0..3u32 {
        let n = 1500 + rng.below(1500) as usize;
        let evs = stream(rng, t, n);
        let mut buf = EventBuffer::new();
        let chunk = 50 + rng.below(200) as usize;
        for (i, e) in evs.iter().enumerate() {
            buf.push(e);
            if (i + 1) % chunk == 0 && i + 1 < evs.len() {
                w.write_events(t, &mut buf, false).unwrap();
            }
        }
        w.write_events(t, &mut buf, true).unwrap();
    }
    w.finish(|_| {}).unwrap();
}

type Row = (String, String, u64, u64, u64, u64, Vec<ThreadId>, Vec<(Pc, u64)>);

fn rows(a: &Attribution) -> Vec<Row> {
    a.sorted()
        .into_iter()
        .map(|(l, c)| {
            let mut pcs = c.pcs.clone();
            pcs.sort();
            let (name, kind) = (l.display(), format!("{:?} {:?}", l.kind, l.site));
            (name, kind, c.loads, c.stores, c.bytes_read, c.bytes_written, c.threads.clone(), pcs)
        })
        .collect()
}

#[test]
fn parallel_attribution_equals_the_serial_pass_on_random_traces() {
    let sym = Symbolizer::new(&[]);
    let site = |pc: Pc| format!("site{:x}", pc.0);
    let no_alloc_fns = memlens_analysis::heap::AllocFns::default();
    let mut folded = 0;
    for seed in 1..=12u64 {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ seed.wrapping_mul(0x1234_5678_9abc_def1));
        let path = std::env::temp_dir()
            .join(format!("memlens-names-prop-{}-{seed}.trace", std::process::id()));
        write(&path, &mut rng);
        let r = TraceReader::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(r.stream_chunks().len() > 6, "seed {seed}: several chunks per thread");
        folded += runs(&r);
        for g in [Granularity::Field, Granularity::Variable] {
            let naming = || Naming {
                trace: &r,
                sym: &sym,
                maps: None,
                site_namer: &site,
                granularity: g,
                alloc_fns: &no_alloc_fns,
            };
            let serial = attribute_trace_serial(naming()).unwrap();
            assert!(serial.labels.len() > 5, "seed {seed}");
            for workers in [2, 3] {
                let par = attribute_trace(naming(), workers).unwrap();
                assert_eq!(rows(&par), rows(&serial), "seed {seed}, {g:?}, {workers} workers");
            }
        }
    }
    // the loops were folded, so runs were counted whole
    eprintln!("{folded} runs");
    assert!(folded >= 12, "{folded} runs in the traces");
}

/// The viewer's and the kernels' attributor names the accesses of all threads
/// interleaved, in merged order, through its label cache: every answer equals the
/// uncached resolution's, whatever the order the threads' events come in (frames
/// entered and left, threads appearing, blocks reused across threads) and with
/// the thread-less lookups `Namer::data` makes in between.
#[test]
fn the_label_cache_answers_as_the_full_resolution_in_any_interleaving() {
    let sym = Symbolizer::new(&[]);
    let no_alloc_fns = memlens_analysis::heap::AllocFns::default();
    for seed in 1..=12u64 {
        let (r, mut rng) = random_trace("cache", 0x5EED_0000_1234_5678, seed);
        for g in [Granularity::Field, Granularity::Variable] {
            let heap = || HeapIndex::from_trace(&r, &no_alloc_fns).unwrap();
            let mut cached = Attributor::new(&sym, heap(), None);
            let mut full = Attributor::new(&sym, heap(), None);
            full.set_uncached();
            for a in [&mut cached, &mut full] {
                a.set_site_namer(|pc: Pc| format!("site{:x}", pc.0));
                a.set_granularity(g);
            }
            let threads: Vec<ThreadId> = r.streams().iter().map(|s| s.thread).collect();
            let mut its: Vec<_> = threads.iter().map(|&t| r.events(t)).collect();
            let (mut named, mut live) = (0, its.len());
            while live > 0 {
                let k = rng.below(its.len() as u64) as usize;
                // a run of this thread's events, then maybe another thread's
                for _ in 0..1 + rng.below(40) {
                    let Some(ev) = its[k].next() else {
                        live -= 1;
                        break;
                    };
                    let (ev, i, t) = (ev.unwrap(), its[k].index(), threads[k]);
                    let (pc, addr) = match ev {
                        Event::Access { pc, addr, .. }
                        | Event::Range { pc, addr, .. }
                        | Event::Rmw { pc, addr, .. } => (pc, addr),
                        _ => {
                            cached.observe(t, &ev);
                            full.observe(t, &ev);
                            continue;
                        }
                    };
                    let (c, f) = (cached.attribute(t, i, pc, addr), full.attribute(t, i, pc, addr));
                    assert_eq!(
                        cached.label(c).display(),
                        full.label(f).display(),
                        "seed {seed}, {g:?}: {t:?} event {i} at {addr:?}"
                    );
                    named += 1;
                    if rng.below(8) == 0 {
                        // another thread's stack: named after it once it started
                        let o = rng.below(threads.len() as u64 + 1);
                        let x = Addr(0x7f00_0000_0000 + o * STACK + STACK - 512 + rng.below(8) * 8);
                        let (c, f) = (cached.attribute(t, i, pc, x), full.attribute(t, i, pc, x));
                        assert_eq!(
                            cached.label(c).display(),
                            full.label(f).display(),
                            "seed {seed}"
                        );
                    }
                    if rng.below(16) == 0 {
                        let (u, x) = (ThreadId(u32::MAX), Addr(addr.0 + 8 * rng.below(3)));
                        let (c, f) = (
                            cached.attribute(u, u64::MAX, Pc(0), x),
                            full.attribute(u, u64::MAX, Pc(0), x),
                        );
                        assert_eq!(
                            cached.label(c).display(),
                            full.label(f).display(),
                            "seed {seed}"
                        );
                    }
                }
                // an exhausted stream's iterator keeps answering None
            }
            assert!(named > 1000, "seed {seed}: {named} accesses named");
        }
    }
}

/// The results namer's attributor (`TraceNamer::data`: one thread-less lookup
/// per address, no label cache, no per-byte table of big blocks, its labels
/// forgotten past a bound) answers as the full resolution.
#[test]
fn the_one_off_namer_answers_as_the_full_resolution_while_forgetting_its_labels() {
    let sym = Symbolizer::new(&[]);
    let no_alloc_fns = memlens_analysis::heap::AllocFns::default();
    for seed in 1..=6u64 {
        let (r, _) = random_trace("oneoff", 0x0FF0_0000_1234_5678, seed);
        let heap = || HeapIndex::from_trace(&r, &no_alloc_fns).unwrap();
        let mut one_off = Attributor::new(&sym, heap(), None);
        let mut full = Attributor::new(&sym, heap(), None);
        full.set_uncached();
        one_off.set_one_off();
        for a in [&mut one_off, &mut full] {
            a.set_site_namer(|pc: Pc| format!("site{:x}", pc.0));
        }
        let (mut named, mut most) = (0, 0);
        for s in r.streams() {
            for ev in r.events(s.thread) {
                let (Event::Access { addr, .. }
                | Event::Range { addr, .. }
                | Event::Rmw { addr, .. }) = ev.unwrap()
                else {
                    continue;
                };
                one_off.forget_labels_over(3);
                let none = (ThreadId(u32::MAX), u64::MAX, Pc(0));
                let (o, f) = (
                    one_off.attribute(none.0, none.1, none.2, addr),
                    full.attribute(none.0, none.1, none.2, addr),
                );
                let (o, f) = (one_off.label(o), full.label(f));
                assert_eq!(
                    (o.display(), &o.base),
                    (f.display(), &f.base),
                    "seed {seed} at {addr:?}"
                );
                most = most.max(one_off.labels().len());
                named += 1;
            }
        }
        assert!(named > 100, "seed {seed}: {named} accesses");
        assert!(most <= 4, "seed {seed}: {most} labels held");
        assert!(full.labels().len() > 4, "seed {seed}: too few labels to forget any");
    }
}

/// A random trace of `write`'s (from `base` and `seed`), read back, and the
/// generator to go on with.
fn random_trace(what: &str, base: u64, seed: u64) -> (TraceReader, Rng) {
    let mut rng = Rng(base ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let path = std::env::temp_dir()
        .join(format!("memlens-names-{what}-{}-{seed}.trace", std::process::id()));
    write(&path, &mut rng);
    let r = TraceReader::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    (r, rng)
}
