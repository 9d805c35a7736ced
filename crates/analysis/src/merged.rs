//! One global order over all threads: a k-way streaming merge of the per-thread
//! streams by `(clock, thread, index)`.
//!
//! The runtime writes `Clock(t)` whenever a thread's Lamport clock changes (see
//! `memlens-rt`'s `order.rs`); an event's clock is that of the last `Clock` at or
//! before it in its stream (0 before the first). Per-thread clocks never decrease,
//! so a heap over one head event per thread yields a total order consistent with
//! every synchronisation the runtime saw. Memory: one decoded chunk and one event
//! per thread, whatever the skew between threads (the trace file is read at random,
//! stream by stream, so no thread's events need to be buffered while another lags).

use crate::{Error, Kernel};
use memlens_format::codec::EventRuns;
use memlens_format::{Event, StreamEvents, ThreadId, TraceReader};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// An event with its place in the merged order.
#[derive(Clone, Debug, PartialEq)]
pub struct MergedEvent {
    /// The thread (stream) that produced it.
    pub thread: ThreadId,
    /// Index of the event in its stream.
    pub index: u64,
    /// Its Lamport clock (0: before the stream's first `Clock`).
    pub clock: u64,
    /// The event.
    pub event: Event,
}

struct Source<'r> {
    thread: ThreadId,
    events: StreamEvents<'r>,
    clock: u64,
    next_index: u64,
    head: Option<Event>,
}

/// Iterator over the events of every stream in merged order.
pub struct Merged<'r> {
    sources: Vec<Source<'r>>,
    heap: BinaryHeap<Reverse<(u64, u32, u64, usize)>>,
    failed: bool,
}

impl<'r> Merged<'r> {
    /// Starts merging every stream of `r`.
    pub fn new(r: &'r TraceReader) -> Result<Merged<'r>, Error> {
        let mut m = Merged { sources: Vec::new(), heap: BinaryHeap::new(), failed: false };
        for s in r.streams() {
            m.sources.push(Source {
                thread: s.thread,
                events: r.events(s.thread),
                clock: 0,
                next_index: 0,
                head: None,
            });
            let i = m.sources.len() - 1;
            m.advance(i)?;
        }
        Ok(m)
    }

    fn advance(&mut self, i: usize) -> Result<(), Error> {
        let s = &mut self.sources[i];
        match s.events.next() {
            None => s.head = None,
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(ev)) => {
                if let Event::Clock(t) = ev {
                    s.clock = s.clock.max(t);
                }
                self.heap.push(Reverse((s.clock, s.thread.0, s.next_index, i)));
                s.next_index += 1;
                s.head = Some(ev);
            }
        }
        Ok(())
    }
}

impl Iterator for Merged<'_> {
    type Item = Result<MergedEvent, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let Reverse((clock, thread, index, i)) = self.heap.pop()?;
        let event = self.sources[i].head.take().expect("a queued source has a head");
        if let Err(e) = self.advance(i) {
            self.failed = true;
            return Some(Err(e));
        }
        Some(Ok(MergedEvent { thread: ThreadId(thread), index, clock, event }))
    }
}

/// A stream as [`drive_merged`] reads it: a decoded batch (its loops' replays left
/// folded in `runs`) and where its head is: event `batch[pos]`, or the run
/// `runs.runs[next_run]` when that run's row is `pos` (a run comes after its body,
/// before the event at its row).
struct Run<'r> {
    thread: ThreadId,
    events: StreamEvents<'r>,
    batch: Vec<Event>,
    runs: EventRuns,
    /// The first run of the batch not yet passed.
    next_run: usize,
    pos: usize,
    /// Clock and stream index of the head.
    clock: u64,
    index: u64,
}

