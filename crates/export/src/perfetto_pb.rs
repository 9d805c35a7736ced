//! Perfetto's native protobuf trace (`Trace { repeated TracePacket packet = 1; }`),
//! for ui.perfetto.dev and trace_processor.
//!
//! The same calls and timestamps as the JSON export ([`crate::perfetto`]): events in
//! the merged global order, `timestamp` = memory operations of all threads before
//! the event × 1000 ns, nudged 1 ns past the thread's previous event.
//!
//! Layout, chosen for size:
//! - sequence 1 carries the process's `TrackDescriptor` (pid, command line);
//! - each thread has its own `trusted_packet_sequence_id` (2 + memlens thread
//!   index). Its first packet clears the incremental state
//!   (`SEQ_INCREMENTAL_STATE_CLEARED`), starts a sequence-scoped incremental
//!   clock (`clock_snapshot`: clock 64, `is_incremental`, equal to the boot clock
//!   there) and sets `trace_packet_defaults` (that clock, the thread's track), so
//!   every later packet carries only the ns since the sequence's previous one and
//!   no track. The next packet describes the thread's track (pid, tid,
//!   `T<n> <name>`); every packet after the first is `SEQ_NEEDS_INCREMENTAL_STATE`.
//! - a function's name is interned (`InternedData.event_names`, iid = the frame's
//!   index + 1) in the first packet of the sequence that uses it; slices then
//!   carry only `name_iid`. A `SLICE_END` carries nothing but its type.
//!
//! Each packet is encoded as it is made and written as one `packet` field, so the
//! file streams like the JSON export.
//!
//! Messages are hand-written `prost` structs holding only the fields memlens
//! writes, with the field numbers of perfetto's `protos/perfetto/trace/*.proto`.

use crate::frames::{thread_label, Frames, ThreadIds};
use crate::trace_events::ThreadState;
use crate::{DynNamer, Error, Summary};
use memlens_analysis::Merged;
use memlens_format::{Event, ThreadId, TraceReader};
use prost::Message;
use std::collections::HashMap;
use std::io::{BufWriter, Write};

/// `TracePacket` (protos/perfetto/trace/trace_packet.proto).
#[derive(Clone, PartialEq, Message)]
struct TracePacket {
    #[prost(message, optional, tag = "6")]
    clock_snapshot: Option<ClockSnapshot>,
    #[prost(uint64, optional, tag = "8")]
    timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "10")]
    trusted_packet_sequence_id: Option<u32>,
    #[prost(message, optional, tag = "11")]
    track_event: Option<TrackEvent>,
    #[prost(message, optional, tag = "12")]
    interned_data: Option<InternedData>,
    /// `SequenceFlags` bits.
    #[prost(uint32, optional, tag = "13")]
    sequence_flags: Option<u32>,
    #[prost(uint32, optional, tag = "58")]
    timestamp_clock_id: Option<u32>,
    #[prost(message, optional, tag = "59")]
    trace_packet_defaults: Option<TracePacketDefaults>,
    #[prost(message, optional, tag = "60")]
    track_descriptor: Option<TrackDescriptor>,
    #[prost(bool, optional, tag = "87")]
    first_packet_on_sequence: Option<bool>,
}

const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;

/// `TracePacketDefaults` (trace_packet_defaults.proto).
#[derive(Clone, PartialEq, Message)]
struct TracePacketDefaults {
    #[prost(uint32, optional, tag = "58")]
    timestamp_clock_id: Option<u32>,
    #[prost(message, optional, tag = "11")]
    track_event_defaults: Option<TrackEventDefaults>,
}

/// `ClockSnapshot` (clock_snapshot.proto).
#[derive(Clone, PartialEq, Message)]
struct ClockSnapshot {
    #[prost(message, repeated, tag = "1")]
    clocks: Vec<Clock>,
}

/// `ClockSnapshot.Clock`.
#[derive(Clone, PartialEq, Message)]
struct Clock {
    #[prost(uint32, optional, tag = "1")]
    clock_id: Option<u32>,
    #[prost(uint64, optional, tag = "2")]
    timestamp: Option<u64>,
    #[prost(bool, optional, tag = "3")]
    is_incremental: Option<bool>,
}

