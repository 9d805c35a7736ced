//! A kernel run on another core: [`Piped`] hands the events, in order and in
//! batches, to a thread of the caller's scope that feeds the inner kernel, so
//! a pass whose kernels together outrun one core splits across two (the
//! viewer's index: naming, sharing and the call tree on one, the map builder on
//! the other). The variable of each access goes along with it.

use crate::names::CurrentVariable;
use crate::Kernel;
use memlens_format::{Event, ThreadId};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::{Scope, ScopedJoinHandle};

/// Events per hand-over: large enough that the channel costs nothing per event,
/// small enough that both threads stay in their caches.
const BATCH: usize = 4096;
/// Batches in flight: the feeding thread waits when the inner kernel is this far
/// behind (memory stays bounded).
const IN_FLIGHT: usize = 4;

/// Events ahead the worker announces to the inner kernel ([`Kernel::prefetch`]).
const AHEAD: usize = 16;

/// Runs per hand-over at most (each holds a copy of its body).
const RUNS: usize = 256;

/// A hand-over: events with their variables, and the folded runs among them.
#[derive(Default)]
struct Batch {
    evs: Vec<(ThreadId, Event, u32)>,
    /// Each run comes before `evs[at]`.
    runs: Vec<PipedRun>,
}

/// A folded run ([`Kernel::process_run`]) with its body events' variables.
struct PipedRun {
    at: usize,
    thread: ThreadId,
    body: Vec<Event>,
    deltas: Vec<u64>,
    reps: u64,
    ids: Vec<u32>,
}

impl Batch {
    fn with_capacity(n: usize) -> Batch {
        Batch { evs: Vec::with_capacity(n), runs: Vec::new() }
    }

    fn is_empty(&self) -> bool {
        self.evs.is_empty() && self.runs.is_empty()
    }

    fn clear(&mut self) {
        self.evs.clear();
        self.runs.clear();
    }
}

/// Feeds `inner` on a thread of `scope` (see the module doc).
pub struct Piped<'s, O> {
    batch: Batch,
    wants: fn(&Event) -> bool,
    read: Option<CurrentVariable>,
    tx: Option<SyncSender<Batch>>,
    spare: Receiver<Batch>,
    worker: Option<ScopedJoinHandle<'s, O>>,
    /// The inner kernel's [`Kernel::wants_runs`].
    wants_runs: bool,
}

impl<'s, O: Send + 's> Piped<'s, O> {
    /// Starts `inner` on a thread of `scope`; it is handed the events `wants`
    /// accepts (the others would be copied for nothing: an allocation's stack is
    /// a vector). With `vars`, each event's variable is read from the first as
    /// it is handed over and set in the second (the one `inner` reads) before
    /// `inner` sees the event.
    pub fn spawn<'e, K>(
        scope: &'s Scope<'s, 'e>,
        mut inner: K,
        vars: Option<(CurrentVariable, CurrentVariable)>,
        wants: fn(&Event) -> bool,
    ) -> Self
    where
        K: Kernel<Output = O> + Send + 's,
    {
        let wants_runs = inner.wants_runs();
        let (tx, rx) = sync_channel::<Batch>(IN_FLIGHT);
        let (back, spare) = sync_channel::<Batch>(IN_FLIGHT + 1);
        let (read, write) = match vars {
            Some((r, w)) => (Some(r), Some(w)),
            None => (None, None),
        };
        let worker = scope.spawn(move || {
            for mut batch in rx {
                let mut runs = batch.runs.iter().peekable();
                for (i, (t, ev, id)) in batch.evs.iter().enumerate() {
                    if let Some((t, next, _)) = batch.evs.get(i + AHEAD) {
                        inner.prefetch(*t, next);
                    }
                    while let Some(r) = runs.next_if(|r| r.at == i) {
                        run(&mut inner, write.as_ref(), r);
                    }
                    if let Some(w) = &write {
                        w.set_id(*id);
                    }
                    inner.process(*t, ev);
                }
                for r in runs {
                    run(&mut inner, write.as_ref(), r);
                }
                batch.clear();
                // the feeder may have stopped taking spares: nothing to do then
                let _ = back.try_send(batch);
            }
            inner.finish()
        });
        Piped {
            batch: Batch::with_capacity(BATCH),
            wants,
            read,
            tx: Some(tx),
            spare,
            worker: Some(worker),
            wants_runs,
        }
    }

    fn hand_over(&mut self) {
        let next = self.spare.try_recv().unwrap_or_else(|_| Batch::with_capacity(BATCH));
        let full = std::mem::replace(&mut self.batch, next);
        if let Some(tx) = &self.tx {
            // a send fails only when the worker is gone (it panicked): `finish`
            // reports that
            let _ = tx.send(full);
        }
    }
}

