//! Analysis kernels over memlens traces.
//!
//! A [`Kernel`] consumes events one at a time and finishes with a result; the
//! `drive_*` functions feed it from a [`TraceReader`] — stream by stream, or (for
//! kernels that allow it) one shard per thread in parallel, merged at the end. The
//! same kernels later run over a live stream. Kernels see raw code and data
//! addresses; naming (file:line, variables) is applied to their results afterwards,
//! through a [`Namer`], so each distinct address is symbolised once, never per event.
//!
//! Kernels are push consumers (the driver calls `process`) rather than pull
//! iterators: one trace pass can feed several kernels (a tuple of kernels is a
//! kernel), kernels never do I/O, and the same code runs over files and live streams.
//! Kernels that only need per-thread state are [`ShardKernel`]s; kernels whose result
//! depends on the interleaving of threads (cache simulation, ownership transfers,
//! working sets over all threads) take events in whatever order the driver delivers
//! them, and give exact cross-thread answers once the driver merges streams in time
//! order.
//!
//! # Brief overview
//! - [`Kernel`]: `process(thread, event)` + `finish()`; [`ShardKernel`]: `fork` + `merge`.
//! - [`drive_serial`], [`drive_parallel`]: feed a kernel from a trace;
//!   [`drive_merged`]: in one global order consistent with synchronisation (Lamport
//!   clocks, k-way merge by `(clock, thread, index)`).
//! - [`Filter`] / [`Filtered`]: thread, code range, data range and event-window filters
//!   around any kernel.
//! - [`Namer`] ([`NoNames`]), [`Render`], [`Table`], [`RenderOpts`]: naming and
//!   printing results as aligned text or JSON.
//! - Kernels:
//!   - [`counts::Counts`]: loads/stores/bytes per code address and thread, allocations
//!     per call site — what `memlens report` shows.
//!   - [`cachesim::CacheSim`]: N-level cache hierarchy, per level, line and variable.
//!   - [`reuse::Reuse`]: exact reuse distance and reuse time histograms.
//!   - [`working_set::WorkingSet`]: distinct lines and pages per interval.
//!   - [`sharing::Sharing`]: data touched by several threads (DINAMITE's analysis).
//!   - [`false_sharing::FalseSharing`]: lines written by one thread and accessed by
//!     another at disjoint bytes.
//!   - [`heap::Heap`]: DHAT-like allocation-site profile, with the heap over time.
//!   - [`calltree::CallTree`]: the call tree (top-down, bottom-up, callers and callees).
//!   - [`layout::Layout`]: field hotness and co-access per allocation site, with
//!     layout advice.
//!
//! # Example
//! ```
//! use memlens_analysis::{counts::Counts, drive_serial};
//! use memlens_format::{AccessKind, Addr, Event, EventBuffer, Pc, ThreadId, TraceReader, TraceWriter};
//!
//! let path = std::env::temp_dir().join(format!("an-doc-{}.trace", std::process::id()));
//! let mut w = TraceWriter::new(std::fs::File::create(&path)?, 1, 1)?;
//! let mut buf = EventBuffer::new();
//! for i in 0..3 {
//!     buf.push(&Event::Access { pc: Pc(0x10), addr: Addr(0x1000 + 8 * i), size: 8,
//!         kind: AccessKind::Read, atomic: false, value: None });
//! }
//! w.write_events(0, &mut buf, true)?;
//! w.finish(|_| {})?;
//!
//! let r = TraceReader::open(&path)?;
//! let counts = drive_serial(&r, Counts::default(), |_| {})?;
//! assert_eq!(counts.by_pc[&Pc(0x10)].loads, 3);
//! # std::fs::remove_file(&path)?;
//! Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

/// Builds a [`table::Row`] from `key => value` pairs.
macro_rules! row {
    ($($k:expr => $v:expr),* $(,)?) => {{
        let mut r = $crate::table::Row::new();
        $( r.insert(::std::string::String::from($k), ::serde_json::json!($v)); )*
        r
    }};
}

/// Adds each named counter field of `$from` to the same field of `$to`: the merge
/// of per-thread or per-shard tallies (also used by the viewer's index).
#[macro_export]
macro_rules! add_fields {
    ($to:expr, $from:expr; $($f:ident),+ $(,)?) => {
        $( $to.$f += $from.$f; )+
    };
}

