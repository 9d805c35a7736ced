//! The column decoder ([`Decoder::decode_columns`]) decodes exactly what the event
//! decoder ([`Decoder::next`]) does, event for event, error for error, on random
//! streams: loops of a few code addresses over strided and scattered addresses
//! (varints of every length), mixed with every other kind of event, whole or cut.

use memlens_format::codec::{self, Columns, Decoder, Encoder};
use memlens_format::*;
use proptest::prelude::*;

/// A code address near a few bases (short pc deltas), or anywhere.
fn arb_pc() -> impl Strategy<Value = Pc> {
    prop_oneof![
        4 => (0u64..3, 0u64..64).prop_map(|(b, o)| Pc(0x40_1000 + b * 0x1_0000 + o * 4)),
        1 => any::<u64>().prop_map(Pc),
    ]
}

/// A data address: small, page-sized, heap-like and full-width magnitudes, so
/// deltas take 1 to 10 bytes.
fn arb_addr() -> impl Strategy<Value = Addr> {
    prop_oneof![
        3 => (0u64..64).prop_map(|i| Addr(0x7f00_0000_1000 + 8 * i)),
        2 => (0u64..1 << 20).prop_map(|i| Addr(0x5555_0000_0000 + i * 8)),
        1 => (0u32..64).prop_flat_map(|b| 0u64..=u64::MAX >> b).prop_map(Addr),
    ]
}

fn arb_kind() -> impl Strategy<Value = AccessKind> {
    prop_oneof![Just(AccessKind::Read), Just(AccessKind::Write)]
}

fn arb_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        12 => (arb_pc(), arb_addr(), 0u32..5, arb_kind(), any::<bool>()).prop_map(
            |(pc, addr, lg, kind, atomic)| Event::Access {
                pc,
                addr,
                size: 1 << lg,
                kind,
                atomic,
                value: None
            }
        ),
        1 => (arb_pc(), arb_addr(), 0u32..5, arb_kind(), any::<u64>()).prop_map(
            |(pc, addr, lg, kind, v)| Event::Access {
                pc,
                addr,
                size: 1 << lg,
                kind,
                atomic: false,
                value: Some(v)
            }
        ),
        1 => (arb_pc(), arb_addr(), any::<u64>(), arb_kind())
            .prop_map(|(pc, addr, len, kind)| Event::Range { pc, addr, len, kind }),
        // memcpy-sized lengths: the column decoder's fast path
        2 => (arb_pc(), arb_addr(), 0u64..4096, arb_kind())
            .prop_map(|(pc, addr, len, kind)| Event::Range { pc, addr, len, kind }),
        1 => (arb_pc(), arb_addr(), 0u32..5, 0u8..9, proptest::option::of(any::<u64>()))
            .prop_map(|(pc, addr, lg, op, value)| Event::Rmw {
                pc,
                addr,
                size: 1 << lg,
                op: RmwOp::from_u8(op).unwrap(),
                value
            }),
        1 => (arb_pc(), arb_pc(), arb_addr())
            .prop_map(|(pc, call_site, frame)| Event::FuncEnter { pc, call_site, frame }),
        1 => arb_pc().prop_map(|pc| Event::FuncExit { pc }),
        1 => (arb_pc(), arb_addr(), any::<u64>(), proptest::collection::vec(arb_pc(), 0..4))
            .prop_map(|(pc, addr, size, stack)| Event::Alloc {
                pc,
                addr,
                size,
                kind: AllocKind::Malloc,
                stack
            }),
        1 => (arb_pc(), arb_addr()).prop_map(|(pc, addr)| Event::Free {
            pc,
            addr,
            kind: FreeKind::Free
        }),
        1 => any::<u64>().prop_map(Event::Clock),
        1 => any::<u64>().prop_map(Event::Time),
        1 => Just(Event::ThreadExit),
    ]
}

/// Random events, with loops: runs of one body repeated (the common case).
fn arb_stream() -> impl Strategy<Value = Vec<Event>> {
    proptest::collection::vec(
        (proptest::collection::vec(arb_event(), 1..8), 1usize..40, 0u64..3),
        0..30,
    )
    .prop_map(|parts| {
        let mut out = Vec::new();
        for (body, reps, stride) in parts {
            for r in 0..reps as u64 {
                for e in &body {
                    let mut e = e.clone();
                    if let Event::Access { addr, .. } = &mut e {
                        addr.0 = addr.0.wrapping_add(r * stride * 8);
                    }
                    out.push(e);
                }
            }
        }
        out
    })
}

