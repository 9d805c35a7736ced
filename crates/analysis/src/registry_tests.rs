use super::*;
use crate::testutil::*;
use crate::{NoNames, RenderOpts};

/// Three threads sharing and falsely sharing lines, allocating and freeing, with
/// an ROI in thread 1.
fn streams() -> Vec<(u32, Vec<Event>)> {
    (0..3u32)
        .map(|t| {
            let t64 = u64::from(t);
            let mut evs = Vec::new();
            for i in 0..2_000u64 {
                let heap = 0x10_0000 + (i % 16) * 64;
                if t == 1 && i % 500 == 0 {
                    evs.push(Event::Roi(i % 1000 == 0));
                }
                evs.push(match i % 7 {
                    0 => alloc(0x900 + t64, heap + t64 * 0x1000, 48, &[0x950]),
                    1 => wr(0x400 + t64, heap + t64 * 0x1000 + 8, 8),
                    2 => rd(0x410, 0x2000 + (i % 64) * 8, 8),
                    3 => wr(0x420 + t64, 0x3000 + t64 * 8, 8),
                    4 => rmw(0x430, 0x4000, 8),
                    5 => range_rd(0x440, 0x5000 + (i % 32) * 64, 100),
                    _ => free(0x960, heap + t64 * 0x1000),
                });
            }
            (t, evs)
        })
        .collect()
}

fn rendered(rep: &dyn Report) -> (String, serde_json::Value) {
    let opts = RenderOpts { top: usize::MAX, verbose: true, ..RenderOpts::default() };
    let t = rep.render(&NoNames, &opts);
    (t.to_text(), t.to_json())
}

#[test]
fn every_kernel_agrees_across_the_drivers_it_declares() {
    let path = trace_file(&streams());
    let opts = KernelOptions { interval: 500, ..KernelOptions::default() };
    let filtered =
        || Pipeline { filter: Filter::new().threads([ThreadId(0), ThreadId(2)]), roi: false };
    let roi = || Pipeline { roi: true, ..Pipeline::default() };
    for k in KERNELS {
        assert!(k.supports(Driver::Serial) && k.supports(Driver::Follow), "{}", k.name);
        for (what, p) in [("all", Pipeline::default()), ("threads", filtered()), ("roi", roi())] {
            let serial = k.run_with(Driver::Serial, &path, &opts, p.clone(), 1).unwrap();
            let want = rendered(&*serial);
            assert!(want.0.len() > 40, "{} {what}: {}", k.name, want.0);
            for &d in k.drivers.iter().filter(|&&d| d != Driver::Serial) {
                if p.roi && matches!(d, Driver::Chunks | Driver::Shards) {
                    assert!(k.run_with(d, &path, &opts, p.clone(), 2).is_err());
                    continue;
                }
                let got = k.run_with(d, &path, &opts, p.clone(), 2).unwrap();
                assert_eq!(rendered(&*got), want, "{} {what} {d:?}", k.name);
            }
            // the CLI's entry point picks one of those drivers
            let r = TraceReader::open(&path).unwrap();
            let rep = k.run(&r, &opts, p.clone(), &NoNames, 2, &mut |_| {}).unwrap();
            assert_eq!(rendered(&*rep), want, "{} {what} run", k.name);
        }
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn filters_and_roi_reach_the_kernel() {
    let path = trace_file(&streams());
    let k = kernel("counts").unwrap();
    let count = |p: Pipeline| {
        let rep = k.run_with(Driver::Serial, &path, &KernelOptions::default(), p, 1).unwrap();
        rep.as_any().downcast_ref::<Counts>().unwrap().by_pc.values().map(|c| c.loads).sum::<u64>()
    };
    let all = count(Pipeline::default());
    let two =
        count(Pipeline { filter: Filter::new().threads([ThreadId(0), ThreadId(2)]), roi: false });
    let roi = count(Pipeline { roi: true, ..Pipeline::default() });
    // per thread: 286 plain loads, 286 RMWs (a load each), 285 ranges
    assert_eq!(all, 3 * 857);
    assert_eq!(two, 2 * 857);
    // only thread 1 ever enters its ROI (events 0..500 and 1000..1500 of its stream)
    assert!(roi > 0 && roi < 857, "{roi}");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn names_and_unknown_kernels() {
    assert_eq!(
        names(),
        [
            "counts",
            "sharing",
            "false-sharing",
            "cachesim",
            "reuse",
            "working-set",
            "heap",
            "layout"
        ]
    );
    let e = kernel("cachesimm").err().unwrap().to_string();
    assert_eq!(
        e,
        "unknown kernel `cachesimm`; choose one of: counts, sharing, false-sharing, cachesim, \
         reuse, working-set, heap, layout"
    );
    let path = trace_file(&streams());
    let e = kernel("heap")
        .unwrap()
        .run_with(Driver::Chunks, &path, &KernelOptions::default(), Pipeline::default(), 2)
        .err()
        .unwrap();
    assert!(e.to_string().contains("heap cannot run"), "{e}");
    std::fs::remove_file(&path).unwrap();
}
