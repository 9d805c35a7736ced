//! Names for code and data addresses, and the scalar functions that give them:
//! `line(pc)`, `function(pc)`, `variable(addr)`, `field(addr)`, `cache_line(addr, size)`.

use crate::dataset::Dataset;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, DictionaryArray, Int32Array, StringArray, UInt64Array,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int32Type, UInt64Type};
use datafusion::common::{exec_err, plan_err, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;
use memlens_format::{Addr, Pc, ThreadId, TraceReader};
use memlens_names::{Attributor, Granularity, Names};
use memlens_symbols::Symbolizer;
// hashbrown with a fast hasher: these maps are probed once a row
use datafusion::common::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// Where a code address is in the source: `memlens_names`' name (the one
/// `report` gives) and the inlined chain for the `code` table.
#[derive(Clone, Debug, Default)]
pub(crate) struct CodeName {
    pub function: Arc<str>,
    pub file: Arc<str>,
    pub line: u32,
    pub column: u32,
    /// `file:line`, as `line(pc)` gives it.
    pub file_line: Arc<str>,
    /// The inlined chain, innermost first, `f <- g <- h` (empty when not inlined).
    pub inlined: String,
}

type DataRequest = (Vec<u64>, Granularity, mpsc::Sender<Vec<Arc<str>>>);

/// Code and data names of one trace.
pub(crate) struct TraceNames {
    pub sym: Symbolizer,
    /// `report`'s code namer (not `Sync`: behind a lock, asked once per distinct pc).
    names: Mutex<Names>,
    code: Mutex<HashMap<u64, CodeName>>,
    /// The attributor lives on a thread of its own (it is not `Send`): requests go there.
    data: Mutex<Option<mpsc::Sender<DataRequest>>>,
    reader: Arc<TraceReader>,
    /// `--alloc-fn` globs for the naming thread's heap index.
    alloc_fn: Vec<String>,
}

impl TraceNames {
    pub fn new(reader: Arc<TraceReader>, alloc_fn: Vec<String>) -> TraceNames {
        TraceNames {
            sym: Symbolizer::new(&reader.meta().modules),
            names: Mutex::new(Names::new(&reader.meta().modules)),
            code: Mutex::default(),
            data: Mutex::new(None),
            reader,
            alloc_fn,
        }
    }

    /// Names of `pcs` (one lock for the lot).
    pub fn codes(&self, pcs: &[u64]) -> Vec<CodeName> {
        let mut cache = self.code.lock().unwrap_or_else(|e| e.into_inner());
        let mut missing: Vec<u64> =
            pcs.iter().copied().filter(|p| !cache.contains_key(p)).collect();
        if !missing.is_empty() {
            missing.sort_unstable();
            missing.dedup();
            let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
            for pc in missing {
                let c = names.code(Pc(pc));
                let inlined = match self.sym.frames(Pc(pc)) {
                    Some(loc) if loc.frames.len() > 1 => loc
                        .frames
                        .iter()
                        .map(|f| f.function.as_deref().unwrap_or("??"))
                        .collect::<Vec<_>>()
                        .join(" <- "),
                    _ => String::new(),
                };
                let file_line = Arc::from(format!("{}:{}", c.file, c.line));
                cache.insert(
                    pc,
                    CodeName {
                        function: c.function,
                        file: c.file,
                        line: c.line,
                        column: c.column,
                        file_line,
                        inlined,
                    },
                );
            }
        }
        pcs.iter().map(|p| cache[p].clone()).collect()
    }

    /// Names of data addresses as `report --by variable` names them without a thread
    /// context (globals, thread-locals by address, heap blocks by the most recent
    /// block at the address; a stack address is named after the stack mapping).
    pub fn data(&self, addrs: Vec<u64>, g: Granularity) -> Vec<Arc<str>> {
        let tx = {
            let mut guard = self.data.lock().unwrap_or_else(|e| e.into_inner());
            guard
                .get_or_insert_with(|| spawn_namer(self.reader.clone(), self.alloc_fn.clone()))
                .clone()
        };
        let (rtx, rrx) = mpsc::channel();
        let n = addrs.len();
        if tx.send((addrs, g, rtx)).is_err() {
            return vec![Arc::from("?"); n];
        }
        rrx.recv().unwrap_or_else(|_| vec![Arc::from("?"); n])
    }
}

/// The naming thread: `report`'s attributor (heap index, site names) built once
/// per granularity, then answers requests.
fn spawn_namer(reader: Arc<TraceReader>, alloc_fn: Vec<String>) -> mpsc::Sender<DataRequest> {
    let (tx, rx) = mpsc::channel::<DataRequest>();
    std::thread::spawn(move || {
        let mut names = Names::new(&reader.meta().modules);
        // checked when the dataset took them (Dataset::set_alloc_fns)
        let _ = names.set_alloc_fns(&alloc_fn);
        let make = |g: Granularity| -> Option<Attributor<'_>> {
            let mut a = memlens_names::attributor(&reader, &names).ok()?;
            a.set_granularity(g);
            Some(a)
        };
        let mut by_var: Option<Option<Attributor>> = None;
        let mut by_field: Option<Option<Attributor>> = None;
        let mut cache: [HashMap<u64, Arc<str>>; 2] = [HashMap::new(), HashMap::new()];
        while let Ok((addrs, g, reply)) = rx.recv() {
            let (a, c) = match g {
                Granularity::Variable => (by_var.get_or_insert_with(|| make(g)), &mut cache[0]),
                Granularity::Field => (by_field.get_or_insert_with(|| make(g)), &mut cache[1]),
            };
            let Some(a) = a else {
                let _ = reply.send(vec![Arc::from("?"); addrs.len()]);
                continue;
            };
            let out = addrs
                .into_iter()
                .map(|x| {
                    c.entry(x)
                        .or_insert_with(|| {
                            let id = a.attribute(ThreadId(u32::MAX), u64::MAX, Pc(0), Addr(x));
                            let l = a.label(id);
                            match g {
                                Granularity::Variable => l.base.clone(),
                                Granularity::Field => Arc::from(l.display()),
                            }
                        })
                        .clone()
                })
                .collect();
            let _ = reply.send(out);
        }
    });
    tx
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Which {
    Line,
    Function,
    Variable,
    Field,
}

impl Which {
    fn name(self) -> &'static str {
        match self {
            Which::Line => "line",
            Which::Function => "function",
            Which::Variable => "variable",
            Which::Field => "field",
        }
    }
}

