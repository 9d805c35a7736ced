//! Where the memlens runtime and header live.
//!
//! Built by `cargo build` next to the `memlens` binary: `libmemlens_rt.a` (for C and
//! C++), `libmemlens_rt.rlib` with its dependencies in `deps/` (for Rust), and the
//! header `memlens.h` in the source tree. `MEMLENS_RUNTIME_DIR` overrides the
//! directory of the libraries.

use anyhow::{bail, Result};
use std::path::PathBuf;

/// Paths of the runtime pieces.
pub struct Runtime {
    /// Directory holding the libraries.
    pub dir: PathBuf,
    /// `libmemlens_rt.a`.
    pub staticlib: PathBuf,
    /// Directory of `memlens.h`.
    pub include_dir: PathBuf,
}

impl Runtime {
    /// Finds the runtime or says how to build it.
    pub fn locate() -> Result<Runtime> {
        let dir = match std::env::var_os("MEMLENS_RUNTIME_DIR") {
            Some(d) => PathBuf::from(d),
            None => std::env::current_exe()?
                .parent()
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(".")),
        };
        let staticlib = dir.join("libmemlens_rt.a");
        if !staticlib.is_file() {
            bail!(
                "the memlens runtime {} is missing; build it with `cargo build --release` in the memlens source tree (or set MEMLENS_RUNTIME_DIR)",
                staticlib.display()
            );
        }
        let candidates = [
            dir.join("include"),
            PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../rt/include")),
        ];
        let include_dir = candidates
            .iter()
            .find(|d| d.join("memlens.h").is_file())
            .cloned()
            .unwrap_or_else(|| candidates[1].clone());
        Ok(Runtime { dir, staticlib, include_dir })
    }
}

/// The first `name` in `PATH`, like a shell's lookup.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|c| c.is_file())
}
