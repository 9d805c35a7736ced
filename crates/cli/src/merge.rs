//! Ordering options of `record`, `dump --merged` (text, JSON, atomic-memory-trace
//! text) and `memlens merge` (atomic-memory-trace's streaming merge).

use anyhow::Result;
use memlens_analysis::Merged;
use memlens_format::{AccessKind, Event, ThreadId};
use serde_json::json;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io::{BufRead, BufWriter, Read, Write};
use std::path::Path;

/// How a recording orders events across threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OrderMode {
    /// Lamport clocks at atomics and pthread synchronisation (default).
    Sync,
    /// A Lamport stamp per access from striped cache-line locks.
    Atomic,
    /// No ordering information.
    None,
}

/// `record`'s ordering options.
#[derive(Clone, Debug, clap::Args)]
pub struct OrderArgs {
    /// Cross-thread order: `sync` (clocks at atomics and pthread synchronisation),
    /// `atomic` (a stamp per access, striped line locks), `none`.
    #[arg(long, value_enum, default_value_t = OrderMode::Sync)]
    pub order: OrderMode,
    /// Number of striped clock locks (power of two).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub order_locks: u32,
    /// Bytes covered by one lock stripe (power of two; a cache line).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1048576))]
    pub order_line: u32,
    /// Record a failed compare-exchange as a read and a write (default: a read).
    #[arg(long)]
    pub cas_as_write: bool,
    /// Record accesses only of threads that called memlens_register_thread().
    #[arg(long)]
    pub registered_only: bool,
}

impl OrderArgs {
    /// The environment variables the runtime reads.
    pub fn env(&self) -> Vec<(String, String)> {
        let mode = match self.order {
            OrderMode::Sync => "sync",
            OrderMode::Atomic => "atomic",
            OrderMode::None => "none",
        };
        let mut v = vec![
            ("MEMLENS_ORDER".to_string(), mode.to_string()),
            ("MEMLENS_ORDER_LOCKS".to_string(), self.order_locks.to_string()),
            ("MEMLENS_ORDER_LINE".to_string(), self.order_line.to_string()),
        ];
        if self.cas_as_write {
            v.push(("MEMLENS_CAS_AS_WRITE".into(), "1".into()));
        }
        if self.registered_only {
            v.push(("MEMLENS_REGISTERED_ONLY".into(), "1".into()));
        }
        v
    }
}

/// Output of `dump --merged`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum MergedFormat {
    Text,
    Json,
    /// atomic-memory-trace's text format.
    Amt,
}

/// `memlens dump --merged`: every event of every thread in one order consistent
/// with synchronisation (`(clock, thread, index)`).
pub fn dump_merged(path: &Path, format: MergedFormat) -> Result<()> {
    let r = crate::inspect::open(path)?;
    let out = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, out.lock());
    let mut amt = Amt { calls: traced_functions(&r), ..Amt::default() };
    for ev in Merged::new(&r)? {
        let ev = ev?;
        match format {
            MergedFormat::Text => {
                writeln!(out, "{}\t{}\t{}\t{}", ev.clock, ev.thread.0, ev.index, ev.event)?
            }
            MergedFormat::Json => {
                let mut v = crate::inspect::event_json(&ev.event);
                v["thread"] = json!(ev.thread.0);
                v["index"] = json!(ev.index);
                v["clock"] = json!(ev.clock);
                serde_json::to_writer(&mut out, &v)?;
                writeln!(out)?;
            }
            MergedFormat::Amt => {
                if let Some(line) = amt.line(ev.thread, ev.clock, &ev.event) {
                    writeln!(out, "{line}")?;
                }
            }
        }
    }
    if format == MergedFormat::Json {
        serde_json::to_writer(&mut out, &crate::inspect::end_of_trace_json(&r))?;
        writeln!(out)?;
    }
    out.flush()?;
    Ok(())
}

/// Figures of a file-order merge (`merge_file_order`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FileOrderStats {
    /// Events written.
    pub events: u64,
    /// Event chunks read.
    pub chunks: u64,
    /// The most events held back at once (decoded, not yet written).
    pub max_buffered: u64,
    /// The most events in one chunk.
    pub max_chunk_events: u64,
}

