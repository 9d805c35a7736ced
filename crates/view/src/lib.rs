//! The memlens viewer: a multi-resolution index of a trace, and a local web app
//! that shows the memory map over time beside a flame chart, a source browser and
//! tables.
//!
//! [`build`] makes one merged pass over a trace and writes an index directory next
//! to it ([`index_dir`]): the working-set map (ExpertMemer's scheme: a cache line
//! enters in address order when first touched, ages as other lines enter, leaves
//! when its age runs out) as tiles of rows × time buckets at several resolutions,
//! flame-chart spans per duration class, per-source-line metrics and the analysis
//! tables. [`Index::open`] reads it back with bounded memory (tiles are read from
//! disk per request) and [`serve`] runs the web app on 127.0.0.1 behind a random
//! token. Time is the index of a memory operation in the merged global order.
//!
//! # Example
//! ```no_run
//! use memlens_view::{build, index_dir, BuildOptions, Index, ServeOptions};
//! let trace = std::path::Path::new("memlens.trace");
//! let r = memlens_format::TraceReader::open(trace)?;
//! let dir = index_dir(trace);
//! build(&r, trace, &dir, &memlens_analysis::NoNames, BuildOptions::default(), &mut |_, _| {})?;
//! let index = Index::open(&dir)?;
//! memlens_view::serve(index, ServeOptions::default(), |url| println!("{url}"))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod diff;
mod emit;
mod flame;
mod fx;
mod guard;
mod index;
mod lanes;
mod linestate;
mod live;
mod place;
mod profile;
mod rangetree;
mod serve;
mod sparse;
mod store;
mod treediff;
mod vars;

pub use diff::{
    serve_diff, Cost, Diff, DiffRow, DiffTable, DiffTotals, HeapCost, HeapRow, IndexParts,
};
pub use index::{annotation_path, build, BuildOptions, DEFAULT_SLACK};
pub use live::{serve_live, LiveBackend};
pub use place::{clean, size_of_dir};
pub use serve::{serve, ServeOptions};
pub use store::{Index, PcWindow, TileFields, TileQuery, WindowSums};

use std::path::{Path, PathBuf};

/// Bumped whenever the index layout changes; older indexes are rebuilt.
pub const INDEX_VERSION: u32 = 6;
/// Bytes per map cell in `cellsN.bin` and in tile responses.
pub const CELL_BYTES: usize = 32;
/// Bytes per flame span in `spansN.bin`.
pub const SPAN_BYTES: usize = 24;
/// Bytes per record in `windowN.bin`: `pc u32, loads u32, stores u32, shared u32,
/// misses u32, mem u32, bytes u64` (what one code address did in one bucket).
pub const WINDOW_BYTES: usize = 32;

/// Why the viewer could not build, read or serve an index.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The trace could not be analysed.
    #[error(transparent)]
    Analysis(#[from] memlens_analysis::Error),
    /// An index file could not be read or written.
    #[error("{0}")]
    Io(String),
    /// The index is damaged or from another version.
    #[error("{0}")]
    BadIndex(String),
    /// Invalid options.
    #[error("{0}")]
    Config(String),
}

/// The index directory of a trace: `TRACE.mlview/`.
pub fn index_dir(trace: &Path) -> PathBuf {
    let mut s = trace.as_os_str().to_owned();
    s.push(".mlview");
    s.into()
}

/// Why `dir` cannot be an index directory (a link, or not a directory), if it
/// exists and cannot.
pub(crate) fn not_a_real_dir(dir: &Path) -> Option<String> {
    let m = std::fs::symlink_metadata(dir).ok()?;
    if m.file_type().is_symlink() {
        return Some(format!(
            "the index directory {} is a symbolic link, which memlens neither reads nor writes through; remove it",
            dir.display()
        ));
    }
    (!m.is_dir()).then(|| {
        format!(
            "{} is not a directory; remove it to let memlens build the index there",
            dir.display()
        )
    })
}

/// The `--alloc-fn` globs the index in `dir` was built with (none when it has no
/// `meta.json` or was built without).
pub fn alloc_fn_globs(dir: &Path) -> Vec<String> {
    std::fs::read(dir.join("meta.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|m| serde_json::from_value(m["alloc_fn"].clone()).ok())
        .unwrap_or_default()
}

/// Whether `dir` holds a complete index of this version that is newer than the
/// trace (and than its cachesim annotation, if any).
pub fn is_fresh(trace: &Path, dir: &Path) -> bool {
    if not_a_real_dir(dir).is_some() {
        return false;
    }
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(meta_time) = mtime(&dir.join("meta.json")) else { return false };
    let newer = |p: &Path| mtime(p).is_some_and(|t| t > meta_time);
    if newer(trace) || newer(&annotation_path(trace)) {
        return false;
    }
    std::fs::read(dir.join("meta.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .is_some_and(|m| m["version"] == INDEX_VERSION)
}