const CLOCK_BOOTTIME: u32 = 6;
/// A sequence-scoped clock (ids 64..=127) whose timestamps are deltas.
const CLOCK_INCREMENTAL: u32 = 64;

/// `TrackEventDefaults` (track_event/track_event.proto).
#[derive(Clone, PartialEq, Message)]
struct TrackEventDefaults {
    #[prost(uint64, optional, tag = "11")]
    track_uuid: Option<u64>,
}

/// `TrackDescriptor` (track_event/track_descriptor.proto).
#[derive(Clone, PartialEq, Message)]
struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    uuid: Option<u64>,
    #[prost(message, optional, tag = "3")]
    process: Option<ProcessDescriptor>,
    #[prost(message, optional, tag = "4")]
    thread: Option<ThreadDescriptor>,
    /// `ChildTracksOrdering`.
    #[prost(int32, optional, tag = "11")]
    child_ordering: Option<i32>,
    #[prost(int32, optional, tag = "12")]
    sibling_order_rank: Option<i32>,
}

const CHILD_ORDERING_EXPLICIT: i32 = 3;

/// `ProcessDescriptor` (track_event/process_descriptor.proto).
#[derive(Clone, PartialEq, Message)]
struct ProcessDescriptor {
    #[prost(int32, optional, tag = "1")]
    pid: Option<i32>,
    #[prost(string, repeated, tag = "2")]
    cmdline: Vec<String>,
    #[prost(string, optional, tag = "6")]
    process_name: Option<String>,
}

/// `ThreadDescriptor` (track_event/thread_descriptor.proto).
#[derive(Clone, PartialEq, Message)]
struct ThreadDescriptor {
    #[prost(int32, optional, tag = "1")]
    pid: Option<i32>,
    #[prost(int32, optional, tag = "2")]
    tid: Option<i32>,
    #[prost(string, optional, tag = "5")]
    thread_name: Option<String>,
}

/// `TrackEvent` (track_event/track_event.proto).
#[derive(Clone, PartialEq, Message)]
struct TrackEvent {
    /// `Type`.
    #[prost(int32, optional, tag = "9")]
    r#type: Option<i32>,
    #[prost(uint64, optional, tag = "10")]
    name_iid: Option<u64>,
}

const TYPE_SLICE_BEGIN: i32 = 1;
const TYPE_SLICE_END: i32 = 2;

/// `InternedData` (interned_data/interned_data.proto).
#[derive(Clone, PartialEq, Message)]
struct InternedData {
    #[prost(message, repeated, tag = "2")]
    event_names: Vec<EventName>,
}

/// `EventName` (track_event/track_event.proto).
#[derive(Clone, PartialEq, Message)]
struct EventName {
    #[prost(uint64, optional, tag = "1")]
    iid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    name: Option<String>,
}

const PROCESS_UUID: u64 = 1;
const PROCESS_SEQUENCE: u32 = 1;

fn thread_uuid(t: ThreadId) -> u64 {
    2 + u64::from(t.0)
}

fn sequence(t: ThreadId) -> u32 {
    t.0.saturating_add(2)
}

/// Writes `Trace.packet` fields one at a time.
struct PacketWriter<W: Write> {
    out: BufWriter<W>,
    buf: Vec<u8>,
}

impl<W: Write> PacketWriter<W> {
    fn write(&mut self, p: &TracePacket) -> std::io::Result<()> {
        self.buf.clear();
        // Trace.packet: field 1, length-delimited
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut self.buf);
        p.encode_length_delimited(&mut self.buf).map_err(std::io::Error::other)?;
        self.out.write_all(&self.buf)
    }
}

/// What a thread's sequence has sent.
struct Sequence {
    state: ThreadState,
    /// Absolute ns of the sequence's last packet on [`CLOCK_INCREMENTAL`].
    last_ns: u64,
    /// Frames whose name this sequence has interned.
    interned: Vec<bool>,
}

