//! Whether a trace holds every event of the run, and if not, why. Every command
//! asks this one place, so they all agree on what "incomplete" means and say it
//! in the same words.

use crate::chunk::ChunkKind;
use crate::reader::{Skipped, TraceReader, Truncation};
use crate::types::ThreadId;
use std::collections::{BTreeMap, BTreeSet};

/// What a trace lacks. Complete when every field is empty or zero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Completeness {
    /// The file ends early or in a damaged chunk that nothing readable follows.
    pub truncation: Option<Truncation>,
    /// Damaged chunks left out (in file order).
    pub skipped: Vec<Skipped>,
    /// Events the runtime counted as not recorded or not written.
    pub dropped_events: u64,
    /// Chunks absent from the file (sequence gaps no skipped chunk explains), per thread.
    pub missing: Vec<(ThreadId, u32)>,
}

impl Completeness {
    /// Works out what `r` lacks.
    pub fn of(r: &TraceReader) -> Completeness {
        let skipped = r.skipped().to_vec();
        // sequence numbers accounted for: read, or skipped with a readable header
        let mut seen: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
        for s in r.streams() {
            let e = seen.entry(s.thread.0).or_default();
            e.extend(s.chunks.iter().map(|&c| r.chunks()[c].header.seq));
        }
        for h in skipped.iter().filter_map(|s| s.header.as_ref()) {
            if h.kind == ChunkKind::Events {
                seen.entry(h.stream).or_default().insert(h.seq);
            }
        }
        let missing = seen
            .into_iter()
            .filter_map(|(t, seqs)| {
                let top = *seqs.last()?;
                let lost = (top as u64 + 1 - seqs.len() as u64) as u32;
                (lost > 0).then_some((ThreadId(t), lost))
            })
            .collect();
        Completeness {
            truncation: r.truncation().cloned(),
            skipped,
            dropped_events: r.dropped_events(),
            missing,
        }
    }

    /// Nothing is missing.
    pub fn is_complete(&self) -> bool {
        self.truncation.is_none()
            && self.skipped.is_empty()
            && self.dropped_events == 0
            && self.missing.is_empty()
    }

    /// Events in the skipped chunks (as their headers count them), per thread.
    pub fn skipped_events(&self) -> BTreeMap<ThreadId, u64> {
        let mut m = BTreeMap::new();
        for h in self.skipped.iter().filter_map(|s| s.header.as_ref()) {
            if h.kind == ChunkKind::Events {
                *m.entry(ThreadId(h.stream)).or_default() += u64::from(h.counts.events);
            }
        }
        m
    }

    /// Each reason the trace is incomplete, as a short phrase.
    pub fn reasons(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(first) = self.skipped.first() {
            let mut what: Vec<String> = self
                .skipped_events()
                .iter()
                .map(|(t, n)| format!("{n} events of thread {}", t.0))
                .collect();
            let meta = self
                .skipped
                .iter()
                .filter(|s| s.header.is_some_and(|h| h.kind == ChunkKind::Meta))
                .count();
            if meta > 0 {
                what.push(format!("{meta} metadata chunk{}", plural(meta)));
            }
            let unreadable: u64 =
                self.skipped.iter().filter(|s| s.header.is_none()).map(|s| s.bytes).sum();
            if unreadable > 0 {
                what.push(format!("{unreadable} bytes behind a damaged chunk header"));
            }
            let n = self.skipped.len();
            out.push(format!(
                "skipped {n} damaged chunk{} ({}; {}at byte {}: {})",
                plural(n),
                what.join(", "),
                if n > 1 { "the first " } else { "" },
                first.offset,
                first.reason
            ));
        }
        for (t, n) in &self.missing {
            out.push(format!("{n} chunk{} of thread {} missing", plural(*n as usize), t.0));
        }
        if let Some(t) = &self.truncation {
            out.push(format!("cut at byte {}: {}", t.offset, t.reason));
        }
        if self.dropped_events > 0 {
            out.push(format!("{} events dropped while recording", self.dropped_events));
        }
        out
    }