/// `memlens merge --trace`: the merge a consumer reading the trace as it is written
/// would do. Chunks are taken in file order (each stream's in sequence order) and
/// decoded once; an event is written as soon as no stream can still produce an
/// earlier one in `(clock, thread, index)` order: every stream not ended has
/// produced an event at `(clock, thread)` at or past it (its clocks never decrease).
/// The output is `dump --merged`'s text; memory is the events held back, which the
/// recorder's skew bound keeps to about `SKEW_CHUNKS` chunks (docs/trace-format.md).
pub fn merge_file_order(path: &Path, out: impl Write) -> Result<FileOrderStats> {
    use memlens_format::ChunkDecoder;
    let r = crate::inspect::open(path)?;
    let mut out = BufWriter::with_capacity(1 << 16, out);
    let streams = r.streams();
    // Each stream's chunks in sequence order; the file order of all chunks.
    let mut order: Vec<(u64, usize, usize)> = Vec::new();
    for (si, s) in streams.iter().enumerate() {
        for (k, &c) in s.chunks.iter().enumerate() {
            order.push((r.chunks()[c].offset, si, k));
        }
    }
    order.sort_unstable();
    struct St {
        queue: VecDeque<(u64, u64, Event)>,
        clock: u64,
        /// `(clock, thread)` of the last event decoded (streams only move forward).
        latest: (u64, u32),
        next_index: u64,
        /// Chunks decoded (in sequence order) and chunks that arrived early.
        done: usize,
        early: Vec<usize>,
        ended: bool,
    }
    let mut st: Vec<St> = streams
        .iter()
        .map(|s| St {
            queue: VecDeque::new(),
            clock: 0,
            latest: (0, s.thread.0),
            next_index: 0,
            done: 0,
            early: Vec::new(),
            ended: s.chunks.is_empty(),
        })
        .collect();
    let sc = r.stream_chunks();
    let by_chunk: HashMap<usize, memlens_format::StreamChunk> =
        sc.iter().map(|c| (c.chunk, *c)).collect();
    let mut dec = ChunkDecoder::new();
    let mut stats = FileOrderStats::default();
    let mut buffered = 0u64;
    let mut heap: BinaryHeap<Reverse<(u64, u32, u64, usize)>> = BinaryHeap::new();
    for (_, si, k) in order {
        st[si].early.push(k);
        // Decode this stream's chunks that are now in sequence.
        while let Some(at) = st[si].early.iter().position(|&e| e == st[si].done) {
            st[si].early.swap_remove(at);
            let ci = streams[si].chunks[st[si].done];
            st[si].done += 1;
            let thread = streams[si].thread;
            let s = &mut st[si];
            let was_empty = s.queue.is_empty();
            let mut n = 0u64;
            dec.decode(&r, &by_chunk[&ci], |evs| {
                for ev in evs {
                    if let Event::Clock(t) = ev {
                        s.clock = s.clock.max(*t);
                    }
                    s.queue.push_back((s.clock, s.next_index, ev.clone()));
                    s.next_index += 1;
                    n += 1;
                }
            })?;
            s.latest = (s.clock, thread.0);
            if s.done == streams[si].chunks.len() {
                s.ended = true;
            }
            if was_empty {
                if let Some(&(c, i, _)) = s.queue.front() {
                    heap.push(Reverse((c, thread.0, i, si)));
                }
            }
            buffered += n;
            stats.chunks += 1;
            stats.max_chunk_events = stats.max_chunk_events.max(n);
            stats.max_buffered = stats.max_buffered.max(buffered);
        }
        // Write every event no stream can still precede.
        while let Some(&Reverse((c, t, _, hs))) = heap.peek() {
            let blocked = st
                .iter()
                .enumerate()
                .any(|(j, o)| j != hs && !o.ended && o.queue.is_empty() && o.latest < (c, t));
            if blocked {
                break;
            }
            heap.pop();
            let s = &mut st[hs];
            let (clock, index, ev) = s.queue.pop_front().expect("queued event");
            writeln!(out, "{clock}\t{t}\t{index}\t{ev}")?;
            buffered -= 1;
            stats.events += 1;
            if let Some(&(c, i, _)) = s.queue.front() {
                heap.push(Reverse((c, t, i, hs)));
            }
        }
    }
    if buffered != 0 {
        let left: Vec<u32> = st
            .iter()
            .zip(streams)
            .filter(|(s, _)| !s.queue.is_empty())
            .map(|(_, i)| i.thread.0)
            .collect();
        anyhow::bail!(
            "{buffered} events of threads {left:?} could not be merged (incomplete streams)"
        );
    }
    out.flush()?;
    Ok(stats)
}

