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

/// Feeds every event of `r` to `k` in merged order (see the module docs), then
/// finishes it. `progress` gets the number of events so far every 2^20 events.
pub fn drive_merged<K: Kernel>(
    r: &TraceReader,
    mut k: K,
    mut progress: impl FnMut(u64),
) -> Result<K::Output, Error> {
    let mut n = 0u64;
    for ev in Merged::new(r)? {
        let ev = ev?;
        k.process(ev.thread, &ev.event);
        n += 1;
        if n & 0xf_ffff == 0 {
            progress(n);
        }
    }
    progress(n);
    Ok(k.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

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
