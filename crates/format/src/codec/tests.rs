use super::tally::FOLD_MIN;
use super::*;
use crate::event::{AccessKind, AllocKind, Event, FreeKind, RmwOp};
use crate::types::{Addr, Pc, ThreadId};
use std::collections::HashMap;

/// Loops whose bytes repeat are folded; the sums stay those of the decoder,
/// including across the breaks (a call, an atomic, a changed stride) and with
/// loop bodies of one to many accesses.
#[test]
fn folded_loops_count_like_the_decoder() {
    let acc = |pc: u64, addr: u64, write: bool, size: u8| Event::Access {
        pc: Pc(pc),
        addr: Addr(addr),
        size,
        kind: if write { AccessKind::Write } else { AccessKind::Read },
        atomic: false,
        value: None,
    };
    let mut evs = Vec::new();
    for i in 0..20_000u64 {
        evs.push(acc(0x1000, 0x10_0000 + 8 * i, false, 8));
        evs.push(acc(0x1008, 0x20_0000 + 4 * i, true, 4));
        if i % 97 == 0 {
            evs.push(Event::FuncEnter { pc: Pc(0x3000), call_site: Pc(0x1010), frame: Addr(0) });
            evs.push(Event::FuncExit { pc: Pc(0x3000) });
        }
        if i % 1000 == 0 {
            evs.push(Event::Rmw {
                pc: Pc(0x1020),
                addr: Addr(0x30_0000),
                size: 8,
                op: RmwOp::FetchAdd,
                value: None,
            });
        }
        // a body of 1 access, and one of 70 (longer than the ring)
        if i % 5000 == 0 {
            for k in 0..300 {
                evs.push(acc(0x2000, 0x40_0000 + 16 * k, false, 2));
            }
            for k in 0..3 {
                for j in 0..70 {
                    evs.push(acc(0x5000 + 4 * j, 0x50_0000 + 8 * j + k, j % 3 == 0, 1));
                }
            }
        }
        // the stride changes midway
        if i == 12_345 {
            evs.push(acc(0x1000, 0x70_0000, false, 8));
        }
    }
    let mut enc = Encoder::new();
    let mut st = Streams::new();
    for e in &evs {
        enc.push(&mut st, e);
    }
    let buf = st.to_raw();
    let mut want: HashMap<Counted, u64> = HashMap::new();
    for e in Decoder::new(&buf[..]) {
        *want.entry(Counted::of(&e.unwrap())).or_default() += 1;
    }
    let mut tally = AccessTally::default();
    let mut got: HashMap<Counted, u64> = HashMap::new();
    let n = Decoder::new(&buf[..])
        .scan_counts(&mut tally, |c, k| *got.entry(c).or_default() += k)
        .unwrap();
    assert_eq!(n, evs.len() as u64);
    assert_eq!(got, want);
    assert!(tally.folded > n / 2, "folded {} of {n}", tally.folded);
}

/// A plain (non-atomic, no value) load or store.
fn plain(pc: u64, addr: u64, size: u8, write: bool) -> Event {
    let kind = if write { AccessKind::Write } else { AccessKind::Read };
    Event::Access { pc: Pc(pc), addr: Addr(addr), size, kind, atomic: false, value: None }
}

fn encode(evs: &[Event]) -> Vec<u8> {
    let mut enc = Encoder::new();
    let mut st = Streams::new();
    for e in evs {
        enc.push(&mut st, e);
    }
    st.to_raw()
}

