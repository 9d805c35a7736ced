//! `memlens export --format parquet`: the same tables as Parquet files, one
//! directory per table, Hive-style partitions (`trace=…/thread=…`), zstd.

use crate::dataset::Dataset;
use crate::pq_pages::PageFile;
use crate::tables::{plain_batch, plain_schema, schema, AccessOut, ChunkRows, Keep};
use crate::Error;
use datafusion::arrow::array::{AsArray, BooleanArray, RecordBatch};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::{Int32Type, SchemaRef, UInt32Type, UInt64Type};
use datafusion::common::{HashMap, HashSet};
use memlens_format::{ChunkDecoder, StreamChunk};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use std::cell::RefCell;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// Rows per row group: large enough for zstd, small enough that a scan of one
/// thread's file runs on every core.
const ROW_GROUP: usize = 1 << 20;
/// Rows of a chunk that decide whether grouping it by pc pays (see [`pc_order`]).
const ORDER_SAMPLE: usize = 16 << 10;
/// Chunks per file of a stream at most: files are written in parallel.
const CHUNKS_PER_FILE: usize = 32;
/// Events per file of a stream: a file ends at the chunk that reaches it (a
/// loop-dense trace holds millions of events a chunk: 27 chunks of matmul 370
/// were one file on one core).
const EVENTS_PER_FILE: u64 = 1 << 22;

/// What an export wrote.
#[derive(Clone, Debug, Default)]
pub struct ExportStats {
    /// Rows of `accesses`.
    pub accesses: u64,
    /// Bytes of the `accesses` files.
    pub access_bytes: u64,
    /// Files written.
    pub files: u64,
}

fn props() -> WriterProperties {
    let delta = |b: parquet::file::properties::WriterPropertiesBuilder, c: &str| {
        b.set_column_encoding(ColumnPath::from(c), Encoding::DELTA_BINARY_PACKED)
            .set_column_dictionary_enabled(ColumnPath::from(c), false)
    };
    // Minimum and maximum per row group (what readers prune with), not per page,
    // and none for `kind`, whose three words prune nothing: the writer spent a
    // fifth of its time on statistics (a string comparison per row for `kind`).
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).expect("valid level")))
        .set_max_row_group_row_count(Some(ROW_GROUP))
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_column_statistics_enabled(ColumnPath::from("kind"), EnabledStatistics::None);
    // the small tables' own steady columns (`accesses` and `calls` pages are
    // encoded in pq_pages)
    for c in ["seq", "address"] {
        b = delta(b, c);
    }
    b.build()
}

/// A Hive partition value: `/`, `=`, `%` and control characters escaped.
fn hive(v: &str) -> String {
    let mut s = String::new();
    for ch in v.chars() {
        if ch == '/' || ch == '=' || ch == '%' || ch == '\\' || ch.is_control() || ch == '#' {
            for b in ch.to_string().bytes() {
                s.push_str(&format!("%{b:02X}"));
            }
        } else {
            s.push(ch);
        }
    }
    s
}

/// A new file (never an existing one, never through a link).
fn create(path: &Path) -> Result<File, Error> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| Error::Io(d.display().to_string(), e))?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(path)
        .map_err(|e| Error::Io(path.display().to_string(), e))
}

