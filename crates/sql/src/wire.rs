//! memlens's tables, scans and functions as bytes, for an engine that plans in
//! one process and runs in others (the `memlens-cluster` crate's Ballista codecs).
//!
//! A dataset travels as its trace files' paths (absolute: every process reads
//! the same shared storage) and the `trace` column's names; a scan as its
//! description (table, columns, pushed-down filters, chunks per partition); a
//! function as its name and dataset.
//! Each process opens a dataset once and keeps it while its files are unchanged.

use crate::dataset::Dataset;
use crate::tables::{ScanExec, ScanSpec, Table};
use crate::Error;
use datafusion::catalog::TableProvider;
use datafusion::logical_expr::ScalarUDF;
use datafusion::physical_plan::ExecutionPlan;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// The first bytes of everything this module writes. Not a valid start of a
/// protobuf message (wire type 7), so a codec can tell ours from the engine's own.
pub const MAGIC: &[u8; 5] = b"\xffMLNS";

/// The traces of a dataset: (name, absolute path) each.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct DataRef {
    traces: Vec<(String, PathBuf)>,
    plain: bool,
    /// `--alloc-fn` globs (none in plans of older builds).
    #[serde(default)]
    alloc_fn: Vec<String>,
}

impl DataRef {
    fn of(d: &Dataset) -> DataRef {
        let traces = d
            .traces
            .iter()
            .map(|t| (t.name.clone(), std::fs::canonicalize(&t.path).unwrap_or(t.path.clone())))
            .collect();
        DataRef { traces, plain: d.plain_text(), alloc_fn: d.alloc_fn_globs() }
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
enum Wire {
    Table { data: DataRef, table: String },
    Scan { data: DataRef, spec: ScanSpec },
    Function { data: DataRef, name: String },
}

fn encode(w: &Wire) -> Vec<u8> {
    let mut v = MAGIC.to_vec();
    serde_json::to_writer(&mut v, w).expect("plain data serialises");
    v
}

fn decode(buf: &[u8]) -> Result<Wire, Error> {
    let body = buf.strip_prefix(MAGIC).ok_or_else(|| Error::Input("not a memlens plan".into()))?;
    serde_json::from_slice(body).map_err(|e| Error::Input(format!("a damaged memlens plan: {e}")))
}

/// Whether `buf` was written by this module.
pub fn is_ours(buf: &[u8]) -> bool {
    buf.starts_with(MAGIC)
}

/// The bytes of a memlens table (None: another provider).
pub fn encode_table(t: &dyn TableProvider) -> Option<Vec<u8>> {
    let t = t.downcast_ref::<Table>()?;
    Some(encode(&Wire::Table { data: DataRef::of(&t.data), table: t.name.to_string() }))
}

/// The bytes of a memlens scan (None: another plan).
pub fn encode_plan(p: &dyn ExecutionPlan) -> Option<Vec<u8>> {
    let p = p.downcast_ref::<ScanExec>()?;
    Some(encode(&Wire::Scan { data: DataRef::of(&p.data), spec: p.spec.clone() }))
}

/// The bytes of a memlens function (None: another function).
pub fn encode_function(f: &ScalarUDF) -> Option<Vec<u8>> {
    let data = crate::names::dataset_of(f)?;
    Some(encode(&Wire::Function { data: DataRef::of(&data), name: f.name().to_string() }))
}

/// The table of [`encode_table`].
pub fn decode_table(buf: &[u8]) -> Result<Arc<dyn TableProvider>, Error> {
    match decode(buf)? {
        Wire::Table { data, table } => crate::tables::table(open(&data)?, &table)
            .ok_or_else(|| Error::Input(format!("no memlens table {table:?}"))),
        _ => Err(Error::Input("a memlens plan where a table was expected".into())),
    }
}

/// The scan of [`encode_plan`], over the same traces opened here, reading its
/// partition numbers from `inputs` (the plan's one input, as the engine sent it).
pub fn decode_plan(
    buf: &[u8],
    inputs: &[Arc<dyn ExecutionPlan>],
) -> Result<Arc<dyn ExecutionPlan>, Error> {
    match decode(buf)? {
        Wire::Scan { data, spec } => {
            let [input] = inputs else {
                return Err(Error::Input(format!(
                    "a memlens scan has one input, not {}",
                    inputs.len()
                )));
            };
            Ok(Arc::new(ScanExec::with_input(open(&data)?, spec, input.clone())?))
        }
        _ => Err(Error::Input("a memlens plan where a scan was expected".into())),
    }
}

/// The function of [`encode_function`].
pub fn decode_function(buf: &[u8]) -> Result<Arc<ScalarUDF>, Error> {
    match decode(buf)? {
        Wire::Function { data, name } => crate::names::function(&open(&data)?, &name)
            .map(Arc::new)
            .ok_or_else(|| Error::Input(format!("no memlens function {name:?}"))),
        _ => Err(Error::Input("a memlens plan where a function was expected".into())),
    }
}

/// What says a file is still the one opened: its length and modification time.
type Stamp = Vec<(u64, Option<SystemTime>)>;

fn stamp(d: &DataRef) -> Stamp {
    d.traces
        .iter()
        .map(|(_, p)| match std::fs::metadata(p) {
            Ok(m) => (m.len(), m.modified().ok()),
            Err(_) => (u64::MAX, None),
        })
        .collect()
}

/// Datasets this process opened, newest last: a query's scans and functions
/// share one (its symbols are loaded once), and so do the queries that follow.
static OPEN: Mutex<Vec<(DataRef, Stamp, Arc<Dataset>)>> = Mutex::new(Vec::new());
const KEEP_OPEN: usize = 8;

fn open(d: &DataRef) -> Result<Arc<Dataset>, Error> {
    let now = stamp(d);
    let mut g = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = g.iter().position(|(r, s, _)| r == d && *s == now) {
        let e = g.remove(i);
        let data = e.2.clone();
        g.push(e);
        return Ok(data);
    }
    g.retain(|(r, _, _)| r != d);
    let mut data = Dataset::open_named(&d.traces)?;
    data.set_alloc_fns(&d.alloc_fn)?;
    if d.plain {
        data.set_plain_text();
    }
    let data = Arc::new(data);
    g.push((d.clone(), now, data.clone()));
    if g.len() > KEEP_OPEN {
        g.remove(0);
    }
    Ok(data)
}
