//! DHAT's JSON (`dhatFileVersion` 2, mode `heap`), as `valgrind --tool=dhat` writes
//! it and `dh_view.html` reads it.
//!
//! The numbers are those of the analysis crate's heap kernel (`memlens analyze heap`)
//! fed in the same merged order: per allocation site (`pps`) total bytes and blocks
//! (`tb`, `tbk`), summed lifetimes (`tl`), the site's peak (`mb`, `mbk`), bytes and
//! blocks live at the end (`eb`, `ebk`), bytes read and written (`rb`, `wb`), and the
//! per-offset access histogram (`acc`) for sites whose blocks all have one size of up
//! to 1024 bytes. A second kernel in the same pass finds the global peak (`tg`) and
//! what each site had live then (`gb`, `gbk`). Time (`tu`) is counted in trace
//! events; `te` is the number of events. Frames (`fs`) are the allocation's call site
//! then its callers, innermost first, as `0xPC: function (file:line)`.

use crate::{DynNamer, Error, Summary};
use memlens_analysis::heap::{track_allocs, AllocFns, AllocTracker, Heap, HeapConfig, SiteStats};
use memlens_analysis::{drive_merged, Kernel};
use memlens_format::{Event, Pc, ThreadId, TraceReader};
use serde_json::json;
use std::collections::HashMap;
use std::io::{BufWriter, Write};

/// Live bytes and blocks per site at the moment the whole heap peaked (DHAT's
/// t-gmax). Mirrors the heap kernel's bookkeeping of blocks.
#[derive(Default)]
struct Peak {
    now: u64,
    sites: HashMap<(Pc, Vec<Pc>), usize>,
    live: Vec<(u64, u64)>,
    at_peak: Vec<(u64, u64)>,
    blocks: HashMap<u64, (usize, u64)>,
    live_bytes: u64,
    max_bytes: u64,
    t_gmax: u64,
    // a new maximum was reached and not yet snapshot
    pending: bool,
}

impl AllocTracker for Peak {
    fn alloc(&mut self, pc: Pc, stack: &[Pc], addr: u64, size: u64) {
        if addr == 0 {
            return;
        }
        let n = self.sites.len();
        let site = *self.sites.entry((pc, stack.to_vec())).or_insert(n);
        if site == self.live.len() {
            self.live.push((0, 0));
            self.at_peak.push((0, 0));
        }
        self.live[site].0 += size;
        self.live[site].1 += 1;
        self.live_bytes += size;
        if self.live_bytes > self.max_bytes {
            self.max_bytes = self.live_bytes;
            self.t_gmax = self.now;
            self.pending = true;
        }
        if let Some(old) = self.blocks.insert(addr, (site, size)) {
            self.release(old);
        }
    }

    fn free(&mut self, addr: u64) {
        if let Some(b) = self.blocks.remove(&addr) {
            self.release(b);
        }
    }
}

impl Peak {
    fn release(&mut self, (site, size): (usize, u64)) {
        // Snapshot lazily, on the first decrease after a new maximum, as DHAT does.
        if self.pending {
            self.at_peak.clone_from(&self.live);
            self.pending = false;
        }
        self.live[site].0 -= size;
        self.live[site].1 -= 1;
        self.live_bytes -= size;
    }
}

impl Kernel for Peak {
    type Output = Peak;

    fn process(&mut self, _t: ThreadId, ev: &Event) {
        self.now += 1;
        track_allocs(self, ev);
    }

    /// A run holds no allocation: only the event count moves.
    fn process_run(&mut self, _t: ThreadId, body: &[Event], _deltas: &[u64], reps: u64) {
        self.now += reps * body.len() as u64;
    }

    fn wants_runs(&self) -> bool {
        true
    }

    fn finish(mut self) -> Peak {
        if self.pending {
            self.at_peak.clone_from(&self.live);
        }
        self
    }
}

/// The `acc` array: per-offset counts, latched at 0xffff, runs of equal values as
/// `-count, value`.
fn acc(by_offset: &[u64]) -> Vec<i64> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < by_offset.len() {
        let v = by_offset[i].min(0xffff) as i64;
        let mut j = i + 1;
        while j < by_offset.len() && by_offset[j].min(0xffff) as i64 == v {
            j += 1;
        }
        if j - i > 1 {
            out.push(-((j - i) as i64));
        }
        out.push(v);
        i = j;
    }
    out
}