mod blocks;
pub mod cachesim;
pub mod calltree;
pub mod counts;
pub mod false_sharing;
pub mod filter;
mod fxhash;
pub mod heap;
pub mod layout;
pub mod live;
pub mod merged;
pub mod names;
pub mod piped;
pub mod registry;
pub mod reuse;
pub mod sharing;
pub mod table;
/// Event and trace builders for unit tests (here and, with the `testutil` feature,
/// in other crates).
#[cfg(any(test, feature = "testutil"))]
#[doc(hidden)]
#[allow(missing_docs)]
pub mod testutil;
pub mod working_set;

pub use filter::{Filter, Filtered, WindowBasis};
pub use live::{ChunkSource, Live, TailState, TraceTail};
pub use merged::{drive_merged, Merged, MergedEvent};
pub use names::{AccessNamer, CodeName, CurrentVariable, DataName, Named, Namer, NoNames};
pub use piped::Piped;
pub use registry::{DynKernel, KernelInfo, KernelOptions, Pipeline, Report};
pub use table::{Render, RenderOpts, Table};

use memlens_format::{AccessKind, ChunkDecoder, Event, Pc, ThreadId, TraceReader};

/// Starts loading `x`'s cache line (a hint: it reads nothing, cannot fault, and does
/// nothing where the CPU has no prefetch instruction). For [`Kernel::prefetch`]
/// implementations, which fetch the state a coming event will touch.
#[inline(always)]
pub fn prefetch_line<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults and `x` is a valid reference.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (x as *const T).cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// Why an analysis could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] memlens_format::Error),
    /// A kernel's configuration is invalid (cache geometry, option syntax).
    #[error("{0}")]
    Config(String),
    /// A cache annotation file could not be read.
    #[error("{0}")]
    Annotation(String),
}

/// A consumer of events. Push model: the driver reads the trace and calls
/// `process` for every event, so kernels never do I/O and several can share a pass.
pub trait Kernel {
    /// What the kernel produces.
    type Output;

    /// Called once per event, with the thread that produced it.
    fn process(&mut self, thread: ThreadId, ev: &Event);

    /// Called with consecutive events of one thread (a decoded batch); the same as
    /// calling [`Kernel::process`] for each. Hot kernels override it to hoist
    /// per-thread lookups out of the loop.
    #[inline]
    fn process_batch(&mut self, thread: ThreadId, evs: &[Event]) {
        for ev in evs {
            self.process(thread, ev);
        }
    }

    /// Called with a loop's replays that the decoder left folded
    /// ([`memlens_format::codec::EventRuns`]): `body` (loads, stores and ranges
    /// just given to the kernel) `reps` more times, each event's address moved by
    /// its delta in `deltas` every time. The same as calling [`Kernel::process`]
    /// for each of those events, which the default does ([`expand_run`]); kernels
    /// that can count a run without visiting each access override it.
    fn process_run(&mut self, thread: ThreadId, body: &[Event], deltas: &[u64], reps: u64) {
        expand_run(body, deltas, reps, |evs| self.process_batch(thread, evs));
    }

    /// Whether the kernel takes a loop's replays as one [`Kernel::process_run`]
    /// to its advantage: the driver then leaves them folded ([`drive_merged`]);
    /// else (the default) the decoder replays them, which costs less than a
    /// run's expansion.
    fn wants_runs(&self) -> bool {
        false
    }

    /// A hint that `ev` comes soon (a few events on): a kernel whose state for a
    /// scattered access is a cache miss may start loading it. The default does
    /// nothing; drivers and adaptors call it where they see events ahead.
    #[inline]
    fn prefetch(&self, thread: ThreadId, ev: &Event) {
        let _ = (thread, ev);
    }

    /// Whether [`Kernel::process_run`] may be called inside a [`Named`] pass
    /// with the body's variables in [`CurrentVariable::run`] (the current one
    /// unset): true for a kernel that reads no [`CurrentVariable`], or reads the
    /// run's. False (the default): [`Named`] gives each event of a run one by
    /// one with its variable set.
    fn named_runs(&self) -> bool {
        false
    }

