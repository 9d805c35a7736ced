//! Cache simulation on synthetic traces with hand-computed outcomes.

use super::*;
use crate::testutil::*;
use crate::{drive_serial, NoNames};

fn sim(cfg: CacheConfig, streams: &[(u32, Vec<Event>)]) -> CacheReport {
    drive_serial(&trace(streams), CacheSim::new(cfg).unwrap(), |_| {}).unwrap()
}

fn d1_ll() -> CacheConfig {
    CacheConfig::new(vec![
        LevelConfig::new("D1", 32 << 10, 8, 64),
        LevelConfig::new("LL", 1 << 20, 16, 64),
    ])
}

#[test]
fn stride_over_twice_the_cache_always_misses() {
    // one load per line over 64 KiB (1024 lines) against a 32 KiB D1, three passes:
    // under LRU every set cycles through 16 lines in 8 ways, so every access misses
    let mut evs = Vec::new();
    for _ in 0..3 {
        for i in 0..1024u64 {
            evs.push(rd(0x10, 0x10_0000 + 64 * i, 8));
        }
    }
    for policy in [PolicyKind::Lru, PolicyKind::Fifo] {
        let r = sim(d1_ll().policy(policy), &[(0, evs.clone())]);
        assert_eq!(r.accesses, 3072);
        assert_eq!(r.levels[0].total.misses(), 3072, "{policy:?}");
        // the LL holds all 1024 lines: cold misses only
        assert_eq!(r.levels[1].total.misses(), 1024);
        assert_eq!(r.levels[1].total.accesses(), 3072);
    }
}

#[test]
fn loop_that_fits_only_has_cold_misses() {
    // every 8-byte word of 16 KiB, five passes: 256 cold misses, nothing else
    let mut evs = Vec::new();
    for _ in 0..5 {
        for i in 0..2048u64 {
            evs.push(rd(0x10, 0x20_0000 + 8 * i, 8));
        }
    }
    let r = sim(d1_ll(), &[(0, evs)]);
    assert_eq!(r.levels[0].total.accesses(), 10240);
    assert_eq!(r.levels[0].total.misses(), 256);
    assert_eq!(r.levels[1].total.accesses(), 256);
    assert_eq!(r.levels[1].total.misses(), 256);
    let pc = &r.by_pc[&Pc(0x10)];
    assert_eq!((pc.accesses, pc.misses(0), pc.misses(1)), (10240, 256, 256));
    // 64-byte data granules: 256 of them, each 40 accesses and one cold miss
    assert_eq!(r.by_data.len(), 256);
    assert!(r.by_data.iter().all(|(_, s)| s.accesses == 40 && s.misses(0) == 1));
    assert_eq!(r.by_data.get(Addr(0x20_0008)).map(|s| s.served[0]), Some(39));
    assert_eq!(r.by_data.get(Addr(0x30_0000)), None);
}

#[test]
fn two_way_conflict_lru_vs_fifo() {
    // A B A C A in the single set of a 2-way cache
    let evs: Vec<Event> = [0u64, 1, 0, 2, 0].iter().map(|&l| rd(0x10, l * 64, 8)).collect();
    let one = |p| CacheConfig::new(vec![LevelConfig::new("D1", 128, 2, 64).policy(p)]);
    assert_eq!(sim(one(PolicyKind::Lru), &[(0, evs.clone())]).levels[0].total.misses(), 3);
    assert_eq!(sim(one(PolicyKind::Fifo), &[(0, evs.clone())]).levels[0].total.misses(), 4);
    // tree-PLRU on two ways is LRU
    assert_eq!(sim(one(PolicyKind::TreePlru), &[(0, evs.clone())]).levels[0].total.misses(), 3);
    // random: reproducible per seed, between the cold misses and all accesses
    let a = sim(one(PolicyKind::Random { seed: 3 }), &[(0, evs.clone())]).levels[0].total.misses();
    let b = sim(one(PolicyKind::Random { seed: 3 }), &[(0, evs)]).levels[0].total.misses();
    assert_eq!(a, b);
    assert!((3..=5).contains(&a));
}

#[test]
fn split_lines_rmw_and_ranges() {
    let evs = vec![
        rd(0x10, 0x103c, 8),  // crosses into the next line: two accesses, two misses
        rmw(0x20, 0x1000, 8), // load hit + store hit
        range_wr(0x30, 0x2000, 256), // four lines
    ];
    let cfg = d1_ll().annotate(true);
    let r = sim(cfg, &[(0, evs)]);
    assert_eq!(r.accesses, 2 + 2 + 4);
    assert_eq!(r.events, 3);
    assert_eq!(r.levels[0].total.misses(), 2 + 4);
    assert_eq!(r.levels[0].total.write_misses, 4);
    assert_eq!(r.by_pc[&Pc(0x20)].writes, 1);
    let a = r.annotation.unwrap();
    assert_eq!(a.thread(ThreadId(0)).unwrap().iter().collect::<Vec<_>>(), [2, 0, 2]);
}

#[test]
fn threads_on_cores_invalidate_each_other() {
    // two threads on two cores increment the same counter alternately
    let cfg = d1_ll().cores(2);
    let mut k = CacheSim::new(cfg).unwrap();
    for i in 0..10 {
        let t = ThreadId(i % 2);
        k.process(t, &rd(0x10, 0x5000, 8));
        k.process(t, &wr(0x14, 0x5000, 8));
    }
    let r = k.finish();
    let d1 = &r.levels[0];
    assert_eq!(d1.per_instance.len(), 2);
    // every turn after the first: the load misses (the copy was invalidated), the
    // other core's modified copy is flushed, then the store upgrades and invalidates
    assert_eq!(d1.total.read_misses, 10);
    assert_eq!(d1.total.invalidations, 9);
    assert_eq!(d1.total.writebacks, 9);
    assert_eq!(r.levels[1].total.misses(), 1);
    // one core: the counter stays in D1
    let mut k = CacheSim::new(d1_ll()).unwrap();
    for i in 0..10 {
        k.process(ThreadId(i % 2), &wr(0x14, 0x5000, 8));
    }
    assert_eq!(k.finish().levels[0].total.misses(), 1);
}

#[test]
fn render_shapes() {
    let evs: Vec<Event> = (0..100u64).map(|i| rd(0x10 + (i % 2), 0x8000 + 32 * i, 8)).collect();
    let r = sim(d1_ll(), &[(0, evs)]);
    let t = r.render(&NoNames, &RenderOpts::default());
    let j = t.to_json();
    assert_eq!(j["levels"][0]["name"], "D1");
    assert_eq!(j["levels"][0]["accesses"], 100);
    assert_eq!(j["levels"][0]["misses"], 50);
    assert_eq!(j["levels"][0]["load_misses"], 50);
    assert_eq!(j["levels"][0]["mpka"], 500.0);
    // pc 0x10 touches the first half of each line and takes every miss
    assert_eq!(j["by_line"][0]["function"], "0x10");
    assert_eq!(j["by_line"][0]["misses"]["D1"], 50);
    assert_eq!(j["by_line"][0]["misses"]["LL"], 50);
    assert_eq!(j["by_line"][1]["misses"]["D1"], 0);
    assert_eq!(j["by_variable"][0]["accesses"], 2);
    let text = t.to_text();
    assert!(text.contains("D1 misses"), "{text}");
}
