//! Code-address types: inlined frame chains, function symbols and code ranges.

use std::fmt;
use std::sync::Arc;

use memlens_format::Pc;

/// One source-level frame at a code address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Demangled function name (C++ with parameter types, Rust without the hash).
    pub function: Option<Arc<str>>,
    /// Full source path.
    pub file: Option<Arc<str>>,
    /// 1-based source line.
    pub line: Option<u32>,
    /// 1-based source column.
    pub column: Option<u32>,
}

impl fmt::Display for Frame {
    /// `function at file:line:column`, leaving out what is unknown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.function.as_deref().unwrap_or("??"))?;
        if let Some(file) = &self.file {
            write!(f, " at {file}")?;
            if let Some(line) = self.line {
                write!(f, ":{line}")?;
                if let Some(col) = self.column {
                    write!(f, ":{col}")?;
                }
            }
        }
        Ok(())
    }
}

/// Everything known about a code address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeLocation {
    /// Id of the module holding the address.
    pub module_id: u32,
    /// Path of that module.
    pub module_path: Arc<str>,
    /// The frame chain, innermost (most deeply inlined) first; the last frame is the
    /// out-of-line function. Empty when nothing is known beyond the module. Without
    /// DWARF this is a single frame holding the ELF symbol's name.
    pub frames: Vec<Frame>,
}

impl CodeLocation {
    /// The innermost frame.
    pub fn innermost(&self) -> Option<&Frame> {
        self.frames.first()
    }

    /// The out-of-line function the code belongs to.
    pub fn outermost(&self) -> Option<&Frame> {
        self.frames.last()
    }
}

/// A function symbol from the ELF symbol table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSymbol {
    /// Demangled name.
    pub name: Arc<str>,
    /// Name as it appears in the symbol table.
    pub raw_name: Arc<str>,
    /// Runtime address of the first instruction.
    pub start: Pc,
    /// Size in bytes (for symbols without `st_size`, the distance to the next symbol).
    pub size: u64,
}

impl FunctionSymbol {
    /// The function's code range.
    pub fn range(&self) -> CodeRange {
        CodeRange { start: self.start, end: Pc(self.start.0 + self.size) }
    }
}

/// A half-open range `[start, end)` of runtime code addresses.
///
/// Trace PCs are return addresses, which point just *after* the call instruction; use
/// [`contains_return_address`](Self::contains_return_address) to test them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CodeRange {
    /// First address in the range.
    pub start: Pc,
    /// First address after the range.
    pub end: Pc,
}

impl CodeRange {
    /// Whether the call instruction whose return address is `pc` lies in the range,
    /// i.e. `start <= pc - 1 < end`.
    pub fn contains_return_address(&self, pc: Pc) -> bool {
        let a = pc.0.wrapping_sub(1);
        self.start.0 <= a && a < self.end.0
    }
}

/// Sorts ranges and merges overlapping or adjacent ones.
pub(crate) fn merge_ranges(mut ranges: Vec<CodeRange>) -> Vec<CodeRange> {
    ranges.sort();
    let mut out: Vec<CodeRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn return_address_containment() {
        let r = CodeRange { start: Pc(0x100), end: Pc(0x200) };
        assert!(!r.contains_return_address(Pc(0x100)));
        assert!(r.contains_return_address(Pc(0x101)));
        assert!(r.contains_return_address(Pc(0x200)));
        assert!(!r.contains_return_address(Pc(0x201)));
    }

    #[test]
    fn merging() {
        let r = |a, b| CodeRange { start: Pc(a), end: Pc(b) };
        assert_eq!(
            merge_ranges(vec![r(10, 20), r(0, 5), r(5, 8), r(15, 30), r(40, 41)]),
            vec![r(0, 8), r(10, 30), r(40, 41)]
        );
    }
}
