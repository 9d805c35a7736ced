//! The tables: providers straight over the native trace.
//!
//! `accesses` and `calls` are scanned chunk by chunk (one partition per range of
//! chunks; `calls` one per stream, for the call depth); `threads`, `allocations`,
//! `code` and `data` are small and built whole when a query reads them.

use crate::dataset::Dataset;
use crate::run_rows::AccessRows;
use crate::Error;
use async_trait::async_trait;
use datafusion::arrow::array::PrimitiveArray;
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, DictionaryArray, Int32Array, Int8Array, RecordBatch, StringArray,
    UInt32Array, UInt64Array,
};
use datafusion::arrow::datatypes::{
    ArrowDictionaryKeyType, ArrowNativeType, DataType, Field, Int32Type, Int8Type, Schema,
    SchemaRef,
};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Expr, Operator, TableProviderFilterPushDown, TableType};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use datafusion::prelude::SessionContext;
use memlens_format::codec::Columns;
use memlens_format::{ChunkDecoder, Event, StreamChunk, ThreadId};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

/// Every table and its columns with their types, for `describe` and the docs.
const TABLES: &[(&str, &[(&str, &str)])] = &[
    (
        "accesses",
        &[
            ("trace", "text"),
            ("thread", "u32"),
            ("seq", "u64"),
            ("clock", "u64"),
            ("kind", "text"),
            ("size", "u64"),
            ("address", "u64"),
            ("pc", "u64"),
            ("value", "u64"),
            ("atomic", "bool"),
        ],
    ),
    (
        "calls",
        &[
            ("trace", "text"),
            ("thread", "u32"),
            ("seq", "u64"),
            ("clock", "u64"),
            ("kind", "text"),
            ("pc", "u64"),
            ("call_site", "u64"),
            ("frame", "u64"),
            ("depth", "u32"),
        ],
    ),
    (
        "allocations",
        &[
            ("trace", "text"),
            ("thread", "u32"),
            ("seq", "u64"),
            ("site", "u64"),
            ("size", "u64"),
            ("address", "u64"),
            ("freed_seq", "u64"),
        ],
    ),
    (
        "threads",
        &[
            ("trace", "text"),
            ("thread", "u32"),
            ("os_tid", "u32"),
            ("name", "text"),
            ("parent", "u32"),
            ("events", "u64"),
            ("loads", "u64"),
            ("stores", "u64"),
            ("allocs", "u64"),
            ("frees", "u64"),
            ("complete", "bool"),
        ],
    ),
    (
        "code",
        &[
            ("trace", "text"),
            ("pc", "u64"),
            ("function", "text"),
            ("file", "text"),
            ("line", "u32"),
            ("column", "u32"),
            ("inlined", "text"),
        ],
    ),
    (
        "data",
        &[
            ("trace", "text"),
            ("start", "u64"),
            ("end", "u64"),
            ("variable", "text"),
            ("kind", "text"),
        ],
    ),
];

/// The tables and their columns, one line each.
pub(crate) fn describe() -> String {
    let mut s = String::from("tables:");
    for (t, cols) in TABLES {
        let c: Vec<&str> = cols.iter().map(|c| c.0).collect();
        s.push_str(&format!("\n  {t}({})", c.join(", ")));
    }
    s.push_str("\nfunctions: line(pc), function(pc), variable(address), field(address), cache_line(address [, line_size]) (with several traces: add the trace column as last argument)");
    s
}

fn dict(key: DataType) -> DataType {
    DataType::Dictionary(Box::new(key), Box::new(DataType::Utf8))
}

/// The Arrow schema of a table (text columns that repeat are dictionaries).
pub(crate) fn schema(table: &str) -> SchemaRef {
    let (_, cols) = TABLES.iter().find(|t| t.0 == table).expect("a known table");
    let fields: Vec<Field> = cols
        .iter()
        .map(|&(name, ty)| {
            let dt = match (table, name, ty) {
                (_, "trace", _) => dict(DataType::Int32),
                ("accesses" | "calls" | "data", "kind", _) => dict(DataType::Int8),
                (_, _, "text") => DataType::Utf8,
                (_, _, "u32") => DataType::UInt32,
                (_, _, "u64") => DataType::UInt64,
                _ => DataType::Boolean,
            };
            let nullable = matches!(name, "value" | "freed_seq" | "parent" | "call_site");
            Field::new(name, dt, nullable)
        })
        .collect();
    Arc::new(Schema::new(fields))
}

pub(crate) fn register(ctx: &SessionContext, data: &Arc<Dataset>) -> Result<(), Error> {
    for (t, _) in TABLES {
        ctx.register_table(*t, Arc::new(Table { data: data.clone(), name: t }))?;
    }
    Ok(())
}

/// The table called `name` over `data` (None: no such table).
pub(crate) fn table(data: Arc<Dataset>, name: &str) -> Option<Arc<dyn TableProvider>> {
    let name = TABLES.iter().find(|t| t.0 == name)?.0;
    Some(Arc::new(Table { data, name }))
}

/// The `trace` column: every row the same value.
fn trace_col(name: &str, rows: usize) -> ArrayRef {
    let keys = Int32Array::from(vec![0; rows]);
    Arc::new(
        DictionaryArray::<Int32Type>::try_new(keys, Arc::new(StringArray::from(vec![name])))
            .expect("valid keys"),
    )
}

