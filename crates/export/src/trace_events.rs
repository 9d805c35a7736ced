//! Chrome trace-event JSON: Perfetto / chrome://tracing (`{"traceEvents": [...]}`)
//! and Spall (the bare array).
//!
//! Events go out in the merged global order (Lamport clocks), so the threads share
//! one time axis: `ts` is the number of memory operations (loads + stores) of all
//! threads before the event, in µs. Each call is a `B`/`E` pair on its thread;
//! `M` events name the process and the threads. Frames still open at a thread's
//! exit or at the end of the trace are closed there.
//!
//! Calls that make no memory operation would give several events of a thread one
//! timestamp, and Perfetto's JSON importer mis-nests events with identical
//! timestamps; so each `B`/`E` of a thread is at least 1 ns after the previous one.
//! The nudges do not accumulate: `ts` is `max(operations µs, previous + 1 ns)`.

use crate::frames::{thread_label, Frames, Open, ThreadIds};
use crate::{DynNamer, Error, Summary};
use memlens_analysis::Merged;
use memlens_format::{CallStack, Event, ThreadId, TraceReader};
use std::collections::HashMap;
use std::io::{BufWriter, Write};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavour {
    Perfetto,
    Spall,
}

/// Writes the call stacks of every thread as Perfetto / Chrome trace-event JSON.
pub fn perfetto(r: &TraceReader, namer: DynNamer<'_>, out: impl Write) -> Result<Summary, Error> {
    write(r, namer, out, Flavour::Perfetto)
}

/// Writes the call stacks of every thread as Spall's JSON (a trace-event array,
/// `B`/`E` sorted per thread, `ts` in µs).
pub fn spall(r: &TraceReader, namer: DynNamer<'_>, out: impl Write) -> Result<Summary, Error> {
    write(r, namer, out, Flavour::Spall)
}

/// A thread's open calls and its nudged clock (shared with the protobuf export).
#[derive(Default)]
pub(crate) struct ThreadState {
    pub tid: u32,
    pub stack: CallStack<Open>,
    named: bool,
    // ns of the thread's last B/E + 1: the earliest its next one may have
    next_ns: u64,
}

impl ThreadState {
    /// The timestamp of the thread's next B/E at `ops` memory operations, as µs
    /// with three decimals.
    pub fn ts(&mut self, ops: u64) -> Ts {
        let ns = (ops.saturating_mul(1000)).max(self.next_ns);
        self.next_ns = ns + 1;
        Ts(ns)
    }
}

/// A timestamp in ns, printed in µs.
#[derive(Clone, Copy)]
pub(crate) struct Ts(pub u64);

impl std::fmt::Display for Ts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 % 1000 {
            0 => write!(f, "{}", self.0 / 1000),
            frac => write!(f, "{}.{frac:03}", self.0 / 1000),
        }
    }
}

struct Writer<W: Write> {
    out: BufWriter<W>,
    first: bool,
    pid: u32,
    flavour: Flavour,
}

impl<W: Write> Writer<W> {
    fn event(&mut self, body: std::fmt::Arguments<'_>) -> std::io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        self.out.write_fmt(body)
    }

    fn thread_name(&mut self, tid: u32, thread: ThreadId, label: &str) -> std::io::Result<()> {
        let pid = self.pid;
        let name = crate::json_str(label);
        self.event(format_args!(
            r#"{{"name":"thread_name","ph":"M","pid":{pid},"tid":{tid},"args":{{"name":{name}}}}}"#
        ))?;
        if self.flavour == Flavour::Spall {
            return Ok(());
        }
        // Perfetto orders threads by this: memlens thread order is creation order.
        let idx = thread.0;
        self.event(format_args!(
            r#"{{"name":"thread_sort_index","ph":"M","pid":{pid},"tid":{tid},"args":{{"sort_index":{idx}}}}}"#
        ))
    }

