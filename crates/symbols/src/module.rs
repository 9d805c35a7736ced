//! One module's symbols: the I/O-free core ([`ModuleSymbols::from_files`]) and the file
//! loader that finds separate debug files ([`ModuleSymbols::load`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use memlens_format::{Addr, Module, Pc};
use object::Object as _;

use crate::code::{merge_ranges, CodeLocation, CodeRange, Frame, FunctionSymbol};
use crate::data::{self, DataIndex, DataKind, DataName, ThreadLocal};
use crate::demangle::{demangle, strip_params};
use crate::dwarf::{self, Units, R};
use crate::elf::{self, RawSymbol, SymKind, TlsSegment};
use crate::frame::{self, FunctionFrame, SubprogramRange};
use crate::glob::Glob;
use crate::heaptype::{self, FrameVerdict, HeapType, Parents, TypeSource};
use crate::layout::LayoutCache;
use crate::srcline::{self, TypeIndex};
use crate::Error;
use gimli::Reader as _;

/// Source files by path: their lines, `None` when unreadable.
type SourceCache = HashMap<Arc<str>, Option<Arc<[String]>>>;

/// Frame descriptions by subprogram DIE (unit index, unit offset).
type FrameCache = HashMap<(usize, usize), Option<Arc<FunctionFrame>>>;

/// Where to look for separate debug files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DebugSearch {
    /// Global debug directories, searched for `.build-id/xx/yyyy.debug` and for
    /// `<dir>/<module's directory>/<debuglink name>`. Default: `/usr/lib/debug`.
    pub debug_dirs: Vec<PathBuf>,
}

impl Default for DebugSearch {
    fn default() -> Self {
        DebugSearch { debug_dirs: vec![PathBuf::from("/usr/lib/debug")] }
    }
}

/// The file contents a module's symbols are built from; see
/// [`ModuleSymbols::from_files`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ModuleFiles<'a> {
    /// The module's own ELF file (may be stripped).
    pub object: Option<(&'a Path, &'a [u8])>,
    /// A separate debug file (`.gnu_debuglink` or build-id), if any.
    pub debug: Option<(&'a Path, &'a [u8])>,
    /// The supplementary DWARF file named by `.gnu_debugaltlink` (dwz), if any.
    pub supplementary: Option<&'a [u8]>,
}

/// A static variable (see [`DataKind::Global`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticVariable {
    /// Qualified name.
    pub name: Arc<str>,
    /// Runtime address of the first byte.
    pub start: Addr,
    /// Size in bytes (0 when unknown).
    pub size: u64,
}

/// Symbols of one module: function symbols, DWARF line and inline information, static
/// and thread-local variables, frame layouts.
///
/// Everything is in runtime addresses (file address + [`Module::bias`]); load a module
/// with bias 0 to work in file addresses. The DWARF-derived tables are built on first
/// use; all methods take `&self` and the type is `Send + Sync`.
pub struct ModuleSymbols {
    module: Module,
    module_path: Arc<str>,
    object_path: Option<PathBuf>,
    debug_path: Option<PathBuf>,
    dwarf_path: PathBuf,
    functions: Vec<FunctionSymbol>,
    raw_symbols: Vec<RawSymbol>,
    tls_segment: Option<TlsSegment>,
    dwarf: Option<Arc<gimli::Dwarf<R>>>,
    context: OnceLock<Option<Mutex<addr2line::Context<R>>>>,
    units: OnceLock<Result<Option<Units>, Error>>,
    data: OnceLock<DataIndex>,
    subprograms: OnceLock<Vec<SubprogramRange>>,
    frames: Mutex<FrameCache>,
    alloc_sites: OnceLock<HashMap<u64, (usize, gimli::UnitOffset)>>,
    rust_types: OnceLock<HashMap<String, (usize, gimli::UnitOffset)>>,
    parents: Mutex<HashMap<usize, Arc<Parents>>>,
    /// C/C++ types by qualified name, for types read from source lines.
    type_index: OnceLock<TypeIndex>,
    /// Source files read for allocation lines (`None`: unreadable).
    sources: Mutex<SourceCache>,
    /// Types read from allocation lines, by call site (file address).
    source_types: Mutex<HashMap<u64, Option<HeapType>>>,
    layouts: LayoutCache,
    names: Mutex<HashMap<String, Arc<str>>>,
    files: Mutex<HashMap<String, Arc<str>>>,
}

impl std::fmt::Debug for ModuleSymbols {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleSymbols")
            .field("module", &self.module)
            .field("object_path", &self.object_path)
            .field("debug_path", &self.debug_path)
            .field("functions", &self.functions.len())
            .field("has_dwarf", &self.dwarf.is_some())
            .finish_non_exhaustive()
    }
}

