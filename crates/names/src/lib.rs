//! Names for data addresses: which variable, field, heap block or mapping each
//! access of a trace touched.
//!
//! DWARF names globals and statics (with member paths like `stats.v[3]`),
//! thread-locals of the executable and of the shared libraries loaded at start-up
//! (through each thread's recorded thread pointer), and stack variables (through the
//! frame pointer recorded at every function entry, and location lists at `-O2`).
//! Heap addresses are named after the element type of their block when its
//! allocation says it (`Node.next`, `Point[3].y`: clang's allocation-site type,
//! `std::allocator<T>`, Rust's `Box<T>`/`Vec<T>`), else after the allocation's call
//! site and the offset in the block. What is left is named after the mapping it
//! falls in.
//!
//! The [`Attributor`] follows each thread's stream (function entries and exits,
//! thread start) and answers [`Attributor::attribute`] for every access with an
//! interned [`LabelId`]; each distinct address is resolved through DWARF once.
//!
//! # Brief overview
//! - [`HeapIndex`]: every block of the trace, built in a first pass.
//! - [`Attributor`]: per-access attribution, then [`Attributor::label`] to read names.
//! - [`Label`]: kind, variable (`base`) and member path; [`Label::display`].
//!
//! # Example
//! ```
//! use memlens_format::{Addr, Pc, ThreadId};
//! use memlens_names::{Attributor, HeapIndex, Kind};
//! use memlens_symbols::Symbolizer;
//!
//! let sym = Symbolizer::new(&[]);
//! let mut heap = HeapIndex::default();
//! heap.add_block(ThreadId(0), 0, Addr(0x1000), 64, Pc(0x401234), Vec::new());
//! heap.finish();
//! let mut a = Attributor::new(&sym, heap, None);
//! let id = a.attribute(ThreadId(0), 1, Pc(0x401500), Addr(0x1010));
//! assert_eq!(a.label(id).kind, Kind::Heap);
//! assert_eq!(a.label(id).path, "+16");
//! ```
#![deny(missing_docs)]

mod attributor;
mod cache;
mod code;
mod counts;
mod heap;
mod label;
mod maps;
mod par;
mod pre;
mod resolve;
mod serial;
mod tables;
mod vars;

pub use attributor::Attributor;
pub use code::{is_toolchain_source, CodeName, Names};
pub use counts::{Attribution, LabelCounts, SiteNamer};
pub use heap::{Block, HeapIndex};
pub use maps::{Mapping, Maps};
/// Allocation wrappers (`--alloc-fn`; see [`Names::set_alloc_fns`]).
pub use memlens_analysis::heap::AllocFns;
pub use par::attribute_trace;
pub use serial::{attribute_trace_auto, attribute_trace_serial, Naming};
pub use vars::{
    alloc_fn_hint, attribute_all, attributor, coverage, heap_index, variable_rows, AccessNames,
    CodeNamer, TraceNamer, VarCounts, VarReport,
};

pub(crate) use label::{
    function_start, global_label, heap_base, heap_label, heap_single, mapping_label, stack_label,
    static_tls_layout, tls_label, HeapShape, OpenFrame, ThreadState,
};
pub(crate) use tables::{
    prefetch, BlockLabels, DenseTable, Interner, ModulePages, BIG_BLOCK, NOT_GLOBAL, UNSEEN,
};

use std::collections::HashMap;
use std::sync::Arc;

/// Why a trace could not be attributed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] memlens_format::Error),
    /// `--alloc-fn` named nothing or was malformed.
    #[error("{0}")]
    AllocFn(String),
}

/// A hash map with a fast, non-cryptographic hasher: attribution looks up every
/// access in a few of these.
pub type FastMap<K, V> = HashMap<K, V, rustc_hash::FxBuildHasher>;

/// What kind of storage an address is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A global or static variable.
    Global,
    /// A thread-local variable.
    ThreadLocal,
    /// A local variable or parameter of a stack frame.
    Stack,
    /// A heap block.
    Heap,
    /// No variable: named after the mapping it falls in (a thread's stack, a
    /// module's data, anonymous memory).
    Mapping,
    /// Nothing known.
    Unknown,
}

impl Kind {
    /// Lowercase name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Global => "global",
            Kind::ThreadLocal => "tls",
            Kind::Stack => "stack",
            Kind::Heap => "heap",
            Kind::Mapping => "mapping",
            Kind::Unknown => "unknown",
        }
    }

    /// Whether this is a real name (a variable or a heap block), not a fallback.
    pub fn is_named(self) -> bool {
        !matches!(self, Kind::Mapping | Kind::Unknown)
    }
}

/// An interned label.
pub type LabelId = u32;

/// A name for a data address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Label {
    /// Storage kind.
    pub kind: Kind,
    /// The variable (`stats`, `fill::buf`), heap site (`heap(counts.c:37)`) or mapping.
    pub base: Arc<str>,
    /// Member/index path or offset inside it (`.v[3]`, `+16`), may be empty.
    pub path: String,
    /// For a heap block whose element type is known (and which is then named after
    /// the type: `Node.next`, `Point[3].y`), its allocation site (`heap(x.cpp:9 main)`).
    pub site: Option<Arc<str>>,
}

impl Label {
    /// `base` + `path`.
    pub fn display(&self) -> String {
        format!("{}{}", self.base, self.path)
    }

    /// Rolls a path up to its first `depth` components (`.v[3].x` at depth 1 → `.v`);
    /// depth 0 is the whole variable.
    pub fn rolled_up(&self, depth: usize) -> String {
        let mut out = String::new();
        let mut n = 0;
        for (i, c) in self.path.char_indices() {
            if (c == '.' || c == '[' || c == '+') && i > 0 {
                n += 1;
            }
            if n >= depth || (depth == 0) {
                break;
            }
            out.push(c);
        }
        if depth == 0 {
            return self.base.to_string();
        }
        format!("{}{}", self.base, out)
    }
}

/// How finely accesses are told apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Granularity {
    /// Every field and array element its own label (`stats.v[3]`, `Point[5].y`).
    #[default]
    Field,
    /// Whole variables (`stats`, `Point`): a label has no path. Much cheaper on
    /// large arrays, which have a label per element otherwise.
    Variable,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollups() {
        let l =
            Label { kind: Kind::Global, base: "stats".into(), path: ".v[3].x".into(), site: None };
        assert_eq!(l.display(), "stats.v[3].x");
        assert_eq!(l.rolled_up(0), "stats");
        assert_eq!(l.rolled_up(1), "stats.v");
        assert_eq!(l.rolled_up(2), "stats.v[3]");
        assert_eq!(l.rolled_up(9), "stats.v[3].x");
    }
}