/// Writes the heap profile as DHAT JSON.
/// `alloc_fns`: allocation wrappers whose callers are the sites (`--alloc-fn`).
pub fn dhat(
    r: &TraceReader,
    namer: DynNamer<'_>,
    alloc_fns: &AllocFns,
    out: impl Write,
) -> Result<Summary, Error> {
    let cfg = HeapConfig { alloc_fns: alloc_fns.clone(), ..HeapConfig::default() };
    let tuth = cfg.short_lived;
    let (heap, peak) = drive_merged(r, (Heap::new(cfg), Peak::default()), |_| {})?;
    let mut ftbl: Vec<String> = vec!["[root]".into()];
    let mut frame_of: HashMap<Pc, usize> = HashMap::new();
    let mut frame = |pc: Pc| -> usize {
        *frame_of.entry(pc).or_insert_with(|| {
            let c = namer.code(pc);
            let loc = if c.file.is_empty() || c.line == 0 {
                String::new()
            } else {
                format!(" ({}:{})", c.file, c.line)
            };
            ftbl.push(format!("0x{:X}: {}{loc}", pc.0, c.function));
            ftbl.len() - 1
        })
    };
    // Largest sites first, as DHAT's own files tend to be read.
    let mut sites: Vec<&SiteStats> = heap.sites.iter().collect();
    sites.sort_by(|a, b| (b.bytes, b.blocks, a.pc).cmp(&(a.bytes, a.blocks, b.pc)));
    let mut pps = Vec::with_capacity(sites.len());
    for s in &sites {
        let fs: Vec<usize> =
            std::iter::once(s.pc).chain(s.stack.iter().copied()).map(&mut frame).collect();
        let (gb, gbk) =
            peak.sites.get(&(s.pc, s.stack.clone())).map_or((0, 0), |&i| peak.at_peak[i]);
        let mut pp = json!({
            "tb": s.bytes, "tbk": s.blocks, "tl": s.lifetime_sum,
            "mb": s.max_live_bytes, "mbk": s.max_live_blocks,
            "gb": gb, "gbk": gbk,
            "eb": s.live_bytes_at_end, "ebk": s.live_at_end,
            "rb": s.bytes_read, "wb": s.bytes_written,
        });
        if s.uniform_size.is_some() && !s.by_offset.is_empty() {
            pp["acc"] = json!(acc(&s.by_offset));
        }
        pp["fs"] = json!(fs);
        pps.push(pp);
    }
    let v = json!({
        "dhatFileVersion": 2,
        "mode": "heap",
        "verb": "Allocated",
        "bklt": true,
        "bkacc": true,
        "tu": "events",
        "Mtu": "Mevents",
        "tuth": tuth,
        "cmd": crate::command(r),
        "pid": r.header().pid,
        "te": heap.events,
        "tg": peak.t_gmax,
        "pps": pps,
        "ftbl": ftbl,
    });
    let mut out = BufWriter::new(out);
    serde_json::to_writer(&mut out, &v).map_err(std::io::Error::from)?;
    writeln!(out)?;
    out.flush()?;
    Ok(Summary {
        threads: r.streams().len() as u64,
        calls: sites.len() as u64,
        operations: heap.heap_accesses,
        frames: v["ftbl"].as_array().map_or(0, |f| f.len() as u64 - 1),
    })
}

/// Fields dh_view.js requires (`checkFields` in valgrind's dh_view.js).
#[cfg(test)]
const TOP_FIELDS: &[&str] = &[
    "dhatFileVersion",
    "mode",
    "verb",
    "bklt",
    "bkacc",
    "tu",
    "Mtu",
    "cmd",
    "pid",
    "te",
    "pps",
    "ftbl",
    "tg",
    "tuth",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use memlens_analysis::testutil::alloc;
    use memlens_analysis::NoNames;
    use memlens_format::{Addr, FreeKind};
    use serde_json::Value;

    fn free(addr: u64) -> Event {
        Event::Free { pc: Pc(0x99), addr: Addr(addr), kind: FreeKind::Free }
    }

    #[test]
    fn run_length_encoding_latches() {
        assert_eq!(acc(&[3, 3, 3, 1, 0, 0, 70000]), vec![-3, 3, 1, -2, 0, 0xffff]);
        assert_eq!(acc(&[]), Vec::<i64>::new());
    }

    #[test]
    fn sites_peak_and_frames() {
        // site A: two 16-byte blocks live at once (peak 32 + B's 100), then freed;
        // site B: one 100-byte block never freed
        let evs = vec![
            alloc(0x10, 0x1000, 16, &[0x100]),
            alloc(0x20, 0x5000, 100, &[0x200, 0x100]),
            alloc(0x10, 0x2000, 16, &[0x100]),
            wr(0x1, 0x1000),
            rd(0x2, 0x1000),
            rd(0x2, 0x2008),
            free(0x1000),
            free(0x2000),
            alloc(0x10, 0x3000, 16, &[0x100]),
        ];
        let r = trace(&[(0, evs)]);
        let mut out = Vec::new();
        let s = dhat(&r, &NoNames, &AllocFns::default(), &mut out).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        for f in TOP_FIELDS {
            assert!(v.get(f).is_some(), "missing {f}");
        }
        assert_eq!(
            (v["te"].as_u64(), v["tg"].as_u64(), v["pid"].as_u64()),
            (Some(9), Some(3), Some(42))
        );
        assert_eq!(s.calls, 2);
        let b = &v["pps"][0];
        assert_eq!(
            (b["tb"].as_u64(), b["tbk"].as_u64(), b["gb"].as_u64(), b["eb"].as_u64()),
            (Some(100), Some(1), Some(100), Some(100))
        );
        let a = &v["pps"][1];
        assert_eq!(
            (a["tb"].as_u64(), a["tbk"].as_u64(), a["mb"].as_u64(), a["mbk"].as_u64()),
            (Some(48), Some(3), Some(32), Some(2))
        );
        assert_eq!(
            (a["gb"].as_u64(), a["gbk"].as_u64(), a["ebk"].as_u64()),
            (Some(32), Some(2), Some(1))
        );
        assert_eq!((a["rb"].as_u64(), a["wb"].as_u64()), (Some(16), Some(8)));
        // 16 bytes: 0..8 read+written in block 1, 8..16 read in block 2
        assert_eq!(a["acc"], json!([-8, 2, -8, 1]));
        let ftbl: Vec<&str> =
            v["ftbl"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
        assert_eq!(ftbl, ["[root]", "0x20: 0x20", "0x200: 0x200", "0x100: 0x100", "0x10: 0x10"]);
        assert_eq!(a["fs"], json!([4, 3]));
        assert_eq!(b["fs"], json!([1, 2, 3]));
    }
}