    /// The one warning line for an incomplete trace (`None` when complete), without
    /// the program's name in front.
    pub fn warning(&self) -> Option<String> {
        if self.is_complete() {
            return None;
        }
        Some(format!("incomplete trace: {}; the results cover the rest", self.reasons().join("; ")))
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use crate::*;

    /// Two threads of three chunks (`per` events each), then metadata; the chunk
    /// offsets in file order.
    fn trace(per: u64) -> (Vec<u8>, Vec<u64>) {
        let mut w = TraceWriter::new(std::io::Cursor::new(Vec::new()), 1, 1).unwrap();
        for k in 0..3 {
            for t in 0..2u32 {
                let mut b = EventBuffer::new();
                for i in 0..per {
                    b.push(&Event::Access {
                        pc: Pc(0x401000 + i % 5),
                        addr: Addr(0x10000 + 8 * (i * 31 % 977)),
                        size: 8,
                        kind: AccessKind::Write,
                        atomic: false,
                        value: None,
                    });
                }
                w.write_events(t, &mut b, k == 2).unwrap();
            }
        }
        w.write_meta(&[MetaRecord::Process { pid: 1, exe: "/x".into(), argv: vec![] }]).unwrap();
        let bytes = w.finish(|_| {}).unwrap().into_inner();
        let mut offs = Vec::new();
        let mut at = HEADER_SIZE;
        while at < bytes.len() {
            offs.push(at as u64);
            let h = ChunkHeader::decode(bytes[at..at + 64].try_into().unwrap(), 0).unwrap();
            at += CHUNK_HEADER_SIZE + h.payload_len as usize;
        }
        (bytes, offs)
    }

    fn open(bytes: &[u8], name: &str) -> TraceReader {
        let p =
            std::env::temp_dir().join(format!("memlens-complete-{}-{name}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        let r = TraceReader::open(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        r
    }

    fn events(r: &TraceReader, t: u32) -> usize {
        r.events(ThreadId(t)).inspect(|e| assert!(e.is_ok(), "{e:?}")).count()
    }

    #[test]
    fn intact_trace_is_complete() {
        let (b, _) = trace(1000);
        let c = open(&b, "intact").completeness();
        assert!(c.is_complete(), "{c:?}");
        assert_eq!(c.warning(), None);
    }

    #[test]
    fn a_flipped_payload_bit_skips_that_chunk_only() {
        let (mut b, offs) = trace(1000);
        // the middle chunk of thread 1 (chunks alternate T0, T1)
        let at = offs[3] as usize;
        b[at + CHUNK_HEADER_SIZE + 5] ^= 0x10;
        let r = open(&b, "payload");
        assert_eq!(events(&r, 0), 3000);
        assert_eq!(events(&r, 1), 2000);
        assert_eq!(r.totals().events, 5000);
        let c = r.completeness();
        assert!(!c.is_complete());
        assert_eq!(c.skipped.len(), 1);
        assert_eq!(c.skipped_events()[&ThreadId(1)], 1000);
        assert!(c.missing.is_empty(), "a skipped chunk is not also missing: {c:?}");
        assert_eq!(
            c.warning().unwrap(),
            format!(
                "incomplete trace: skipped 1 damaged chunk (1000 events of thread 1; at byte {at}: \
                 chunk payload checksum mismatch); the results cover the rest"
            )
        );
    }

    #[test]
    fn a_damaged_chunk_header_is_stepped_over() {
        let (mut b, offs) = trace(1000);
        let at = offs[2] as usize;
        b[at + 20] ^= 1; // payload length: the header's CRC fails
        let r = open(&b, "header");
        assert_eq!(events(&r, 0), 2000);
        assert_eq!(events(&r, 1), 3000);
        let c = r.completeness();
        assert!(c.truncation.is_none());
        assert_eq!(c.skipped.len(), 1);
        assert_eq!(c.skipped[0].header, None);
        assert_eq!(c.skipped[0].bytes, offs[3] - offs[2]);
        assert_eq!(c.missing, vec![(ThreadId(0), 1)]);
        let w = c.warning().unwrap();
        assert!(w.contains("chunk header checksum mismatch"), "{w}");
        assert!(w.contains("1 chunk of thread 0 missing"), "{w}");
    }

    #[test]
    fn a_damaged_metadata_chunk_is_skipped() {
        let (mut b, offs) = trace(10);
        let at = *offs.last().unwrap() as usize;
        b[at + CHUNK_HEADER_SIZE] ^= 4;
        let r = open(&b, "meta");
        assert_eq!(r.meta().exe, "");
        assert_eq!(r.totals().events, 60);
        let w = r.completeness().warning().unwrap();
        assert!(w.contains("skipped 1 damaged chunk (1 metadata chunk; at byte"), "{w}");
    }

    #[test]
    fn a_cut_trace_says_where() {
        let (b, offs) = trace(1000);
        let r = open(&b[..offs[4] as usize + 100], "cut");
        assert_eq!(r.totals().events, 4000);
        let w = r.completeness().warning().unwrap();
        assert!(
            w.starts_with(&format!("incomplete trace: cut at byte {}: file ends", offs[4])),
            "{w}"
        );
    }
}