impl ModuleSymbols {
    /// Reads the module's file and its separate debug files, if any.
    ///
    /// Debug information is taken from the module itself when it has `.debug_info`;
    /// otherwise from, in order: `<debug dir>/.build-id/xx/yyyy.debug` (build-id from the
    /// file, else from [`Module::build_id`]), then the `.gnu_debuglink` name in the
    /// module's directory, its `.debug/` subdirectory and `<debug dir>/<module dir>/`. A
    /// module whose file is gone can still be symbolized from a build-id debug file.
    /// A `.gnu_debugaltlink` (dwz) supplementary file is loaded when found.
    pub fn load(module: &Module, search: &DebugSearch) -> Result<ModuleSymbols, Error> {
        let obj_path = PathBuf::from(&module.path);
        let (obj_data, obj_err) = match std::fs::read(&obj_path) {
            Ok(d) => (Some(d), None),
            Err(e) => (None, Some(Error::io(&obj_path, e))),
        };
        let ident = match &obj_data {
            Some(d) => {
                let obj = object::File::parse(&d[..])
                    .map_err(|source| Error::Object { path: obj_path.clone(), source })?;
                Some(elf::identity(&obj))
            }
            None => None,
        };
        // A file rebuilt since the recording names other code: only a debug file
        // with the recorded build-id can name this module then.
        let recorded = (!module.build_id.is_empty()).then(|| module.build_id.clone());
        let changed = match (&recorded, ident.as_ref().and_then(|i| i.build_id.as_ref())) {
            (Some(r), Some(f)) if r != f => Some(hex(f)),
            _ => None,
        };
        if let Some(found) = changed {
            return match find_debug_file(&obj_path, recorded.as_deref(), None, search) {
                Some((p, d)) => {
                    let files = ModuleFiles {
                        object: None,
                        debug: Some((p.as_path(), d.as_slice())),
                        supplementary: None,
                    };
                    ModuleSymbols::from_files(module.clone(), files)
                }
                None => Err(Error::ModuleChanged {
                    path: obj_path,
                    recorded: module.build_id_hex(),
                    found,
                }),
            };
        }
        let build_id = ident.as_ref().and_then(|i| i.build_id.clone()).or(recorded);
        let debug = if ident.as_ref().is_some_and(|i| i.has_dwarf) {
            None
        } else {
            let link = ident.as_ref().and_then(|i| i.debuglink.clone());
            find_debug_file(&obj_path, build_id.as_deref(), link, search)
        };
        if obj_data.is_none() && debug.is_none() {
            return Err(obj_err.unwrap_or(Error::ModuleNotFound { path: obj_path }));
        }
        // The supplementary file is named by whichever file holds the DWARF.
        let (holder_path, holder_data) = match (&debug, &obj_data) {
            (Some((p, d)), _) => (p.as_path(), d.as_slice()),
            (None, Some(d)) => (obj_path.as_path(), d.as_slice()),
            (None, None) => unreachable!("checked above"),
        };
        let altlink = object::File::parse(holder_data).ok().and_then(|o| elf::identity(&o).altlink);
        let sup = altlink.and_then(|(name, id)| find_sup_file(holder_path, &name, &id, search));
        let files = ModuleFiles {
            object: obj_data.as_deref().map(|d| (obj_path.as_path(), d)),
            debug: debug.as_ref().map(|(p, d)| (p.as_path(), d.as_slice())),
            supplementary: sup.as_deref(),
        };
        ModuleSymbols::from_files(module.clone(), files)
    }

    /// Builds the symbols from file contents already in memory (no I/O).
    ///
    /// At least one of `object` and `debug` should be given; with neither, the result
    /// knows nothing but the module.
    pub fn from_files(module: Module, files: ModuleFiles<'_>) -> Result<ModuleSymbols, Error> {
        fn parse<'a>(
            (path, data): (&'a Path, &'a [u8]),
        ) -> Result<(&'a Path, object::File<'a>), Error> {
            object::File::parse(data)
                .map(|o| (path, o))
                .map_err(|source| Error::Object { path: path.to_owned(), source })
        }
        let object = files.object.map(parse).transpose()?;
        let debug = files.debug.map(parse).transpose()?;
        let sup = files.supplementary.and_then(|d| object::File::parse(d).ok());

        let mut raw_symbols = Vec::new();
        for (_, obj) in object.iter().chain(debug.iter()) {
            elf::symbols(obj, &mut raw_symbols);
        }
        let tls_segment =
            object.iter().chain(debug.iter()).find_map(|(_, o)| elf::program_headers(o).1);

        // DWARF from the debug file when it has some, else from the object.
        let holder = debug.iter().chain(object.iter()).find(|(_, o)| elf::identity(o).has_dwarf);
        let (dwarf, dwarf_path) = match holder {
            Some((path, obj)) => {
                let d = dwarf::load_dwarf(obj, sup.as_ref())
                    .map_err(|source| Error::Object { path: path.to_path_buf(), source })?;
                (Some(Arc::new(d)), path.to_path_buf())
            }
            None => (None, PathBuf::from(&module.path)),
        };