/// The order that groups a chunk's `accesses` rows by instruction (`pc`, in
/// order of first appearance), each instruction's rows in `seq` order, as each
/// row's place; None: keep the recorded order. A loop's accesses through one
/// instruction move by a steady stride, so the delta-encoded `address` and `seq`
/// columns shrink to a few bits a row, where interleaved instructions jump
/// between arrays on every row. `seq` keeps the order for whoever needs it.
fn pc_order(b: &RecordBatch) -> Option<Vec<u32>> {
    let col = |n: &str| b.column_by_name(n).and_then(|c| c.as_primitive_opt::<UInt64Type>());
    let (pcs, addr, seq) = (col("pc")?.values(), col("address")?.values(), col("seq")?.values());
    // Random accesses (a hash table) gain nothing and `seq` loses its steady
    // step: keep the order that packs smaller, as the chunk's first rows tell
    // (a chunk that keeps its order costs a sample, not a sort).
    let pays = |n: usize, place: &[u32]| {
        // the row at each place
        let mut perm = vec![0u32; n];
        for (row, &at) in place.iter().enumerate() {
            perm[at as usize] = row as u32;
        }
        let now = packed_bits(n, |i| addr[i]) + packed_bits(n, |i| seq[i]);
        let grouped =
            packed_bits(n, |i| addr[perm[i] as usize]) + packed_bits(n, |i| seq[perm[i] as usize]);
        grouped < now
    };
    let sample = pcs.len().min(ORDER_SAMPLE);
    let first = by_pc(&pcs[..sample])?;
    if !pays(sample, &first) {
        return None;
    }
    if sample == pcs.len() {
        return Some(first);
    }
    by_pc(pcs)
}

/// The stable order of `pcs` by pc (in order of first appearance), as each row's
/// place; None: one pc.
fn by_pc(pcs: &[u64]) -> Option<Vec<u32>> {
    // a counting sort; a loop's few pcs hit a small cache before the map
    let mut ids: HashMap<u64, u32> = HashMap::default();
    let mut cache = [(u64::MAX, 0u32); 64];
    let mut of_row = Vec::with_capacity(pcs.len());
    for &p in pcs.iter() {
        let slot = &mut cache[((p ^ (p >> 6)) & 63) as usize];
        let id = if slot.0 == p {
            slot.1
        } else {
            let next = ids.len() as u32;
            let id = *ids.entry(p).or_insert(next);
            *slot = (p, id);
            id
        };
        of_row.push(id);
    }
    if ids.len() < 2 {
        return None;
    }
    let mut start = vec![0u32; ids.len()];
    for &id in &of_row {
        start[id as usize] += 1;
    }
    let mut at = 0u32;
    for c in start.iter_mut() {
        let n = *c;
        *c = at;
        at += n;
    }
    for id in of_row.iter_mut() {
        let slot = &mut start[*id as usize];
        *id = *slot;
        *slot += 1;
    }
    Some(of_row)
}

/// About what Parquet's delta encoding takes for the `n` values `v(i)`: per
/// 32 values, the bit width of the spread of their differences.
fn packed_bits(n: usize, v: impl Fn(usize) -> u64) -> u64 {
    let mut bits = 0u64;
    let mut i = 1;
    while i < n {
        let end = (i + 32).min(n);
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        for k in i..end {
            let d = v(k).wrapping_sub(v(k - 1)) as i64;
            lo = lo.min(d);
            hi = hi.max(d);
        }
        let w = 64 - (hi.wrapping_sub(lo) as u64).leading_zeros();
        bits += u64::from(w) * (end - i) as u64;
        i = end;
    }
    bits
}

fn write_file(
    path: &Path,
    schema: &SchemaRef,
    batches: impl Iterator<Item = Result<RecordBatch, Error>>,
) -> Result<u64, Error> {
    let f = create(path)?;
    // plain text: each file's dictionary would differ (readers such as pyarrow refuse
    // to unify them across files), and Parquet dictionary-encodes the strings anyway
    let plain = plain_schema(schema);
    let mut w = ArrowWriter::try_new(f, plain.clone(), Some(props()))?;
    for b in batches {
        w.write(&plain_batch(b?, &plain)?)?;
    }
    w.close()?;
    Ok(std::fs::metadata(path).map(|m| m.len()).unwrap_or(0))
}