/// `line(pc [, trace])` and friends: the trace argument picks the trace's symbols
/// when the dataset has several.
struct NameUdf {
    which: Which,
    sig: Signature,
    data: Arc<Dataset>,
}

impl std::fmt::Debug for NameUdf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.which.name())
    }
}
impl PartialEq for NameUdf {
    fn eq(&self, o: &Self) -> bool {
        self.which == o.which && Arc::ptr_eq(&self.data, &o.data)
    }
}
impl Eq for NameUdf {}
impl std::hash::Hash for NameUdf {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.which.hash(h)
    }
}

fn arg_array(v: &ColumnarValue, rows: usize, ty: &DataType) -> DfResult<ArrayRef> {
    let a = v.to_array(rows)?;
    Ok(if a.data_type() == ty { a } else { cast(&a, ty)? })
}

impl ScalarUDFImpl for NameUdf {
    fn name(&self) -> &str {
        self.which.name()
    }
    fn signature(&self) -> &Signature {
        &self.sig
    }
    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        if args.is_empty() || args.len() > 2 {
            return plan_err!(
                "{}(address [, trace]) takes one or two arguments",
                self.which.name()
            );
        }
        if self.data.plain_text() {
            return Ok(DataType::Utf8);
        }
        Ok(DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let rows = args.number_rows;
        let addr = arg_array(&args.args[0], rows, &DataType::UInt64)?;
        let addr = addr.as_primitive::<UInt64Type>();
        let traces: Option<ArrayRef> = match args.args.get(1) {
            Some(t) => Some(arg_array(t, rows, &DataType::Utf8)?),
            None => None,
        };
        if traces.is_none() && self.data.traces.len() > 1 {
            return exec_err!(
                "the dataset has {} traces: name the trace, {}(address, trace)",
                self.data.traces.len(),
                self.which.name()
            );
        }
        // distinct (trace, address) per batch, each named once; the result is a
        // dictionary (one key per row), cheap to build and to group by
        let mut key_of: HashMap<(usize, u64), i32> = HashMap::new();
        let mut distinct: Vec<(usize, u64)> = Vec::new();
        let mut keys: Vec<Option<i32>> = Vec::with_capacity(rows);
        let tarr = traces.as_ref().map(|t| t.as_string::<i32>());
        for i in 0..rows {
            if addr.is_null(i) {
                keys.push(None);
                continue;
            }
            let t = match tarr {
                None => 0,
                Some(t) if t.is_null(i) => {
                    keys.push(None);
                    continue;
                }
                Some(t) => match self.data.traces.iter().position(|x| x.name == t.value(i)) {
                    Some(k) => k,
                    None => return exec_err!("no trace named {:?} in the dataset", t.value(i)),
                },
            };
            let k = *key_of.entry((t, addr.value(i))).or_insert_with(|| {
                distinct.push((t, addr.value(i)));
                distinct.len() as i32 - 1
            });
            keys.push(Some(k));
        }
        let mut values: Vec<Arc<str>> = vec![Arc::from(""); distinct.len()];
        let mut per: HashMap<usize, Vec<usize>> = HashMap::new();
        for (k, &(t, _)) in distinct.iter().enumerate() {
            per.entry(t).or_default().push(k);
        }
        for (t, ks) in per {
            let names = self.data.traces[t].names();
            let addrs: Vec<u64> = ks.iter().map(|&k| distinct[k].1).collect();
            let got: Vec<Arc<str>> = match self.which {
                Which::Line => names.codes(&addrs).into_iter().map(|c| c.file_line).collect(),
                Which::Function => names.codes(&addrs).into_iter().map(|c| c.function).collect(),
                Which::Variable => names.data(addrs, Granularity::Variable),
                Which::Field => names.data(addrs, Granularity::Field),
            };
            for (k, n) in ks.into_iter().zip(got) {
                values[k] = n;
            }
        }
        let values = StringArray::from_iter_values(values.iter().map(|v| v.as_ref()));
        let d = DictionaryArray::<Int32Type>::try_new(Int32Array::from(keys), Arc::new(values))?;
        if self.data.plain_text() {
            return Ok(ColumnarValue::Array(cast(&d, &DataType::Utf8)?));
        }
        Ok(ColumnarValue::Array(Arc::new(d)))
    }
}

