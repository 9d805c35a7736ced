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

/// Addresses to name, and where the answer goes: per address an index into the
/// answer's names (distinct texts).
type DataRequest = (Vec<u64>, Granularity, mpsc::Sender<(Vec<u32>, Vec<Arc<str>>)>);

/// Code and data names of one trace.
pub(crate) struct TraceNames {
    pub sym: Symbolizer,
    /// `report`'s code namer (not `Sync`: behind a lock, asked once per distinct pc).
    names: Mutex<Names>,
    code: Mutex<HashMap<u64, CodeName>>,
    /// The attributor lives on a thread of its own (it is not `Send`): requests go
    /// there. One such thread per core, taking turns, as each scan thread names.
    data: Mutex<Vec<mpsc::Sender<DataRequest>>>,
    turn: std::sync::atomic::AtomicUsize,
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
            data: Mutex::default(),
            turn: Default::default(),
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
        let (ids, names) = self.data_ids(addrs, g);
        ids.into_iter().map(|i| names[i as usize].clone()).collect()
    }

    /// [`TraceNames::data`] as an index per address into distinct names.
    pub fn data_ids(&self, addrs: Vec<u64>, g: Granularity) -> (Vec<u32>, Vec<Arc<str>>) {
        let tx = {
            let mut namers = self.data.lock().unwrap_or_else(|e| e.into_inner());
            let turn = self.turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
            if namers.len() < cores && turn >= namers.len() {
                namers.push(spawn_namer(self.reader.clone(), self.alloc_fn.clone()));
            }
            namers[turn % namers.len()].clone()
        };
        let (rtx, rrx) = mpsc::channel();
        let unknown = |n: usize| (vec![0; n], vec![Arc::from("?")]);
        let n = addrs.len();
        if tx.send((addrs, g, rtx)).is_err() {
            return unknown(n);
        }
        rrx.recv().unwrap_or_else(|_| unknown(n))
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
        // The labels of recently named addresses, direct-mapped: a map of every
        // address ever named grew to millions of entries on random (hash-table)
        // accesses, slower than naming them again and hundreds of MB.
        const CACHE: usize = 1 << 16;
        let mut cache: [Vec<(u64, u32)>; 2] =
            [vec![(u64::MAX, 0); CACHE], vec![(u64::MAX, 0); CACHE]];
        while let Ok((addrs, g, reply)) = rx.recv() {
            let (a, c) = match g {
                Granularity::Variable => (by_var.get_or_insert_with(|| make(g)), &mut cache[0]),
                Granularity::Field => (by_field.get_or_insert_with(|| make(g)), &mut cache[1]),
            };
            let Some(a) = a else {
                let _ = reply.send((vec![0; addrs.len()], vec![Arc::from("?")]));
                continue;
            };
            // per label, its index in `names`; names distinct by text
            let mut of_label: HashMap<u32, u32> = HashMap::new();
            let mut of_text: HashMap<Arc<str>, u32> = HashMap::new();
            let mut names: Vec<Arc<str>> = Vec::new();
            let mut last = (u32::MAX, 0u32);
            let mut ids = Vec::with_capacity(addrs.len());
            for x in addrs {
                let slot = &mut c[((x ^ (x >> 16) ^ (x >> 32)) as usize) & (CACHE - 1)];
                let label = if slot.0 == x {
                    slot.1
                } else {
                    let id = a.attribute(ThreadId(u32::MAX), u64::MAX, Pc(0), Addr(x));
                    *slot = (x, id);
                    id
                };
                if label != last.0 {
                    let i = *of_label.entry(label).or_insert_with(|| {
                        let l = a.label(label);
                        let text = match g {
                            Granularity::Variable => l.base.clone(),
                            Granularity::Field => Arc::from(l.display()),
                        };
                        *of_text.entry(text.clone()).or_insert_with(|| {
                            names.push(text);
                            names.len() as u32 - 1
                        })
                    });
                    last = (label, i);
                }
                ids.push(last.1);
            }
            let out = (ids, names);
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
        // each row's trace (None: a null row)
        let tarr = traces.as_ref().map(|t| t.as_string::<i32>());
        let mut trace_of: Vec<Option<usize>> = Vec::with_capacity(rows);
        for i in 0..rows {
            trace_of.push(match tarr {
                _ if addr.is_null(i) => None,
                None => Some(0),
                Some(t) if t.is_null(i) => None,
                Some(t) => match self.data.traces.iter().position(|x| x.name == t.value(i)) {
                    Some(k) => Some(k),
                    None => return exec_err!("no trace named {:?} in the dataset", t.value(i)),
                },
            });
        }
        // The result is a dictionary with one entry per name (not per address:
        // random addresses name a handful of variables), cheap to group by.
        let mut names: Vec<Arc<str>> = Vec::new();
        let mut of_text: HashMap<Arc<str>, i32> = HashMap::new();
        let mut keys: Vec<Option<i32>> = vec![None; rows];
        let used: std::collections::BTreeSet<usize> = trace_of.iter().flatten().copied().collect();
        for t in used {
            let rows_t: Vec<usize> = (0..rows).filter(|&i| trace_of[i] == Some(t)).collect();
            let addrs: Vec<u64> = rows_t.iter().map(|&i| addr.value(i)).collect();
            let tn = self.data.traces[t].names();
            let (ids, got) = match self.which {
                Which::Variable => tn.data_ids(addrs, Granularity::Variable),
                Which::Field => tn.data_ids(addrs, Granularity::Field),
                Which::Line | Which::Function => {
                    // few distinct pcs, each named once
                    let mut of_pc: HashMap<u64, u32> = HashMap::new();
                    let mut pcs = Vec::new();
                    let ids: Vec<u32> = addrs
                        .iter()
                        .map(|&p| {
                            *of_pc.entry(p).or_insert_with(|| {
                                pcs.push(p);
                                pcs.len() as u32 - 1
                            })
                        })
                        .collect();
                    let line = self.which == Which::Line;
                    let got = tn
                        .codes(&pcs)
                        .into_iter()
                        .map(|c| if line { c.file_line } else { c.function })
                        .collect();
                    (ids, got)
                }
            };
            let remap: Vec<i32> = got
                .into_iter()
                .map(|n| {
                    let k = names.len() as i32;
                    *of_text.entry(n.clone()).or_insert_with(|| {
                        names.push(n);
                        k
                    })
                })
                .collect();
            for (&i, id) in rows_t.iter().zip(ids) {
                keys[i] = Some(remap[id as usize]);
            }
        }
        let keys: Int32Array = keys.into_iter().collect();
        let values = StringArray::from_iter_values(names.iter().map(|n| n.as_ref()));
        let d = DictionaryArray::<Int32Type>::try_new(keys, Arc::new(values))?;
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