    fn end(&mut self, tid: u32, ts: Ts) -> std::io::Result<()> {
        let pid = self.pid;
        self.event(format_args!(r#"{{"ph":"E","pid":{pid},"tid":{tid},"ts":{ts}}}"#))
    }
}

fn write(
    r: &TraceReader,
    namer: DynNamer<'_>,
    out: impl Write,
    flavour: Flavour,
) -> Result<Summary, Error> {
    let pid = r.header().pid;
    let mut w = Writer { out: BufWriter::with_capacity(1 << 16, out), first: true, pid, flavour };
    match flavour {
        Flavour::Perfetto => w.out.write_all(
            b"{\"displayTimeUnit\":\"ns\",\"otherData\":{\"exporter\":\"memlens\",\
              \"time\":\"1 us = 1 memory operation (load or store), all threads merged\"},\
              \"traceEvents\":[\n",
        )?,
        Flavour::Spall => w.out.write_all(b"[\n")?,
    }
    let pname = crate::json_str(&crate::command(r));
    w.event(format_args!(
        r#"{{"name":"process_name","ph":"M","pid":{pid},"tid":0,"args":{{"name":{pname}}}}}"#
    ))?;
    let mut frames = Frames::new(namer);
    let mut tids = ThreadIds::new();
    let mut threads: HashMap<ThreadId, ThreadState> = HashMap::new();
    let mut now = 0u64;
    let mut sum = Summary::default();
    for ev in Merged::new(r)? {
        let ev = ev?;
        let t = ev.thread;
        let st = threads.entry(t).or_default();
        if !st.named {
            st.named = true;
            sum.threads += 1;
            let (os_tid, name) = match &ev.event {
                Event::ThreadStart { os_tid, name, .. } => (*os_tid, name.as_str()),
                _ => (0, ""),
            };
            st.tid = tids.tid(t.0, os_tid);
            w.thread_name(st.tid, t, &thread_label(t.0, name))?;
        }
        let tid = st.tid;
        match &ev.event {
            Event::FuncEnter { pc, frame, .. } => {
                let f = frames.open(*pc, frame.0);
                // frames left by a longjmp close first
                let mut left = 0;
                st.stack.enter(f, |_, _| left += 1);
                for _ in 0..left {
                    w.end(tid, st.ts(now))?;
                }
                sum.calls += 1;
                let name = &frames.get(f.frame).json_name;
                let ts = st.ts(now);
                w.event(format_args!(
                    r#"{{"name":{name},"cat":"function","ph":"B","pid":{pid},"tid":{tid},"ts":{ts}}}"#
                ))?;
            }
            Event::FuncExit { pc } => {
                // An exit without a recorded entry (tracing began inside it) is dropped.
                let mut closed = 0;
                st.stack.exit(frames.start(*pc), |_, _| closed += 1);
                for _ in 0..closed {
                    w.end(tid, st.ts(now))?;
                }
            }
            Event::ThreadExit => {
                for _ in 0..st.stack.len() {
                    w.end(tid, st.ts(now))?;
                }
                st.stack.close_all(memlens_format::callstack::discard);
            }
            Event::ThreadName(n) => w.thread_name(tid, t, &thread_label(t.0, n))?,
            e => now += crate::frames::operations(e),
        }
    }
    // Close what is still open, threads in a fixed order.
    for (_, mut st) in crate::frames::in_thread_order(threads) {
        for _ in 0..st.stack.len() {
            let ts = st.ts(now);
            w.end(st.tid, ts)?;
        }
    }
    match flavour {
        Flavour::Perfetto => w.out.write_all(b"\n]}\n")?,
        Flavour::Spall => w.out.write_all(b"\n]\n")?,
    }
    frames.finish(&mut w.out, sum, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use memlens_analysis::NoNames;
    use serde_json::Value;

    /// (phase, name, tid, ts in ns)
    fn events(v: &Value) -> Vec<(String, String, u64, u64)> {
        v.as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "B" || e["ph"] == "E")
            .map(|e| {
                (
                    e["ph"].as_str().unwrap().to_string(),
                    e["name"].as_str().unwrap_or("").to_string(),
                    e["tid"].as_u64().unwrap(),
                    (e["ts"].as_f64().unwrap() * 1000.0).round() as u64,
                )
            })
            .collect()
    }

    #[test]
    fn nested_calls_on_one_time_axis() {
        let r = nested_calls();
        let mut out = Vec::new();
        let s = perfetto(&r, &NoNames, &mut out).unwrap();
        assert_eq!((s.threads, s.calls, s.operations, s.frames), (2, 5, 4, 3));
        assert!(String::from_utf8_lossy(&out).contains(r#""ts":3.001}"#));
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["traceEvents"][0]["args"]["name"], "");
        let ev = events(&v["traceEvents"]);
        let e = |ph: &str, n: &str, tid: u64, ts: u64| (ph.to_string(), n.to_string(), tid, ts);
        assert_eq!(
            ev,
            vec![
                e("B", "0x10", 100, 0),
                e("B", "0x20", 100, 1000),
                e("E", "", 100, 3000),
                e("B", "0x20", 100, 3001), // nudged 1 ns: no two events of a thread share a ts
                e("E", "", 100, 3002),
                e("E", "", 100, 3003),
                e("B", "0x30", 100, 3004),
                e("B", "0x20", 101, 3000),
                e("E", "", 101, 4000),
                e("E", "", 100, 4000),
            ]
        );
        let names: Vec<&str> = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "thread_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["T0 main", "T1 worker", "T1 renamed"]);

        let mut out = Vec::new();
        spall(&r, &NoNames, &mut out).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(events(&v), ev);
    }
}