impl Run<'_> {
    /// The run at the head, if the head is one.
    fn head_run(&self) -> Option<&memlens_format::codec::Run> {
        self.runs.runs.get(self.next_run).filter(|r| r.row == self.pos)
    }

    /// Where the events from the head stop: the next run's row, or the batch's end.
    fn events_end(&self) -> usize {
        self.runs.runs.get(self.next_run).map_or(self.batch.len(), |r| r.row)
    }

    /// Moves the head past event `batch[pos]`.
    fn pass_event(&mut self) {
        self.pos += 1;
        self.index += 1;
        self.arrive();
    }

    /// Moves the head past the run at its place.
    fn pass_run(&mut self, len: u64) {
        self.index += len;
        self.next_run += 1;
        self.arrive();
    }

    /// A head that is a `Clock` event carries its clock (a run before it does not).
    fn arrive(&mut self) {
        if self.head_run().is_some() {
            return;
        }
        if let Some(Event::Clock(t)) = self.batch.get(self.pos) {
            self.clock = self.clock.max(*t);
        }
    }

    /// Decodes the next batch, the head at its first event; false at the stream's end.
    fn refill(&mut self, runs: bool) -> Result<bool, Error> {
        self.pos = 0;
        self.next_run = 0;
        let max = memlens_format::reader::BATCH;
        let n = if runs {
            self.events.next_batch_runs(&mut self.batch, &mut self.runs, max)?
        } else {
            self.events.next_batch(&mut self.batch, max)?
        };
        if n == 0 {
            return Ok(false);
        }
        self.arrive();
        Ok(true)
    }

    fn key(&self, i: usize) -> (u64, u32, u64, usize) {
        (self.clock, self.thread.0, self.index, i)
    }
}