    /// Called once after the last event.
    fn finish(self) -> Self::Output;
}

/// The events of a folded run (see [`Kernel::process_run`]) in order, handed to
/// `f` a few thousand at a time: each iteration is the one before with every
/// address moved by its delta (what the decoder's replay gives).
pub fn expand_run(body: &[Event], deltas: &[u64], reps: u64, mut f: impl FnMut(&[Event])) {
    if body.is_empty() || reps == 0 {
        return;
    }
    let per = (memlens_format::reader::BATCH / body.len()).max(1);
    let mut cur = body.to_vec();
    let mut evs = Vec::with_capacity(per.min(reps as usize) * body.len());
    for _ in 0..reps {
        for (e, &d) in cur.iter_mut().zip(deltas) {
            if let Event::Access { addr, .. } | Event::Range { addr, .. } = e {
                addr.0 = addr.0.wrapping_add(d);
            }
        }
        evs.extend_from_slice(&cur);
        if evs.len() >= per * body.len() {
            f(&evs);
            evs.clear();
        }
    }
    if !evs.is_empty() {
        f(&evs);
    }
}

/// Feeding a kernel through a mutable reference: the owner keeps the kernel and
/// finishes it itself (finishing the reference does nothing).
impl<K: Kernel + ?Sized> Kernel for &mut K {
    type Output = ();

    #[inline]
    fn process(&mut self, thread: ThreadId, ev: &Event) {
        (**self).process(thread, ev)
    }

    #[inline]
    fn process_batch(&mut self, thread: ThreadId, evs: &[Event]) {
        (**self).process_batch(thread, evs)
    }

    fn process_run(&mut self, thread: ThreadId, body: &[Event], deltas: &[u64], reps: u64) {
        (**self).process_run(thread, body, deltas, reps)
    }

    fn named_runs(&self) -> bool {
        (**self).named_runs()
    }

    fn wants_runs(&self) -> bool {
        (**self).wants_runs()
    }

    #[inline]
    fn prefetch(&self, thread: ThreadId, ev: &Event) {
        (**self).prefetch(thread, ev)
    }

    fn finish(self) {}
}

/// Two kernels fed by one pass.
impl<A: Kernel, B: Kernel> Kernel for (A, B) {
    type Output = (A::Output, B::Output);

    #[inline]
    fn process(&mut self, thread: ThreadId, ev: &Event) {
        self.0.process(thread, ev);
        self.1.process(thread, ev);
    }

    fn process_run(&mut self, thread: ThreadId, body: &[Event], deltas: &[u64], reps: u64) {
        self.0.process_run(thread, body, deltas, reps);
        self.1.process_run(thread, body, deltas, reps);
    }

    fn named_runs(&self) -> bool {
        self.0.named_runs() && self.1.named_runs()
    }

    fn wants_runs(&self) -> bool {
        self.0.wants_runs() || self.1.wants_runs()
    }

    #[inline]
    fn prefetch(&self, thread: ThreadId, ev: &Event) {
        self.0.prefetch(thread, ev);
        self.1.prefetch(thread, ev);
    }

    fn finish(self) -> Self::Output {
        (self.0.finish(), self.1.finish())
    }
}

/// Three kernels fed by one pass.
impl<A: Kernel, B: Kernel, C: Kernel> Kernel for (A, B, C) {
    type Output = (A::Output, B::Output, C::Output);

    #[inline]
    fn process(&mut self, thread: ThreadId, ev: &Event) {
        self.0.process(thread, ev);
        self.1.process(thread, ev);
        self.2.process(thread, ev);
    }

    fn process_run(&mut self, thread: ThreadId, body: &[Event], deltas: &[u64], reps: u64) {
        self.0.process_run(thread, body, deltas, reps);
        self.1.process_run(thread, body, deltas, reps);
        self.2.process_run(thread, body, deltas, reps);
    }

    fn named_runs(&self) -> bool {
        self.0.named_runs() && self.1.named_runs() && self.2.named_runs()
    }

    fn wants_runs(&self) -> bool {
        self.0.wants_runs() || self.1.wants_runs() || self.2.wants_runs()
    }

