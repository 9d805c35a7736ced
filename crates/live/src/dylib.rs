//! Out-of-tree probe modules: a shared library loaded at run time
//! (`memlens live --module-path PATH`) through a small versioned C ABI, wrapped in the
//! same [`ProbeModule`] trait as the built-in modules. The library exports
//!
//! ```c
//! const struct memlens_probe_module *memlens_probe_module(void);
//! ```
//!
//! returning a table whose first field is the ABI version ([`ABI_VERSION`]); a
//! library speaking another version is refused before anything else is read. Strings
//! are NUL-terminated UTF-8; actions and columns are JSON arrays (the shapes of
//! `memlens probe modules --format json`), values a JSON object. A probe publishes
//! tables (GUI panels, like the heap probe's sites) under the values' key `"tables"`:
//! `[{"title", "columns": [{"name","unit","kind"?}], "rows": [{"cells": [...], "at":
//! [FILE, LINE] | null}], "sort": COLUMN | null}]`, the shape
//! [`crate::module::Table::to_json`] serves (`kind`: `value`, the default, or
//! `series`, cells `[[ms, value], ...]` drawn as sparklines). Probes are used from one thread at a time, not always the one that created
//! them.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde_json::{Map, Value};

use crate::module::{
    Action, Column, ColumnKind, ModuleInfo, Probe, ProbeModule, Table as PanelTable, TableRow,
};
use crate::target::Target;
use crate::{Error, Result};
use std::cell::RefCell;
use std::collections::HashSet;

/// The ABI version this memlens speaks.
pub const ABI_VERSION: u32 = 1;

/// The exported symbol.
const SYMBOL: &CStr = c"memlens_probe_module";

/// `struct memlens_probe_module`, version 1.
#[repr(C)]
struct Table {
    abi_version: u32,
    name: *const c_char,
    description: *const c_char,
    /// Newline-separated.
    requirements: *const c_char,
    /// JSON `[{"name","label","spec"}]`.
    actions: *const c_char,
    /// JSON `[{"name","unit"}]`.
    columns: *const c_char,
    /// 0: usable; else why not, written into `err` (NUL-terminated, at most `len`).
    init: unsafe extern "C" fn(err: *mut c_char, len: usize) -> c_int,
    /// A probe for process `pid` running `exe` at `args` (the SPEC after `MODULE:`),
    /// or NULL with the reason in `err`.
    create: unsafe extern "C" fn(
        pid: i32,
        exe: *const c_char,
        args: *const c_char,
        err: *mut c_char,
        len: usize,
    ) -> *mut c_void,
    poll: unsafe extern "C" fn(probe: *mut c_void),
    /// Writes the values (a JSON object) into `buf`; returns the length needed.
    values: unsafe extern "C" fn(probe: *mut c_void, buf: *mut c_char, len: usize) -> usize,
    /// Writes where the probe is, for display; returns the length needed.
    location: unsafe extern "C" fn(probe: *mut c_void, buf: *mut c_char, len: usize) -> usize,
    destroy: unsafe extern "C" fn(probe: *mut c_void),
}

struct DylibModule {
    table: &'static Table,
    info: ModuleInfo,
    actions: Vec<Action>,
    columns: Vec<Column>,
}

// SAFETY: the table is immutable static data of a library that is never unloaded.
unsafe impl Send for DylibModule {}