impl Sequence {
    /// The timestamp to write for a packet at `ns` on the incremental clock.
    fn delta(&mut self, ns: u64) -> u64 {
        let d = ns - self.last_ns;
        self.last_ns = ns;
        d
    }
}

/// Writes the call stacks of every thread as a Perfetto protobuf trace.
pub fn perfetto_pb(
    r: &TraceReader,
    namer: DynNamer<'_>,
    out: impl Write,
) -> Result<Summary, Error> {
    let pid = r.header().pid;
    let mut w = PacketWriter { out: BufWriter::with_capacity(1 << 16, out), buf: Vec::new() };
    let argv = r.meta().argv.clone();
    w.write(&TracePacket {
        trusted_packet_sequence_id: Some(PROCESS_SEQUENCE),
        timestamp: Some(0),
        track_descriptor: Some(TrackDescriptor {
            uuid: Some(PROCESS_UUID),
            process: Some(ProcessDescriptor {
                pid: Some(pid as i32),
                process_name: Some(crate::command(r)),
                cmdline: argv,
            }),
            // threads in memlens order (creation order), as the JSON's thread_sort_index
            child_ordering: Some(CHILD_ORDERING_EXPLICIT),
            ..Default::default()
        }),
        ..Default::default()
    })?;
    let mut frames = Frames::new(namer);
    // raw names of frames, decoded once from the frames' JSON literals
    let mut names: Vec<String> = Vec::new();
    let mut tids = ThreadIds::new();
    let mut seqs: HashMap<ThreadId, Sequence> = HashMap::new();
    let mut now = 0u64;
    let mut sum = Summary::default();
    // A sequence's first packet: clears its state, starts the incremental clock
    // at `ts` and sets the defaults. (`clock_snapshot`, `track_descriptor` and
    // `track_event` are one `oneof data`: one per packet.)
    let start = |t: ThreadId, ts: u64| TracePacket {
        timestamp: Some(ts),
        timestamp_clock_id: Some(CLOCK_BOOTTIME),
        trusted_packet_sequence_id: Some(sequence(t)),
        sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
        first_packet_on_sequence: Some(true),
        clock_snapshot: Some(ClockSnapshot {
            clocks: vec![
                Clock { clock_id: Some(CLOCK_BOOTTIME), timestamp: Some(ts), is_incremental: None },
                Clock {
                    clock_id: Some(CLOCK_INCREMENTAL),
                    timestamp: Some(ts),
                    is_incremental: Some(true),
                },
            ],
        }),
        trace_packet_defaults: Some(TracePacketDefaults {
            timestamp_clock_id: Some(CLOCK_INCREMENTAL),
            track_event_defaults: Some(TrackEventDefaults { track_uuid: Some(thread_uuid(t)) }),
        }),
        ..Default::default()
    };
    let describe = |t: ThreadId, tid: u32, label: String, delta: u64| TracePacket {
        timestamp: Some(delta),
        trusted_packet_sequence_id: Some(sequence(t)),
        sequence_flags: Some(SEQ_NEEDS_INCREMENTAL_STATE),
        track_descriptor: Some(TrackDescriptor {
            uuid: Some(thread_uuid(t)),
            thread: Some(ThreadDescriptor {
                pid: Some(pid as i32),
                tid: Some(tid as i32),
                thread_name: Some(label),
            }),
            sibling_order_rank: Some(t.0 as i32),
            ..Default::default()
        }),
        ..Default::default()
    };
    let slice = |t: ThreadId, ts: u64, ty: i32, name_iid: Option<u64>| TracePacket {
        timestamp: Some(ts),
        trusted_packet_sequence_id: Some(sequence(t)),
        sequence_flags: Some(SEQ_NEEDS_INCREMENTAL_STATE),
        track_event: Some(TrackEvent { r#type: Some(ty), name_iid }),
        ..Default::default()
    };
    for ev in Merged::new(r)? {
        let ev = ev?;
        let t = ev.thread;
        let seq = match seqs.entry(t) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                sum.threads += 1;
                let (os_tid, name) = match &ev.event {
                    Event::ThreadStart { os_tid, name, .. } => (*os_tid, name.as_str()),
                    _ => (0, ""),
                };
                let tid = tids.tid(t.0, os_tid);
                let ts = now.saturating_mul(1000);
                w.write(&start(t, ts))?;
                w.write(&describe(t, tid, thread_label(t.0, name), 0))?;
                let mut state = ThreadState::default();
                state.tid = tid;
                v.insert(Sequence { state, last_ns: ts, interned: Vec::new() })
            }
        };
        let st = &mut seq.state;
        match &ev.event {
            Event::FuncEnter { pc, frame, .. } => {
                let open = frames.open(*pc, frame.0);
                // frames left by a longjmp close first (the one CallStack rule)
                let mut left = 0;
                seq.state.stack.enter(open, |_, _| left += 1);
                for _ in 0..left {
                    let ts = seq.state.ts(now).0;
                    w.write(&slice(t, seq.delta(ts), TYPE_SLICE_END, None))?;
                }
                let st = &mut seq.state;
                let f = open.frame;
                sum.calls += 1;
                let ts = st.ts(now).0;
                let mut p = slice(t, seq.delta(ts), TYPE_SLICE_BEGIN, Some(u64::from(f) + 1));
                let fi = f as usize;
                if seq.interned.len() <= fi {
                    seq.interned.resize(fi + 1, false);
                }
                if !seq.interned[fi] {
                    seq.interned[fi] = true;
                    while names.len() < frames.list.len() {
                        let j = &frames.list[names.len()].json_name;
                        names.push(serde_json::from_str(j).unwrap_or_default());
                    }
                    p.interned_data = Some(InternedData {
                        event_names: vec![EventName {
                            iid: Some(u64::from(f) + 1),
                            name: Some(names[fi].clone()),
                        }],
                    });
                }
                w.write(&p)?;
            }
            Event::FuncExit { pc } => {
                // An exit without a recorded entry (tracing began inside it) is dropped.
                let mut closed = 0;
                st.stack.exit(frames.start(*pc), |_, _| closed += 1);
                for _ in 0..closed {
                    let ts = seq.state.ts(now).0;
                    w.write(&slice(t, seq.delta(ts), TYPE_SLICE_END, None))?;
                }
            }
            Event::ThreadExit => {
                for _ in 0..st.stack.len() {
                    let ts = seq.state.ts(now).0;
                    w.write(&slice(t, seq.delta(ts), TYPE_SLICE_END, None))?;
                }
                seq.state.stack.close_all(memlens_format::callstack::discard);
            }
            Event::ThreadName(n) => {
                // not before the thread's last slice event: the clock counts up
                let ts = seq.delta(now.saturating_mul(1000).max(seq.last_ns));
                w.write(&describe(t, seq.state.tid, thread_label(t.0, n), ts))?;
            }
            e => now += crate::frames::operations(e),
        }
    }
    // Close what is still open, threads in a fixed order.
    for (t, mut seq) in crate::frames::in_thread_order(seqs) {
        for _ in 0..seq.state.stack.len() {
            let ts = seq.state.ts(now).0;
            w.write(&slice(t, seq.delta(ts), TYPE_SLICE_END, None))?;
        }
    }
    frames.finish(&mut w.out, sum, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use memlens_analysis::NoNames;

    /// (ts, type, name_iid, names interned with it)
    type Slice = (u64, i32, u64, Vec<String>);

    #[derive(Clone, PartialEq, Message)]
    struct Trace {
        #[prost(message, repeated, tag = "1")]
        packet: Vec<TracePacket>,
    }

    #[test]
    fn slices_per_thread_with_names_interned_once_per_sequence() {
        let r = nested_calls();
        let mut out = Vec::new();
        let s = perfetto_pb(&r, &NoNames, &mut out).unwrap();
        assert_eq!((s.threads, s.calls, s.operations, s.frames), (2, 5, 4, 3));
        let t = Trace::decode(out.as_slice()).unwrap();
        let p = &t.packet;
        let process = p[0].track_descriptor.as_ref().unwrap().process.as_ref().unwrap();
        assert_eq!(process.pid, Some(42));
        // per sequence: (ts, type, name_iid, interned names) of the track events
        let mut seqs: HashMap<u32, Vec<Slice>> = HashMap::new();
        let mut first: HashMap<u32, u32> = HashMap::new();
        // absolute ns of each sequence's last packet
        let mut last: HashMap<u32, u64> = HashMap::new();
        let mut described: HashMap<u32, Vec<(i32, String, u64)>> = HashMap::new();
        for q in &p[1..] {
            let seq = q.trusted_packet_sequence_id.unwrap();
            first.entry(seq).or_insert_with(|| q.sequence_flags.unwrap());
            let ts = match q.timestamp_clock_id {
                Some(CLOCK_BOOTTIME) => {
                    let c = &q.clock_snapshot.as_ref().unwrap().clocks;
                    assert_eq!(c[1].clock_id, Some(CLOCK_INCREMENTAL));
                    assert_eq!(c[1].timestamp, q.timestamp);
                    let d = q.trace_packet_defaults.as_ref().unwrap();
                    assert_eq!(d.timestamp_clock_id, Some(CLOCK_INCREMENTAL));
                    q.timestamp.unwrap()
                }
                None => last[&seq] + q.timestamp.unwrap(),
                Some(c) => panic!("clock {c}"),
            };
            last.insert(seq, ts);
            // one member of TracePacket's `oneof data` per packet
            let data = [q.clock_snapshot.is_some(), q.track_descriptor.is_some()];
            assert_eq!(data.iter().filter(|x| **x).count() + q.track_event.iter().count(), 1);
            if q.clock_snapshot.is_some() {
                continue;
            }
            if let Some(d) = &q.track_descriptor {
                let th = d.thread.as_ref().unwrap();
                assert_eq!(d.uuid, Some(u64::from(seq)));
                let named = (th.tid.unwrap(), th.thread_name.clone().unwrap(), ts);
                described.entry(seq).or_default().push(named);
                continue;
            }
            assert_eq!(q.sequence_flags, Some(SEQ_NEEDS_INCREMENTAL_STATE));
            let e = q.track_event.as_ref().unwrap();
            let names = q.interned_data.iter().flat_map(|i| &i.event_names);
            let names = names.map(|n| n.name.clone().unwrap()).collect();
            let ev = (ts, e.r#type.unwrap(), e.name_iid.unwrap_or(0), names);
            seqs.entry(seq).or_default().push(ev);
        }
        assert_eq!(first, HashMap::from([(2, 1), (3, 1)]));
        let d = |tid: i32, name: &str, ts: u64| (tid, name.to_string(), ts);
        assert_eq!(described[&2], [d(100, "T0 main", 0)]);
        // renamed after its store (4 operations), after its slice began (3000)
        assert_eq!(described[&3], [d(101, "T1 worker", 3000), d(101, "T1 renamed", 4000)]);
        let e = |ts: u64, ty: i32, iid: u64, n: &[&str]| {
            (ts, ty, iid, n.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(
            seqs[&2],
            [
                e(0, TYPE_SLICE_BEGIN, 1, &["0x10"]),
                e(1000, TYPE_SLICE_BEGIN, 2, &["0x20"]),
                e(3000, TYPE_SLICE_END, 0, &[]),
                e(3001, TYPE_SLICE_BEGIN, 2, &[]), // interned already
                e(3002, TYPE_SLICE_END, 0, &[]),
                e(3003, TYPE_SLICE_END, 0, &[]),
                e(3004, TYPE_SLICE_BEGIN, 3, &["0x30"]),
                e(4000, TYPE_SLICE_END, 0, &[]), // closed at the end
            ]
        );
        // the other sequence interns 0x20 for itself
        assert_eq!(
            seqs[&3],
            [e(3000, TYPE_SLICE_BEGIN, 2, &["0x20"]), e(4000, TYPE_SLICE_END, 0, &[])]
        );
    }
}