/// One file's worth of work (or one file per trace), for whichever core is free.
enum Unit {
    /// A small table, built whole: one file per trace.
    Small(&'static str),
    /// Part `part` of a stream: its `accesses` and `calls` rows, from one read.
    Stream { trace: usize, thread: u32, part: usize, chunks: Vec<StreamChunk> },
}

/// How a run of calls moves the depth: (lowest running sum, net), see
/// [`crate::tables::depth_steps`].
type Steps = (i64, i64);
/// A stream of a dataset: (trace, thread).
type Stream = (usize, u32);

/// The call depth at the start of each part of each stream. A call's depth
/// depends on every earlier event of its thread, so each part publishes how its
/// calls move the depth ([`crate::tables::depth_steps`]) as soon as it has read
/// them, and writes its `depth` column once every earlier part of its stream has.
#[derive(Default)]
struct Depths {
    /// Per (trace, thread), per part: its steps, once known.
    parts: Mutex<HashMap<Stream, Vec<Option<Steps>>>>,
    cv: Condvar,
    /// The export failed: nobody waits any more.
    stop: AtomicBool,
}

impl Depths {
    fn publish(&self, stream: Stream, part: usize, steps: Steps) {
        let mut g = self.parts.lock().unwrap_or_else(|e| e.into_inner());
        let v = g.entry(stream).or_default();
        if v.len() <= part {
            v.resize(part + 1, None);
        }
        v[part] = Some(steps);
        self.cv.notify_all();
    }

    /// The depth where part `part` of `stream` starts, once the parts before it
    /// published theirs; None when the export stopped.
    fn start_of(&self, stream: Stream, part: usize) -> Option<u64> {
        let mut g = self.parts.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return None;
            }
            let v = g.get(&stream).map_or(&[][..], |v| &v[..]);
            let before: Option<Vec<Steps>> =
                (0..part).map(|k| v.get(k).copied().flatten()).collect();
            if let Some(before) = before {
                return Some(before.into_iter().fold(0, crate::tables::depth_after));
            }
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn abort(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let _g = self.parts.lock().unwrap_or_else(|e| e.into_inner());
        self.cv.notify_all();
    }
}

/// Writes every table of `data` under `out`. Refuses a table directory that exists.
pub fn export_parquet(data: &Dataset, out: &Path) -> Result<ExportStats, Error> {
    for t in ["accesses", "calls", "allocations", "threads", "code", "data"] {
        let d = out.join(t);
        if d.exists() {
            return Err(Error::Input(format!(
                "{} exists; remove it or export to another directory",
                d.display()
            )));
        }
    }
    let stats = Mutex::new(ExportStats::default());
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    // The small tables first: the parts of the streams then fill the cores up to
    // the end, where a long unit started last would leave all but one idle.
    // `code` comes last, from the pcs the `accesses` parts saw (no second pass).
    // A stream's parts are in order (a part waits for the call depth of those
    // before it, which were handed out first).
    let mut units: Vec<Unit> =
        ["data", "allocations", "threads"].into_iter().map(Unit::Small).collect();
    for (ti, t) in data.traces.iter().enumerate() {
        let mut by_stream: Vec<(u32, Vec<StreamChunk>)> = Vec::new();
        for c in t.reader.stream_chunks() {
            match by_stream.last_mut() {
                Some((th, v)) if *th == c.thread.0 => v.push(c),
                _ => by_stream.push((c.thread.0, vec![c])),
            }
        }
        let events = |c: &StreamChunk| {
            t.reader.chunks().get(c.chunk).map_or(0, |h| u64::from(h.header.counts.events))
        };
        for (th, chunks) in by_stream {
            let mut part: Vec<StreamChunk> = Vec::new();
            let mut held = 0u64;
            let mut k = 0;
            for c in chunks {
                held += events(&c);
                part.push(c);
                if part.len() == CHUNKS_PER_FILE || held >= EVENTS_PER_FILE {
                    let chunks = std::mem::take(&mut part);
                    units.push(Unit::Stream { trace: ti, thread: th, part: k, chunks });
                    k += 1;
                    held = 0;
                }
            }
            if !part.is_empty() {
                units.push(Unit::Stream { trace: ti, thread: th, part: k, chunks: part });
            }
        }
    }
    let depths = Depths::default();
    let next = AtomicU64::new(0);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let pcs: Vec<Mutex<HashSet<u64>>> = data.traces.iter().map(|_| Mutex::default()).collect();
    std::thread::scope(|s| {
        for _ in 0..cores.min(units.len()) {
            s.spawn(|| {
                let mut dec = ChunkDecoder::new();
                let seen: Vec<RefCell<HashSet<u64>>> =
                    data.traces.iter().map(|_| RefCell::default()).collect();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(unit) = units.get(i) else { break };
                    if failed.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
                        break;
                    }
                    let done = match unit {
                        Unit::Small(table) => crate::small::build(data, table)
                            .map_err(Error::from)
                            .and_then(|b| write_small(data, out, table, b))
                            .map(|files| {
                                stats.lock().unwrap_or_else(|e| e.into_inner()).files += files;
                            }),
                        Unit::Stream { trace, thread, part, chunks } => {
                            let at = (*trace, *thread, *part);
                            let seen = &seen[*trace];
                            let done = write_stream(data, out, &mut dec, at, chunks, seen, &depths)
                                .map(|(rows, bytes, files)| {
                                    let mut g = stats.lock().unwrap_or_else(|e| e.into_inner());
                                    g.files += files;
                                    g.accesses += rows;
                                    g.access_bytes += bytes;
                                });
                            // The code names of the pcs seen so far, while the other
                            // cores still encode: the `code` table at the end (one
                            // core) then finds them cached, the debug info loaded.
                            let pcs: Vec<u64> = seen.borrow().iter().copied().collect();
                            data.traces[*trace].names().codes(&pcs);
                            done
                        }
                    };
                    if let Err(e) = done {
                        // the first error is the one to report
                        failed.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                        depths.abort();
                        break;
                    }
                }
                for (all, mine) in pcs.iter().zip(seen) {
                    all.lock().unwrap_or_else(|e| e.into_inner()).extend(mine.into_inner());
                }
            });
        }
    });
    if let Some(e) = failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    let mut pcs = pcs.into_iter().map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()));
    let code = crate::small::code_of(data, |_| {
        let mut v: Vec<u64> = pcs.next().unwrap_or_default().into_iter().collect();
        v.sort_unstable();
        v
    });
    let code = RecordBatch::try_new(schema("code"), code)
        .map_err(datafusion::error::DataFusionError::from)?;
    stats.lock().unwrap_or_else(|e| e.into_inner()).files += write_small(data, out, "code", code)?;
    Ok(stats.into_inner().unwrap_or_else(|e| e.into_inner()))
}