/// Strings of a loaded module live as long as the process (the library stays loaded).
fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives the process.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: per the contract above.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a thread-local message.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: a NUL-terminated message.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Loads the probe module at `path`. Refuses a library that is not one, or that
/// speaks another ABI version, with one line saying what to do.
pub fn load_module(path: &Path) -> Result<Box<dyn ProbeModule>> {
    let shown = path.display();
    let md =
        std::fs::metadata(path).map_err(|e| Error::Spec(format!("--module-path {shown}: {e}")))?;
    if !md.is_file() {
        return Err(Error::Spec(format!("--module-path {shown}: not a shared library file")));
    }
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::Spec(format!("--module-path {shown}: a path with a NUL byte")))?;
    // SAFETY: loading runs the library's initialisers: the user chose to trust it.
    let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if lib.is_null() {
        return Err(Error::Spec(format!("--module-path {shown}: cannot load: {}", dlerror())));
    }
    // SAFETY: looking up a symbol in a library we hold open (never closed).
    let sym = unsafe { libc::dlsym(lib, SYMBOL.as_ptr()) };
    if sym.is_null() {
        return Err(Error::Spec(format!(
            "--module-path {shown}: not a memlens probe module (it exports no `memlens_probe_module`)"
        )));
    }
    // SAFETY: the ABI says the symbol is this function.
    let get: unsafe extern "C" fn() -> *const u32 = unsafe { std::mem::transmute(sym) };
    // SAFETY: calling the module's entry point.
    let t = unsafe { get() };
    if t.is_null() {
        return Err(Error::Spec(format!("--module-path {shown}: the module returned no table")));
    }
    // Only the version is read before it is known to match.
    // SAFETY: every version of the table starts with a u32 version.
    let version = unsafe { *t };
    if version != ABI_VERSION {
        return Err(Error::Spec(format!(
            "--module-path {shown}: probe module ABI version {version}, this memlens speaks version {ABI_VERSION}: rebuild the module against this memlens"
        )));
    }
    // SAFETY: version 1: the table has this layout and static lifetime.
    let table: &'static Table = unsafe { &*t.cast::<Table>() };
    // SAFETY: the table's strings are static NUL-terminated strings.
    let (name, description, requirements, actions, columns) = unsafe {
        (
            text(table.name),
            text(table.description),
            text(table.requirements),
            text(table.actions),
            text(table.columns),
        )
    };
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(Error::Spec(format!(
            "--module-path {shown}: the module's name `{name}` is not a word (letters, digits, - and _)"
        )));
    }
    let json = |what: &str, s: &str| -> Result<Vec<Value>> {
        match serde_json::from_str::<Value>(s) {
            Ok(Value::Array(a)) => Ok(a),
            _ => Err(Error::Spec(format!(
                "--module-path {shown}: the module's {what} are not a JSON array"
            ))),
        }
    };
    let field = |v: &Value, k: &str| leak(v[k].as_str().unwrap_or(""));
    let actions = json("actions", &actions)?
        .iter()
        .map(|a| Action {
            name: field(a, "name"),
            label: field(a, "label"),
            spec: field(a, "spec"),
        })
        .collect();
    let columns = json("columns", &columns)?
        .iter()
        .map(|c| Column::new(field(c, "name"), field(c, "unit")))
        .collect();
    Ok(Box::new(DylibModule {
        table,
        info: ModuleInfo {
            name: leak(&name),
            description: leak(&description),
            requirements: requirements.lines().filter(|l| !l.is_empty()).map(leak).collect(),
        },
        actions,
        columns,
    }))
}

/// Reads a string a callback writes, growing the buffer when it says it needs more.
fn read_text(f: impl Fn(*mut c_char, usize) -> usize) -> String {
    let mut buf = vec![0u8; 4096];
    for _ in 0..4 {
        let need = f(buf.as_mut_ptr().cast(), buf.len());
        if need < buf.len() {
            buf.truncate(need);
            return String::from_utf8_lossy(&buf).into_owned();
        }
        buf = vec![0u8; need.saturating_add(1).min(16 << 20)];
    }
    String::new()
}

fn c_err(buf: &[u8]) -> String {
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

impl ProbeModule for DylibModule {
    fn query(&self) -> ModuleInfo {
        self.info.clone()
    }

    fn init(&mut self) -> std::result::Result<(), String> {
        let mut err = [0u8; 512];
        // SAFETY: the callback writes at most `len` bytes.
        match unsafe { (self.table.init)(err.as_mut_ptr().cast(), err.len() - 1) } {
            0 => Ok(()),
            _ => Err(c_err(&err)),
        }
    }

    fn actions(&self) -> Vec<Action> {
        self.actions.clone()
    }

    fn columns(&self) -> Vec<Column> {
        self.columns.clone()
    }

    fn create(&self, target: &Target, args: &str) -> Result<Box<dyn Probe>> {
        let exe = CString::new(target.binary().path().as_os_str().as_bytes())
            .map_err(|_| Error::Target("an executable path with a NUL byte".into()))?;
        let a = CString::new(args).map_err(|_| Error::Spec("a SPEC with a NUL byte".into()))?;
        let mut err = [0u8; 512];
        // SAFETY: valid strings; the callback writes at most `len` bytes.
        let p = unsafe {
            (self.table.create)(
                target.pid(),
                exe.as_ptr(),
                a.as_ptr(),
                err.as_mut_ptr().cast(),
                err.len() - 1,
            )
        };
        if p.is_null() {
            let why = c_err(&err);
            return Err(Error::Spec(format!("{}:{args}: {why}", self.info.name)));
        }
        Ok(Box::new(DylibProbe {
            table: self.table,
            p,
            tables: RefCell::default(),
            names: RefCell::default(),
        }))
    }
}

struct DylibProbe {
    table: &'static Table,
    p: *mut c_void,
    /// The tables the last `values()` carried.
    tables: RefCell<Vec<PanelTable>>,
    /// Column names and units are `&'static` in [`Column`]: each distinct one is
    /// leaked once, not at every poll.
    names: RefCell<HashSet<&'static str>>,
}

impl DylibProbe {
    fn intern(&self, s: &str) -> &'static str {
        let mut names = self.names.borrow_mut();
        match names.get(s) {
            Some(n) => n,
            None => {
                let n = leak(s);
                names.insert(n);
                n
            }
        }
    }
}