/// The functions traced with `record --trace-calls`, by runtime entry address, from
/// the `trace_calls` option (`<vaddr> <pad vaddr> <name>` lines in the executable's
/// file addresses, then those of the shared library named by each `@<path>` line)
/// and the modules' load biases.
fn traced_functions(r: &memlens_format::TraceReader) -> HashMap<u64, String> {
    let m = r.meta();
    let Some((_, spec)) = m.options.iter().rev().find(|(k, _)| k == "trace_calls") else {
        return HashMap::new();
    };
    let exe_bias =
        m.modules.iter().find(|md| md.path == m.exe).or(m.modules.first()).map_or(0, |md| md.bias);
    let lib_bias = |path: &str| {
        let want = std::fs::canonicalize(path).ok();
        m.modules
            .iter()
            .find(|md| {
                md.path == path || (want.is_some() && std::fs::canonicalize(&md.path).ok() == want)
            })
            .map(|md| md.bias)
    };
    let mut bias = Some(exe_bias);
    let mut out = HashMap::new();
    for l in spec.lines() {
        if let Some(path) = l.strip_prefix('@') {
            bias = lib_bias(path);
            continue;
        }
        let Some(b) = bias else { continue };
        let mut f = l.splitn(3, ' ');
        let (Some(a), Some(_pad), Some(name)) = (f.next(), f.next(), f.next()) else { continue };
        let Ok(a) = u64::from_str_radix(a, 16) else { continue };
        out.insert(a.wrapping_add(b), name.to_string());
    }
    out
}

/// Converts events to atomic-memory-trace lines. `tid` is the id the thread gave
/// `memlens_register_thread`, else its memlens thread index.
#[derive(Default)]
struct Amt {
    registered: HashMap<u32, i64>,
    /// Names of traced functions by entry address.
    calls: HashMap<u64, String>,
}

impl Amt {
    fn line(&mut self, t: ThreadId, ts: u64, ev: &Event) -> Option<String> {
        if let Event::RegisterThread(id) = ev {
            self.registered.insert(t.0, *id);
        }
        let reg = self.registered.get(&t.0).copied();
        let tid = reg.unwrap_or(i64::from(t.0));
        let body = match ev {
            Event::Access { addr, size, kind: AccessKind::Read, .. } => {
                format!("m\tr\t{}\t{size}", addr.0)
            }
            Event::Access { addr, size, kind: AccessKind::Write, .. } => {
                format!("m\tw\t{}\t{size}", addr.0)
            }
            Event::Range { addr, len, kind: AccessKind::Read, .. } => {
                format!("m\tr\t{}\t{len}", addr.0)
            }
            Event::Range { addr, len, kind: AccessKind::Write, .. } => {
                format!("m\tw\t{}\t{len}", addr.0)
            }
            Event::Rmw { addr, size, op, .. } if op.stores() => {
                format!("m\tr\t{a}\t{size}\tw\t{a}\t{size}", a = addr.0)
            }
            Event::Rmw { addr, size, .. } => format!("m\tr\t{}\t{size}", addr.0),
            Event::Call { func, sp, args } => {
                let name = self.calls.get(&func.0).cloned().unwrap_or_else(|| func.to_string());
                format!("fc\t{name}\t{}\t{}\t{}\t{}", sp.0, args[0], args[1], args[2])
            }
            Event::Return { func, sp, value } => {
                let name = self.calls.get(&func.0).cloned().unwrap_or_else(|| func.to_string());
                format!("fr\t{name}\t{}\t{value}", sp.0)
            }
            Event::RegisterThread(_) => "tr".into(),
            Event::ThreadExit if reg.is_some() => "tf".into(),
            Event::Roi(true) => "start_roi".into(),
            Event::Roi(false) => "end_roi".into(),
            _ => return None,
        };
        Some(format!("{ts}\t{tid}\t{body}"))
    }
}

/// Longest input line `merge` accepts; atomic-memory-trace lines are under 200 bytes.
const MAX_AMT_LINE: usize = 64 << 10;