impl<'s, O: Send + 's> Kernel for Piped<'s, O> {
    type Output = O;

    #[inline]
    fn process(&mut self, thread: ThreadId, ev: &Event) {
        if !(self.wants)(ev) {
            return;
        }
        let id = self.read.as_ref().map_or(CurrentVariable::NONE, |r| r.get());
        self.batch.evs.push((thread, ev.clone(), id));
        if self.batch.evs.len() >= BATCH {
            self.hand_over();
        }
    }

    fn process_run(&mut self, thread: ThreadId, body: &[Event], deltas: &[u64], reps: u64) {
        // a body is loads, stores and ranges: wanted alike
        if !body.first().is_some_and(|e| (self.wants)(e)) {
            return;
        }
        let ids = self.read.as_ref().map_or_else(Vec::new, |r| r.run().clone());
        self.batch.runs.push(PipedRun {
            at: self.batch.evs.len(),
            thread,
            body: body.to_vec(),
            deltas: deltas.to_vec(),
            reps,
            ids,
        });
        if self.batch.runs.len() >= RUNS {
            self.hand_over();
        }
    }

    /// The worker reads a run's variables (the private `run` below).
    fn named_runs(&self) -> bool {
        true
    }

    fn wants_runs(&self) -> bool {
        self.wants_runs
    }

    fn finish(mut self) -> O {
        if !self.batch.is_empty() {
            self.hand_over();
        }
        drop(self.tx.take());
        let worker = self.worker.take().expect("finished once");
        match worker.join() {
            Ok(out) => out,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

/// Feeds `inner` a handed-over run, its body's variables set in `write` (each
/// event's in turn when `inner` does not read a run's: [`Kernel::named_runs`]).
fn run<K: Kernel>(inner: &mut K, write: Option<&CurrentVariable>, r: &PipedRun) {
    match write {
        Some(w) if !r.ids.is_empty() && !inner.named_runs() => {
            crate::expand_run(&r.body, &r.deltas, r.reps, |evs| {
                for (ev, &id) in evs.iter().zip(r.ids.iter().cycle()) {
                    w.set_id(id);
                    inner.process(r.thread, ev);
                }
            });
        }
        Some(w) => {
            w.set_id(CurrentVariable::NONE);
            w.set_run(&r.ids);
            inner.process_run(r.thread, &r.body, &r.deltas, r.reps);
            w.set_run(&[]);
        }
        None => inner.process_run(r.thread, &r.body, &r.deltas, r.reps),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlens_format::{AccessKind, Addr, Pc};

    /// Records what it sees and the variable current at each event.
    struct Log(Vec<(u32, u64, u32)>, CurrentVariable);

    impl Kernel for Log {
        type Output = Vec<(u32, u64, u32)>;
        fn process(&mut self, t: ThreadId, ev: &Event) {
            if let Event::Access { addr, .. } = ev {
                self.0.push((t.0, addr.0, self.1.get()));
            }
        }
        fn finish(self) -> Self::Output {
            self.0
        }
    }

    /// Every event wanted arrives, in order, across several batches, with the
    /// variable that was current when it was handed over; the others do not.
    #[test]
    fn piped_kernel_sees_every_event_in_order_with_its_variable() {
        let (read, write) = (CurrentVariable::default(), CurrentVariable::default());
        let n = 3 * BATCH as u64 + 17;
        let got = std::thread::scope(|sc| {
            let log = Log(Vec::new(), write.clone());
            let wants = |ev: &Event| !matches!(ev, Event::Access { size: 1, .. });
            let mut p = Piped::spawn(sc, log, Some((read.clone(), write.clone())), wants);
            for i in 0..n {
                read.set_id(i as u32 * 3);
                let ev = Event::Access {
                    pc: Pc(1),
                    addr: Addr(i),
                    size: if i % 5 == 4 { 1 } else { 8 },
                    kind: AccessKind::Read,
                    atomic: false,
                    value: None,
                };
                p.process(ThreadId((i % 3) as u32), &ev);
            }
            p.finish()
        });
        let want: Vec<_> =
            (0..n).filter(|i| i % 5 != 4).map(|i| ((i % 3) as u32, i, i as u32 * 3)).collect();
        assert_eq!(got, want);
    }
}
