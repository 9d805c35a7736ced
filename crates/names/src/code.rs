//! Names for code addresses, cached per distinct pc.

use memlens_analysis::heap::AllocFns;
use memlens_format::{Module, Pc};
use memlens_symbols::Symbolizer;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;

/// Where a code address is in the source.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CodeName {
    /// Innermost (possibly inlined) function, demangled.
    pub function: Arc<str>,
    /// Source file, empty when unknown.
    pub file: Arc<str>,
    /// Line, 0 when unknown.
    pub line: u32,
    /// Column, 0 when unknown.
    pub column: u32,
}

/// Sources of the compilers' own libraries (std, libstdc++ headers, libc headers).
pub fn is_toolchain_source(path: &str) -> bool {
    path.starts_with("/rustc/")
        || path.starts_with("/usr/include/")
        || path.starts_with("/usr/lib/gcc/")
        || path.starts_with("/usr/lib/llvm")
}

/// Symbolises code addresses of one trace.
pub struct Names {
    sym: Symbolizer,
    cache: Mutex<HashMap<Pc, CodeName>>,
    alloc_fns: AllocFns,
}

impl Names {
    /// For the modules of a trace.
    pub fn new(modules: &[Module]) -> Names {
        Names {
            sym: Symbolizer::new(modules),
            cache: Mutex::default(),
            alloc_fns: AllocFns::default(),
        }
    }

    /// Allocation wrappers (`--alloc-fn`, valgrind massif's option): function
    /// globs, each a comma-separated list; a heap block allocated inside a matching
    /// function belongs to its first caller outside every one of them, for the
    /// names of heap blocks and for the allocation sites of the heap kernels (see
    /// [`Names::alloc_fns`]). Returns the globs (as `--alloc-fn GLOB`) that match no
    /// function of the trace's modules (all of them when [`Names::alloc_fns`] stays
    /// empty: the caller says so); a `!glob` or a malformed glob is an error.
    pub fn set_alloc_fns(&mut self, globs: &[String]) -> Result<Vec<String>, crate::Error> {
        let bad = |m: String| crate::Error::AllocFn(m);
        let mut spec = memlens_symbols::CodeFilter::default();
        for g in globs {
            if memlens_symbols::split_glob_list(g).iter().any(|x| x.starts_with('!')) {
                return Err(bad(format!(
                    "--alloc-fn {g}: name the wrappers (a `!glob` excludes nothing here)"
                )));
            }
            spec.add_list(g, false).map_err(|e| bad(format!("--alloc-fn {g}: {e}")))?;
        }
        if spec.include_functions.is_empty() {
            // (a filter without includes selects every function)
            self.alloc_fns = AllocFns::default();
            if globs.is_empty() {
                return Ok(Vec::new());
            }
            return Err(bad("--alloc-fn takes function names or globs (xmalloc,*_alloc)".into()));
        }
        let labels: Vec<String> =
            spec.labels().iter().map(|l| l.replace("--functions", "--alloc-fn")).collect();
        let mut matched = vec![false; labels.len()];
        let mut out = Vec::new();
        for m in self.sym.modules() {
            let Ok(syms) = self.sym.module_symbols(m.id) else { continue };
            let sel = syms.select_code(&spec).map_err(|e| bad(format!("--alloc-fn: {e}")))?;
            for (a, b) in matched.iter_mut().zip(&sel.matched) {
                *a |= b;
            }
            // call stacks hold return addresses: one past the call instruction
            out.extend(sel.ranges.iter().map(|r| Pc(r.start.0 + 1)..Pc(r.end.0 + 1)));
        }
        self.alloc_fns = AllocFns::new(out);
        Ok(labels.into_iter().zip(matched).filter(|(_, m)| !m).map(|(l, _)| l).collect())
    }

    /// The allocation wrappers [`Names::set_alloc_fns`] resolved (none by default).
    pub fn alloc_fns(&self) -> &AllocFns {
        &self.alloc_fns
    }

    /// The symboliser, for data names.
    pub fn symbolizer(&self) -> &Symbolizer {
        &self.sym
    }

    /// Name of a code address (a callback's return address).
    pub fn code(&self, pc: Pc) -> CodeName {
        // (the viewer's index names code from two threads at once)
        let cache = || self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = cache().get(&pc) {
            return c.clone();
        }
        let name = self.resolve(pc);
        cache().insert(pc, name.clone());
        name
    }

    /// The function a call entered at `pc` (a function entry's code address, as the
    /// call tree and the flame chart name their frames): the out-of-line function,
    /// never a helper inlined at its first instructions (which [`Names::code`]
    /// names, as the code the address runs); file and line are then that function's
    /// own, where the helper was inlined.
    pub fn entered(&self, pc: Pc) -> CodeName {
        let c = self.code(pc);
        let loc = self.sym.frames(pc);
        let Some(outer) = loc.as_ref().and_then(|l| l.outermost()) else { return c };
        match &outer.function {
            Some(f) if *f != c.function => CodeName {
                function: f.clone(),
                file: outer.file.clone().unwrap_or_else(|| "".into()),
                line: outer.line.unwrap_or(0),
                column: outer.column.unwrap_or(0),
            },
            _ => c,
        }
    }

    fn resolve(&self, pc: Pc) -> CodeName {
        let unknown = || CodeName { function: format!("{pc}").into(), ..CodeName::default() };
        let Some(loc) = self.sym.frames(pc) else {
            return match self.sym.function_symbol(pc) {
                Some(f) => CodeName { function: f.name.clone(), ..CodeName::default() },
                None => unknown(),
            };
        };
        // Inlined standard-library frames (Rust's core/alloc, libstdc++ headers) say
        // less than the user's line that inlined them: take the innermost frame
        // outside the toolchain's own sources, else the innermost.
        let Some(fr) = loc
            .frames
            .iter()
            .find(|f| f.file.as_deref().is_some_and(|p| !is_toolchain_source(p)))
            .or_else(|| loc.innermost())
        else {
            return unknown();
        };
        CodeName {
            function: fr
                .function
                .clone()
                .or_else(|| self.sym.function_symbol(pc).map(|f| f.name.clone()))
                .unwrap_or_else(|| format!("{pc}").into()),
            file: fr.file.clone().unwrap_or_else(|| "".into()),
            line: fr.line.unwrap_or(0),
            column: fr.column.unwrap_or(0),
        }
    }
}