/// What `next` yields: the events with their numbers, and the error that ended them.
fn by_next(raw: &[u8]) -> (Vec<(u64, Event)>, Option<codec::DecodeError>) {
    let mut d = Decoder::new(raw);
    let mut out = Vec::new();
    loop {
        match d.next() {
            Ok(Some(e)) => out.push((out.len() as u64, e)),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

/// What `decode_columns` yields in batches of at most `max`, the same with the
/// loops' repeats kept as runs ([`Columns::keep_runs`]) and written out.
fn by_columns(raw: &[u8], max: usize) -> (Vec<(u64, Event)>, Option<codec::DecodeError>) {
    let rows = by_columns_as(raw, max, false);
    assert_eq!(by_columns_as(raw, max, true), rows, "runs kept");
    rows
}

fn by_columns_as(
    raw: &[u8],
    max: usize,
    keep_runs: bool,
) -> (Vec<(u64, Event)>, Option<codec::DecodeError>) {
    let mut d = Decoder::new(raw);
    let mut cols = Columns { keep_runs, ..Columns::new() };
    let mut err = None;
    loop {
        let (before, runs) = (cols.events(), cols.runs.len());
        match d.decode_columns(&mut cols, max) {
            Ok(0) => break,
            Ok(n) => {
                // a run may end a batch past `max`: it takes no rows
                assert!(n <= max || cols.runs.len() > runs, "{n} events in a batch of {max}");
                assert_eq!(cols.events() - before, n, "count returned");
            }
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    assert!(keep_runs || cols.runs.is_empty());
    // the columns stay aligned
    let n = cols.pc.len();
    for len in [cols.seq.len(), cols.addr.len(), cols.size.len(), cols.kind.len()] {
        assert_eq!(len, n);
    }
    assert!(cols.value.is_empty() || cols.value.len() == n);
    (cols.to_events(), err)
}

/// What `next_batch` yields in batches of at most `max`.
fn by_batches(raw: &[u8], max: usize) -> Vec<Event> {
    let mut d = Decoder::new(raw);
    let (mut out, mut b) = (Vec::new(), Vec::new());
    while d.next_batch(&mut b, max).unwrap() > 0 {
        out.append(&mut b);
    }
    out
}

/// What `next_batch_runs` yields in batches of at most `max`, each run written
/// out after its row, and how many events came folded.
fn by_batch_runs(raw: &[u8], max: usize) -> (Vec<Event>, u64) {
    let mut d = Decoder::new(raw);
    let (mut out, mut b, mut runs, mut folded) =
        (Vec::new(), Vec::new(), codec::EventRuns::default(), 0);
    while d.next_batch_runs(&mut b, &mut runs, max).unwrap() > 0 {
        let mut at = 0;
        for r in &runs.runs {
            assert!(r.row >= r.events && r.reps > 0, "a run follows its body");
            out.extend_from_slice(&b[at..r.row]);
            at = r.row;
            for k in 1..=r.reps {
                for (e, &d) in b[r.row - r.events..r.row].iter().zip(runs.deltas(r)) {
                    out.push(codec::replayed(e, d, k));
                }
            }
            folded += r.len();
        }
        out.extend_from_slice(&b[at..]);
    }
    (out, folded)
}

/// The skeleton's events and event count.
fn by_skeleton(raw: &[u8]) -> (Vec<(u64, Event)>, u64) {
    let mut evs = Vec::new();
    let n = Decoder::new(raw).skeleton(|i, e| evs.push((i, e))).unwrap();
    (evs, n)
}

/// The counts scan's totals, in a canonical order, and its event count.
fn by_counts(raw: &[u8]) -> (Vec<String>, u64) {
    let mut tally = codec::AccessTally::default();
    let mut got: std::collections::BTreeMap<String, u64> = Default::default();
    let n = Decoder::new(raw)
        .scan_counts(&mut tally, |c, k| match c {
            // a range's bytes are summed over the `k` it stands for
            codec::Counted::Range { pc, write, bytes } => {
                *got.entry(format!("range {pc:?} {write}")).or_default() += k;
                let b = got.entry(format!("range bytes {pc:?} {write}")).or_default();
                *b = b.wrapping_add(bytes);
            }
            c => *got.entry(format!("{c:?}")).or_default() += k,
        })
        .unwrap();
    (got.into_iter().map(|(c, k)| format!("{c} {k}")).collect(), n)
}

/// The payload a counts scan gets: the length prefix and the op stream only.
fn ops_only(raw: &[u8]) -> Vec<u8> {
    let mut at = 0;
    let n = memlens_format::varint::get(raw, &mut at).unwrap() as usize;
    raw[..at + n].to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn columns_equal_next(evs in arb_stream(), max in 1usize..5000, cut in any::<usize>(), side_cut in any::<usize>()) {
        let mut enc = Encoder::new();
        let mut s = codec::Streams::new();
        for e in &evs {
            enc.push(&mut s, e);
        }
        let whole = s.to_raw();
        let (want, err) = by_next(&whole);
        prop_assert_eq!(err, None);
        prop_assert_eq!(want.iter().map(|x| &x.1).collect::<Vec<_>>(), evs.iter().collect::<Vec<_>>());
        prop_assert_eq!(by_columns(&whole, max), (want.clone(), None));
        // the skeleton pass: the same non-access events, numbered alike
        let skel: Vec<(u64, Event)> = want
            .into_iter()
            .filter(|(_, e)| {
                !matches!(
                    e,
                    Event::Access { .. } | Event::Range { .. } | Event::Rmw { .. }
                )
            })
            .collect();
        prop_assert_eq!(by_skeleton(&whole), (skel, evs.len() as u64));
        // cut in the op stream, or the side stream: the same events, then the same error
        let ops = &s.ops[..cut % (s.ops.len() + 1)];
        let side = &s.side[..side_cut % (s.side.len() + 1)];
        for (o, sd) in [(ops, &s.side[..]), (&s.ops[..], side)] {
            let mut raw = Vec::new();
            codec::join(o, sd, &mut raw);
            prop_assert_eq!(by_columns(&raw, max), by_next(&raw));
        }
    }

    /// A chunk with its loops folded ([`codec::Folder`]) decodes to the same
    /// events by every decoder, and cut anywhere, to the same events and error.
    #[test]
    fn folded_decodes_alike(evs in arb_stream(), max in 1usize..5000, cut in any::<usize>(), side_cut in any::<usize>()) {
        let mut enc = Encoder::new();
        let mut s = codec::Streams::new();
        for e in &evs {
            enc.push(&mut s, e);
        }
        let whole = s.to_raw();
        let want = by_next(&whole);
        let mut folder = codec::Folder::new();
        let Some(f) = folder.fold(&s.ops, &s.side) else { return Ok(()) };
        prop_assert!(f.len() < s.len());
        let folded = f.to_raw();
        prop_assert_eq!(&by_next(&folded), &want);
        prop_assert_eq!(&by_columns(&folded, max), &want);
        prop_assert_eq!(by_batches(&folded, max), want.0.iter().map(|x| x.1.clone()).collect::<Vec<_>>());
        prop_assert_eq!(by_batch_runs(&folded, max).0, want.0.iter().map(|x| x.1.clone()).collect::<Vec<_>>());
        prop_assert_eq!(by_skeleton(&folded), by_skeleton(&whole));
        prop_assert_eq!(by_counts(&folded), by_counts(&whole));
        prop_assert_eq!(by_counts(&ops_only(&folded)), by_counts(&whole));
        let ops = &f.ops[..cut % (f.ops.len() + 1)];
        let side = &f.side[..side_cut % (f.side.len() + 1)];
        for (o, sd) in [(ops, &f.side[..]), (&f.ops[..], side)] {
            let mut raw = Vec::new();
            codec::join(o, sd, &mut raw);
            prop_assert_eq!(by_columns(&raw, max), by_next(&raw));
        }
    }

    /// A loop recorded as a run (the runtime's `loops.rs`: two iterations, then
    /// [`Encoder::repeat`] and [`Encoder::replay`]) decodes to the loop's events
    /// written out, by every decoder, before and after the writer's folding.
    #[test]
    fn runs_decode_as_their_loops(
        before in arb_stream(),
        after in arb_stream(),
        items in proptest::collection::vec((arb_pc(), arb_addr(), -64i64..64, 0u8..5, any::<bool>()), 1..5),
        trips in 3u64..60,
        max in 1usize..5000,
    ) {
        let body: Vec<(u64, u64)> = items.iter().map(|&(pc, _, st, ..)| (pc.0, st as u64)).collect();
        // (the runtime writes such a loop out instead)
        prop_assume!(codec::repeats_alike(&body));
        let at = |i: u64| -> Vec<Event> {
            items.iter().map(|&(pc, addr, stride, lg, w)| Event::Access {
                pc,
                addr: Addr(addr.0.wrapping_add((stride as u64).wrapping_mul(i))),
                size: 1 << lg,
                kind: if w { AccessKind::Write } else { AccessKind::Read },
                atomic: false,
                value: None,
            }).collect()
        };
        let (mut enc, mut s) = (Encoder::new(), codec::Streams::new());
        let (mut plain_enc, mut plain) = (Encoder::new(), codec::Streams::new());
        for e in &before {
            enc.push(&mut s, e);
            plain_enc.push(&mut plain, e);
        }
        for i in 0..trips {
            for e in at(i) {
                plain_enc.push(&mut plain, &e);
            }
        }
        for e in at(0) {
            enc.push(&mut s, &e);
        }
        let (bo, bs) = (s.ops.len(), s.side.len());
        for e in at(1) {
            enc.push(&mut s, &e);
        }
        let (lo, ls) = (s.ops.len() - bo, s.side.len() - bs);
        let mut tag = [0u8; codec::MAX_REPEAT_LEN];
        // SAFETY: `tag` holds MAX_REPEAT_LEN bytes.
        let end = unsafe { enc.repeat(tag.as_mut_ptr(), lo as u64, ls as u64, trips - 2, items.len() as u64) };
        s.ops.extend_from_slice(&tag[..end as usize - tag.as_ptr() as usize]);
        for (e, &(pc, ..)) in at(trips - 1).iter().zip(&items) {
            let Event::Access { addr, .. } = e else { unreachable!() };
            enc.replay(pc.0, addr.0);
        }
        for e in after.iter().chain(before.iter()) {
            enc.push(&mut s, e);
            plain_enc.push(&mut plain, e);
        }
        let want = by_next(&plain.to_raw());
        prop_assert!(want.1.is_none());
        let raw = s.to_raw();
        prop_assert_eq!(&by_next(&raw), &want);
        prop_assert_eq!(&by_columns(&raw, max), &want);
        let (events, folded) = by_batch_runs(&raw, max);
        prop_assert_eq!(events, want.0.iter().map(|x| x.1.clone()).collect::<Vec<_>>());
        // the repeat's replays after the first (decoded as events, as are the two
        // iterations written out before it); fewer when a batch cut one, the
        // replays before the cut decoded one by one
        let rest = (trips - 3) * items.len() as u64;
        prop_assert!(folded <= rest && folded % items.len() as u64 == 0);
        if max >= 4 * (before.len() + 3 * items.len()) {
            prop_assert_eq!(folded, rest, "the loop comes as one run");
        }
        prop_assert_eq!(by_counts(&raw), by_counts(&plain.to_raw()));
        let mut folder = codec::Folder::new();
        if let Some(f) = folder.fold(&s.ops, &s.side) {
            let folded = f.to_raw();
            prop_assert_eq!(&by_next(&folded), &want);
            prop_assert_eq!(&by_columns(&folded, max), &want);
        }
    }

    #[test]
    fn garbage_decodes_alike(bytes in proptest::collection::vec(any::<u8>(), 0..400), max in 1usize..64) {
        prop_assert_eq!(by_columns(&bytes, max), by_next(&bytes));
    }
}

/// `seq` numbers start where [`Decoder::set_seq`] says, and a chunk's events
/// come back from [`Columns::to_events`] in order.
#[test]
fn seq_starts_at_set_seq() {
    let mut enc = Encoder::new();
    let mut s = codec::Streams::new();
    let evs = [
        Event::FuncEnter { pc: Pc(0x1000), call_site: Pc(0x2000), frame: Addr(0x7ff0) },
        Event::Access {
            pc: Pc(0x1004),
            addr: Addr(0x5000),
            size: 4,
            kind: AccessKind::Write,
            atomic: false,
            value: None,
        },
        Event::FuncExit { pc: Pc(0x1008) },
    ];
    for e in &evs {
        enc.push(&mut s, e);
    }
    let raw = s.to_raw();
    let mut d = Decoder::new(&raw[..]);
    d.set_seq(100);
    let mut cols = Columns::new();
    assert_eq!(d.decode_columns(&mut cols, 10).unwrap(), 3);
    assert_eq!(cols.seq, [101]);
    assert_eq!((cols.pc[0], cols.addr[0], cols.size[0], cols.kind[0]), (0x1004, 0x5000, 4, 1));
    assert_eq!(cols.other.iter().map(|o| o.0).collect::<Vec<_>>(), [100, 102]);
    let back: Vec<Event> = cols.to_events().into_iter().map(|x| x.1).collect();
    assert_eq!(back, evs);
}

/// A chunk the writer left unfolded (it does when it falls behind) is folded by
/// the reader when runs are kept: the loop comes out as runs, and the events, the
/// skeleton and their numbers are those of the chunk as written.
#[test]
fn unfolded_chunks_are_folded_for_runs() {
    // two threads' strided loops (a load and a store an iteration, a call now and
    // then), and a third thread of three accesses flushed alone
    let thread_events = |t: u64| -> Vec<Event> {
        let mut evs = Vec::new();
        for i in 0..20_000u64 {
            if i % 5_000 == 0 {
                evs.push(Event::FuncEnter {
                    pc: Pc(0x40_2000),
                    call_site: Pc(0x40_1ff0),
                    frame: Addr(0x7ff0),
                });
            }
            for (k, kind) in [AccessKind::Read, AccessKind::Write].into_iter().enumerate() {
                evs.push(Event::Access {
                    pc: Pc(0x40_1000 + 4 * k as u64),
                    addr: Addr(0x5555_0000_0000 + t * 0x100_0000 + 8 * i),
                    size: 8,
                    kind,
                    atomic: false,
                    value: None,
                });
            }
            if i % 5_000 == 4_999 {
                evs.push(Event::FuncExit { pc: Pc(0x40_2040) });
            }
        }
        evs
    };
    let mut written = std::collections::BTreeMap::new();
    // level 0: stored, so never folded by the writer
    let mut w = TraceWriter::new(std::io::Cursor::new(Vec::new()), 7, 0).unwrap();
    for t in 0..3u32 {
        let evs = if t < 2 { thread_events(t.into()) } else { thread_events(9)[..3].to_vec() };
        let mut b = EventBuffer::new();
        for e in &evs {
            b.push(e);
        }
        w.write_events(t, &mut b, true).unwrap();
        written.insert(ThreadId(t), evs);
    }
    let bytes = w.finish(|_| {}).unwrap().into_inner();
    let path = std::env::temp_dir().join(format!("memlens-refold-{}.trace", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let r = TraceReader::open(&path).unwrap();
    let mut dec = ChunkDecoder::new();
    dec.keep_runs(true);
    let mut got: std::collections::BTreeMap<ThreadId, Vec<Event>> = Default::default();
    let mut skel: std::collections::BTreeMap<ThreadId, Vec<(u64, Event)>> = Default::default();
    let (mut rows, mut runs, mut kept) = (0usize, 0usize, 0usize);
    for (k, c) in r.stream_chunks().into_iter().enumerate() {
        let n = dec
            .skeleton(&r, &c, |i, e| skel.entry(c.thread).or_default().push((c.first_index + i, e)))
            .unwrap();
        assert_eq!(n, u64::from(r.chunks()[c.chunk].header.counts.events));
        // every other chunk from the bytes the skeleton walk folded, the rest read again
        let refolded = dec.take_refolded().filter(|_| k % 2 == 0);
        kept += usize::from(refolded.is_some());
        dec.for_columns_of(&r, &c, refolded.as_deref(), |cols| {
            rows += cols.len();
            runs += cols.runs.len();
            got.entry(c.thread).or_default().extend(cols.to_events().into_iter().map(|x| x.1));
        })
        .unwrap();
    }
    assert!(kept > 0, "no chunk was folded by the skeleton walk");
    std::fs::remove_file(&path).unwrap();
    assert_eq!(got, written);
    for (t, evs) in &written {
        let want: Vec<(u64, Event)> = evs
            .iter()
            .enumerate()
            .filter(|(_, e)| !matches!(e, Event::Access { .. }))
            .map(|(i, e)| (i as u64, e.clone()))
            .collect();
        assert_eq!(skel.get(t).cloned().unwrap_or_default(), want, "thread {t:?}");
    }
    assert!(runs >= 8 && rows * 50 < 80_000, "{rows} rows, {runs} runs");
}
