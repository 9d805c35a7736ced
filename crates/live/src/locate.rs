//! Probe locations: a function name, `FILE:LINE`, `0xADDR` or `/REGEX/`, resolved
//! through the binary's DWARF (crates/symbols) to ELF virtual addresses and then,
//! through the program headers, to the file offsets uprobes take.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use memlens_symbols::{path_glob_match, Addr, DebugSearch, ModuleSymbols, Pc};
use object::{Object as _, ObjectSegment as _};

use crate::regex::Regex;
use crate::{Error, Result};

/// One instruction to probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Point {
    /// ELF virtual address.
    pub vaddr: u64,
    /// Offset of the instruction in the file (what the uprobe PMU takes).
    pub offset: u64,
    /// What the user named: a function or `file:line`.
    pub label: String,
}

/// A watched variable or member.
#[derive(Clone, Debug)]
pub struct Variable {
    /// As the user named it.
    pub name: String,
    /// ELF address of its first byte.
    pub vaddr: u64,
    /// Bytes.
    pub size: u64,
    /// DWARF type name, when known.
    pub ty: Option<String>,
}

/// The target's executable with its symbols.
pub struct Binary {
    path: PathBuf,
    cpath: CString,
    symbols: ModuleSymbols,
    /// Executable PT_LOAD segments: (vaddr, file size, file offset).
    segments: Vec<(u64, u64, u64)>,
}