/// `memlens merge`: atomic-memory-trace's streaming merge (`src/merge.cpp`). Reads
/// per-thread-ordered, globally unordered lines `<ts>\t<tid>\t...` on `input` and
/// writes them ordered by timestamp. A line is written once no live registered
/// thread can still produce an earlier one (the minimum over live threads of their
/// latest timestamp, or at any time when no thread is live); `tr` and `tf` make
/// threads live and dead, `thread_sync` lines only advance their thread and are
/// not written. `strip_ts` drops the timestamp column like the original does.
pub fn merge_amt(input: impl BufRead, out: impl Write, strip_ts: bool) -> Result<()> {
    let mut out = BufWriter::new(out);
    let mut fifos: HashMap<i64, VecDeque<(u64, String)>> = HashMap::new();
    let mut latest: HashMap<i64, u64> = HashMap::new();
    let mut heap: BinaryHeap<Reverse<(u64, i64)>> = BinaryHeap::new();
    let mut active: i64 = 0;
    let emit = |fifos: &mut HashMap<i64, VecDeque<(u64, String)>>,
                heap: &mut BinaryHeap<Reverse<(u64, i64)>>,
                safe: Option<u64>,
                out: &mut BufWriter<_>|
     -> Result<()> {
        while let Some(&Reverse((ts, tid))) = heap.peek() {
            if let Some(s) = safe {
                if ts > s {
                    break;
                }
            }
            heap.pop();
            let q = fifos.get_mut(&tid).expect("queued thread");
            let (_, line) = q.pop_front().expect("queued line");
            writeln!(out, "{line}")?;
            if let Some(&(nts, _)) = q.front() {
                heap.push(Reverse((nts, tid)));
            }
        }
        Ok(())
    };
    let mut input = input;
    let mut buf = Vec::new();
    for n in 0usize.. {
        buf.clear();
        // bounded: a stream without newlines (`< /dev/zero`) must not fill memory
        let got = (&mut input).take(MAX_AMT_LINE as u64 + 1).read_until(b'\n', &mut buf)?;
        if got == 0 {
            break;
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        } else if buf.len() > MAX_AMT_LINE {
            anyhow::bail!(
                "line {} is longer than {} KiB: the input is not atomic-memory-trace text (`<ts>\\t<tid>\\t...` lines)",
                n + 1,
                MAX_AMT_LINE >> 10
            );
        }
        let line = String::from_utf8(std::mem::take(&mut buf))
            .map_err(|_| anyhow::anyhow!("line {} is not UTF-8 text", n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let mut f = line.splitn(3, '\t');
        let (Some(ts), Some(tid)) = (f.next(), f.next()) else {
            anyhow::bail!("line {}: expected <ts>\\t<tid>\\t...", n + 1);
        };
        let rest = f.next().unwrap_or("");
        let ts: u64 =
            ts.trim().parse().map_err(|_| anyhow::anyhow!("line {}: bad timestamp", n + 1))?;
        let tid: i64 =
            tid.trim().parse().map_err(|_| anyhow::anyhow!("line {}: bad thread id", n + 1))?;
        let kind = rest.split('\t').next().unwrap_or("");
        match kind {
            "tr" => active += 1,
            "tf" => {
                active -= 1;
                latest.remove(&tid);
            }
            _ => {}
        }
        if tid >= 0 && kind != "tf" {
            latest.insert(tid, ts);
        }
        if kind != "thread_sync" {
            let text = if strip_ts { format!("{tid}\t{rest}") } else { line.clone() };
            let q = fifos.entry(tid).or_default();
            if let Some(&(last, _)) = q.back() {
                if ts < last {
                    anyhow::bail!("line {}: thread {tid}'s timestamps go backwards", n + 1);
                }
            }
            if q.is_empty() {
                heap.push(Reverse((ts, tid)));
            }
            q.push_back((ts, text));
        }
        let safe = if active <= 0 {
            None
        } else {
            Some(latest.values().copied().min().unwrap_or(u64::MAX))
        };
        emit(&mut fifos, &mut heap, safe, &mut out)?;
    }
    emit(&mut fifos, &mut heap, None, &mut out)?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_like_atomic_memory_trace() {
        let input = "1\t0\ttr\n2\t1\ttr\n5\t0\tm\tr\t8\t8\n3\t1\tm\tw\t8\t8\n9\t1\tthread_sync\n7\t0\ttf\n8\t1\ttf\n";
        let mut out = Vec::new();
        merge_amt(input.as_bytes(), &mut out, false).unwrap();
        let got = String::from_utf8(out).unwrap();
        assert_eq!(
            got,
            "1\t0\ttr\n2\t1\ttr\n3\t1\tm\tw\t8\t8\n5\t0\tm\tr\t8\t8\n7\t0\ttf\n8\t1\ttf\n"
        );
        let mut out = Vec::new();
        merge_amt(input.as_bytes(), &mut out, true).unwrap();
        assert!(String::from_utf8(out).unwrap().starts_with("0\ttr\n1\ttr\n1\tm\tw"));
    }
}