    #[inline]
    fn prefetch(&self, thread: ThreadId, ev: &Event) {
        self.0.prefetch(thread, ev);
        self.1.prefetch(thread, ev);
        self.2.prefetch(thread, ev);
    }

    fn finish(self) -> Self::Output {
        (self.0.finish(), self.1.finish(), self.2.finish())
    }
}

/// One contiguous run of bytes an event reads or writes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Touch {
    pub pc: Pc,
    pub addr: u64,
    pub len: u64,
    pub write: bool,
}

/// Calls `f` for each memory touch of an event: one for an access or range, a load
/// then a store for an RMW (a load only for a failed compare-exchange).
#[inline]
pub(crate) fn for_each_touch(ev: &Event, mut f: impl FnMut(Touch)) {
    match *ev {
        Event::Access { pc, addr, size, kind, .. } => f(Touch {
            pc,
            addr: addr.0,
            len: u64::from(size.max(1)),
            write: kind == AccessKind::Write,
        }),
        Event::Range { pc, addr, len, kind } if len > 0 => {
            f(Touch { pc, addr: addr.0, len, write: kind == AccessKind::Write })
        }
        Event::Rmw { pc, addr, size, op, .. } => {
            let len = u64::from(size.max(1));
            f(Touch { pc, addr: addr.0, len, write: false });
            if op.stores() {
                f(Touch { pc, addr: addr.0, len, write: true });
            }
        }
        _ => {}
    }
}

/// A kernel that can run as independent per-thread shards and merge them.
pub trait ShardKernel: Kernel + Send + Sized {
    /// A fresh, empty shard like `self`.
    fn fork(&self) -> Self;
    /// Folds another shard into this one.
    fn merge(&mut self, other: Self);
}

/// A [`ShardKernel`] whose result does not depend on the order of events, even
/// within a thread: a shard may see any chunks of any threads in any order, and
/// merging the shards gives the same result (sums and sets, e.g. [`counts::Counts`]).
/// Such kernels can run with [`drive_chunks`], which uses every core even on a
/// single-threaded trace.
pub trait ChunkKernel: ShardKernel {}

/// Feeds every stream of `r` to `k`, one stream after the other, then finishes it.
/// `progress` gets the number of events processed so far every 2^20 events or so.
pub fn drive_serial<K: Kernel>(
    r: &TraceReader,
    mut k: K,
    mut progress: impl FnMut(u64),
) -> Result<K::Output, Error> {
    let mut n = 0u64;
    let mut last = 0u64;
    let mut dec = ChunkDecoder::new();
    for c in r.stream_chunks() {
        dec.decode(r, &c, |evs| {
            k.process_batch(c.thread, evs);
            n += evs.len() as u64;
        })?;
        if n - last >= 1 << 20 {
            last = n;
            progress(n);
        }
    }
    progress(n);
    Ok(k.finish())
}

/// Runs `k` over every chunk of `r` on `threads` worker threads (one shard per
/// worker, chunks handed out in file order), merges the shards, then finishes.
/// `progress` is called on the calling thread with the number of events processed
/// so far, a few times a second. Errors: the first corrupt chunk met.
pub fn drive_chunks<K: ChunkKernel>(
    r: &TraceReader,
    k: K,
    threads: usize,
    progress: impl FnMut(u64),
) -> Result<K::Output, Error> {
    chunk_workers(r, k, threads, progress, |dec, shard, c| {
        let mut n = 0u64;
        dec.decode(r, c, |evs| {
            shard.process_batch(c.thread, evs);
            n += evs.len() as u64;
        })
        .map(|()| n)
        .map_err(|e| (n, e))
    })
}

/// [`drive_chunks`] for [`counts::Counts`] over the address-free scan
/// ([`ChunkDecoder::scan_counts`]): the same result, several times faster, since
/// neither addresses nor events are materialised.
pub fn drive_counts(
    r: &TraceReader,
    threads: usize,
    progress: impl FnMut(u64),
) -> Result<counts::Counts, Error> {
    chunk_workers(r, counts::Counts::default(), threads, progress, |dec, shard, c| {
        let mut n = 0u64;
        dec.scan_counts(r, c, |ev, k| {
            shard.counted(c.thread, ev, k);
            n += k;
        })
        .map_err(|e| (n, e))
    })
}

