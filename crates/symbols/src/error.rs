//! The crate's error type.

use std::path::PathBuf;
use std::sync::Arc;

/// Everything that can go wrong while loading or reading a module's symbols.
///
/// Lookups such as [`Symbolizer::frames`](crate::Symbolizer::frames) never fail: a module
/// that cannot be loaded simply yields no names. The errors surface through the loading
/// functions ([`module_from_file`](crate::module_from_file),
/// [`ModuleSymbols::load`](crate::ModuleSymbols::load),
/// [`Symbolizer::module_symbols`](crate::Symbolizer::module_symbols)).
///
/// The type is `Clone` so that a module's load failure can be cached and reported again.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read.
    #[error("cannot read {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// A file is not a well-formed ELF object.
    #[error("cannot parse elf file {}", path.display())]
    Object {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: object::Error,
    },
    /// A file's DWARF debugging information is malformed.
    #[error("malformed dwarf in {}", path.display())]
    Dwarf {
        /// The file holding the DWARF sections.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: gimli::Error,
    },
    /// Neither the module's file nor a separate debug file for it was found.
    #[error("no file found for module {}", path.display())]
    ModuleNotFound {
        /// The module's path as recorded.
        path: PathBuf,
    },
    /// The module's file was rebuilt after the trace was recorded: its build-id is
    /// not the one that ran, so its addresses would be named from another binary
    /// (and no debug file with the recorded build-id was found).
    #[error("{} was rebuilt after the trace was recorded (build-id {found}, recorded {recorded})", path.display())]
    ModuleChanged {
        /// The module's path as recorded.
        path: PathBuf,
        /// The build-id in the trace (hex).
        recorded: String,
        /// The build-id of the file now at that path (hex).
        found: String,
    },
    /// No module with this id was given to the symbolizer.
    #[error("unknown module id {0}")]
    UnknownModule(u32),
    /// A filter glob is malformed.
    #[error("bad glob '{pattern}': {reason}; write `*`, `?`, `[abc]`, `{{a,b}}`, and `\\[` for a literal `[`")]
    Glob {
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source: Arc::new(source) }
    }
}