/// Ranges of varying lengths are tallied per (pc, kind) with their bytes
/// summed: the counts kernel's loads, stores and bytes stay the decoder's.
#[test]
fn ranges_are_tallied_with_their_bytes() {
    let mut evs = Vec::new();
    for i in 0..5_000u64 {
        let kind = if i % 3 == 0 { AccessKind::Write } else { AccessKind::Read };
        let pc = Pc(0x2000 + 16 * (i % 2));
        evs.push(Event::Range { pc, addr: Addr(0x40_0000 + 64 * i), len: 1 + i % 200, kind });
        evs.push(plain(0x2100, 0x50_0000 + 8 * i, 8, false));
    }
    let buf = encode(&evs);
    // (pc, write) -> (events, bytes), from the decoder and from the scan
    let mut want: HashMap<(u64, bool), (u64, u64)> = HashMap::new();
    for e in &evs {
        let (pc, write, len) = match *e {
            Event::Range { pc, len, kind, .. } => (pc.0, kind == AccessKind::Write, len),
            Event::Access { pc, size, .. } => (pc.0, false, u64::from(size)),
            _ => unreachable!(),
        };
        let w = want.entry((pc, write)).or_default();
        w.0 += 1;
        w.1 += len;
    }
    let mut got: HashMap<(u64, bool), (u64, u64)> = HashMap::new();
    let mut ranges = 0;
    let n = Decoder::new(&buf[..])
        .scan_counts(&mut AccessTally::default(), |c, k| {
            let (pc, write, bytes) = match c {
                Counted::Range { pc, write, bytes } => {
                    ranges += 1;
                    (pc.0, write, bytes)
                }
                Counted::Access { pc, write, bytes } => (pc.0, write, k * bytes),
                c => panic!("unexpected {c:?}"),
            };
            let g = got.entry((pc, write)).or_default();
            g.0 += k;
            g.1 += bytes;
        })
        .unwrap();
    assert_eq!(n, evs.len() as u64);
    assert_eq!(got, want);
    // one call per distinct (pc, kind), not one per range (plus one each for
    // the last few events, within a longest event of the end: the full decoder's)
    assert!((4..=12).contains(&ranges), "{ranges} calls");
}

/// A loop whose two branches alternate every few iterations folds often, but
/// each fold is short: the next chunk is scanned without folding.
#[test]
fn short_folds_turn_folding_off() {
    let mut evs = Vec::new();
    let (mut i, mut j) = (0u64, 0u64);
    for k in 0..20_000u64 {
        // runs of 1..=3 iterations of one branch, then of the other
        let a = (k / (1 + k % 3)) % 2 == 0;
        let (pc, addr) = if a { (0x1000, &mut i) } else { (0x1010, &mut j) };
        *addr += 4;
        evs.push(plain(pc, 0x10_0000 + *addr, 4, false));
        evs.push(plain(0x1020, 0x90_0000 + 4 * k, 4, true));
    }
    let buf = encode(&evs);
    let mut tally = AccessTally::default();
    let n = Decoder::new(&buf[..]).scan_counts(&mut tally, |_, _| {}).unwrap();
    assert_eq!(n, evs.len() as u64);
    assert!(tally.folds > 0 && tally.folded < FOLD_MIN * tally.folds);
    assert!(!tally.fold_next);
}