fn kind_col(kinds: Vec<i8>, names: &[&str]) -> ArrayRef {
    let values = Arc::new(StringArray::from(names.to_vec()));
    Arc::new(
        DictionaryArray::<Int8Type>::try_new(Int8Array::from(kinds), values).expect("valid keys"),
    )
}

pub(crate) const ACCESS_KINDS: [&str; 3] = ["load", "store", "rmw"];
const CALL_KINDS: [&str; 2] = ["enter", "exit"];

/// What a scan keeps: projected columns and pushed-down filters.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Keep {
    /// Column indices of the table's schema, in output order.
    pub cols: Vec<usize>,
    /// Only these threads (None: all).
    pub threads: Option<HashSet<u32>>,
    /// Only these kinds, as indices of [`ACCESS_KINDS`] (None: all).
    pub kinds: Option<[bool; 3]>,
    /// Only rows whose `seq` may lie in this inclusive range (None: all).
    pub seq: Option<(u64, u64)>,
    /// Only rows whose `clock` may lie in this inclusive range (None: all).
    pub clock: Option<(u64, u64)>,
}

/// The intersection of two inclusive ranges (None: unbounded).
fn meet(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> Option<(u64, u64)> {
    match (a, b) {
        (Some(x), Some(y)) => Some((x.0.max(y.0), x.1.min(y.1))),
        (x, None) | (None, x) => x,
    }
}

/// `column OP literal` (or reversed) and `column BETWEEN a AND b` on a u64 column:
/// the inclusive range of values it allows.
fn window(e: &Expr, name: &str) -> Option<(u64, u64)> {
    let num = |v: &ScalarValue| -> Option<i128> {
        v.cast_to(&DataType::Int64).ok().and_then(|x| x.to_string().parse().ok())
    };
    let clamp = |lo: i128, hi: i128| -> (u64, u64) {
        (lo.clamp(0, u64::MAX as i128) as u64, hi.clamp(-1, u64::MAX as i128).max(0) as u64)
    };
    let is_col = |e: &Expr| match e {
        Expr::Column(c) => c.name == name,
        Expr::Cast(c) => matches!(&*c.expr, Expr::Column(c) if c.name == name),
        _ => false,
    };
    match e {
        Expr::BinaryExpr(b) => {
            let (op, v) = match (&*b.left, &*b.right) {
                (l, Expr::Literal(v, _)) if is_col(l) => (b.op, num(v)?),
                (Expr::Literal(v, _), r) if is_col(r) => (b.op.swap()?, num(v)?),
                _ => return None,
            };
            let (lo, hi) = match op {
                Operator::Eq => (v, v),
                Operator::Gt => (v + 1, i128::MAX),
                Operator::GtEq => (v, i128::MAX),
                Operator::Lt => (i128::MIN, v - 1),
                Operator::LtEq => (i128::MIN, v),
                _ => return None,
            };
            if hi < 0 || lo > hi {
                return Some((1, 0)); // empty
            }
            Some(clamp(lo, hi))
        }
        Expr::Between(b) if !b.negated && is_col(&b.expr) => {
            let (Expr::Literal(lo, _), Expr::Literal(hi, _)) = (&*b.low, &*b.high) else {
                return None;
            };
            let (lo, hi) = (num(lo)?, num(hi)?);
            if hi < 0 || lo > hi {
                return Some((1, 0));
            }
            Some(clamp(lo, hi))
        }
        _ => None,
    }
}

/// Per stream state carried from chunk to chunk (the call depth).
#[derive(Default)]
pub(crate) struct StreamState {
    depth: u32,
}

/// A chunk's Arrow batch (None: no row) and, for a damaged chunk, the reason (the
/// batch then holds the rows before the damage).
pub(crate) type Batch = (Option<RecordBatch>, Option<String>);

/// A chunk's `accesses` rows for the export.
pub(crate) enum AccessOut {
    /// A batch, and whether its rows are grouped by pc already.
    Rows(Batch, bool),
    /// Grouped by pc as segments (loops' runs not written out), with the
    /// warning of a damaged chunk.
    Segs(crate::run_rows::SegRows, Option<String>),
}

/// What turns the chunks of one stream into rows, the same from chunk to chunk.
pub(crate) struct ChunkRows<'a> {
    pub data: &'a Dataset,
    /// Index of the trace in `data`.
    pub trace: usize,
    /// `calls` rows, else `accesses`.
    pub calls: bool,
    pub keep: &'a Keep,
    /// The projected schema of the rows.
    pub schema: &'a SchemaRef,
    /// Where the code addresses of every event go, when someone collects them
    /// (the export builds its `code` table from them: no second pass).
    pub pcs: Option<&'a std::cell::RefCell<datafusion::common::HashSet<u64>>>,
}

