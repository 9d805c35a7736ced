//! Property tests: every event sequence round-trips, and no input — random bytes or
//! a valid trace with bytes flipped or cut — makes the reader panic.

use memlens_format::codec::{Decoder, Encoder};
use memlens_format::*;
use proptest::prelude::*;

fn arb_event() -> impl Strategy<Value = Event> {
    let pc = any::<u64>().prop_map(Pc);
    let addr = any::<u64>().prop_map(Addr);
    let kind = prop_oneof![Just(AccessKind::Read), Just(AccessKind::Write)];
    prop_oneof![
        (
            pc.clone(),
            addr.clone(),
            0u32..5,
            kind.clone(),
            any::<bool>(),
            proptest::option::of(any::<u64>())
        )
            .prop_map(|(pc, addr, lg, kind, atomic, value)| Event::Access {
                pc,
                addr,
                size: 1 << lg,
                kind,
                atomic,
                value
            }),
        (pc.clone(), addr.clone(), any::<u64>(), kind)
            .prop_map(|(pc, addr, len, kind)| Event::Range { pc, addr, len, kind }),
        (pc.clone(), addr.clone(), 0u32..5, 0u8..9, proptest::option::of(any::<u64>())).prop_map(
            |(pc, addr, lg, op, value)| Event::Rmw {
                pc,
                addr,
                size: 1 << lg,
                op: RmwOp::from_u8(op).unwrap(),
                value
            }
        ),
        (pc.clone(), pc.clone(), addr.clone())
            .prop_map(|(pc, call_site, frame)| Event::FuncEnter { pc, call_site, frame }),
        pc.clone().prop_map(|pc| Event::FuncExit { pc }),
        (pc.clone(), addr.clone(), any::<[u64; 3]>()).prop_map(|(func, sp, args)| Event::Call {
            func,
            sp,
            args
        }),
        (pc.clone(), addr.clone(), any::<u64>()).prop_map(|(func, sp, value)| Event::Return {
            func,
            sp,
            value
        }),
        (
            pc.clone(),
            addr.clone(),
            any::<u64>(),
            0u8..8,
            proptest::collection::vec(any::<u64>().prop_map(Pc), 0..10)
        )
            .prop_map(|(pc, addr, size, k, stack)| Event::Alloc {
                pc,
                addr,
                size,
                kind: AllocKind::from_u8(k).unwrap(),
                stack
            }),
        (pc, addr, 0u8..5).prop_map(|(pc, addr, k)| Event::Free {
            pc,
            addr,
            kind: FreeKind::from_u8(k).unwrap()
        }),
        (any::<u32>(), ".{0,20}", any::<u64>()).prop_map(|(os_tid, name, s)| Event::ThreadStart {
            os_tid,
            parent: None,
            name,
            stack_lo: Addr(s),
            stack_hi: Addr(s.wrapping_add(4096)),
            tls: Addr(s / 2)
        }),
        any::<u64>().prop_map(Event::Clock),
        any::<u64>().prop_map(Event::Time),
        any::<i64>().prop_map(Event::RegisterThread),
    ]
}

/// Occurrences per distinct counted event.
/// Occurrences and bytes per distinct counted event (a range's bytes are its total,
/// so ranges are keyed without them).
fn sums(evs: &[(codec::Counted, u64)]) -> std::collections::HashMap<codec::Counted, (u64, u64)> {
    let mut m = std::collections::HashMap::new();
    for &(c, n) in evs {
        let (key, bytes) = match c {
            codec::Counted::Range { pc, write, bytes } => {
                (codec::Counted::Range { pc, write, bytes: 0 }, bytes)
            }
            c => (c, 0),
        };
        let e: &mut (u64, u64) = m.entry(key).or_default();
        e.0 += n;
        e.1 += bytes;
    }
    m
}

fn sample_trace() -> Vec<u8> {
    let mut w = TraceWriter::new(std::io::Cursor::new(Vec::new()), 7, 1).unwrap();
    w.write_meta(&[MetaRecord::Process { pid: 7, exe: "/x".into(), argv: vec!["x".into()] }])
        .unwrap();
    for t in 0..2u32 {
        let mut b = EventBuffer::new();
        for i in 0..300u64 {
            b.push(&Event::Access {
                pc: Pc(0x401000 + i % 7),
                addr: Addr(0x10000 + 8 * i),
                size: 8,
                kind: AccessKind::Read,
                atomic: false,
                value: None,
            });
        }
        w.write_events(t, &mut b, true).unwrap();
    }
    w.finish(|_| {}).unwrap().into_inner()
}

fn read_everything(bytes: &[u8]) {
    let path = std::env::temp_dir().join(format!(
        "memlens-prop-{}-{:?}.trace",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::write(&path, bytes).unwrap();
    if let Ok(r) = TraceReader::open(&path) {
        let _ = r.totals();
        for s in r.streams() {
            for ev in r.events(s.thread) {
                if ev.is_err() {
                    break;
                }
            }
        }
    }
    let _ = std::fs::remove_file(&path);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn events_roundtrip(evs in proptest::collection::vec(arb_event(), 0..200)) {
        let mut enc = Encoder::new();
        let mut buf = codec::Streams::new();
        for e in &evs {
            enc.push(&mut buf, e);
        }
        let raw = buf.to_raw();
        let got: Vec<Event> = Decoder::new(&raw[..]).collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(got, evs);
    }

    #[test]
    fn count_scan_agrees_with_decoder(evs in proptest::collection::vec(arb_event(), 0..200), cut in any::<usize>()) {
        let mut enc = Encoder::new();
        let mut buf = codec::Streams::new();
        for e in &evs {
            enc.push(&mut buf, e);
        }
        // whole and with the op stream cut short: the same events, then the same
        // error; and the scan needs no side stream
        let mut tally = codec::AccessTally::default();
        let ops = &buf.ops[..];
        for o in [ops, &ops[..cut % (ops.len() + 1)]] {
            let (mut b, mut b_ops) = (Vec::new(), Vec::new());
            codec::join(o, &buf.side, &mut b);
            codec::join(o, &[], &mut b_ops);
            let mut full = Vec::new();
            let mut d = Decoder::new(&b[..]);
            let want_err = loop {
                match d.next() {
                    Ok(Some(e)) => full.push((codec::Counted::of(&e), 1)),
                    Ok(None) => break None,
                    Err(e) => break Some(e),
                }
            };
            for b in [&b, &b_ops] {
                // the scan tallies plain accesses: compare sums per distinct event
                let mut got = Vec::new();
                let r = Decoder::new(&b[..]).scan_counts(&mut tally, |c, n| got.push((c, n)));
                prop_assert_eq!(sums(&got), sums(&full));
                let total: u64 = got.iter().map(|&(_, n)| n).sum();
                prop_assert_eq!(total, full.len() as u64);
                if let Ok(n) = &r {
                    prop_assert_eq!(total, *n);
                }
                prop_assert_eq!(r.err(), want_err);
            }
        }
    }

    #[test]
    fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        for _ in Decoder::new(&bytes[..]) {}
        let _ = Decoder::new(&bytes[..]).scan_counts(&mut codec::AccessTally::default(), |_, _| {});
        let _ = MetaRecord::decode_all(&bytes);
    }

    #[test]
    fn damaged_traces_never_panic(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8), cut in any::<usize>()) {
        let mut t = sample_trace();
        for (at, x) in flips {
            let i = at % t.len();
            t[i] ^= x | 1;
        }
        let n = cut % (t.len() + 1);
        read_everything(&t[..n]);
        read_everything(&t);
    }
}
