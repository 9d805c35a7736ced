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

/// A stream as [`drive_merged`] reads it: a decoded batch and where its head is.
struct Run<'r> {
    thread: ThreadId,
    events: StreamEvents<'r>,
    batch: Vec<Event>,
    pos: usize,
    /// Clock and stream index of the head (`batch[pos]`).
    clock: u64,
    index: u64,
}

impl Run<'_> {
    /// Moves the head to the next event of the batch; false at the batch's last.
    fn next_in_batch(&mut self) -> bool {
        if self.pos + 1 == self.batch.len() {
            return false;
        }
        self.pos += 1;
        self.index += 1;
        if let Event::Clock(t) = self.batch[self.pos] {
            self.clock = self.clock.max(t);
        }
        true
    }

    /// Moves the head to the first event of the next batch; false at the stream's end.
    fn refill(&mut self) -> Result<bool, Error> {
        self.pos = 0;
        self.index += 1;
        if self.events.next_batch(&mut self.batch, memlens_format::reader::BATCH)? == 0 {
            return Ok(false);
        }
        if let Event::Clock(t) = self.batch[0] {
            self.clock = self.clock.max(t);
        }
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
/// [`Kernel::process_batch`].
pub fn drive_merged<K: Kernel>(
    r: &TraceReader,
    mut k: K,
    mut progress: impl FnMut(u64),
) -> Result<K::Output, Error> {
    let mut runs: Vec<Run<'_>> = Vec::new();
    let mut heap: BinaryHeap<Reverse<(u64, u32, u64, usize)>> = BinaryHeap::new();
    for s in r.streams() {
        let mut run = Run {
            thread: s.thread,
            events: r.events(s.thread),
            batch: Vec::with_capacity(memlens_format::reader::BATCH),
            pos: 0,
            clock: 0,
            index: 0,
        };
        if run.events.next_batch(&mut run.batch, memlens_format::reader::BATCH)? == 0 {
            continue;
        }
        if let Event::Clock(t) = run.batch[0] {
            run.clock = t;
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
        loop {
            // the run: from the head, as far as the batch goes and stays below
            let start = run.pos;
            let mut stopped = false;
            while run.next_in_batch() {
                if !below(run) {
                    stopped = true;
                    break;
                }
            }
            let end = if stopped { run.pos } else { run.batch.len() };
            k.process_batch(run.thread, &run.batch[start..end]);
            n += (end - start) as u64;
            if !stopped {
                if !run.refill()? {
                    break;
                }
                if below(run) {
                    continue;
                }
            }
            heap.push(Reverse(run.key(i)));
            break;
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