impl ChunkRows<'_> {
    /// Builds the Arrow batch of one chunk of the stream: the one place events
    /// become rows (`accesses` or `calls`), decoded by the trace's own decoder.
    /// Rows are not filtered here: pushed-down filters only skip chunks (they are
    /// `Inexact`, the engine applies them to the rows).
    pub(crate) fn batch(
        &self,
        c: &StreamChunk,
        dec: &mut ChunkDecoder,
        st: &mut StreamState,
    ) -> Batch {
        if self.calls {
            self.call_batch(c, dec, st)
        } else {
            self.access_batch(c, dec)
        }
    }

    fn trace(&self) -> &crate::dataset::Trace {
        &self.data.traces[self.trace]
    }

    /// The warning of a chunk the decoder stopped in.
    fn damage<T, E: std::fmt::Display>(&self, res: Result<T, E>) -> Option<String> {
        let path = self.trace().path.display();
        res.err().map(|e| format!("{path}: {e}; rows read up to the damage"))
    }

    /// The batch of `rows` rows in the projected columns: `trace` and `thread`
    /// made here, the table's own columns by `own` (from their names).
    fn project(
        &self,
        c: &StreamChunk,
        rows: usize,
        warning: Option<String>,
        mut own: impl FnMut(&str) -> ArrayRef,
    ) -> Batch {
        let full = schema_for(self.calls);
        let cols = self
            .keep
            .cols
            .iter()
            .map(|&i| match full.field(i).name().as_str() {
                "trace" => trace_col(&self.trace().name, rows),
                "thread" => Arc::new(UInt32Array::from(vec![c.thread.0; rows])),
                name => own(name),
            })
            .collect();
        finish(self.schema, cols, rows, warning)
    }

    /// `accesses` rows of one chunk, through the decoder's column batches: loads,
    /// stores and ranges arrive as columns that become Arrow arrays without a copy;
    /// atomic read-modify-writes (rare) are appended from the other events.
    fn access_batch(&self, c: &StreamChunk, dec: &mut ChunkDecoder) -> Batch {
        let t = self.trace();
        let mut cols = Columns::new();
        let warning = self.damage(dec.decode_columns(&t.reader, c, &mut cols));
        self.access_rows(c, cols, warning)
    }

    /// `accesses` rows of one chunk (`self`) and, from the same decoding, its
    /// `calls` rows in the projection of `calls`, their `depth` relative: 0 for an
    /// entry, 1 for an exit (the depth depends on every earlier chunk of the
    /// stream; [`replay_depth`] fills it in). One read of the trace for both
    /// tables, where the calls' own scan walks every chunk again. A chunk whose
    /// loops are runs comes back grouped by pc, as segments when it can (see
    /// [`crate::run_rows`]).
    pub(crate) fn access_and_call_batches(
        &self,
        calls: &ChunkRows,
        c: &StreamChunk,
        dec: &mut ChunkDecoder,
    ) -> (AccessOut, Batch) {
        let t = self.trace();
        // loops stay runs: written out by `run_rows`, each row in its place
        let mut cols = Columns { keep_runs: true, ..Columns::new() };
        let warning = self.damage(dec.decode_columns(&t.reader, c, &mut cols));
        let mut rows = CallCols::default();
        let mut now = t.reader.chunks()[c.chunk].header.first_clock;
        for (n, e) in &cols.other {
            if let Event::Clock(v) = e {
                now = *v;
            }
            rows.push(*n, now, e, |k| u32::from(k == 1));
        }
        let call = calls.call_rows(c, rows, warning.clone());
        if cols.runs.is_empty() {
            return (AccessOut::Rows(self.access_rows(c, cols, warning), false), call);
        }
        // Grouped by pc when the runs hold most rows: a loop's instruction then
        // steps by its stride (see `parquet_out::pc_order`).
        let looped: u64 = cols.runs.iter().map(|r| r.len()).sum();
        let grouped = looped >= cols.len() as u64;
        if let Some(set) = self.pcs {
            crate::small::add_pcs(&mut set.borrow_mut(), &cols);
        }
        let first_clock = t.reader.chunks()[c.chunk].header.first_clock;
        let all = self.keep.cols.len() == schema_for(false).fields().len() - 2;
        if grouped && all {
            if let Some(segs) = crate::run_rows::access_segs(&cols, first_clock) {
                return (AccessOut::Segs(segs, warning), call);
            }
        }
        let r = crate::run_rows::access_rows(&cols, first_clock, grouped);
        let b = self.access_batch_of(c, r, warning);
        (AccessOut::Rows(b, grouped), call)
    }

    /// The `accesses` batch of a decoded chunk.
    fn access_rows(&self, c: &StreamChunk, mut cols: Columns, warning: Option<String>) -> Batch {
        let t = self.trace();
        if let Some(set) = self.pcs {
            crate::small::add_pcs(&mut set.borrow_mut(), &cols);
        }
        let full = schema_for(false);
        let want = |n: &str| self.keep.cols.iter().any(|&i| full.field(i).name() == n);
        let plain = cols.len();
        let has_values = !cols.value.is_empty();
        cols.value.resize(if has_values { plain } else { 0 }, 0);
        let mut values: Vec<Option<u64>> = Vec::new();
        // left empty while every row so far has no value (most traces record none)
        if want("value") && has_values {
            values = (0..plain)
                .map(|i| (cols.kind[i] & Columns::VALUE != 0).then(|| cols.value[i]))
                .collect();
        }
        let mut kind: Vec<i8> =
            cols.kind.iter().map(|&k| i8::from(k & Columns::WRITE != 0)).collect();
        let mut atomic: Vec<bool> = Vec::new();
        if want("atomic") {
            atomic = cols.kind.iter().map(|&k| k & Columns::ATOMIC != 0).collect();
        }
        let first_clock = t.reader.chunks()[c.chunk].header.first_clock;
        let mut clock =
            if want("clock") { clocks_of(&cols.seq, first_clock, &cols.other) } else { Vec::new() };
        let mut rmw_seq = Vec::new();
        for (n, e) in &cols.other {
            if let Event::Rmw { pc, addr, size, value, .. } = *e {
                rmw_seq.push(*n);
                cols.pc.push(pc.0);
                cols.addr.push(addr.0);
                cols.size.push(u64::from(size));
                kind.push(2);
                if want("value") && (value.is_some() || !values.is_empty()) {
                    values.resize(kind.len() - 1, None);
                    values.push(value);
                }
                if want("atomic") {
                    atomic.push(true);
                }
            }
        }
        if want("clock") {
            clock.extend(clocks_of(&rmw_seq, first_clock, &cols.other));
        }
        cols.seq.extend(rmw_seq);
        let r = AccessRows {
            seq: cols.seq,
            clock,
            kind,
            size: cols.size,
            addr: cols.addr,
            pc: cols.pc,
            value: values,
            atomic,
        };
        self.access_batch_of(c, r, warning)
    }

    /// The `accesses` batch of rows written out (the one place they become
    /// arrays; columns not projected may be left empty, `value` is when no
    /// row has one).
    fn access_batch_of(
        &self,
        c: &StreamChunk,
        mut r: AccessRows,
        warning: Option<String>,
    ) -> Batch {
        let rows = r.kind.len();
        if rows == 0 {
            return (None, warning);
        }
        self.project(c, rows, warning, |name| match name {
            "seq" => Arc::new(UInt64Array::from(std::mem::take(&mut r.seq))),
            "clock" => Arc::new(UInt64Array::from(std::mem::take(&mut r.clock))),
            "kind" => kind_col(std::mem::take(&mut r.kind), &ACCESS_KINDS),
            "size" => Arc::new(UInt64Array::from(std::mem::take(&mut r.size))),
            "address" => Arc::new(UInt64Array::from(std::mem::take(&mut r.addr))),
            "pc" => Arc::new(UInt64Array::from(std::mem::take(&mut r.pc))),
            // most traces record no value: one null bitmap, not a row at a time
            "value" if r.value.is_empty() => {
                datafusion::arrow::array::new_null_array(&DataType::UInt64, rows)
            }
            "value" => {
                r.value.resize(rows, None);
                Arc::new(UInt64Array::from(std::mem::take(&mut r.value)))
            }
            "atomic" => Arc::new(BooleanArray::from(std::mem::take(&mut r.atomic))),
            other => unreachable!("accesses has no column {other}"),
        })
    }

    /// `calls` rows of one chunk (function entries and exits, with the call depth
    /// carried from chunk to chunk of the stream).
    fn call_batch(&self, c: &StreamChunk, dec: &mut ChunkDecoder, st: &mut StreamState) -> Batch {
        let t = self.trace();
        let mut rows = CallCols::default();
        let mut now = t.reader.chunks()[c.chunk].header.first_clock;
        // accesses are stepped over, not decoded
        let res = dec.skeleton(&t.reader, c, |n, e| {
            if let Event::Clock(v) = e {
                now = v;
            }
            rows.push(c.first_index + n, now, &e, |k| step_depth(&mut st.depth, k));
        });
        let warning = self.damage(res);
        self.call_rows(c, rows, warning)
    }

    /// The `calls` batch of a chunk's rows.
    fn call_rows(&self, c: &StreamChunk, mut r: CallCols, warning: Option<String>) -> Batch {
        let rows = r.kind.len();
        if rows == 0 {
            return (None, warning);
        }
        self.project(c, rows, warning, |name| match name {
            "seq" => Arc::new(UInt64Array::from(std::mem::take(&mut r.seq))),
            "clock" => Arc::new(UInt64Array::from(std::mem::take(&mut r.clock))),
            "kind" => kind_col(std::mem::take(&mut r.kind), &CALL_KINDS),
            "pc" => Arc::new(UInt64Array::from(std::mem::take(&mut r.pc))),
            "call_site" => Arc::new(UInt64Array::from(std::mem::take(&mut r.site))),
            "frame" => Arc::new(UInt64Array::from(std::mem::take(&mut r.frame))),
            "depth" => Arc::new(UInt32Array::from(std::mem::take(&mut r.depth))),
            other => unreachable!("calls has no column {other}"),
        })
    }
}