/// The `accesses` stream files' schema, for tests of the page encoder.
#[cfg(test)]
pub(crate) fn stream_schema_for_tests() -> (SchemaRef, Keep) {
    stream_schema("accesses").expect("a known table")
}

/// The schema of `table`'s stream files and what to keep of its rows: the
/// partition columns live in the path, not in the file.
fn stream_schema(table: &str) -> Result<(SchemaRef, Keep), Error> {
    let full = schema(table);
    let cols: Vec<usize> = (0..full.fields().len())
        .filter(|&i| !matches!(full.field(i).name().as_str(), "trace" | "thread"))
        .collect();
    let sch = Arc::new(full.project(&cols).map_err(|e| Error::Input(e.to_string()))?);
    Ok((sch, Keep { cols, ..Keep::default() }))
}

/// Part `part` of a stream (`at`: trace, thread, part): its `accesses` file and
/// its `calls` file, from one read of its chunks (part 0 always has a `calls`
/// file, the others only when they hold calls). Returns the accesses rows, the
/// accesses file's bytes and the files written.
fn write_stream(
    data: &Dataset,
    out: &Path,
    dec: &mut ChunkDecoder,
    at: (usize, u32, usize),
    chunks: &[StreamChunk],
    pcs: &RefCell<HashSet<u64>>,
    depths: &Depths,
) -> Result<(u64, u64, u64), Error> {
    let (ti, th, part) = at;
    let (acc_sch, acc_keep) = stream_schema("accesses")?;
    let (call_sch, call_keep) = stream_schema("calls")?;
    let t = &data.traces[ti];
    let path = |table: &str| -> PathBuf {
        out.join(table)
            .join(format!("trace={}", hive(&t.name)))
            .join(format!("thread={th}"))
            .join(format!("part-{part:05}.parquet"))
    };
    let accesses = ChunkRows {
        data,
        trace: ti,
        calls: false,
        keep: &acc_keep,
        schema: &acc_sch,
        pcs: Some(pcs),
    };
    let calls =
        ChunkRows { data, trace: ti, calls: true, keep: &call_keep, schema: &call_sch, pcs: None };
    let new_calls = || -> Result<PageFile, Error> {
        let f = create(&path("calls"))?;
        Ok(PageFile::new(f, call_sch.clone(), &plain_schema(&call_sch), ROW_GROUP)?
            .deferring_last())
    };
    let acc_path = path("accesses");
    let mut aw =
        PageFile::new(create(&acc_path)?, acc_sch.clone(), &plain_schema(&acc_sch), ROW_GROUP)?;
    let mut cw = if part == 0 { Some(new_calls()?) } else { None };
    let mut rows = 0u64;
    // how this part's calls move the depth: (lowest, net), see `depth_steps`
    let mut steps = (0i64, 0i64);
    for c in chunks {
        let (acc, (cb, _)) = accesses.access_and_call_batches(&calls, c, dec);
        let warning = match acc {
            AccessOut::Rows((ab, warning), grouped) => {
                if let Some(b) = ab {
                    rows += b.num_rows() as u64;
                    let order = if grouped { None } else { pc_order(&b) };
                    aw.write(b, order)?;
                }
                warning
            }
            AccessOut::Segs(segs, warning) => {
                rows += segs.rows as u64;
                aw.write_segs(&segs)?;
                warning
            }
        };
        if let Some(b) = cb {
            let kinds = b
                .column_by_name("depth")
                .and_then(|d| d.as_primitive_opt::<UInt32Type>())
                .ok_or_else(|| Error::Input("calls rows without a depth".into()))?;
            let (low, net) =
                crate::tables::depth_steps(kinds.values().iter().map(|&k| u64::from(k)));
            steps = (steps.0.min(steps.1 + low), steps.1 + net);
            let w = match cw.as_mut() {
                Some(w) => w,
                None => cw.insert(new_calls()?),
            };
            w.write(b, None)?;
        }
        if let Some(w) = warning {
            // the rows before the damage are in; the chunks after it are not read
            data.warn(w);
            break;
        }
    }
    depths.publish((ti, th), part, steps);
    aw.close()?;
    let bytes = std::fs::metadata(&acc_path).map(|m| m.len()).unwrap_or(0);
    let mut files = 1;
    if let Some(w) = cw {
        let start = depths
            .start_of((ti, th), part)
            .ok_or_else(|| Error::Input("the export stopped".into()))?;
        w.close_with(|d| crate::tables::replay_depth(d, start as u32))?;
        files += 1;
    }
    Ok((rows, bytes, files))
}