/// A table of a module's values, with names and units made `'static` by `intern`;
/// `None` when it is not one (ignored: a module that gets the shape wrong loses its
/// panel, not its values).
fn panel(v: &Value, intern: impl Fn(&str) -> &'static str) -> Option<PanelTable> {
    let columns: Vec<Column> = v["columns"]
        .as_array()?
        .iter()
        .map(|c| {
            // an unknown kind is a table of another shape
            let kind = ColumnKind::parse(c["kind"].as_str().unwrap_or("value"))?;
            Some(Column {
                name: intern(c["name"].as_str()?),
                unit: intern(c["unit"].as_str().unwrap_or("")),
                kind,
            })
        })
        .collect::<Option<_>>()?;
    let rows = v["rows"]
        .as_array()?
        .iter()
        .map(|r| {
            let cells = r["cells"].as_array()?.clone();
            let at = r["at"]
                .as_array()
                .and_then(|a| Some((a.first()?.as_str()?.to_owned(), a.get(1)?.as_u64()?)));
            (cells.len() == columns.len()).then_some(TableRow { cells, at })
        })
        .collect::<Option<_>>()?;
    let sort = v["sort"].as_u64().map(|c| c as usize).filter(|&c| c < columns.len());
    Some(PanelTable { title: v["title"].as_str()?.to_owned(), columns, rows, sort })
}

// SAFETY: the ABI requires probes usable from any thread, one at a time; the
// collector never shares one.
unsafe impl Send for DylibProbe {}

impl Probe for DylibProbe {
    fn location(&self) -> String {
        // SAFETY: a live probe; the callback writes at most `len` bytes.
        read_text(|b, n| unsafe { (self.table.location)(self.p, b, n) })
    }

    fn poll(&mut self) {
        // SAFETY: a live probe.
        unsafe { (self.table.poll)(self.p) }
    }

    fn values(&self) -> Map<String, Value> {
        // SAFETY: a live probe; the callback writes at most `len` bytes.
        let s = read_text(|b, n| unsafe { (self.table.values)(self.p, b, n) });
        let mut m = match serde_json::from_str(&s) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let tables = match m.remove("tables") {
            Some(Value::Array(t)) => {
                t.iter().filter_map(|t| panel(t, |s| self.intern(s))).collect()
            }
            _ => Vec::new(),
        };
        *self.tables.borrow_mut() = tables;
        m
    }

    fn tables(&self) -> Vec<PanelTable> {
        self.tables.borrow().clone()
    }
}

impl Drop for DylibProbe {
    fn drop(&mut self) {
        // SAFETY: destroyed once, never used after.
        unsafe { (self.table.destroy)(self.p) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_s_columns_may_be_series_and_an_unknown_kind_drops_it() {
        let t = serde_json::json!({"title": "T", "sort": 0,
            "columns": [{"name": "tid", "unit": ""}, {"name": "cpu", "unit": "ns", "kind": "series"}],
            "rows": [{"cells": [7, [[0, 1], [250, 3]]], "at": null}]});
        let p = panel(&t, leak).expect("a table");
        let kinds: Vec<ColumnKind> = p.columns.iter().map(|c| c.kind).collect();
        assert_eq!(kinds, [ColumnKind::Value, ColumnKind::Series]);
        assert_eq!(p.to_json()["columns"][1]["kind"], "series");
        let mut bad = t.clone();
        bad["columns"][1]["kind"] = "sparkle".into();
        assert!(panel(&bad, leak).is_none());
    }
}