fn sample() -> Vec<Event> {
    vec![
        Event::ThreadStart {
            os_tid: 42,
            parent: Some(ThreadId(0)),
            name: "w".into(),
            stack_lo: Addr(0x7000),
            stack_hi: Addr(0x9000),
            tls: Addr(0x7f00_0000),
        },
        Event::FuncEnter { pc: Pc(0x1000), call_site: Pc(0x2000), frame: Addr(0x7ffd_0000) },
        Event::Access {
            pc: Pc(0x1010),
            addr: Addr(0x7fff_0000),
            size: 8,
            kind: AccessKind::Read,
            atomic: false,
            value: None,
        },
        Event::Access {
            pc: Pc(0x1010),
            addr: Addr(0x7fff_0008),
            size: 4,
            kind: AccessKind::Write,
            atomic: true,
            value: Some(7),
        },
        Event::Range { pc: Pc(0x1020), addr: Addr(5), len: 4096, kind: AccessKind::Write },
        Event::Rmw { pc: Pc(0x1030), addr: Addr(64), size: 8, op: RmwOp::CasFailed, value: None },
        Event::Rmw { pc: Pc(0x1030), addr: Addr(64), size: 4, op: RmwOp::FetchAdd, value: Some(9) },
        Event::Fence { pc: Pc(0x1040), order: 5 },
        Event::Alloc {
            pc: Pc(0x1050),
            addr: Addr(0x5555_0000),
            size: 100,
            kind: AllocKind::Calloc,
            stack: vec![Pc(0x3000), Pc(0x900)],
        },
        Event::Realloc { pc: Pc(1), old: Addr(2), new: Addr(3), size: 4, stack: vec![] },
        Event::Free { pc: Pc(0x1060), addr: Addr(0x5555_0000), kind: FreeKind::DeleteArray },
        Event::FuncExit { pc: Pc(0x1070) },
        Event::Call { func: Pc(0x1100), sp: Addr(0x7ffd_fff8), args: [1, u64::MAX, 0] },
        Event::Return { func: Pc(0x1100), sp: Addr(0x7ffd_fff8), value: 42 },
        Event::ThreadName("worker-1".into()),
        Event::RegisterThread(-3),
        Event::Roi(true),
        Event::Roi(false),
        Event::Tracing(false),
        Event::Fork { child_pid: 99 },
        Event::Exec,
        Event::Clock(123456789),
        Event::Dropped(17),
        Event::Signal(11),
        Event::Time(1_234_567_890_123),
        // deltas from the previous stamp, also backwards (a damaged clock) and huge
        Event::Time(1_234_567_900_000),
        Event::Time(5),
        Event::Time(u64::MAX),
        Event::ThreadExit,
    ]
}

#[test]
fn every_event_roundtrips() {
    let evs = sample();
    let mut enc = Encoder::new();
    let mut st = Streams::new();
    for e in &evs {
        enc.push(&mut st, e);
    }
    let buf = st.to_raw();
    let got: Vec<Event> = Decoder::new(&buf[..]).collect::<Result<_, _>>().unwrap();
    assert_eq!(got, evs);
}

/// The skeleton pass sees exactly the decoder's non-access events (fences
/// included), numbered as the decoder numbers them.
#[test]
fn skeleton_yields_the_non_access_events() {
    let mut evs = sample();
    for i in 0..50u64 {
        evs.insert(3, plain(0x1000 + i, 0x7000_0000 + 8 * i, 4, i % 2 == 0));
    }
    let buf = encode(&evs);
    let want: Vec<(u64, Event)> = Decoder::new(&buf[..])
        .map(|e| e.unwrap())
        .enumerate()
        .filter(|(_, e)| {
            !matches!(e, Event::Access { .. } | Event::Range { .. } | Event::Rmw { .. })
        })
        .map(|(i, e)| (i as u64, e))
        .collect();
    let mut got = Vec::new();
    let n = Decoder::new(&buf[..]).skeleton(|i, e| got.push((i, e))).unwrap();
    assert_eq!(n, evs.len() as u64);
    assert!(want.len() > 5);
    assert_eq!(got, want);
}

/// The runtime sizes its side region on this: no event writes more than
/// `SIDE_PER_OP` side bytes per op byte, nor more than `MAX_SIDE_LEN`.
#[test]
fn side_bytes_stay_within_the_bound() {
    let far = u64::MAX / 3;
    let worst = [
        Event::Access {
            pc: Pc(0),
            addr: Addr(far),
            size: 8,
            kind: AccessKind::Write,
            atomic: true,
            value: Some(u64::MAX),
        },
        Event::Access {
            pc: Pc(0),
            addr: Addr(far),
            size: 8,
            kind: AccessKind::Read,
            atomic: false,
            value: None,
        },
        Event::Rmw { pc: Pc(0), addr: Addr(far), size: 8, op: RmwOp::Cas, value: Some(u64::MAX) },
        Event::Range { pc: Pc(0), addr: Addr(far), len: 1, kind: AccessKind::Read },
        Event::FuncEnter { pc: Pc(0), call_site: Pc(far), frame: Addr(far) },
    ];
    for e in &worst {
        let mut enc = Encoder::new();
        // a first event moves the predictions away from the worst case's
        enc.push(&mut Streams::new(), &Event::FuncExit { pc: Pc(0) });
        let mut s = Streams::new();
        enc.push(&mut s, e);
        assert!(s.side.len() <= MAX_SIDE_LEN, "{e:?}: {}", s.side.len());
        assert!(s.side.len() <= SIDE_PER_OP * s.ops.len(), "{e:?}: {s:?}");
        assert!(s.ops.len() <= MAX_ACCESS_LEN, "{e:?}");
    }
}