/// A small table, one file per trace. Returns the files written.
fn write_small(data: &Dataset, out: &Path, table: &str, b: RecordBatch) -> Result<u64, Error> {
    let trace_col =
        b.schema().index_of("trace").map_err(datafusion::error::DataFusionError::from)?;
    let keep: Vec<usize> = (0..b.num_columns()).filter(|&i| i != trace_col).collect();
    for t in &data.traces {
        let d = b.column(trace_col).as_dictionary::<Int32Type>();
        let vals = d.values().as_string::<i32>();
        let mask: BooleanArray = d
            .keys()
            .iter()
            .map(|k| Some(k.is_some_and(|k| vals.value(k as usize) == t.name)))
            .collect();
        let rows =
            filter_record_batch(&b, &mask).map_err(datafusion::error::DataFusionError::from)?;
        let rows = rows.project(&keep).map_err(datafusion::error::DataFusionError::from)?;
        let path =
            out.join(table).join(format!("trace={}", hive(&t.name))).join("part-00000.parquet");
        write_file(&path, &rows.schema(), std::iter::once(Ok(rows)))?;
    }
    Ok(data.traces.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{ArrayRef, UInt32Array, UInt64Array};
    use datafusion::arrow::compute::take;

    fn batch(rows: &[(u64, u64, u64)]) -> RecordBatch {
        let col = |f: fn(&(u64, u64, u64)) -> u64| -> ArrayRef {
            Arc::new(UInt64Array::from(rows.iter().map(f).collect::<Vec<_>>()))
        };
        RecordBatch::try_from_iter([
            ("seq", col(|r| r.0)),
            ("address", col(|r| r.1)),
            ("pc", col(|r| r.2)),
        ])
        .unwrap()
    }

    fn rows(b: &RecordBatch) -> Vec<(u64, u64, u64)> {
        let c = |n: &str| b.column_by_name(n).unwrap().as_primitive::<UInt64Type>().clone();
        let (s, a, p) = (c("seq"), c("address"), c("pc"));
        (0..b.num_rows()).map(|i| (s.value(i), a.value(i), p.value(i))).collect()
    }

    fn grouped(b: RecordBatch) -> RecordBatch {
        let place = pc_order(&b).unwrap();
        let mut perm = vec![0u32; place.len()];
        for (row, &at) in place.iter().enumerate() {
            perm[at as usize] = row as u32;
        }
        let idx = UInt32Array::from(perm);
        let cols = b.columns().iter().map(|c| take(c.as_ref(), &idx, None).unwrap()).collect();
        RecordBatch::try_new(b.schema(), cols).unwrap()
    }

    #[test]
    fn a_loops_rows_are_grouped_by_instruction_in_seq_order() {
        // two arrays walked in step, as `c[i] = a[i] + b[i]` does
        let mut r = Vec::new();
        // more rows than the sample that decides
        for i in 0..20_000u64 {
            r.push((2 * i, 0x10000 + 8 * i, 0x401000));
            r.push((2 * i + 1, 0x90000 + 8 * i, 0x401008));
        }
        let got = rows(&grouped(batch(&r)));
        let mut want: Vec<_> = r.iter().filter(|x| x.2 == 0x401000).copied().collect();
        want.extend(r.iter().filter(|x| x.2 == 0x401008));
        assert_eq!(got, want);
    }

    #[test]
    fn random_accesses_keep_their_order() {
        let mut x = 0x9e3779b97f4a7c15u64;
        let r: Vec<_> = (0..40_000u64)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (i, 0x10000 + (x % (1 << 22)) * 8, 0x401000 + (i % 3) * 8)
            })
            .collect();
        assert_eq!(pc_order(&batch(&r)), None);
    }

    #[test]
    fn a_parts_depth_comes_from_the_steps_of_the_parts_before_it() {
        use crate::tables::{depth_after, depth_steps, replay_depth};
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for n in [0usize, 1, 5, 64, 1000] {
            // entries (0) and exits (1), exits more often at first: the depth hits 0
            let kinds: Vec<u64> = (0..n)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    u64::from(x % 100 < if i < n / 3 { 60 } else { 40 })
                })
                .collect();
            let mut whole = kinds.clone();
            replay_depth(&mut whole, 0);
            for cuts in [vec![], vec![n / 2], vec![n / 3, n / 3, 2 * n / 3, n]] {
                let mut at = 0;
                let mut bounds = cuts.clone();
                bounds.push(n);
                let mut before = Vec::new();
                for end in bounds {
                    let start = before.iter().copied().fold(0, depth_after);
                    let mut part = kinds[at..end].to_vec();
                    replay_depth(&mut part, start as u32);
                    assert_eq!(part, whole[at..end], "{n} rows, part {at}..{end}");
                    before.push(depth_steps(kinds[at..end].iter().copied()));
                    at = end;
                }
            }
        }
    }

    #[test]
    fn packed_bits_counts_the_spread_of_differences() {
        assert_eq!(packed_bits(100, |i| 5 + 8 * i as u64), 0);
        // differences 1 and 9 alternate: a spread of 8 takes 4 bits
        assert_eq!(packed_bits(33, |i| (i as u64 / 2) * 10 + (i as u64 % 2)), 32 * 4);
    }
}