/// The `calls` rows of a chunk, column by column.
#[derive(Default)]
struct CallCols {
    seq: Vec<u64>,
    clock: Vec<u64>,
    kind: Vec<i8>,
    site: Vec<Option<u64>>,
    frame: Vec<u64>,
    pc: Vec<u64>,
    depth: Vec<u32>,
}

impl CallCols {
    /// Event `e`, number `seq`, as a row if it is an entry or an exit; `depth`
    /// gives its depth from its kind (0 entry, 1 exit).
    fn push(&mut self, seq: u64, clock: u64, e: &Event, depth: impl FnOnce(i8) -> u32) {
        let (k, s, f, p) = match *e {
            Event::FuncEnter { pc, call_site, frame } => (0i8, Some(call_site.0), frame.0, pc.0),
            Event::FuncExit { pc } => (1, None, 0, pc.0),
            _ => return,
        };
        self.seq.push(seq);
        self.clock.push(clock);
        self.kind.push(k);
        self.site.push(s);
        self.frame.push(f);
        self.pc.push(p);
        self.depth.push(depth(k));
    }
}

/// The call depth rule of `calls`: an entry is at the depth before it and opens
/// one more; an exit closes one (never below 0) and is at the depth after it.
fn step_depth(d: &mut u32, kind: i8) -> u32 {
    if kind == 0 {
        *d += 1;
        *d - 1
    } else {
        *d = d.saturating_sub(1);
        *d
    }
}

