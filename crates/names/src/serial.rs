//! The serial entry points: one [`Attributor`](crate::Attributor) pass over a
//! trace, and the choice between it and the chunk-parallel pass.

use crate::counts::{Accum, Pending, BATCH};
use crate::{
    attribute_trace, Attribution, Error, Granularity, HeapIndex, Maps, SiteNamer, BIG_BLOCK,
};
use memlens_analysis::heap::AllocFns;
use memlens_format::{ChunkDecoder, Event, TraceReader};
use memlens_symbols::Symbolizer;

/// What naming the accesses of a trace takes, for every way of doing it.
pub struct Naming<'a> {
    /// The trace.
    pub trace: &'a TraceReader,
    /// Its programs' symbols.
    pub sym: &'a Symbolizer,
    /// The process's memory map, if recorded.
    pub maps: Option<Maps>,
    /// Names allocation sites (heap blocks are named after them).
    pub site_namer: SiteNamer<'a>,
    /// Whole variables or each field.
    pub granularity: Granularity,
    /// Allocation wrappers whose callers are the heap blocks' sites.
    pub alloc_fns: &'a AllocFns,
}

/// Names every access of the trace in one serial pass of an
/// [`Attributor`](crate::Attributor) that resolves each access in full: the
/// reference [`attribute_trace`] and the attributor's label cache must agree with.
pub fn attribute_trace_serial(n: Naming<'_>) -> Result<Attribution, Error> {
    let heap = HeapIndex::from_trace(n.trace, n.alloc_fns)?;
    serial_with(n, heap, false)
}

/// Heap bytes in large blocks above which [`attribute_trace_auto`] stays serial:
/// every worker of the parallel pass names each field of a large block it touches
/// again (a 32 MiB hash table of structs: millions of names per worker).
const PARALLEL_MAX_BIG_HEAP: u64 = 16 << 20;

/// Names every access of `r` the faster way for this trace: chunk-parallel on
/// `threads` workers unless there is one worker only or (by field) large heap
/// blocks would have every worker name millions of the same fields; serial
/// otherwise. The result is the same either way.
pub fn attribute_trace_auto(n: Naming<'_>, threads: usize) -> Result<Attribution, Error> {
    let parallel = threads > 1 && n.trace.stream_chunks().len() > 1;
    if parallel && n.granularity == Granularity::Variable {
        // whole blocks have one name each: no need to look at the heap first
        return attribute_trace(n, threads);
    }
    let heap = HeapIndex::from_trace(n.trace, n.alloc_fns)?;
    let big: u64 = heap.blocks().iter().map(|b| b.end - b.start).filter(|&n| n >= BIG_BLOCK).sum();
    if parallel && big <= PARALLEL_MAX_BIG_HEAP {
        return attribute_trace(n, threads);
    }
    serial_with(n, heap, true)
}

fn serial_with(n: Naming<'_>, heap: HeapIndex, cached: bool) -> Result<Attribution, Error> {
    let r = n.trace;
    let mut a = crate::Attributor::new(n.sym, heap, n.maps);
    if !cached {
        a.set_uncached();
    }
    a.set_site_namer(n.site_namer);
    a.set_granularity(n.granularity);
    let mut acc = Accum::default();
    let mut batch: Vec<(Event, u64)> = Vec::with_capacity(BATCH);
    for s in r.streams() {
        let t = s.thread;
        let mut it = r.events(t);
        loop {
            // in batches, so that the label tables of the next accesses are
            // fetched while the current ones are named
            batch.clear();
            while batch.len() < BATCH {
                match it.next() {
                    Some(ev) => batch.push((ev?, it.index())),
                    None => break,
                }
            }
            if batch.is_empty() {
                break;
            }
            for (ev, _) in &batch {
                if let Event::Access { addr, .. } | Event::Rmw { addr, .. } = ev {
                    a.prefetch(*addr);
                }
            }
            for (ev, i) in &batch {
                let (pc, addr) = match ev {
                    Event::Access { pc, addr, .. }
                    | Event::Range { pc, addr, .. }
                    | Event::Rmw { pc, addr, .. } => (*pc, *addr),
                    _ => {
                        a.observe(t, ev);
                        continue;
                    }
                };
                let id = a.attribute(t, *i, pc, addr);
                let (l, st) = ev.loads_stores();
                let (br, bw) = ev.bytes_read_written();
                acc.push(Pending { id, pc, l, st, br, bw }, t);
            }
        }
        acc.flush(t);
    }
    let (labels, heap) = a.into_parts();
    let mut out = acc.finish(labels);
    out.heap = heap;
    Ok(out)
}

impl HeapIndex {
    /// Every block of a trace: a pass over the chunks that hold allocations or frees,
    /// stream by stream; a block allocated inside `alloc_fns` is its caller's.
    pub fn from_trace(r: &TraceReader, alloc_fns: &AllocFns) -> Result<HeapIndex, Error> {
        let mut h = HeapIndex::with_alloc_fns(alloc_fns.clone());
        let mut dec = ChunkDecoder::new();
        // stream by stream; the accesses stepped over (a loop's millions of
        // accesses beside a matrix's allocation are never written out)
        for c in r.stream_chunks() {
            let counts = &r.chunks()[c.chunk].header.counts;
            if counts.allocs == 0 && counts.frees == 0 {
                continue;
            }
            let t = c.thread;
            dec.skeleton(r, &c, |n, ev| {
                let i = c.first_index + n;
                match ev {
                    Event::Alloc { pc, addr, size, stack, .. } => {
                        h.add_block(t, i, addr, size, pc, stack)
                    }
                    Event::Realloc { pc, old, new, size, stack } => {
                        h.free(t, i, old);
                        h.add_block(t, i, new, size, pc, stack);
                    }
                    Event::Free { addr, .. } => h.free(t, i, addr),
                    _ => {}
                }
            })?;
        }
        h.finish();
        Ok(h)
    }
}