/// The worker pool behind [`drive_chunks`] and [`drive_counts`]: `chunk` processes
/// one chunk into a shard and returns its event count (with the count so far on error).
fn chunk_workers<K: ChunkKernel>(
    r: &TraceReader,
    k: K,
    threads: usize,
    mut progress: impl FnMut(u64),
    chunk: impl Fn(
            &mut ChunkDecoder,
            &mut K,
            &memlens_format::StreamChunk,
        ) -> Result<u64, (u64, memlens_format::Error)>
        + Sync,
) -> Result<K::Output, Error> {
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    let work = r.stream_chunks();
    let threads = threads.max(1).min(work.len().max(1));
    let next = AtomicUsize::new(0);
    let done = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let running = AtomicUsize::new(threads);
    // the last worker to finish wakes the caller from its progress wait
    let caller = std::thread::current();
    let results: Vec<Result<K, Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let mut shard = k.fork();
                let (work, next, done, failed, running) = (&work, &next, &done, &failed, &running);
                let caller = caller.clone();
                let chunk = &chunk;
                scope.spawn(move || {
                    let mut dec = ChunkDecoder::new();
                    let res = loop {
                        if failed.load(Ordering::Relaxed) {
                            break Ok(());
                        }
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(c) = work.get(i) else { break Ok(()) };
                        match chunk(&mut dec, &mut shard, c) {
                            Ok(n) => {
                                done.fetch_add(n, Ordering::Relaxed);
                            }
                            Err((n, e)) => {
                                done.fetch_add(n, Ordering::Relaxed);
                                failed.store(true, Ordering::Relaxed);
                                break Err(Error::from(e));
                            }
                        }
                    };
                    if running.fetch_sub(1, Ordering::Release) == 1 {
                        caller.unpark();
                    }
                    res.map(|()| shard)
                })
            })
            .collect();
        while running.load(Ordering::Acquire) > 0 {
            std::thread::park_timeout(std::time::Duration::from_millis(100));
            progress(done.load(Ordering::Relaxed));
        }
        handles.into_iter().map(|h| h.join().expect("analysis worker panicked")).collect()
    });
    let mut k = k;
    for s in results {
        k.merge(s?);
    }
    progress(done.load(Ordering::Relaxed));
    Ok(k.finish())
}