/// A run of calls rows whose `depth` holds their kind (0 entry, 1 exit, as
/// [`ChunkRows::access_and_call_batches`] leaves it) as a function of the depth
/// before it: `(lowest, net)`, the lowest running sum (≤ 0) and the sum at the end.
pub(crate) fn depth_steps(kinds: impl Iterator<Item = u64>) -> (i64, i64) {
    let (mut sum, mut low) = (0i64, 0i64);
    for k in kinds {
        sum += if k == 0 { 1 } else { -1 };
        low = low.min(sum);
    }
    (low, sum)
}

/// The depth after a run of `depth_steps` `(lowest, net)` that starts at `d`
/// (an exit at depth 0 stays at 0).
pub(crate) fn depth_after(d: u64, (low, net): (i64, i64)) -> u64 {
    ((d as i64 + low).max(0) + net - low) as u64
}

/// Turns the kinds of a run of calls rows (see [`depth_steps`]) into their depths,
/// the run starting at depth `d`.
pub(crate) fn replay_depth(kinds: &mut [u64], mut d: u32) {
    for k in kinds.iter_mut() {
        *k = u64::from(step_depth(&mut d, *k as i8));
    }
}

/// The `clock` of each of `seqs` (ascending): the chunk's first clock, moved by
/// the `clock` events among `other` (ascending by number) at or before it.
fn clocks_of(seqs: &[u64], first: u64, other: &[(u64, Event)]) -> Vec<u64> {
    let mut clock = first;
    let mut o = other.iter().peekable();
    seqs.iter()
        .map(|&s| {
            while let Some((_, e)) = o.next_if(|(n, _)| *n < s) {
                if let Event::Clock(v) = e {
                    clock = *v;
                }
            }
            clock
        })
        .collect()
}

/// The batch of `rows` rows (a query such as `count(*)` projects no column).
fn finish(schema: &SchemaRef, cols: Vec<ArrayRef>, rows: usize, warning: Option<String>) -> Batch {
    let opts = datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(rows));
    match RecordBatch::try_new_with_options(schema.clone(), cols, &opts) {
        Ok(b) => (Some(b), warning),
        Err(e) => (None, Some(format!("internal: {e}"))),
    }
}

fn schema_for(calls: bool) -> SchemaRef {
    schema(if calls { "calls" } else { "accesses" })
}

/// A table: `accesses` and `calls` are scanned chunk by chunk, the others are
/// built whole when a query reads them.
#[derive(Debug)]
pub(crate) struct Table {
    pub(crate) data: Arc<Dataset>,
    pub(crate) name: &'static str,
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dataset({} traces)", self.traces.len())
    }
}

/// `column = literal` or `column IN (literals)` on `name`: the literals.
fn literals<'e>(e: &'e Expr, name: &str) -> Option<Vec<&'e ScalarValue>> {
    match e {
        Expr::BinaryExpr(b) if b.op == Operator::Eq => match (&*b.left, &*b.right) {
            (Expr::Column(c), Expr::Literal(v, _)) | (Expr::Literal(v, _), Expr::Column(c))
                if c.name == name =>
            {
                Some(vec![v])
            }
            _ => None,
        },
        Expr::InList(l) if !l.negated => match &*l.expr {
            Expr::Column(c) if c.name == name => l
                .list
                .iter()
                .map(|x| if let Expr::Literal(v, _) = x { Some(v) } else { None })
                .collect(),
            _ => None,
        },
        Expr::Cast(c) => literals(&c.expr, name),
        _ => None,
    }
}

fn text_of(v: &ScalarValue) -> Option<String> {
    match v {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s.clone()),
        ScalarValue::Dictionary(_, v) => text_of(v),
        _ => None,
    }
}

fn pushed(calls: bool, e: &Expr) -> Option<Keep> {
    let mut k = Keep::default();
    if let Some(w) = window(e, "seq") {
        k.seq = Some(w);
        return Some(k);
    }
    if let Some(w) = window(e, "clock") {
        k.clock = Some(w);
        return Some(k);
    }
    if let Some(v) = literals(e, "thread") {
        let t: Option<HashSet<u32>> = v
            .iter()
            .map(|v| v.cast_to(&DataType::UInt32).ok().and_then(|x| x.to_string().parse().ok()))
            .collect();
        k.threads = Some(t?);
        return Some(k);
    }
    if !calls {
        if let Some(v) = literals(e, "kind") {
            let mut ks = [false; 3];
            for x in v {
                let s = text_of(x)?;
                ks[ACCESS_KINDS.iter().position(|k| *k == s)?] = true;
            }
            k.kinds = Some(ks);
            return Some(k);
        }
    }
    None
}

impl Table {
    /// `Some(calls)` for the tables scanned chunk by chunk: `calls` or `accesses`.
    fn streamed(&self) -> Option<bool> {
        match self.name {
            "accesses" => Some(false),
            "calls" => Some(true),
            _ => None,
        }
    }