/// `cache_line(addr [, line_size])`: the first byte of the cache line holding
/// `addr` (lines of `line_size` bytes, a power of two; 64 by default).
#[derive(Debug, PartialEq, Eq, Hash)]
struct CacheLine {
    sig: Signature,
}

impl ScalarUDFImpl for CacheLine {
    fn name(&self) -> &str {
        "cache_line"
    }
    fn signature(&self) -> &Signature {
        &self.sig
    }
    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        match args.len() {
            1 | 2 => Ok(DataType::UInt64),
            _ => plan_err!("cache_line(address [, line_size]) takes one or two arguments"),
        }
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let rows = args.number_rows;
        let addr = arg_array(&args.args[0], rows, &DataType::UInt64)?;
        let addr = addr.as_primitive::<UInt64Type>();
        let size = match args.args.get(1) {
            Some(s) => Some(arg_array(s, rows, &DataType::UInt64)?),
            None => None,
        };
        let size = size.as_ref().map(|s| s.as_primitive::<UInt64Type>());
        let mut v = Vec::with_capacity(rows);
        for i in 0..rows {
            let line = match size {
                None => 64,
                Some(s) if s.is_null(i) => {
                    v.push(None);
                    continue;
                }
                Some(s) => s.value(i),
            };
            if line == 0 || !line.is_power_of_two() {
                return exec_err!("cache_line: the line size must be a power of two, not {line}");
            }
            v.push((!addr.is_null(i)).then(|| addr.value(i) & !(line - 1)));
        }
        Ok(ColumnarValue::Array(Arc::new(UInt64Array::from(v))))
    }
}

/// The function called `name` over `data` (None: not one of ours).
pub(crate) fn function(data: &Arc<Dataset>, name: &str) -> Option<ScalarUDF> {
    let sig = Signature::variadic_any(Volatility::Immutable);
    if name == "cache_line" {
        return Some(ScalarUDF::new_from_impl(CacheLine { sig }));
    }
    let which = [Which::Line, Which::Function, Which::Variable, Which::Field]
        .into_iter()
        .find(|w| w.name() == name)?;
    Some(ScalarUDF::new_from_impl(NameUdf { which, sig, data: data.clone() }))
}

/// The dataset a memlens function names from: None for another function; an
/// empty dataset for `cache_line`, which names nothing.
pub(crate) fn dataset_of(f: &ScalarUDF) -> Option<Arc<Dataset>> {
    if let Some(n) = f.inner().downcast_ref::<NameUdf>() {
        return Some(n.data.clone());
    }
    f.inner().downcast_ref::<CacheLine>().map(|_| Arc::new(Dataset::empty()))
}

/// Registers the scalar functions.
pub(crate) fn register(ctx: &SessionContext, data: &Arc<Dataset>) {
    for name in FUNCTIONS {
        if let Some(f) = function(data, name) {
            ctx.register_udf(f);
        }
    }
}

/// The scalar functions' names.
pub(crate) const FUNCTIONS: [&str; 5] = ["line", "function", "variable", "field", "cache_line"];
