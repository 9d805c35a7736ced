//! Analysis kernels over memlens traces.
//!
//! A [`Kernel`] consumes events one at a time and finishes with a result; the
//! [`drive`] functions feed it from a [`TraceReader`] — stream by stream, or (for
//! kernels that allow it) one shard per thread in parallel, merged at the end. The
//! same kernels later run over a live stream. Kernels see raw code and data
//! addresses; naming (file:line, variables) is applied to their results afterwards,
//! so each distinct address is symbolised once, never per event.
//!
//! # Brief overview
//! - [`Kernel`]: `process(thread, event)` + `finish()`.
//! - [`counts::Counts`]: loads/stores/bytes per code address and thread, allocations
//!   per call site — what `memlens report` shows.
//! - [`drive_serial`], [`drive_parallel`]: feed a kernel from a trace.
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

pub mod counts;

use memlens_format::{Event, ThreadId, TraceReader};

/// Why an analysis could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] memlens_format::Error),
}

/// A consumer of events. Push model: the driver reads the trace and calls
/// `process` for every event, so kernels never do I/O and several can share a pass.
pub trait Kernel {
    /// What the kernel produces.
    type Output;

    /// Called once per event, with the thread that produced it.
    fn process(&mut self, thread: ThreadId, ev: &Event);

    /// Called once after the last event.
    fn finish(self) -> Self::Output;
}

/// A kernel that can run as independent per-thread shards and merge them.
pub trait ShardKernel: Kernel + Send + Sized {
    /// A fresh, empty shard like `self`.
    fn fork(&self) -> Self;
    /// Folds another shard into this one.
    fn merge(&mut self, other: Self);
}

/// Feeds every stream of `r` to `k`, one stream after the other, then finishes it.
/// `progress` gets the number of events processed so far every 2^20 events.
pub fn drive_serial<K: Kernel>(
    r: &TraceReader,
    mut k: K,
    mut progress: impl FnMut(u64),
) -> Result<K::Output, Error> {
    let mut n = 0u64;
    for s in r.streams() {
        for ev in r.events(s.thread) {
            k.process(s.thread, &ev?);
            n += 1;
            if n & 0xf_ffff == 0 {
                progress(n);
            }
        }
    }
    progress(n);
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
                        for ev in r.events(t) {
                            shard.process(t, &ev?);
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
