//! The traces a session reads, and the warnings met while reading them.

use crate::names::TraceNames;
use crate::Error;
use memlens_format::TraceReader;
use memlens_names::{AllocFns, Names};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// One trace of a dataset.
pub struct Trace {
    /// The value of the `trace` column: the file name (the path when two traces
    /// share a file name).
    pub name: String,
    /// The file.
    pub path: PathBuf,
    /// The open trace.
    pub reader: Arc<TraceReader>,
    names: OnceLock<Arc<TraceNames>>,
    /// `--alloc-fn` globs and their code in this trace ([`Dataset::set_alloc_fns`]).
    alloc_fn: (Vec<String>, AllocFns),
}

impl Trace {
    /// Code and data names of this trace, loaded on first use.
    pub(crate) fn names(&self) -> &Arc<TraceNames> {
        self.names
            .get_or_init(|| Arc::new(TraceNames::new(self.reader.clone(), self.alloc_fn.0.clone())))
    }

    /// The allocation wrappers whose callers are this trace's heap sites.
    pub(crate) fn alloc_fns(&self) -> &AllocFns {
        &self.alloc_fn.1
    }
}

/// Several traces read as one: every table has a `trace` column.
pub struct Dataset {
    /// The traces, in the order given (a directory's in name order).
    pub traces: Vec<Trace>,
    warnings: Mutex<(Vec<String>, HashSet<String>)>,
    plain: AtomicBool,
}

impl Dataset {
    /// Opens every path: a trace file, or a directory whose trace files are all read.
    /// A damaged trace is read up to its damage; the warning is in [`Dataset::take_warnings`].
    pub fn open(paths: &[PathBuf]) -> Result<Dataset, Error> {
        let mut files = Vec::new();
        for p in paths {
            if p.is_dir() {
                let mut inside: Vec<PathBuf> = std::fs::read_dir(p)
                    .map_err(|e| Error::Io(p.display().to_string(), e))?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|f| f.is_file() && is_trace(f))
                    .collect();
                if inside.is_empty() {
                    return Err(Error::Input(format!(
                        "{} holds no memlens trace; record one with `memlens record -o {}/x.trace -- PROG`",
                        p.display(),
                        p.display()
                    )));
                }
                inside.sort();
                files.extend(inside);
            } else if !p.exists() {
                return Err(Error::Input(format!(
                    "trace {} does not exist; record one with `memlens record -- PROG`",
                    p.display()
                )));
            } else {
                files.push(p.clone());
            }
        }
        let base = |f: &PathBuf| {
            f.file_name()
                .map_or_else(|| f.display().to_string(), |n| n.to_string_lossy().into_owned())
        };
        let mut named: Vec<(String, PathBuf)> =
            files.iter().map(|f| (base(f), f.clone())).collect();
        let mut seen = HashSet::new();
        if named.iter().any(|t| !seen.insert(t.0.clone())) {
            for t in &mut named {
                t.0 = t.1.display().to_string();
            }
        }
        Dataset::open_named(&named)
    }

    /// Opens trace files under the names given them (the `trace` column).
    pub fn open_named(files: &[(String, PathBuf)]) -> Result<Dataset, Error> {
        let d = Dataset {
            traces: Vec::new(),
            warnings: Mutex::default(),
            plain: AtomicBool::new(false),
        };
        let mut traces = Vec::new();
        for (_, f) in files {
            if !f.exists() {
                return Err(Error::Input(format!(
                    "trace {} does not exist here (a cluster's machines must all see the traces at the same path)",
                    f.display()
                )));
            }
        }
        // opening reads each trace's chunk index: on every core
        let next = std::sync::atomic::AtomicUsize::new(0);
        let opened: Vec<Mutex<Option<Result<TraceReader, memlens_format::Error>>>> =
            files.iter().map(|_| Mutex::new(None)).collect();
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        std::thread::scope(|s| {
            for _ in 0..cores.min(files.len()) {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((_, f)) = files.get(i) else { break };
                    let r = TraceReader::open(f);
                    *opened[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                });
            }
        });
        for ((name, f), r) in files.iter().zip(opened) {
            let r = match r.into_inner().unwrap_or_else(|e| e.into_inner()) {
                Some(r) => {
                    r.map_err(|e| Error::Trace { path: f.display().to_string(), source: e })?
                }
                None => return Err(Error::Input(format!("{}: not opened", f.display()))),
            };
            if let Some(w) = r.completeness().warning() {
                d.warn(format!("{}: {w}", f.display()));
            }
            traces.push(Trace {
                name: name.clone(),
                path: f.clone(),
                reader: Arc::new(r),
                names: OnceLock::new(),
                alloc_fn: Default::default(),
            });
        }
        Ok(Dataset { traces, ..d })
    }

    /// Allocation wrappers (`--alloc-fn`, function glob lists; see
    /// `memlens_names::Names::set_alloc_fns`): a heap block allocated in one is
    /// its first caller's, in `allocations.site`, `data` and `variable()`. Set it
    /// before a session registers the tables. A glob that matches in no trace at
    /// all is an error; one that misses in some traces is a warning.
    pub fn set_alloc_fns(&mut self, globs: &[String]) -> Result<(), Error> {
        if globs.is_empty() {
            return Ok(());
        }
        let mut missed = Vec::new();
        for t in &mut self.traces {
            let mut names = Names::new(&t.reader.meta().modules);
            let unmatched = names.set_alloc_fns(globs).map_err(|e| Error::Input(e.to_string()))?;
            if !unmatched.is_empty() {
                missed.push(format!("{} matches nothing in {}", unmatched.join(", "), t.name));
            }
            t.alloc_fn = (globs.to_vec(), names.alloc_fns().clone());
        }
        if !self.traces.is_empty() && self.traces.iter().all(|t| t.alloc_fn.1.is_empty()) {
            return Err(Error::Input(format!(
                "--alloc-fn {} names no function of the traced programs (see `memlens report --by function`)",
                globs.join(",")
            )));
        }
        for m in missed {
            self.warn(m);
        }
        Ok(())
    }

    /// The `--alloc-fn` globs set ([`Dataset::set_alloc_fns`]).
    pub fn alloc_fn_globs(&self) -> Vec<String> {
        self.traces.first().map(|t| t.alloc_fn.0.clone()).unwrap_or_default()
    }

    /// No trace: every table is empty (a query can be checked before any trace exists).
    pub fn empty() -> Dataset {
        Dataset { traces: Vec::new(), warnings: Mutex::default(), plain: AtomicBool::new(false) }
    }

    /// Text columns and function results as plain text instead of dictionaries
    /// (a cluster's engine does not carry dictionaries through its shuffles).
    /// Set it before a session registers the tables.
    pub fn set_plain_text(&self) {
        self.plain.store(true, Ordering::Relaxed);
    }

    /// Whether [`Dataset::set_plain_text`] was called.
    pub fn plain_text(&self) -> bool {
        self.plain.load(Ordering::Relaxed)
    }

    /// Records a warning (each text once).
    pub(crate) fn warn(&self, w: String) {
        let mut g = self.warnings.lock().unwrap_or_else(|e| e.into_inner());
        if g.1.insert(w.clone()) {
            g.0.push(w);
        }
    }

    /// The warnings not taken yet.
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut self.warnings.lock().unwrap_or_else(|e| e.into_inner()).0)
    }
}

/// Whether a file starts with the trace magic.
fn is_trace(p: &Path) -> bool {
    use std::io::Read;
    let mut m = [0u8; 7];
    std::fs::File::open(p).and_then(|mut f| f.read_exact(&mut m)).is_ok() && &m == b"MEMLENS"
}