/// Runs one shard of `k` per stream on up to `threads` worker threads, merges the
/// shards in stream order, then finishes.
pub fn drive_parallel<K: ShardKernel>(
    r: &TraceReader,
    k: K,
    threads: usize,
) -> Result<K::Output, Error> {
    let streams: Vec<ThreadId> = r.streams().iter().map(|s| s.thread).collect();
    let threads = threads.max(1).min(streams.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<Result<Vec<(usize, K)>, Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let shard_proto = k.fork();
                let streams = &streams;
                let next = &next;
                scope.spawn(move || {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&t) = streams.get(i) else { break };
                        let mut shard = shard_proto.fork();
                        let mut dec = ChunkDecoder::new();
                        for c in r.stream_chunks().iter().filter(|c| c.thread == t) {
                            dec.decode(r, c, |evs| shard.process_batch(t, evs))?;
                        }
                        done.push((i, shard));
                    }
                    Ok(done)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("analysis worker panicked")).collect()
    });
    let mut shards = Vec::new();
    for r in results {
        shards.extend(r?);
    }
    shards.sort_by_key(|(i, _)| *i);
    let mut k = k;
    for (_, s) in shards {
        k.merge(s);
    }
    Ok(k.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    #[test]
    fn chunks_on_several_workers_count_like_one_serial_pass() {
        // random addresses make ~10 bytes per event: several chunks per stream
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut streams = Vec::new();
        let mut loads = 0u64;
        for t in 0..3u32 {
            let mut evs = vec![Event::FuncEnter {
                pc: Pc(0x50),
                call_site: Pc(0x60),
                frame: memlens_format::Addr(0x7000),
            }];
            for i in 0..300_000u64 {
                let (pc, addr) = (0x400 + rnd() % 37, rnd() >> 16);
                evs.push(match i % 5 {
                    0 => wr(pc, addr, 4),
                    1 => rmw(pc, addr, 8),
                    2 => range_rd(pc, addr, 100),
                    3 if i % 1000 == 3 => alloc(0x900 + t as u64, addr, 64, &[]),
                    _ => rd(pc, addr, 8),
                });
                loads += u64::from(matches!(i % 5, 1 | 2 | 4));
                loads += u64::from(i % 5 == 3 && i % 1000 != 3);
            }
            streams.push((t, evs));
        }
        let r = trace(&streams);
        assert!(r.chunks().len() >= 6, "{} chunks", r.chunks().len());
        let serial = drive_serial(&r, counts::Counts::default(), |_| {}).unwrap();
        let mut seen = 0;
        let par = drive_chunks(&r, counts::Counts::default(), 2, |n| seen = n).unwrap();
        assert_eq!(seen, u64::from(r.totals().events));
        assert_eq!(par.by_pc, serial.by_pc);
        assert_eq!(par.by_thread, serial.by_thread);
        assert_eq!(par.allocs, serial.allocs);
        assert_eq!(par.by_pc.values().map(|c| c.loads).sum::<u64>(), loads);
        assert_eq!(par.by_thread[&ThreadId(2)].calls, 1);
        assert_eq!(par.allocs[&Pc(0x901)].count, 300);
        assert!(par.by_pc.values().all(|c| c.threads.len() == 3));
    }

    #[test]
    fn sharing_on_chunks_renders_like_the_merged_pass() {
        // threads touch overlapping words from several pcs, in several chunks each
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let streams: Vec<(u32, Vec<Event>)> = (0..3u32)
            .map(|t| {
                let evs = (0..250_000u64)
                    .map(|i| {
                        let (pc, addr) = (0x400 + rnd() % 23, 0x1000 + (rnd() % 512) * 8);
                        match i % 4 {
                            0 => wr(pc, addr, 8),
                            1 => rmw(pc, addr, 8),
                            2 => range_wr(pc, addr, 24),
                            _ => rd(pc, rnd() >> 20, 8),
                        }
                    })
                    .collect();
                (t, evs)
            })
            .collect();
        let r = trace(&streams);
        assert!(r.chunks().len() >= 6, "{} chunks", r.chunks().len());
        let opts = RenderOpts { top: usize::MAX, ..RenderOpts::default() };
        let serial = drive_merged(&r, sharing::Sharing::default(), |_| {}).unwrap();
        let par = drive_chunks(&r, sharing::Sharing::default(), 2, |_| {}).unwrap();
        assert_eq!(par.by_addr.len(), serial.by_addr.len());
        let (a, b) = (serial.render(&NoNames, &opts), par.render(&NoNames, &opts));
        assert!(a.to_json()["by_address"].as_array().unwrap().len() > 100);
        assert_eq!(a.to_json(), b.to_json());
        assert_eq!(a.to_text(), b.to_text());
    }

    #[test]
    fn tuples_references_and_filters_share_a_pass() {
        let r = trace(&[
            (0, vec![rd(0x10, 0x1000, 8), wr(0x20, 0x1000, 8)]),
            (1, vec![rd(0x10, 0x1000, 8)]),
        ]);
        let mut reuse = reuse::Reuse::default();
        let filtered = Filter::new().threads([ThreadId(1)]).apply(sharing::Sharing::default());
        let (counts, shared, ()) =
            drive_serial(&r, (counts::Counts::default(), filtered, &mut reuse), |_| {}).unwrap();
        assert_eq!(counts.by_pc[&Pc(0x10)].loads, 2);
        assert_eq!(shared.by_addr.len(), 1);
        assert_eq!(shared.shared().len(), 0); // only thread 1 was let through
        let rep = reuse.finish();
        assert_eq!(rep.overall.accesses(), 3);
        let t = counts.render(&NoNames, &RenderOpts::default());
        assert_eq!(t.to_json()["by_line"][0]["loads"], 2);
        assert_eq!(t.to_json()["by_thread"].as_array().map(Vec::len), Some(2));
        assert!(t.to_text().contains("Accesses by source line"));
    }
}