    /// The plan of `accesses` or `calls`: the chunks the pushed filters rule out
    /// are skipped, the others split into partitions.
    fn scan_chunks(
        &self,
        calls: bool,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let full = self.schema();
        let mut keep = Keep {
            cols: projection.cloned().unwrap_or_else(|| (0..full.fields().len()).collect()),
            ..Keep::default()
        };
        for f in filters {
            if let Some(k) = pushed(calls, f) {
                if let Some(t) = k.threads {
                    keep.threads = Some(match keep.threads.take() {
                        Some(old) => old.intersection(&t).copied().collect(),
                        None => t,
                    });
                }
                if let Some(ks) = k.kinds {
                    let old = keep.kinds.unwrap_or([true; 3]);
                    keep.kinds = Some([old[0] && ks[0], old[1] && ks[1], old[2] && ks[2]]);
                }
                keep.seq = meet(keep.seq, k.seq);
                keep.clock = meet(keep.clock, k.clock);
            }
        }
        // units of work: (trace, chunks of one stream)
        let mut units: Vec<(usize, Vec<StreamChunk>)> = Vec::new();
        for (ti, t) in self.data.traces.iter().enumerate() {
            let mut by_stream: Vec<(ThreadId, Vec<StreamChunk>)> = Vec::new();
            let all = t.reader.stream_chunks();
            for (j, &c) in all.iter().enumerate() {
                if keep.threads.as_ref().is_some_and(|s| !s.contains(&c.thread.0)) {
                    continue;
                }
                let h = &t.reader.chunks()[c.chunk].header;
                // chunk statistics: the numbers it holds, and its clocks (from its
                // first to the next chunk's first); `calls` reads whole streams (depth)
                let next = all.get(j + 1).filter(|n| n.thread == c.thread);
                let last_seq = c.first_index + u64::from(h.counts.events).max(1) - 1;
                let last_clock =
                    next.map_or(u64::MAX, |n| t.reader.chunks()[n.chunk].header.first_clock);
                let outside = |w: Option<(u64, u64)>, lo: u64, hi: u64| {
                    w.is_some_and(|(a, b)| b < lo || a > hi || a > b)
                };
                if !calls
                    && (outside(keep.seq, c.first_index, last_seq)
                        || outside(keep.clock, h.first_clock, last_clock))
                {
                    continue;
                }
                if !calls {
                    if let Some(k) = keep.kinds {
                        // loads/stores counters: skip chunks that hold no access of a wanted kind
                        let has = (k[0] && h.counts.loads > 0)
                            || (k[1] && h.counts.stores > 0)
                            || (k[2] && (h.counts.loads > 0 || h.counts.stores > 0));
                        if !has {
                            continue;
                        }
                    } else if h.counts.loads == 0 && h.counts.stores == 0 {
                        continue;
                    }
                }
                match by_stream.last_mut() {
                    Some((th, v)) if *th == c.thread => v.push(c),
                    _ => by_stream.push((c.thread, vec![c])),
                }
            }
            for (_, chunks) in by_stream {
                if calls {
                    units.push((ti, chunks));
                } else {
                    units.extend(chunks.into_iter().map(|c| (ti, vec![c])));
                }
            }
        }
        // one partition per contiguous range of units, as many as the engine scans at once
        let n = state.config().target_partitions().max(1).min(units.len().max(1));
        let per = units.len().div_ceil(n).max(1);
        let mut parts: Vec<Vec<(usize, Vec<ChunkRef>)>> = Vec::new();
        let mut it = units.into_iter().peekable();
        while it.peek().is_some() {
            let group = it.by_ref().take(per);
            parts.push(group.map(|(t, cs)| (t, cs.iter().map(ChunkRef::from).collect())).collect());
        }
        if parts.is_empty() {
            parts.push(Vec::new());
        }
        let spec = ScanSpec { table: self.name.to_string(), keep, parts };
        Ok(Arc::new(ScanExec::new(self.data.clone(), spec)?))
    }
}

/// `s` with each dictionary column as its values' type (text). A cluster's
/// tables have them (Ballista's shuffle hands dictionary columns on as plain
/// text, and its final aggregation then fails on the type), and so do Parquet files.
pub(crate) fn plain_schema(s: &Schema) -> SchemaRef {
    let f: Vec<Field> = s
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Dictionary(_, v) => f.as_ref().clone().with_data_type(v.as_ref().clone()),
            _ => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new(f))
}

/// `b` in the types of `out` (the dictionaries of text cast to text, or `b` as is).
pub(crate) fn plain_batch(b: RecordBatch, out: &SchemaRef) -> DfResult<RecordBatch> {
    if b.schema_ref() == out {
        return Ok(b);
    }
    let cols = b
        .columns()
        .iter()
        .zip(out.fields())
        .map(|(c, f)| datafusion::arrow::compute::cast(c, f.data_type()))
        .collect::<Result<Vec<_>, _>>()?;
    let opts =
        datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
    Ok(RecordBatch::try_new_with_options(out.clone(), cols, &opts)?)
}

/// A partition's units of work: (trace index, chunks of one stream) each.
type Units = Vec<(usize, Vec<StreamChunk>)>;

/// A chunk of one stream, as a scan sends it to another process.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct ChunkRef {
    thread: u32,
    chunk: usize,
    first_index: u64,
}

impl From<&StreamChunk> for ChunkRef {
    fn from(c: &StreamChunk) -> ChunkRef {
        ChunkRef { thread: c.thread.0, chunk: c.chunk, first_index: c.first_index }
    }
}

impl From<ChunkRef> for StreamChunk {
    fn from(c: ChunkRef) -> StreamChunk {
        StreamChunk { thread: ThreadId(c.thread), chunk: c.chunk, first_index: c.first_index }
    }
}