/// Stamps microseconds apart take three bytes each after the first.
#[test]
fn time_stamps_are_small_deltas() {
    let mut enc = Encoder::new();
    let mut buf = Streams::new();
    for i in 0..100u64 {
        enc.push(&mut buf, &Event::Time(30_000_000_000_000 + i * 20_000));
    }
    assert!(buf.ops.len() <= 9 + 99 * 4, "{}", buf.ops.len());
    let got: Vec<Event> = Decoder::new(&buf.to_raw()[..]).collect::<Result<_, _>>().unwrap();
    assert_eq!(got[99], Event::Time(30_000_000_000_000 + 99 * 20_000));
}

#[test]
fn strided_accesses_encode_small() {
    let mut enc = Encoder::new();
    let mut buf = Streams::new();
    for i in 0..1000u64 {
        let e = Event::Access {
            pc: Pc(0x401000),
            addr: Addr(0x10_0000 + i * 8),
            size: 8,
            kind: AccessKind::Read,
            atomic: false,
            value: None,
        };
        enc.push(&mut buf, &e);
    }
    // tag + 1-byte pc delta, then a 1-byte addr delta, after the first
    assert!(buf.ops.len() < 2 * 1000 + 8, "{}", buf.ops.len());
    assert!(buf.side.len() < 1000 + 8, "{}", buf.side.len());
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    let mut d = Decoder::new(&[3, 0xffu8, 1, 2][..]);
    assert!(d.next().is_err());
    assert_eq!(d.next(), Ok(None));
    let mut d = Decoder::new(&[3, tag::ALLOC, 0, 0x80][..]);
    assert!(d.next().is_err());
    // an op-stream length past the end
    let mut d = Decoder::new(&[9, tag::THREAD_EXIT][..]);
    assert!(d.next().is_err());
    assert_eq!(d.next(), Ok(None));
    let mut t = AccessTally::default();
    assert!(Decoder::new(&[9, tag::THREAD_EXIT][..]).scan_counts(&mut t, |_, _| {}).is_err());
    // an access whose address is missing from the side stream
    let mut d = Decoder::new(&[2, 0x03, 0x02][..]);
    assert!(d.next().is_err());
}

/// `repeats` counts the whole periods both streams repeat, however long one of
/// them runs on alone (it used to compare that one to its end at every event).
#[test]
fn repeats_counts_whole_periods_of_both_streams() {
    // the naive count: period by period
    let naive = |ops: &[u8], bo: usize, o: usize, side: &[u8], bs: usize, s: usize| {
        let (lo, ls) = (o - bo, s - bs);
        let mut r = 0;
        while o + (r + 1) * lo <= ops.len()
            && s + (r + 1) * ls <= side.len()
            && (0..lo).all(|k| ops[bo + r * lo + k] == ops[o + r * lo + k])
            && (0..ls).all(|k| side[bs + r * ls + k] == side[s + r * ls + k])
        {
            r += 1;
        }
        r
    };
    let mut x = 7u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for case in 0..400 {
        let (lo, ls) = (1 + (rnd() % 40) as usize, (rnd() % 12) as usize);
        let (ro, rs) = ((rnd() % 300) as usize, (rnd() % 300) as usize);
        let body_o: Vec<u8> = (0..lo).map(|_| rnd() as u8).collect();
        let body_s: Vec<u8> = (0..ls).map(|_| rnd() as u8).collect();
        let mut ops: Vec<u8> = body_o.iter().cycle().take(lo * (ro + 1)).copied().collect();
        let mut side: Vec<u8> = body_s.iter().cycle().take(ls * (rs + 1)).copied().collect();
        // a tail that may or may not continue the pattern
        ops.extend((0..(rnd() % 20)).map(|_| if case % 2 == 0 { body_o[0] } else { rnd() as u8 }));
        side.extend((0..(rnd() % 20)).map(|_| rnd() as u8));
        let got = super::fold::repeats(&ops, 0, lo, lo, &side, 0, ls, ls);
        assert_eq!(got, naive(&ops, 0, lo, &side, 0, ls), "case {case}: lo {lo} ls {ls}");
    }
}