/// Feeds every event of `r` to `k` in merged order (see the module docs), then
/// finishes it. `progress` gets the number of events so far every 2^20 events.
///
/// The order is [`Merged`]'s, but a stream's events go to the kernel in runs: as
/// long as its head stays ahead of every other stream's (always, for one thread),
/// no heap operation and no copy of an event, and the run as one
/// [`Kernel::process_batch`]. For a kernel that [wants runs](Kernel::wants_runs),
/// a loop's replays stay folded and go as one [`Kernel::process_run`]: they hold
/// no clock, so no other stream's event falls among them.
pub fn drive_merged<K: Kernel>(
    r: &TraceReader,
    mut k: K,
    mut progress: impl FnMut(u64),
) -> Result<K::Output, Error> {
    let mut runs: Vec<Run<'_>> = Vec::new();
    let mut heap: BinaryHeap<Reverse<(u64, u32, u64, usize)>> = BinaryHeap::new();
    let folded = k.wants_runs();
    for s in r.streams() {
        let mut run = Run {
            thread: s.thread,
            events: r.events(s.thread),
            batch: Vec::with_capacity(memlens_format::reader::BATCH),
            runs: EventRuns::default(),
            next_run: 0,
            pos: 0,
            clock: 0,
            index: 0,
        };
        if !run.refill(folded)? {
            continue;
        }
        heap.push(Reverse(run.key(runs.len())));
        runs.push(run);
    }
    let (mut n, mut next_tick) = (0u64, 1u64 << 20);
    while let Some(Reverse((_, _, _, i))) = heap.pop() {
        // the head of the next stream, which this one's run must stay below
        let limit = heap.peek().map(|Reverse(k)| *k);
        let run = &mut runs[i];
        let below = |run: &Run<'_>| limit.is_none_or(|l| run.key(i) < l);
        // the head is below the limit here
        let alive = loop {
            if let Some(&fr) = run.head_run() {
                let body = &run.batch[fr.row - fr.events..fr.row];
                k.process_run(run.thread, body, run.runs.deltas(&fr), fr.reps);
                n += fr.len();
                run.pass_run(fr.len());
            } else {
                // events from the head, as far as the next run or the batch goes,
                // staying below
                let (start, stop) = (run.pos, run.events_end());
                run.pass_event();
                while run.pos < stop && below(run) {
                    run.pass_event();
                }
                k.process_batch(run.thread, &run.batch[start..run.pos]);
                n += (run.pos - start) as u64;
            }
            if run.pos == run.batch.len() && run.head_run().is_none() && !run.refill(folded)? {
                break false;
            }
            if !below(run) {
                break true;
            }
        };
        if alive {
            heap.push(Reverse(run.key(i)));
        }
        if n >= next_tick {
            progress(n);
            next_tick = (n >> 20 << 20) + (1 << 20);
        }
    }
    progress(n);
    Ok(k.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    /// Records what it is fed.
    #[derive(Default)]
    struct Seen(Vec<(u32, Event)>);

    impl Kernel for Seen {
        type Output = Vec<(u32, Event)>;
        fn process(&mut self, thread: ThreadId, ev: &Event) {
            self.0.push((thread.0, ev.clone()));
        }
        fn finish(self) -> Self::Output {
            self.0
        }
    }

    /// The driver's runs give exactly the merged iterator's order, whatever the
    /// clocks and the batch boundaries.
    #[test]
    fn driver_runs_keep_the_merged_order() {
        let mut streams = Vec::new();
        for t in 0..3u32 {
            let mut evs = Vec::new();
            let mut c = 0;
            for i in 0..3000u64 {
                if (i + u64::from(t)) % (7 + 5 * u64::from(t)) == 0 {
                    c += 1 + (i % 3);
                    evs.push(Event::Clock(c));
                }
                evs.push(rd(0x100 * u64::from(t) + i % 5, 0x1000 + i, 8));
            }
            streams.push((t, evs));
        }
        // one stream alone, too
        for r in [trace(&streams), trace(&streams[1..2])] {
            let want: Vec<(u32, Event)> = Merged::new(&r)
                .unwrap()
                .map(|e| e.unwrap())
                .map(|e| (e.thread.0, e.event))
                .collect();
            let got = drive_merged(&r, Seen::default(), |_| {}).unwrap();
            assert_eq!(got.len(), want.len());
            assert!(got == want);
        }
    }

    /// Counts the runs it is given, and records every event (the runs'
    /// expanded).
    #[derive(Default)]
    struct SeenRuns(Vec<(u32, Event)>, u64);

    impl Kernel for SeenRuns {
        type Output = (Vec<(u32, Event)>, u64);
        fn process(&mut self, thread: ThreadId, ev: &Event) {
            self.0.push((thread.0, ev.clone()));
        }
        fn process_run(&mut self, thread: ThreadId, body: &[Event], deltas: &[u64], reps: u64) {
            self.1 += reps * body.len() as u64;
            crate::expand_run(body, deltas, reps, |evs| self.process_batch(thread, evs));
        }
        fn wants_runs(&self) -> bool {
            true
        }
        fn finish(self) -> Self::Output {
            (self.0, self.1)
        }
    }

    /// Loops the writer folds, each ended by a clock, on three threads: the
    /// driver hands them over as runs, and in the merged order (a clock right
    /// after a run is the next event's, not the run's).
    #[test]
    fn folded_loops_keep_the_merged_order() {
        let mut streams = Vec::new();
        for t in 0..3u64 {
            let mut evs = Vec::new();
            let mut c = 0;
            for round in 0..40u64 {
                let n = 200 + 37 * ((round * 7 + t) % 11);
                for i in 0..n {
                    evs.push(rd(0x400 + 0x40 * t, 0x10_0000 + 0x1_0000 * t + 8 * i, 8));
                    evs.push(rd(0x404 + 0x40 * t, 0x80_0000 - 16 * i, 4));
                    evs.push(wr(0x408 + 0x40 * t, 0x90_0000 + 64 * i, 8));
                }
                c += 1 + (round + t) % 3;
                evs.push(Event::Clock(c));
            }
            streams.push((t as u32, evs));
        }
        let r = trace_folded(&streams);
        let want: Vec<(u32, Event)> =
            Merged::new(&r).unwrap().map(|e| e.unwrap()).map(|e| (e.thread.0, e.event)).collect();
        let (got, folded) = drive_merged(&r, SeenRuns::default(), |_| {}).unwrap();
        assert!(folded > want.len() as u64 / 2, "{folded} of {} events came in runs", want.len());
        assert_eq!(got.len(), want.len());
        assert!(got == want);
        // a kernel that does not want runs gets every event from the decoder
        assert!(drive_merged(&r, Seen::default(), |_| {}).unwrap() == want);
    }

    #[test]
    fn merges_by_clock_then_thread_then_index() {
        let r = trace(&[
            (0, vec![Event::Clock(1), rd(0x10, 0x1000, 8), Event::Clock(5), rd(0x11, 0x1000, 8)]),
            (1, vec![rd(0x20, 0x2000, 8), Event::Clock(3), rd(0x21, 0x2000, 8)]),
        ]);
        let got: Vec<(u32, u64, u64)> = Merged::new(&r)
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| (e.thread.0, e.index, e.clock))
            .collect();
        assert_eq!(
            got,
            vec![(1, 0, 0), (0, 0, 1), (0, 1, 1), (1, 1, 3), (1, 2, 3), (0, 2, 5), (0, 3, 5)]
        );
        // Equal to a full sort by key.
        let mut sorted = got.clone();
        sorted.sort_by_key(|&(t, i, c)| (c, t, i));
        assert_eq!(got, sorted);
    }
}