/// What a scan reads, whole: a cluster sends it to the executors, which rebuild
/// the same [`ScanExec`] over the same traces.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct ScanSpec {
    /// The table.
    pub table: String,
    /// Columns and pushed-down filters.
    pub keep: Keep,
    /// Per partition: its units of work, (trace index, chunks of one stream).
    /// The small tables have one partition and no unit.
    pub parts: Vec<Vec<(usize, Vec<ChunkRef>)>>,
}

/// The physical scan of a memlens table: one partition per range of chunks
/// (`accesses`, `calls`), or one that builds a small table whole.
pub(crate) struct ScanExec {
    pub(crate) data: Arc<Dataset>,
    pub(crate) spec: ScanSpec,
    /// One row per partition of the spec: its number (see [`ScanExec::new`]).
    input: Arc<dyn ExecutionPlan>,
    calls: Option<bool>,
    parts: Vec<Arc<Units>>,
    /// The rows as built (text columns that repeat are dictionaries).
    schema: SchemaRef,
    /// The rows as sent on: the same, or plain text for a cluster.
    out: SchemaRef,
    props: Arc<PlanProperties>,
}

/// The input of a scan: partition `p` holds one row, `p`.
fn partition_numbers(n: usize) -> DfResult<Arc<dyn ExecutionPlan>> {
    let schema = Arc::new(Schema::new(vec![Field::new("part", DataType::UInt32, false)]));
    let parts = (0..n.max(1))
        .map(|p| {
            let col: ArrayRef = Arc::new(UInt32Array::from(vec![p as u32]));
            Ok(vec![RecordBatch::try_new(schema.clone(), vec![col])?])
        })
        .collect::<DfResult<Vec<_>>>()?;
    Ok(datafusion::datasource::memory::MemorySourceConfig::try_new_exec(&parts, schema, None)?)
}

impl ScanExec {
    /// The scan of `spec` over `data`. Its input is a memory table of the
    /// partition numbers, one per partition, which every engine knows how to
    /// split: Ballista gives each task a slice of it (it slices only the plans
    /// it knows), and each partition of the scan reads the spec's partitions
    /// whose numbers arrive on the same partition of its input.
    pub(crate) fn new(data: Arc<Dataset>, spec: ScanSpec) -> DfResult<ScanExec> {
        let input = partition_numbers(spec.parts.len())?;
        ScanExec::with_input(data, spec, input)
    }

    /// The scan of `spec` reading partition numbers from `input`.
    pub(crate) fn with_input(
        data: Arc<Dataset>,
        spec: ScanSpec,
        input: Arc<dyn ExecutionPlan>,
    ) -> DfResult<ScanExec> {
        let Some(&(name, cols)) = TABLES.iter().find(|t| t.0 == spec.table) else {
            return Err(datafusion::error::DataFusionError::Plan(format!(
                "no memlens table {:?}",
                spec.table
            )));
        };
        if let Some(&c) = spec.keep.cols.iter().find(|&&c| c >= cols.len()) {
            return Err(datafusion::error::DataFusionError::Plan(format!(
                "{name} has no column {c}"
            )));
        }
        for (t, chunks) in spec.parts.iter().flatten() {
            let Some(tr) = data.traces.get(*t) else {
                return Err(datafusion::error::DataFusionError::Plan(format!(
                    "the dataset has no trace {t}"
                )));
            };
            if chunks.iter().any(|c| c.chunk >= tr.reader.chunks().len()) {
                return Err(datafusion::error::DataFusionError::Plan(format!(
                    "{}: fewer chunks than the plan reads (was the trace rewritten?)",
                    tr.path.display()
                )));
            }
        }
        let schema = Arc::new(crate::tables::schema(name).project(&spec.keep.cols)?);
        let out = if data.plain_text() { plain_schema(&schema) } else { schema.clone() };
        let parts = spec
            .parts
            .iter()
            .map(|p| {
                Arc::new(
                    p.iter()
                        .map(|(t, cs)| (*t, cs.iter().map(|&c| StreamChunk::from(c)).collect()))
                        .collect(),
                )
            })
            .collect::<Vec<_>>();
        let n = input.properties().output_partitioning().partition_count();
        let props = PlanProperties::new(
            EquivalenceProperties::new(out.clone()),
            Partitioning::UnknownPartitioning(n),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        let calls = match name {
            "accesses" => Some(false),
            "calls" => Some(true),
            _ => None,
        };
        Ok(ScanExec { data, spec, input, calls, parts, schema, out, props: Arc::new(props) })
    }
}

impl std::fmt::Debug for ScanExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ScanExec({}, {} partitions)", self.spec.table, self.parts.len())
    }
}

impl DisplayAs for ScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let chunks: usize = self.parts.iter().flat_map(|p| p.iter()).map(|u| u.1.len()).sum();
        write!(
            f,
            "MemlensScanExec: table={}, partitions={}, chunks={chunks}",
            self.spec.table,
            self.parts.len()
        )
    }
}

