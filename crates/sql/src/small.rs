//! The small tables, built whole: `threads`, `allocations`, `code`, `data`.

use crate::dataset::{Dataset, Trace};
use crate::tables::{dict_kind, dict_trace, schema};
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, RecordBatch, StringArray, UInt32Array, UInt64Array,
};
use datafusion::common::{DataFusionError, HashSet, Result as DfResult};
use memlens_format::codec::Columns;
use memlens_format::{ChunkDecoder, Event};
use memlens_names::{Granularity, HeapIndex};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn u64s(v: Vec<u64>) -> ArrayRef {
    Arc::new(UInt64Array::from(v))
}
fn u32s(v: Vec<u32>) -> ArrayRef {
    Arc::new(UInt32Array::from(v))
}
fn texts(v: Vec<String>) -> ArrayRef {
    Arc::new(StringArray::from(v))
}

fn ext(e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Execution(e.to_string())
}

/// Builds table `name` over every trace.
pub(crate) fn build(data: &Dataset, name: &str) -> DfResult<RecordBatch> {
    let cols: Vec<ArrayRef> = match name {
        "threads" => threads(data),
        "allocations" => allocations(data)?,
        "code" => code(data),
        "data" => data_table(data)?,
        _ => return Err(ext(format!("no table {name}"))),
    };
    Ok(RecordBatch::try_new(schema(name), cols)?)
}

fn threads(data: &Dataset) -> Vec<ArrayRef> {
    let (mut tr, mut th, mut tid, mut name, mut parent) = (vec![], vec![], vec![], vec![], vec![]);
    let (mut ev, mut lo, mut st, mut al, mut fr, mut co) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for t in &data.traces {
        let chunks = t.reader.stream_chunks();
        for s in t.reader.streams() {
            tr.push(t.name.as_str());
            th.push(s.thread.0);
            let first = first_event(&t.reader, &chunks, s.thread);
            match first {
                Some(Event::ThreadStart { os_tid, parent: p, name: n, .. }) => {
                    tid.push(os_tid);
                    name.push(n);
                    parent.push(p.map(|p| p.0));
                }
                _ => {
                    tid.push(0);
                    name.push(String::new());
                    parent.push(None);
                }
            }
            ev.push(u64::from(s.counts.events));
            lo.push(u64::from(s.counts.loads));
            st.push(u64::from(s.counts.stores));
            al.push(u64::from(s.counts.allocs));
            fr.push(u64::from(s.counts.frees));
            co.push(s.complete);
        }
    }
    vec![
        dict_trace(tr),
        u32s(th),
        u32s(tid),
        texts(name),
        Arc::new(UInt32Array::from(parent)),
        u64s(ev),
        u64s(lo),
        u64s(st),
        u64s(al),
        u64s(fr),
        Arc::new(BooleanArray::from(co)),
    ]
}

/// The stream's first event when it is not an access (a thread's start): its
/// first chunk's skeleton, the loops stepped over (decoding the chunk whole
/// wrote out millions of a loop's accesses).
fn first_event(
    r: &memlens_format::TraceReader,
    chunks: &[memlens_format::StreamChunk],
    thread: memlens_format::ThreadId,
) -> Option<Event> {
    let c = chunks.iter().find(|c| c.thread == thread)?;
    let mut first = None;
    let _ = memlens_format::ChunkDecoder::new().skeleton(r, c, |n, e| {
        if n == 0 && first.is_none() {
            first = Some(e);
        }
    });
    first
}

fn allocations(data: &Dataset) -> DfResult<Vec<ArrayRef>> {
    let (mut tr, mut th, mut seq, mut site, mut size, mut addr, mut freed) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for t in &data.traces {
        let heap = HeapIndex::from_trace(&t.reader, t.alloc_fns()).map_err(ext)?;
        for b in heap.blocks() {
            tr.push(t.name.as_str());
            th.push(b.thread.0);
            seq.push(b.born);
            site.push(b.site.0);
            size.push(b.end - b.start);
            addr.push(b.start);
            freed.push(b.died);
        }
    }
    Ok(vec![
        dict_trace(tr),
        u32s(th),
        u64s(seq),
        u64s(site),
        u64s(size),
        u64s(addr),
        Arc::new(UInt64Array::from(freed)),
    ])
}

