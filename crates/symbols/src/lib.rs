//! Offline symbolization for memlens traces.
//!
//! A trace records raw addresses: the PC of every load and store (the return address of
//! the instrumentation callback) and the data address it touched. This crate turns them
//! into names, using the ELF symbol tables and DWARF debugging information of the
//! traced program's modules:
//!
//! - **code addresses** become a chain of source frames, innermost inlined function
//!   first, with demangled names (C++ through `cpp_demangle`, Rust through
//!   `rustc-demangle`, without hashes) and `file:line:column`;
//! - **data addresses** inside static variables become a variable name with a member
//!   path, such as `stats.v[3]` or `cfg.limits.max`; thread-local variables are named
//!   by their offset in the module's TLS block, and stack slots through a function's
//!   frame description.
//!
//! Separate debug files are found through the build-id (`/usr/lib/debug/.build-id/…`)
//! and `.gnu_debuglink`; without DWARF, function names come from `.symtab`/`.dynsym`.
//!
//! # Brief overview
//!
//! - [`Symbolizer`] is the entry point: built from the trace's module table, it maps
//!   each address to its module, loads that module's symbols on first use and caches
//!   results per PC. [`Symbolizer::frames`] gives a [`CodeLocation`] (a list of
//!   [`Frame`]s), [`Symbolizer::data_name`] a [`DataName`].
//! - [`ModuleSymbols`] holds one module's symbols. It is what the recorder uses to turn
//!   `--functions`/`--files` globs into [`CodeRange`]s
//!   ([`ModuleSymbols::functions_matching`], [`ModuleSymbols::source_file_ranges`]).
//!   [`ModuleSymbols::from_files`] builds it from bytes without I/O;
//!   [`ModuleSymbols::load`] reads the files, searching [`DebugSearch`] directories.
//! - [`module_from_file`] describes an ELF file as a [`Module`] (segments, build-id).
//! - [`Symbolizer::heap_type`] gives the element type of a heap block from its
//!   allocation site ([`HeapType`]): clang's allocation type, an allocator's template
//!   parameter, or the allocating C/C++ source line (`new T`, `sizeof(struct T)`);
//!   [`HeapType::source`] says which.
//! - [`TypeLayout`] maps an offset inside a typed object to a member path;
//!   [`FunctionFrame`] lists a function's frame-base-relative locals.
//! - [`Glob`] (on `globset`) is the one filter glob; [`CodeFilter`] and
//!   [`ModuleSymbols::select_code`] give `record` and `analyze` one meaning of
//!   `--functions`/`--files`.
//!
//! All addresses are runtime addresses, [`Pc`] for code and [`Addr`] for data; a
//! [`Module`] with bias 0 makes them file addresses. PCs are treated as return
//! addresses everywhere: lookups use `pc − 1`.
//!
//! # Example
//!
//! ```no_run
//! use memlens_symbols::{module_from_file, Addr, Pc, Symbolizer};
//!
//! let module = module_from_file("/path/to/program", 0)?;
//! let symbolizer = Symbolizer::new(&[module]);
//! if let Some(loc) = symbolizer.frames(Pc(0x401136)) {
//!     for frame in &loc.frames {
//!         println!("{frame}"); // e.g. `sum at /src/prog.c:12:9`
//!     }
//! }
//! if let Some(name) = symbolizer.data_name(Addr(0x404040)) {
//!     println!("{name}"); // e.g. `stats.v[3]`
//! }
//! Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod code;
mod data;
mod demangle;
mod dwarf;
mod dyntls;
mod elf;
mod error;
mod frame;
mod glob;
mod heaptype;
mod layout;
mod module;
mod select;
mod srcline;
mod symbolizer;

pub use code::{CodeLocation, CodeRange, Frame, FunctionSymbol};
pub use data::{DataKind, DataName, ThreadLocal};
pub use demangle::demangle_symbol;
pub use dyntls::TlsBlock;
pub use elf::{module_from_elf_bytes, module_from_file, patch_pad, TlsSegment};
pub use error::Error;
pub use frame::{FrameBase, FunctionFrame, LocalPiece, LocalVariable};
pub use glob::{glob_match, path_glob_match, split_glob_list, Glob};
pub use heaptype::{HeapType, TypeSource};
pub use layout::{MemberPath, TypeLayout};
pub use memlens_format::{Addr, Module, Pc, Segment};
pub use module::{changed_modules, DebugSearch, ModuleFiles, ModuleSymbols, StaticVariable};
pub use select::{CodeFilter, CodeSelection};
pub use symbolizer::Symbolizer;

#[cfg(test)]
mod tests {
    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn thread_safe() {
        assert_send_sync::<crate::Symbolizer>();
        assert_send_sync::<crate::ModuleSymbols>();
    }
}