impl ExecutionPlan for ScanExec {
    fn name(&self) -> &str {
        "MemlensScanExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }
    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }
    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let [input] = <[_; 1]>::try_from(children).map_err(|c| {
            datafusion::error::DataFusionError::Internal(format!(
                "MemlensScanExec takes one input, not {}",
                c.len()
            ))
        })?;
        Ok(Arc::new(ScanExec::with_input(self.data.clone(), self.spec.clone(), input)?))
    }
    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        use futures::{StreamExt, TryStreamExt};
        let numbers = self.input.execute(partition, ctx)?;
        let me = Scan {
            data: self.data.clone(),
            table: self.spec.table.clone(),
            keep: self.spec.keep.clone(),
            calls: self.calls,
            parts: self.parts.clone(),
            schema: self.schema.clone(),
            out: self.out.clone(),
        };
        // the partition numbers first (a row or two), then their rows
        let s = futures::stream::once(async move {
            let batches: Vec<RecordBatch> = numbers.try_collect().await?;
            let mut ps = Vec::new();
            for b in &batches {
                let c = b.column(0).as_any().downcast_ref::<UInt32Array>().ok_or_else(|| {
                    datafusion::error::DataFusionError::Internal("partition numbers".into())
                })?;
                ps.extend(c.values().iter().map(|&p| p as usize));
            }
            me.rows(ps)
        })
        .map(|r: DfResult<_>| match r {
            Ok(it) => futures::stream::iter(it).left_stream(),
            Err(e) => futures::stream::iter(std::iter::once(Err(e))).right_stream(),
        })
        .flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.out.clone(), s)))
    }
}

/// What one partition of a scan needs to make its rows.
struct Scan {
    data: Arc<Dataset>,
    table: String,
    keep: Keep,
    calls: Option<bool>,
    parts: Vec<Arc<Units>>,
    schema: SchemaRef,
    out: SchemaRef,
}

type Rows = Box<dyn Iterator<Item = DfResult<RecordBatch>> + Send>;

impl Scan {
    /// The rows of the spec's partitions `ps`, one chunk's batch at a time.
    fn rows(self, ps: Vec<usize>) -> DfResult<Rows> {
        if let Some(&p) = ps.iter().find(|&&p| p >= self.parts.len().max(1)) {
            return Err(datafusion::error::DataFusionError::Internal(format!(
                "MemlensScanExec has no partition {p}"
            )));
        }
        let Some(calls) = self.calls else {
            // a small table, built whole, once
            if ps.is_empty() {
                return Ok(Box::new(std::iter::empty()));
            }
            let b = crate::small::build(&self.data, &self.table)?.project(&self.keep.cols)?;
            return Ok(Box::new(std::iter::once(plain_batch(b, &self.out))));
        };
        let units: Vec<(usize, Vec<StreamChunk>)> =
            ps.iter().flat_map(|&p| self.parts[p].iter().cloned()).collect();
        let Scan { data, keep, schema, out, .. } = self;
        let mut dec = ChunkDecoder::new();
        // (unit, chunk in unit, state)
        let mut pos = (0usize, 0usize, StreamState::default());
        Ok(Box::new(std::iter::from_fn(move || loop {
            let (u, k, st) = &mut pos;
            let (trace, chunks) = units.get(*u)?;
            let Some(c) = chunks.get(*k) else {
                *u += 1;
                *k = 0;
                *st = StreamState::default();
                continue;
            };
            *k += 1;
            let rows = ChunkRows {
                data: &data,
                trace: *trace,
                calls,
                keep: &keep,
                schema: &schema,
                pcs: None,
            };
            let (b, w) = rows.batch(c, &mut dec, st);
            if let Some(w) = w {
                data.warn(w);
                // the rest of a damaged stream cannot be trusted for depths; accesses go on
                if calls {
                    *k = chunks.len();
                }
            }
            if let Some(b) = b {
                return Some(plain_batch(b, &out));
            }
        })))
    }
}

#[async_trait]
impl TableProvider for Table {
    fn schema(&self) -> SchemaRef {
        let s = schema(self.name);
        if self.data.plain_text() {
            plain_schema(&s)
        } else {
            s
        }
    }
    fn table_type(&self) -> TableType {
        TableType::Base
    }
    fn supports_filters_pushdown(&self, f: &[&Expr]) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Inexact: chunks are skipped, the engine still filters the rows.
        Ok(f.iter()
            .map(|e| match self.streamed() {
                Some(calls) if pushed(calls, e).is_some() => TableProviderFilterPushDown::Inexact,
                _ => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }
    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let _ = limit; // a hint: the engine stops pulling
        if let Some(calls) = self.streamed() {
            return self.scan_chunks(calls, state, projection, filters);
        }
        let cols =
            projection.cloned().unwrap_or_else(|| (0..self.schema().fields().len()).collect());
        let spec = ScanSpec {
            table: self.name.to_string(),
            keep: Keep { cols, ..Keep::default() },
            parts: vec![Vec::new()],
        };
        Ok(Arc::new(ScanExec::new(self.data.clone(), spec)?))
    }
}

/// A dictionary of `names` (the distinct values sorted) keyed by `K`.
fn dict_of<K: ArrowDictionaryKeyType>(names: Vec<&str>) -> ArrayRef {
    let uniq: Vec<&str> = names.iter().copied().collect::<BTreeSet<&str>>().into_iter().collect();
    let keys: PrimitiveArray<K> =
        names.iter().map(|n| uniq.binary_search(n).ok().and_then(K::Native::from_usize)).collect();
    Arc::new(
        DictionaryArray::<K>::try_new(keys, Arc::new(StringArray::from(uniq))).expect("valid keys"),
    )
}

/// The `trace` column of a small table.
pub(crate) fn dict_trace(names: Vec<&str>) -> ArrayRef {
    dict_of::<Int32Type>(names)
}

/// A `kind` column of a small table.
pub(crate) fn dict_kind(names: Vec<&str>) -> ArrayRef {
    dict_of::<Int8Type>(names)
}
