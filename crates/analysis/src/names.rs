//! Naming raw addresses in results: the [`Namer`] the caller supplies.
//!
//! Kernels keep raw [`Pc`]s and [`Addr`]s. Rendering asks a `Namer` once per distinct
//! address that survives ranking, so a symboliser (DWARF, ELF symbols, heap blocks)
//! can sit behind this trait without the kernels knowing about it. [`NoNames`] prints
//! hexadecimal addresses.

use memlens_format::{Addr, Pc};

/// Where a code address comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CodeName {
    /// Function name (the address in hex when unknown).
    pub function: String,
    /// Source file (empty when unknown).
    pub file: String,
    /// 1-based source line (0 when unknown).
    pub line: u32,
}

impl CodeName {
    /// `file:line`, or the function when the line is unknown.
    pub fn location(&self) -> String {
        if self.file.is_empty() || self.line == 0 {
            self.function.clone()
        } else {
            format!("{}:{}", self.file, self.line)
        }
    }
}

/// What a data address holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DataName {
    /// The full name of the accessed element: `stats.v[3]`, `cfg.limits.max`.
    pub name: String,
    /// The variable it belongs to (the roll-up key): `stats`, `cfg`; for heap data
    /// the allocation site.
    pub variable: String,
}

/// Names code and data addresses for rendering.
pub trait Namer {
    /// Names a code address.
    fn code(&self, pc: Pc) -> CodeName;
    /// Names a data address, if anything is known about it.
    fn data(&self, addr: Addr) -> Option<DataName>;
}

/// A [`Namer`] that knows nothing: code addresses print as hex function names, data
/// addresses stay unnamed (renderers then print them in hex).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoNames;

impl Namer for NoNames {
    fn code(&self, pc: Pc) -> CodeName {
        CodeName { function: format!("{pc}"), file: String::new(), line: 0 }
    }

    fn data(&self, _addr: Addr) -> Option<DataName> {
        None
    }
}

impl<N: Namer + ?Sized> Namer for &N {
    fn code(&self, pc: Pc) -> CodeName {
        (**self).code(pc)
    }

    fn data(&self, addr: Addr) -> Option<DataName> {
        (**self).data(addr)
    }
}

/// The variable name of an address: the namer's roll-up key, or the hex address.
pub(crate) fn variable_of(namer: &dyn Namer, addr: Addr) -> String {
    namer.data(addr).map_or_else(|| format!("{addr}"), |d| d.variable)
}

/// The element name of an address: the namer's full name, or the hex address.
pub(crate) fn name_of(namer: &dyn Namer, addr: Addr) -> String {
    namer.data(addr).map_or_else(|| format!("{addr}"), |d| d.name)
}