        let functions = function_symbols(&raw_symbols, module.bias);
        Ok(ModuleSymbols {
            module_path: module.path.as_str().into(),
            object_path: object.map(|(p, _)| p.to_owned()),
            debug_path: debug.map(|(p, _)| p.to_owned()),
            dwarf_path,
            module,
            functions,
            raw_symbols,
            tls_segment,
            dwarf,
            context: OnceLock::new(),
            units: OnceLock::new(),
            data: OnceLock::new(),
            subprograms: OnceLock::new(),
            frames: Mutex::new(HashMap::new()),
            alloc_sites: OnceLock::new(),
            rust_types: OnceLock::new(),
            parents: Mutex::new(HashMap::new()),
            type_index: OnceLock::new(),
            sources: Mutex::new(HashMap::new()),
            source_types: Mutex::new(HashMap::new()),
            layouts: LayoutCache::default(),
            names: Mutex::new(HashMap::new()),
            files: Mutex::new(HashMap::new()),
        })
    }

    /// The module these symbols belong to.
    pub fn module(&self) -> &Module {
        &self.module
    }

    /// The module's own file, when it was read.
    pub fn object_path(&self) -> Option<&Path> {
        self.object_path.as_deref()
    }

    /// The separate debug file, when one was used.
    pub fn debug_path(&self) -> Option<&Path> {
        self.debug_path.as_deref()
    }

    /// Whether DWARF debugging information is available (else names come from the ELF
    /// symbol table only).
    pub fn has_dwarf(&self) -> bool {
        self.dwarf.is_some()
    }

    /// The module's `PT_TLS` segment.
    pub fn tls_segment(&self) -> Option<TlsSegment> {
        self.tls_segment
    }

    fn context(&self) -> Option<&Mutex<addr2line::Context<R>>> {
        self.context
            .get_or_init(|| {
                let dwarf = self.dwarf.clone()?;
                addr2line::Context::from_arc_dwarf(dwarf).ok().map(Mutex::new)
            })
            .as_ref()
    }

    fn units(&self) -> Result<Option<&Units>, Error> {
        let r = self.units.get_or_init(|| match &self.dwarf {
            Some(d) => Units::parse(d.clone())
                .map(Some)
                .map_err(|source| Error::Dwarf { path: self.dwarf_path.clone(), source }),
            None => Ok(None),
        });
        match r {
            Ok(u) => Ok(u.as_ref()),
            Err(e) => Err(e.clone()),
        }
    }

    fn intern(
        map: &Mutex<HashMap<String, Arc<str>>>,
        key: &str,
        make: impl FnOnce() -> String,
    ) -> Arc<str> {
        let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = map.get(key) {
            return v.clone();
        }
        let v: Arc<str> = make().into();
        map.insert(key.to_owned(), v.clone());
        v
    }

    /// The inlined frame chain at return address `pc` (looked up at `pc − 1`).
    ///
    /// `pc` should belong to this module; the result's frames are empty when nothing is
    /// known about it.
    pub fn frames(&self, pc: Pc) -> CodeLocation {
        let probe = self.module.file_addr(pc.0).wrapping_sub(1);
        let mut frames = Vec::new();
        if let Some(ctx) = self.context() {
            let ctx = ctx.lock().unwrap_or_else(|e| e.into_inner());
            if let Ok(mut iter) = ctx.find_frames(probe).skip_all_loads() {
                while let Ok(Some(f)) = iter.next() {
                    let function = f.function.as_ref().and_then(|n| {
                        let raw = n.raw_name().ok()?;
                        Some(Self::intern(&self.names, &raw, || demangle(&raw, n.language)))
                    });
                    let (file, line, column) = match f.location {
                        Some(l) => (
                            l.file.map(|p| Self::intern(&self.files, p, || p.to_owned())),
                            l.line,
                            l.column,
                        ),
                        None => (None, None, None),
                    };
                    frames.push(Frame { function, file, line, column });
                }
            }
        }
        // Compilers give line 0 to code they merged or generated (clang often does
        // for sanitizer callbacks): take the closest line before it in the function.
        if frames.first().is_some_and(|f| f.line.is_none()) {
            if let Some((file, line, column)) = self.line_before(probe, pc) {
                let f = &mut frames[0];
                f.file = Some(file);
                f.line = Some(line);
                f.column = column;
            }
        }
        if frames.last().is_none_or(|f| f.function.is_none()) {
            if let Some(sym) = self.function_symbol(pc) {
                match frames.last_mut() {
                    Some(last) => last.function = Some(sym.name.clone()),
                    None => frames.push(Frame {
                        function: Some(sym.name.clone()),
                        file: None,
                        line: None,
                        column: None,
                    }),
                }
            }
        }
        CodeLocation { module_id: self.module.id, module_path: self.module_path.clone(), frames }
    }

    /// The last line-table row with a line number between the start of the function
    /// holding `probe` (at most 4 KiB back) and `probe`.
    fn line_before(&self, probe: u64, pc: Pc) -> Option<(Arc<str>, u32, Option<u32>)> {
        let ctx = self.context()?.lock().unwrap_or_else(|e| e.into_inner());
        let start = self.function_symbol(pc).map(|f| self.module.file_addr(f.start.0));
        let lo = start.unwrap_or(0).max(probe.saturating_sub(4096));
        let mut best = None;
        for (addr, _, loc) in ctx.find_location_range(lo, probe + 1).ok()? {
            if addr <= probe && loc.line.is_some() {
                best = Some((loc.file?.to_owned(), loc.line?, loc.column));
            }
        }
        let (file, line, column) = best?;
        Some((Self::intern(&self.files, &file, || file.clone()), line, column))
    }

    /// All function symbols, sorted by address.
    pub fn functions(&self) -> &[FunctionSymbol] {
        &self.functions
    }

    /// The function symbol containing the call whose return address is `pc`.
    pub fn function_symbol(&self, pc: Pc) -> Option<&FunctionSymbol> {
        let a = pc.0.wrapping_sub(1);
        let end = self.functions.partition_point(|f| f.start.0 <= a);
        (end.saturating_sub(4)..end)
            .rev()
            .map(|i| &self.functions[i])
            .find(|f| a - f.start.0 < f.size.max(1))
    }

    /// Function symbols whose demangled name, demangled name without the parameter list
    /// (`ns::Foo::bar`), or raw symbol name matches the glob `pattern`.
    pub fn functions_matching(&self, pattern: &Glob) -> Vec<&FunctionSymbol> {
        self.functions
            .iter()
            .filter(|f| {
                pattern.is_match(&f.name)
                    || pattern.is_match(strip_params(&f.name))
                    || pattern.is_match(&f.raw_name)
            })
            .collect()
    }

    /// Code ranges (from the DWARF line tables) of the source files matching `pattern`
    /// (see [`Glob::is_path_match`]), sorted and merged. An instruction belongs to
    /// every file of its inlined frame chain, so code a header inlined into `main.c`
    /// counts for both, and every access `report --by line` puts on a line of a
    /// matching file is inside. Empty without DWARF.
    pub fn source_file_ranges(&self, pattern: &Glob) -> Result<Vec<CodeRange>, Error> {
        let Some(units) = self.units()? else { return Ok(Vec::new()) };
        let bias = self.module.bias;
        let in_module = |a: u64| {
            self.module.segments.is_empty()
                || self.module.segments.iter().any(|s| a >= s.vaddr && a - s.vaddr < s.memsz)
        };
        let mut out = Vec::new();
        for (uid, unit) in units.units.iter().enumerate() {
            let Some(program) = unit.line_program.clone() else { continue };
            let mut matches: HashMap<u64, bool> = HashMap::new();
            // Inlined frames name files of this unit's file table: walk the frames
            // only in units where one of those files matches.
            let header = program.header();
            let unit_matches = header.file_names().iter().any(|f| {
                units.file_path(uid, header, f).is_some_and(|p| pattern.is_path_match(&p))
            });
            let mut rows = program.rows();
            let mut prev: Option<(u64, bool)> = None;
            loop {
                let row = rows
                    .next_row()
                    .map_err(|source| Error::Dwarf { path: self.dwarf_path.clone(), source })?;
                let Some((header, row)) = row else { break };
                if let Some((start, true)) = prev {
                    if row.address() > start && in_module(start) {
                        out.push(CodeRange {
                            start: Pc(start + bias),
                            end: Pc(row.address() + bias),
                        });
                    }
                }
                if row.end_sequence() {
                    prev = None;
                    continue;
                }
                let m = *matches.entry(row.file_index()).or_insert_with(|| {
                    row.file(header)
                        .and_then(|f| units.file_path(uid, header, f))
                        .is_some_and(|p: String| pattern.is_path_match(&p))
                });
                let m = m
                    || (unit_matches && {
                        let loc = self.frames(Pc(row.address() + bias + 1));
                        loc.frames
                            .iter()
                            .any(|f| f.file.as_deref().is_some_and(|p| pattern.is_path_match(p)))
                    });
                prev = Some((row.address(), m));
            }
        }
        Ok(merge_ranges(out))
    }

    /// Runtime addresses where execution enters source line `line` of the files matching
    /// `pattern` (see [`Glob::is_path_match`]), for live probes: the first address of each
    /// run of instructions the line table gives to that line. Of several rows at one
    /// address (location views: gcc puts `is_stmt` rows of several lines there), the
    /// last one owns the instruction. Sorted, deduplicated; empty without DWARF.
    pub fn line_addresses(&self, pattern: &str, line: u64) -> Result<Vec<Pc>, Error> {
        let glob = Glob::new(pattern)?;
        let Some(units) = self.units()? else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for (uid, unit) in units.units.iter().enumerate() {
            let Some(program) = unit.line_program.clone() else { continue };
            let mut matches: HashMap<u64, bool> = HashMap::new();
            let mut rows = program.rows();
            // The row owning the current address, and the (file matches, line) owning
            // the previous one.
            let mut pending: Option<(u64, bool, u64)> = None;
            let mut prev: Option<(bool, u64)> = None;
            while let Some((header, row)) = rows
                .next_row()
                .map_err(|source| Error::Dwarf { path: self.dwarf_path.clone(), source })?
            {
                if let Some((addr, m, l)) = pending {
                    if row.address() != addr || row.end_sequence() {
                        if m && l == line && prev != Some((true, line)) {
                            out.push(Pc(addr + self.module.bias));
                        }
                        prev = Some((m, l));
                    }
                }
                if row.end_sequence() {
                    pending = None;
                    prev = None;
                    continue;
                }
                let m = *matches.entry(row.file_index()).or_insert_with(|| {
                    row.file(header)
                        .and_then(|f| units.file_path(uid, header, f))
                        .is_some_and(|p: String| glob.is_path_match(&p))
                });
                pending = Some((row.address(), m, row.line().map_or(0, |l| l.get())));
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// Every line of `file` (a name from [`Self::source_files`]) that has code,
    /// with the first address where execution enters it (the live GUI marks these
    /// lines as instrumentable). Sorted by line; empty without DWARF. Paths are
    /// compared with `.` and `dir/..` components removed, not as globs (a name
    /// with `..` matched nothing; one with `[` would have been a pattern).
    pub fn code_lines(&self, file: &str) -> Result<Vec<(u64, Pc)>, Error> {
        let want = crate::glob::normal(file);
        let Some(units) = self.units()? else { return Ok(Vec::new()) };
        let mut first: HashMap<u64, u64> = HashMap::new();
        for (uid, unit) in units.units.iter().enumerate() {
            let Some(program) = unit.line_program.clone() else { continue };
            let mut matches: HashMap<u64, bool> = HashMap::new();
            let mut rows = program.rows();
            while let Some((header, row)) = rows
                .next_row()
                .map_err(|source| Error::Dwarf { path: self.dwarf_path.clone(), source })?
            {
                let line = row.line().map_or(0, |l| l.get());
                if row.end_sequence() || line == 0 {
                    continue;
                }
                let m = *matches.entry(row.file_index()).or_insert_with(|| {
                    row.file(header)
                        .and_then(|f| units.file_path(uid, header, f))
                        .is_some_and(|p: String| crate::glob::normal(&p) == want)
                });
                if m {
                    let a = row.address() + self.module.bias;
                    first.entry(line).and_modify(|v| *v = (*v).min(a)).or_insert(a);
                }
            }
        }
        let mut out: Vec<(u64, Pc)> = first.into_iter().map(|(l, a)| (l, Pc(a))).collect();
        out.sort_unstable();
        Ok(out)
    }

    /// Every source file the DWARF line tables name, as [`Self::frames`] spells it
    /// (sorted, deduplicated). Empty without DWARF. The viewer serves only these.
    pub fn source_files(&self) -> Result<Vec<String>, Error> {
        self.files_of_units(|_, _| true)
    }

    /// [`Self::source_files`] without the memlens runtime's own sources, nor the
    /// Rust standard library's, nor (in a program with no Rust of its own) the
    /// crates the runtime is built from: the files a user browses in the live GUI.
    pub fn user_source_files(&self) -> Result<Vec<String>, Error> {
        let Some(units) = self.units()? else { return Ok(Vec::new()) };
        let text = |v: &Option<R>| {
            v.as_ref().and_then(|r| r.to_string_lossy().ok().map(|c| c.into_owned()))
        };
        let named: Vec<(String, String)> = units
            .units
            .iter()
            .map(|u| (text(&u.name).unwrap_or_default(), text(&u.comp_dir).unwrap_or_default()))
            .collect();
        // the runtime's crates were built in one workspace: where its `rt` was
        let rt_dirs: Vec<&str> = named
            .iter()
            .filter(|(n, _)| n.starts_with("crates/rt/src/lib.rs/@/"))
            .map(|(_, d)| d.as_str())
            .collect();
        let kind: Vec<UnitOrigin> =
            named.iter().map(|(n, d)| UnitOrigin::of(n, d, &rt_dirs)).collect();
        let own_rust = kind
            .iter()
            .zip(&units.langs)
            .any(|(k, l)| *k == UnitOrigin::User && *l == Some(gimli::DW_LANG_Rust));
        let runtime = kind.contains(&UnitOrigin::Runtime);
        self.files_of_units(|uid, _| match kind[uid] {
            UnitOrigin::User => true,
            UnitOrigin::Registry => own_rust || !runtime,
            UnitOrigin::Runtime | UnitOrigin::Toolchain => false,
        })
    }

    fn files_of_units(
        &self,
        keep: impl Fn(usize, &gimli::Unit<R>) -> bool,
    ) -> Result<Vec<String>, Error> {
        let Some(units) = self.units()? else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for (uid, unit) in units.units.iter().enumerate() {
            if !keep(uid, unit) {
                continue;
            }
            let Some(program) = &unit.line_program else { continue };
            let header = program.header();
            out.extend(header.file_names().iter().filter_map(|f| units.file_path(uid, header, f)));
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    fn data_index(&self) -> &DataIndex {
        self.data.get_or_init(|| {
            let units = self.units().ok().flatten();
            DataIndex::build(units, &self.layouts, &self.raw_symbols)
        })
    }

    /// Names a data address inside one of this module's static variables.
    pub fn data_name(&self, addr: Addr) -> Option<DataName> {
        let a = self.module.file_addr(addr.0);
        let index = self.data_index();
        let i = data::find(&index.globals, a)?;
        let units = self.units().ok().flatten();
        Some(data::name_in(
            &index.globals[i],
            a,
            DataKind::Global,
            self.module.id,
            units,
            &self.layouts,
        ))
    }

    /// Names the byte at `offset` in this module's thread-local block.
    pub fn tls_data_name(&self, offset: u64) -> Option<DataName> {
        let index = self.data_index();
        let i = data::find(&index.tls, offset)?;
        let units = self.units().ok().flatten();
        Some(data::name_in(
            &index.tls[i],
            offset,
            DataKind::ThreadLocal,
            self.module.id,
            units,
            &self.layouts,
        ))
    }

    /// All static variables, sorted by address (from DWARF, plus ELF data symbols that
    /// DWARF does not describe).
    pub fn static_variables(&self) -> Vec<StaticVariable> {
        self.data_index()
            .globals
            .iter()
            .map(|v| StaticVariable {
                name: v.name.clone(),
                start: Addr(v.start.wrapping_add(self.module.bias)),
                size: v.size,
            })
            .collect()
    }

    /// The thread-local variables with their layouts, for naming a dynamic TLS block.
    pub(crate) fn tls_vars(&self) -> Vec<crate::dyntls::TlsVar> {
        let units = self.units().ok().flatten();
        self.data_index()
            .tls
            .iter()
            .map(|v| crate::dyntls::TlsVar {
                name: v.name.clone(),
                offset: v.start,
                size: v.size,
                layout: v.ty.zip(units).map(|((u, o), units)| self.layouts.get(units, u, o)),
            })
            .collect()
    }

    /// All thread-local variables, sorted by TLS-block offset.
    pub fn thread_locals(&self) -> Vec<ThreadLocal> {
        self.data_index()
            .tls
            .iter()
            .map(|v| ThreadLocal { name: v.name.clone(), offset: v.start, size: v.size })
            .collect()
    }

    /// The frame description (frame base, frame-base-relative locals) of the function
    /// containing return address `pc`.
    pub fn function_frame(&self, pc: Pc) -> Option<Arc<FunctionFrame>> {
        let units = self.units().ok().flatten()?;
        let index = self.subprograms.get_or_init(|| frame::subprogram_index(units));
        let a = self.module.file_addr(pc.0).wrapping_sub(1);
        let end = index.partition_point(|r| r.start <= a);
        // The innermost (last-starting) subprogram range that contains the address.
        let range = *(end.saturating_sub(8)..end).rev().map(|i| &index[i]).find(|r| a < r.end)?;
        let key = (range.uid, range.offset.0);
        if let Some(f) = self.frames.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return f.clone();
        }
        let f = frame::build_frame(
            units,
            &self.layouts,
            index,
            range,
            self.module.id,
            self.module.bias,
        )
        .map(Arc::new);
        self.frames.lock().unwrap_or_else(|e| e.into_inner()).insert(key, f.clone());
        f
    }
}

impl ModuleSymbols {
    /// The type clang recorded for the `new T` whose call returns to `pc`
    /// (`DW_AT_LLVM_alloc_type` on the call site).
    pub fn alloc_site_type(&self, pc: Pc) -> Option<HeapType> {
        let units = self.units().ok().flatten()?;
        let index = self.alloc_sites.get_or_init(|| heaptype::alloc_site_index(units));
        let t = *index.get(&self.module.file_addr(pc.0))?;
        heaptype::heap_type(units, &self.layouts, t, TypeSource::AllocSite)
    }

    /// What the frames (innermost first) of the call returning to `pc` say about the
    /// type allocated through them; see [`Symbolizer::heap_type`](crate::Symbolizer::heap_type).
    pub(crate) fn allocator_frames(&self, pc: Pc) -> FrameVerdict {
        let Some(units) = self.units().ok().flatten() else { return FrameVerdict::Stop };
        let index = self.subprograms.get_or_init(|| frame::subprogram_index(units));
        let a = self.module.file_addr(pc.0).wrapping_sub(1);
        let chain = heaptype::inline_chain(units, index, a);
        if chain.is_empty() {
            return FrameVerdict::Stop;
        }
        let parents = |uid: usize| self.parents_of(units, uid);
        let by_name = |name: &str| {
            let index = self.rust_types.get_or_init(|| heaptype::rust_type_index(units));
            heaptype::heap_type(units, &self.layouts, *index.get(name)?, TypeSource::Allocator)
        };
        for site in chain {
            match heaptype::verdict(units, &self.layouts, &parents, &by_name, site) {
                FrameVerdict::Continue => {}
                v => return v,
            }
        }
        FrameVerdict::Continue
    }

    fn parents_of(&self, units: &Units, uid: usize) -> Arc<Parents> {
        let mut map = self.parents.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(uid).or_insert_with(|| Arc::new(heaptype::parents(units, uid))).clone()
    }

    /// The type the source line of the C or C++ call returning to `pc` allocates
    /// (`new T`, `malloc(n * sizeof(struct T))`, `T *p = malloc(...)`), resolved in
    /// the allocating function's scope; `None` when the source cannot be read or the
    /// line names no single type. See the `srcline` module.
    pub(crate) fn source_line_type(&self, pc: Pc) -> Option<HeapType> {
        let key = self.module.file_addr(pc.0);
        if let Some(t) = self.source_types.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return t.clone();
        }
        let t = self.read_source_line_type(pc);
        self.source_types.lock().unwrap_or_else(|e| e.into_inner()).insert(key, t.clone());
        t
    }

    fn read_source_line_type(&self, pc: Pc) -> Option<HeapType> {
        let units = self.units().ok().flatten()?;
        let index = self.subprograms.get_or_init(|| frame::subprogram_index(units));
        let a = self.module.file_addr(pc.0).wrapping_sub(1);
        let function = *heaptype::inline_chain(units, index, a).first()?;
        if !srcline::is_c_family(units.langs[function.0]) {
            return None;
        }
        let loc = self.frames(pc);
        let frame = loc.frames.first()?;
        let (file, line) = (frame.file.clone()?, frame.line?);
        let lines = self.source(&file)?;
        let text = srcline::statement(&lines, line as usize)?;
        let cands = srcline::candidates(&text);
        let types = self.type_index.get_or_init(|| TypeIndex::build(units));
        let parents = |uid: usize| self.parents_of(units, uid);
        let global = |name: &str| {
            let d = self.data_index();
            d.globals.iter().find(|v| &*v.name == name).and_then(|v| v.ty)
        };
        let cx = srcline::Context {
            units,
            layouts: &self.layouts,
            types,
            parents: &parents,
            global: &global,
            function,
        };
        cx.resolve(&cands)
    }

    /// The lines of a source file, read once.
    fn source(&self, path: &Arc<str>) -> Option<Arc<[String]>> {
        let mut map = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(path.clone())
            .or_insert_with(|| {
                let text = std::fs::read(&**path).ok()?;
                Some(String::from_utf8_lossy(&text).lines().map(str::to_owned).collect())
            })
            .clone()
    }
}

/// Function symbols in runtime addresses, sorted, one per address (global names first),
/// with missing sizes filled in from the next symbol.
fn function_symbols(raw: &[RawSymbol], bias: u64) -> Vec<FunctionSymbol> {
    let mut funcs: Vec<&RawSymbol> =
        raw.iter().filter(|s| s.kind == SymKind::Function && s.addr != 0).collect();
    funcs.sort_by(|a, b| {
        a.addr
            .cmp(&b.addr)
            .then(b.global.cmp(&a.global))
            .then((b.size != 0).cmp(&(a.size != 0)))
            .then(a.name.len().cmp(&b.name.len()))
    });
    funcs.dedup_by(|later, first| later.addr == first.addr);
    let mut out: Vec<FunctionSymbol> = Vec::with_capacity(funcs.len());
    for (i, s) in funcs.iter().enumerate() {
        let size = if s.size != 0 {
            s.size
        } else {
            funcs.get(i + 1).map_or(0, |n| (n.addr - s.addr).min(1 << 20))
        };
        out.push(FunctionSymbol {
            name: demangle(&s.name, None).into(),
            raw_name: s.name.as_str().into(),
            start: Pc(s.addr.wrapping_add(bias)),
            size,
        });
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The recorded modules whose file on disk now has another build-id than the one
/// that ran (rebuilt since the recording): [`ModuleSymbols::load`] does not name their
/// code from that file. Reads only each file's headers and notes. Modules without a
/// recorded build-id, and files that are gone, are not listed.
pub fn changed_modules(modules: &[Module]) -> Vec<Error> {
    modules
        .iter()
        .filter(|m| !m.build_id.is_empty())
        .filter_map(|m| {
            let f = std::fs::File::open(&m.path).ok()?;
            let cache = object::ReadCache::new(f);
            let obj = object::File::parse(&cache).ok()?;
            let found = obj.build_id().ok().flatten()?;
            (found != m.build_id.as_slice()).then(|| Error::ModuleChanged {
                path: PathBuf::from(&m.path),
                recorded: m.build_id_hex(),
                found: hex(found),
            })
        })
        .collect()
}

fn build_id_path(dir: &Path, id: &[u8]) -> Option<PathBuf> {
    if id.len() < 2 {
        return None;
    }
    let h = hex(id);
    Some(dir.join(".build-id").join(&h[..2]).join(format!("{}.debug", &h[2..])))
}

/// Finds and reads a separate debug file with DWARF for the object at `obj_path`.
fn find_debug_file(
    obj_path: &Path,
    build_id: Option<&[u8]>,
    debuglink: Option<(String, u32)>,
    search: &DebugSearch,
) -> Option<(PathBuf, Vec<u8>)> {
    let obj_real = obj_path.canonicalize().ok();
    let mut candidates: Vec<(PathBuf, Option<u32>)> = Vec::new();
    if let Some(id) = build_id {
        for dir in &search.debug_dirs {
            candidates.extend(build_id_path(dir, id).map(|p| (p, None)));
        }
    }
    if let Some((name, crc)) = debuglink {
        let dir = obj_real
            .as_deref()
            .unwrap_or(obj_path)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        candidates.push((dir.join(&name), Some(crc)));
        candidates.push((dir.join(".debug").join(&name), Some(crc)));
        for d in &search.debug_dirs {
            let rel = dir.strip_prefix("/").unwrap_or(&dir);
            candidates.push((d.join(rel).join(&name), Some(crc)));
        }
    }
    for (path, crc) in candidates {
        if obj_real.is_some() && path.canonicalize().ok() == obj_real {
            continue;
        }
        let Ok(data) = std::fs::read(&path) else { continue };
        let Ok(obj) = object::File::parse(&data[..]) else { continue };
        let ident = elf::identity(&obj);
        if !ident.has_dwarf {
            continue;
        }
        let ok = match (build_id, ident.build_id.as_deref(), crc) {
            (Some(want), Some(have), _) => want == have,
            (_, _, Some(crc)) => crc32fast::hash(&data) == crc,
            _ => true,
        };
        drop(obj);
        if ok {
            return Some((path, data));
        }
    }
    None
}

/// Finds and reads the supplementary (dwz) file named by `.gnu_debugaltlink`.
fn find_sup_file(holder: &Path, name: &str, id: &[u8], search: &DebugSearch) -> Option<Vec<u8>> {
    let mut candidates = Vec::new();
    let name = Path::new(name);
    if name.is_absolute() {
        candidates.push(name.to_path_buf());
    } else if let Some(dir) = holder.parent() {
        candidates.push(dir.join(name));
    }
    for d in &search.debug_dirs {
        candidates.extend(build_id_path(d, id));
    }
    candidates.into_iter().find_map(|p| {
        let data = std::fs::read(p).ok()?;
        let obj = object::File::parse(&data[..]).ok()?;
        let matches = obj.build_id().ok().flatten().is_none_or(|b| b == id);
        drop(obj);
        matches.then_some(data)
    })
}

/// Where a compile unit comes from, by its name and directory.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum UnitOrigin {
    /// The program's own code.
    User,
    /// A crate of the memlens runtime (rustc names a unit `SRC/@/CRATE.HASH-cgu.N`).
    Runtime,
    /// Rust's standard library (built in `/rustc/HASH`, its dependencies in `/rust/deps`).
    Toolchain,
    /// A crate from a Cargo registry: the user's, or the runtime's dependencies.
    Registry,
}

impl UnitOrigin {
    /// `rt_dirs`: the directories the memlens runtime's crates were built in.
    fn of(name: &str, dir: &str, rt_dirs: &[&str]) -> UnitOrigin {
        // rustc names a unit `ROOT/@/CGU`
        if name.contains("/@/") && rt_dirs.contains(&dir) {
            UnitOrigin::Runtime
        } else if dir.starts_with("/rustc/") || dir.starts_with("/rust/deps") {
            UnitOrigin::Toolchain
        } else if dir.contains("/registry/src/") || name.contains("/registry/src/") {
            UnitOrigin::Registry
        } else {
            UnitOrigin::User
        }
    }
}

#[cfg(test)]
mod origin_tests {
    use super::UnitOrigin;

    #[test]
    fn units_are_told_apart_by_name_and_directory() {
        let rt = ["/work/main"];
        let of = |n, d| UnitOrigin::of(n, d, &rt);
        // release (codegen unit names) and incremental (hashes) builds of the runtime
        let cgu = "crates/format/src/lib.rs/@/memlens_format.6d1faf4c6985c478-cgu.06";
        assert_eq!(of(cgu, "/work/main"), UnitOrigin::Runtime);
        assert_eq!(
            of("crates/rt/src/lib.rs/@/6sswwq9xd5haw56usa9vu52sy", "/work/main"),
            UnitOrigin::Runtime
        );
        // a C file compiled in the memlens tree is not the runtime
        assert_eq!(of("tests/programs/inc.c", "/work/main"), UnitOrigin::User);
        assert_eq!(
            of("library/std/src/lib.rs/@/std.x-cgu.0", "/rustc/59807616e"),
            UnitOrigin::Toolchain
        );
        let zstd = "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/zstd-sys-2.1.2";
        assert_eq!(of("zstd/lib/common/zstd_common.c", zstd), UnitOrigin::Registry);
        assert_eq!(of("src/main.rs/@/app.1-cgu.0", "/home/u/app"), UnitOrigin::User);
        assert_eq!(of("", ""), UnitOrigin::User);
    }
}