/// Every distinct code address of the trace's events, with its source location.
fn code(data: &Dataset) -> Vec<ArrayRef> {
    code_of(data, |t| code_pcs(data, t))
}

/// The `code` table of the pcs `pcs_of` gives for each trace (ascending).
pub(crate) fn code_of(data: &Dataset, mut pcs_of: impl FnMut(&Trace) -> Vec<u64>) -> Vec<ArrayRef> {
    let (mut tr, mut pcs, mut func, mut file, mut line, mut col, mut inl) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    for t in &data.traces {
        let set = pcs_of(t);
        let named = t.names().codes(&set);
        for (pc, c) in set.into_iter().zip(named) {
            tr.push(t.name.as_str());
            pcs.push(pc);
            func.push(c.function.to_string());
            file.push(c.file.to_string());
            line.push(c.line);
            col.push(c.column);
            inl.push(c.inlined);
        }
    }
    vec![dict_trace(tr), u64s(pcs), texts(func), texts(file), u32s(line), u32s(col), texts(inl)]
}

/// The distinct code addresses of a trace's events, ascending: its chunks decoded
/// into columns on every core (a loop repeats one pc row after row: only a change
/// is looked up).
fn code_pcs(data: &Dataset, t: &Trace) -> Vec<u64> {
    let chunks = t.reader.stream_chunks();
    let next = AtomicUsize::new(0);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let sets: Vec<HashSet<u64>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..cores.min(chunks.len()).max(1))
            .map(|_| {
                s.spawn(|| {
                    let (mut set, mut dec) = (HashSet::new(), ChunkDecoder::new());
                    while let Some(c) = chunks.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let r = dec.for_columns(&t.reader, c, |cols| add_pcs(&mut set, cols));
                        if let Err(e) = r {
                            data.warn(format!(
                                "{}: {e}; rows read up to the damage",
                                t.path.display()
                            ));
                        }
                    }
                    set
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let all = sets.into_iter().reduce(|mut a, b| {
        a.extend(b);
        a
    });
    let mut v: Vec<u64> = all.unwrap_or_default().into_iter().collect();
    v.sort_unstable();
    v
}

/// Adds the code addresses of a chunk's events to `set`.
pub(crate) fn add_pcs(set: &mut HashSet<u64>, cols: &Columns) {
    // a loop's few pcs take turns: a small cache of those already added
    let mut seen = [u64::MAX; 64];
    for &p in &cols.pc {
        let slot = &mut seen[((p ^ (p >> 6)) & 63) as usize];
        if *slot != p {
            set.insert(p);
            *slot = p;
        }
    }
    set.extend(cols.other.iter().filter_map(|(_, e)| e.pc()).map(|p| p.0));
}

/// Static variables of every module and the heap blocks, each an address range.
fn data_table(data: &Dataset) -> DfResult<Vec<ArrayRef>> {
    let (mut tr, mut start, mut end, mut var, mut kind) = (vec![], vec![], vec![], vec![], vec![]);
    for t in &data.traces {
        let names = t.names();
        for m in &t.reader.meta().modules {
            let Ok(ms) = names.sym.module_symbols(m.id) else { continue };
            for v in ms.static_variables() {
                tr.push(t.name.as_str());
                start.push(v.start.0);
                end.push(v.start.0 + v.size);
                var.push(v.name.to_string());
                kind.push("global");
            }
        }
        let heap = HeapIndex::from_trace(&t.reader, t.alloc_fns()).map_err(ext)?;
        let starts: Vec<u64> = heap.blocks().iter().map(|b| b.start).collect();
        let labels = names.data(starts, Granularity::Variable);
        for (b, l) in heap.blocks().iter().zip(labels) {
            tr.push(t.name.as_str());
            start.push(b.start);
            end.push(b.end);
            var.push(l.to_string());
            kind.push("heap");
        }
    }
    Ok(vec![dict_trace(tr), u64s(start), u64s(end), texts(var), dict_kind(kind)])
}
