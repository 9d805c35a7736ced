//! Names for code and data addresses, and the scalar functions that give them:
//! `line(pc)`, `function(pc)`, `variable(addr)`, `field(addr)`, `cache_line(addr, size)`.

use crate::dataset::Dataset;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringBuilder, UInt64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, UInt64Type};
use datafusion::common::{exec_err, plan_err, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;
use memlens_format::{Addr, Pc, ThreadId, TraceReader};
use memlens_names::{Attributor, Granularity, HeapIndex, Maps};
use memlens_symbols::Symbolizer;
use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// Where a code address is in the source.
#[derive(Clone, Debug, Default)]
pub(crate) struct CodeName {
    pub function: Arc<str>,
    pub file: Arc<str>,
    pub line: u32,
    pub column: u32,
    /// The inlined chain, innermost first, `f <- g <- h` (empty when not inlined).
    pub inlined: String,
}

/// Sources of the compilers' own libraries, stepped over as `report` does.
fn is_toolchain_source(path: &str) -> bool {
    path.starts_with("/rustc/")
        || path.starts_with("/usr/include/")
        || path.starts_with("/usr/lib/gcc/")
        || path.starts_with("/usr/lib/llvm")
}

/// Names a pc the way `report --by line` does (the innermost frame outside the
/// toolchain's sources, else the innermost).
pub(crate) fn code_name(sym: &Symbolizer, pc: Pc) -> CodeName {
    let unknown = || CodeName { function: format!("{pc}").into(), ..CodeName::default() };
    let Some(loc) = sym.frames(pc) else {
        return match sym.function_symbol(pc) {
            Some(f) => CodeName { function: f.name.clone(), ..CodeName::default() },
            None => unknown(),
        };
    };
    let Some(fr) = loc
        .frames
        .iter()
        .find(|f| f.file.as_deref().is_some_and(|p| !is_toolchain_source(p)))
        .or_else(|| loc.innermost())
    else {
        return unknown();
    };
    let inlined = if loc.frames.len() > 1 {
        loc.frames
            .iter()
            .map(|f| f.function.as_deref().unwrap_or("??"))
            .collect::<Vec<_>>()
            .join(" <- ")
    } else {
        String::new()
    };
    CodeName {
        function: fr
            .function
            .clone()
            .or_else(|| sym.function_symbol(pc).map(|f| f.name.clone()))
            .unwrap_or_else(|| format!("{pc}").into()),
        file: fr.file.clone().unwrap_or_else(|| "".into()),
        line: fr.line.unwrap_or(0),
        column: fr.column.unwrap_or(0),
        inlined,
    }
}

/// How heap blocks are named: `file:line function` of the allocation, as `report` does.
fn site_name(sym: &Symbolizer, pc: Pc) -> String {
    let c = code_name(sym, pc);
    if c.line == 0 {
        c.function.to_string()
    } else {
        let file = c.file.rsplit('/').next().unwrap_or(&c.file).to_string();
        format!("{file}:{} {}", c.line, c.function)
    }
}

type DataRequest = (Vec<u64>, Granularity, mpsc::Sender<Vec<Arc<str>>>);

/// Code and data names of one trace.
pub(crate) struct TraceNames {
    pub sym: Symbolizer,
    code: Mutex<HashMap<u64, CodeName>>,
    /// The attributor lives on a thread of its own (it is not `Send`): requests go there.
    data: Mutex<Option<mpsc::Sender<DataRequest>>>,
    reader: Arc<TraceReader>,
}

impl TraceNames {
    pub fn new(reader: Arc<TraceReader>) -> TraceNames {
        TraceNames {
            sym: Symbolizer::new(&reader.meta().modules),
            code: Mutex::default(),
            data: Mutex::new(None),
            reader,
        }
    }

    pub fn code(&self, pc: u64) -> CodeName {
        if let Some(c) = self.code.lock().unwrap_or_else(|e| e.into_inner()).get(&pc) {
            return c.clone();
        }
        let c = code_name(&self.sym, Pc(pc));
        self.code.lock().unwrap_or_else(|e| e.into_inner()).insert(pc, c.clone());
        c
    }

    /// Names of data addresses as `report --by variable` names them without a thread
    /// context (globals, thread-locals by address, heap blocks by the most recent
    /// block at the address; a stack address is named after the stack mapping).
    pub fn data(&self, addrs: Vec<u64>, g: Granularity) -> Vec<Arc<str>> {
        let tx = {
            let mut guard = self.data.lock().unwrap_or_else(|e| e.into_inner());
            guard.get_or_insert_with(|| spawn_namer(self.reader.clone())).clone()
        };
        let (rtx, rrx) = mpsc::channel();
        let n = addrs.len();
        if tx.send((addrs, g, rtx)).is_err() {
            return vec![Arc::from("?"); n];
        }
        rrx.recv().unwrap_or_else(|_| vec![Arc::from("?"); n])
    }
}

/// The naming thread: builds the heap index once, then answers requests.
fn spawn_namer(reader: Arc<TraceReader>) -> mpsc::Sender<DataRequest> {
    let (tx, rx) = mpsc::channel::<DataRequest>();
    std::thread::spawn(move || {
        let sym = Symbolizer::new(&reader.meta().modules);
        let heap = || HeapIndex::from_trace(&reader).unwrap_or_default();
        let maps = || reader.meta().maps.as_deref().map(Maps::parse);
        let make = |g: Granularity| {
            let mut a = Attributor::new(&sym, heap(), maps());
            a.set_site_namer(|pc: Pc| site_name(&sym, pc));
            a.set_granularity(g);
            a
        };
        let mut by_var: Option<Attributor> = None;
        let mut by_field: Option<Attributor> = None;
        let mut cache: [HashMap<u64, Arc<str>>; 2] = [HashMap::new(), HashMap::new()];
        while let Ok((addrs, g, reply)) = rx.recv() {
            let (a, c) = match g {
                Granularity::Variable => (by_var.get_or_insert_with(|| make(g)), &mut cache[0]),
                Granularity::Field => (by_field.get_or_insert_with(|| make(g)), &mut cache[1]),
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
        Ok(DataType::Utf8)
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
        // rows grouped by trace, named per trace in one request each
        let mut out: Vec<Option<Arc<str>>> = vec![None; rows];
        let mut per: HashMap<usize, Vec<usize>> = HashMap::new();
        for i in 0..rows {
            if addr.is_null(i) {
                continue;
            }
            let t = match &traces {
                None => 0,
                Some(t) => {
                    let t = t.as_string::<i32>();
                    if t.is_null(i) {
                        continue;
                    }
                    match self.data.traces.iter().position(|x| x.name == t.value(i)) {
                        Some(k) => k,
                        None => return exec_err!("no trace named {:?} in the dataset", t.value(i)),
                    }
                }
            };
            per.entry(t).or_default().push(i);
        }
        for (t, idx) in per {
            let names = self.data.traces[t].names();
            match self.which {
                Which::Line | Which::Function => {
                    for i in idx {
                        let c = names.code(addr.value(i));
                        out[i] = Some(match self.which {
                            Which::Line => Arc::from(format!("{}:{}", c.file, c.line)),
                            _ => c.function,
                        });
                    }
                }
                Which::Variable | Which::Field => {
                    let g = if self.which == Which::Variable {
                        Granularity::Variable
                    } else {
                        Granularity::Field
                    };
                    let got = names.data(idx.iter().map(|&i| addr.value(i)).collect(), g);
                    for (i, n) in idx.into_iter().zip(got) {
                        out[i] = Some(n);
                    }
                }
            }
        }
        let mut b = StringBuilder::with_capacity(rows, rows * 16);
        for v in out {
            b.append_option(v.as_deref());
        }
        Ok(ColumnarValue::Array(Arc::new(b.finish())))
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

/// Registers the scalar functions.
pub(crate) fn register(ctx: &SessionContext, data: &Arc<Dataset>) {
    for which in [Which::Line, Which::Function, Which::Variable, Which::Field] {
        ctx.register_udf(ScalarUDF::new_from_impl(NameUdf {
            which,
            sig: Signature::variadic_any(Volatility::Immutable),
            data: data.clone(),
        }));
    }
    ctx.register_udf(ScalarUDF::new_from_impl(CacheLine {
        sig: Signature::variadic_any(Volatility::Immutable),
    }));
}