/// The encoded streams of `evs`.
fn streams_of(evs: &[Event]) -> Streams {
    let mut enc = Encoder::new();
    let mut st = Streams::new();
    for e in evs {
        enc.push(&mut st, e);
    }
    st
}

/// A strided loop (it folds) and random accesses (they do not), 4000 events each.
fn loop_and_random() -> (Streams, Streams) {
    let looped: Vec<Event> =
        (0..4000).map(|i| plain(0x1000, 0x10_0000 + 8 * i, 8, false)).collect();
    let random: Vec<Event> = (0..4000u64)
        .map(|i| {
            plain(0x1000 + (i * 2_654_435_761) % 977, (i * 0x9E37_79B9) & 0xff_ffff, 8, i % 3 == 0)
        })
        .collect();
    (streams_of(&looped), streams_of(&random))
}

/// A folder that looked at a chunk that did not halve leaves the next 7 chunks
/// unfolded without looking, twice as many after each further miss in a row.
#[test]
fn folding_backs_off_after_misses() {
    let (lp, rn) = loop_and_random();
    let mut f = Folder::new();
    assert!(f.fold(&lp.ops, &lp.side).is_some(), "a strided loop folds");
    assert!(f.fold(&rn.ops, &rn.side).is_none(), "random accesses do not");
    for miss in 0..3u32 {
        let skipped = (0..).take_while(|_| f.fold(&lp.ops, &lp.side).is_none()).count();
        assert_eq!(skipped as u32, 7 << miss, "miss {miss}");
        // the fold that ended the skip counted as a look; miss again
        assert!(f.fold(&rn.ops, &rn.side).is_none());
    }
}

/// Misses are counted per stream, and a chunk too small to show a loop is not
/// one: a thread whose few events are flushed on a timer, or whose accesses are
/// random, leaves another thread's loops folded (mt's workers were half unfolded).
#[test]
fn folding_paces_each_stream_alone() {
    let (lp, rn) = loop_and_random();
    let tiny: Vec<Event> =
        (0..3u64).map(|i| plain(0x2000, 0x40_0000 + 4096 * i, 4, true)).collect();
    let tn = streams_of(&tiny);
    let mut f = Folder::new();
    for round in 0..20 {
        f.set_stream(1);
        assert!(f.fold(&lp.ops, &lp.side).is_some(), "round {round}: stream 1's loop folds");
        f.set_stream(2);
        assert!(f.fold(&rn.ops, &rn.side).is_none());
        f.set_stream(0);
        assert!(f.fold(&tn.ops, &tn.side).is_none(), "three accesses do not repeat");
    }
    // stream 2 missed: its loops wait the skip out, while stream 1's stay folded
    f.set_stream(2);
    assert!(f.fold(&lp.ops, &lp.side).is_none(), "stream 2 is still skipping");
    f.set_stream(1);
    assert!(f.fold(&lp.ops, &lp.side).is_some());
    // the tiny chunks did not make stream 0 skip
    f.set_stream(0);
    assert!(f.fold(&lp.ops, &lp.side).is_some(), "stream 0 never missed");
}