impl Binary {
    /// Reads `path`; refuses a binary without DWARF (stripped), since locations are
    /// resolved from it.
    pub fn open(path: &Path) -> Result<Binary> {
        let data = std::fs::read(path)
            .map_err(|e| Error::Target(format!("cannot read {}: {e}", path.display())))?;
        let obj = object::File::parse(&data[..]).map_err(|e| {
            Error::Target(format!("{} is not an ELF executable: {e}", path.display()))
        })?;
        let mut segments = Vec::new();
        for s in obj.segments() {
            let (off, size) = s.file_range();
            if let object::SegmentFlags::Elf { p_flags } = s.flags() {
                if p_flags & object::elf::PF_X == 0 {
                    continue;
                }
            }
            segments.push((s.address(), size, off));
        }
        let module = memlens_symbols::module_from_file(path, 0)
            .map_err(|e| Error::Target(format!("cannot read {}: {e}", path.display())))?;
        let symbols = ModuleSymbols::load(&module, &DebugSearch::default()).map_err(|e| {
            Error::Target(format!("cannot read symbols of {}: {e}", path.display()))
        })?;
        if !symbols.has_dwarf() {
            return Err(Error::Location(format!(
                "{} has no debug information (stripped?): rebuild it with -g or install its debug file",
                path.display()
            )));
        }
        let cpath = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| Error::Target(format!("{}: a path with a NUL byte", path.display())))?;
        Ok(Binary { path: path.to_owned(), cpath, symbols, segments })
    }

    /// The executable's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn cpath(&self) -> &CString {
        &self.cpath
    }

    fn offset_of(&self, vaddr: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|&&(a, size, _)| vaddr >= a && vaddr - a < size)
            .map(|&(a, _, off)| off + (vaddr - a))
    }

    fn point(&self, vaddr: u64, label: String) -> Result<Point> {
        let offset = self.offset_of(vaddr).ok_or_else(|| {
            Error::Location(format!(
                "{label}: address {vaddr:#x} is not in an executable segment of {}",
                self.path.display()
            ))
        })?;
        Ok(Point { vaddr, offset, label })
    }

    /// Resolves one location. A function gives its entry (DW_AT_low_pc, the symbol's
    /// address), `FILE:LINE` the addresses where execution enters the line, `0xADDR`
    /// that address, `/REGEX/` the entry of every matching function.
    pub fn resolve(&self, loc: &str) -> Result<Vec<Point>> {
        if loc.is_empty() {
            return Err(Error::Spec(
                "a probe needs a location: a function, FILE:LINE, 0xADDR or /REGEX/".into(),
            ));
        }
        if loc.len() >= 2 && loc.starts_with('/') && loc.ends_with('/') {
            let re = Regex::new(&loc[1..loc.len() - 1])
                .map_err(|e| Error::Spec(format!("{loc}: bad regular expression: {e}")))?;
            let mut out: Vec<Point> = Vec::new();
            for f in self.symbols.functions() {
                if f.size > 0 && re.is_match(&f.name) && !out.iter().any(|p| p.vaddr == f.start.0) {
                    out.push(self.point(f.start.0, f.name.to_string())?);
                }
            }
            if out.is_empty() {
                return Err(Error::Location(format!(
                    "{loc}: no function of {} matches",
                    self.path.display()
                )));
            }
            return Ok(out);
        }
        if let Some(hex) = loc.strip_prefix("0x") {
            let a = u64::from_str_radix(hex, 16)
                .map_err(|_| Error::Spec(format!("{loc}: not a hexadecimal address")))?;
            let label = match self.symbols.function_symbol(Pc(a + 1)) {
                Some(f) => format!("{}+{:#x}", f.name, a - f.start.0),
                None => loc.to_owned(),
            };
            return Ok(vec![self.point(a, label)?]);
        }
        if let Some((file, line)) = loc.rsplit_once(':') {
            if let Ok(line) = line.parse::<u64>() {
                return self.resolve_line(file, line);
            }
        }
        let mut out: Vec<Point> = Vec::new();
        for f in self.symbols.functions() {
            if (&*f.name == loc || &*f.raw_name == loc) && !out.iter().any(|p| p.vaddr == f.start.0)
            {
                out.push(self.point(f.start.0, f.name.to_string())?);
            }
        }
        if out.is_empty() {
            return Err(Error::Location(format!(
                "{loc}: no function of that name in {} (see `nm`; /REGEX/ matches several)",
                self.path.display()
            )));
        }
        Ok(out)
    }

    fn resolve_line(&self, file: &str, line: u64) -> Result<Vec<Point>> {
        let err = |e: memlens_symbols::Error| Error::Location(format!("{file}:{line}: {e}"));
        let addrs = self.symbols.line_addresses(file, line).map_err(err)?;
        if addrs.is_empty() {
            let known = self.symbols.source_files().map_err(err)?;
            if !known.iter().any(|p| path_glob_match(file, p)) {
                return Err(Error::Location(format!(
                    "{file}:{line}: no source file {file} in the debug information of {}",
                    self.path.display()
                )));
            }
            return Err(Error::Location(format!(
                "{file}:{line}: no code at this line (a comment, a declaration or optimised away): pick a line with a statement"
            )));
        }
        let label = format!("{file}:{line}");
        addrs.into_iter().map(|a| self.point(a.0, label.clone())).collect()
    }

    /// The pad address when `p` is the entry of a function with a NOP pad (built
    /// by memlens cc), for in-process probes.
    pub fn pad_at(&self, p: &Point) -> Option<u64> {
        use std::io::{Read, Seek, SeekFrom};
        let f = self.symbols.function_symbol(Pc(p.vaddr + 1))?;
        if f.start.0 != p.vaddr {
            return None;
        }
        let mut code = [0u8; 16];
        let mut file = std::fs::File::open(&self.path).ok()?;
        file.seek(SeekFrom::Start(p.offset)).ok()?;
        file.read_exact(&mut code).ok()?;
        memlens_symbols::patch_pad(&code).map(|skip| p.vaddr + skip)
    }

    /// Whether the program was built by memlens cc (it holds the memlens runtime,
    /// which can take in-process probes).
    pub fn memlens_built(&self) -> bool {
        self.symbols.functions().iter().any(|f| &*f.name == "memlens_register_thread")
    }

    /// Every source file the DWARF names but the memlens runtime's and the Rust
    /// standard library's (the only files the GUI shows).
    pub fn source_files(&self) -> Vec<String> {
        self.symbols.user_source_files().unwrap_or_default()
    }

    /// The lines of `file` (a name from [`Binary::source_files`]) that have code, each
    /// with the function holding its first address.
    pub fn code_lines(&self, file: &str) -> Vec<(u64, Option<String>)> {
        let lines = self.symbols.code_lines(file).unwrap_or_default();
        lines.into_iter().map(|(l, pc)| (l, self.function_at(pc.0))).collect()
    }

    /// The source file and line of the instruction at `vaddr`.
    pub fn line_of(&self, vaddr: u64) -> Option<(String, u64)> {
        // frames() looks up a return address, one byte before.
        let loc = self.symbols.frames(Pc(vaddr + 1));
        let f = loc.frames.first()?;
        Some((f.file.as_deref()?.to_owned(), u64::from(f.line?)))
    }

    /// `FILE:LINE FUNCTION` of the call that returns to `ret` (an ELF address), as
    /// `report` names an allocation site (crates/names: the innermost inlined frame
    /// outside the toolchain's own sources, so a `std::vector`'s growth is charged to
    /// the user's line); `None` outside the executable's code.
    pub fn call_site(&self, ret: u64) -> Option<String> {
        self.call_site_at(ret).map(|(text, _)| text)
    }

    /// [`Binary::call_site`]'s name, with the `(FILE, LINE)` it names when known (the
    /// GUI links a table row to that line).
    pub fn call_site_at(&self, ret: u64) -> Option<(String, Option<(String, u64)>)> {
        self.offset_of(ret.checked_sub(1)?)?;
        let func = self.function_at(ret.wrapping_sub(2));
        let loc = self.symbols.frames(Pc(ret));
        let user = |f: &&memlens_symbols::Frame| {
            f.file.as_deref().is_some_and(|p| !memlens_names::is_toolchain_source(p))
        };
        let f = loc.frames.iter().find(user).or(loc.frames.first());
        let line = f.and_then(|f| Some((f.file.as_deref()?.to_owned(), u64::from(f.line?))));
        let at = match &line {
            Some((file, line)) => format!("{file}:{line}"),
            None => format!("{ret:#x}"),
        };
        let func = f.and_then(|f| f.function.as_deref().map(str::to_owned)).or(func);
        let text = match func {
            Some(func) => format!("{at} {func}"),
            None => at,
        };
        Some((text, line))
    }

    /// A global variable or a member of one (`cfg`, `cfg.limit`, `v[3]`, named as
    /// `report --by variable` names them): its ELF address, size in bytes and the
    /// DWARF type name of the member when known.
    pub fn variable(&self, spec: &str) -> Result<Variable> {
        let base = spec.split(['.', '[']).next().unwrap_or(spec);
        let vars: Vec<_> =
            self.symbols.static_variables().into_iter().filter(|v| &*v.name == base).collect();
        let v = match vars.as_slice() {
            [v] => v,
            [] => {
                return Err(Error::Location(format!(
                    "{spec}: no global variable {base} in {} (a static or global; locals cannot be watched)",
                    self.path.display()
                )))
            }
            _ => {
                return Err(Error::Location(format!(
                    "{spec}: {} global variables are named {base} (file-local statics): rename one",
                    vars.len()
                )))
            }
        };
        let start = v.start.0;
        if v.size == 0 {
            return Err(Error::Location(format!(
                "{spec}: the size of {base} is unknown (no DWARF type)"
            )));
        }
        // The member's bytes: the offsets whose name is the member or lies inside it,
        // as the trace naming says (one implementation of the layout walk).
        const SCAN: u64 = 1 << 16;
        let inside = |name: &str| {
            name == spec || name.strip_prefix(spec).is_some_and(|r| r.starts_with(['.', '[', '+']))
        };
        let (mut lo, mut hi, mut leaf) = (None, 0, None);
        if spec == base {
            (lo, hi) = (Some(0), v.size);
            leaf = self.symbols.data_name(Addr(start)).filter(|d| d.path.is_empty());
        } else {
            if v.size > SCAN {
                return Err(Error::Location(format!(
                    "{spec}: {base} is larger than 64 KiB: watch the whole variable"
                )));
            }
            for off in 0..v.size {
                let Some(d) = self.symbols.data_name(Addr(start + off)) else { continue };
                let name = d.display();
                if inside(&name) {
                    if lo.is_none() {
                        lo = Some(off);
                        // a scalar member's type (an array's first element's is not its)
                        leaf = (name == spec).then_some(d);
                    }
                    hi = off + 1;
                }
            }
        }
        let lo = lo.ok_or_else(|| {
            Error::Location(format!(
                "{spec}: {base} has no member {} (see `memlens report --by variable --group-by field`)",
                &spec[base.len()..]
            ))
        })?;
        Ok(Variable {
            name: spec.to_owned(),
            vaddr: start + lo,
            size: hi - lo,
            ty: leaf.and_then(|d| d.leaf_type.map(|t| t.to_string())),
        })
    }

    /// The function containing `vaddr`, for display.
    pub fn function_at(&self, vaddr: u64) -> Option<String> {
        self.symbols.function_symbol(Pc(vaddr + 1)).map(|f| f.name.to_string())
    }
}
