//! The LLVM pass plugin that `memlens cc` loads into clang.
//!
//! clang's ThreadSanitizer pass, which memlens uses for plain accesses, atomics,
//! memory intrinsics and function entry/exit, records loads and stores of 1, 2, 4,
//! 8 and 16 bytes only and skips constant data and masked or gathered accesses.
//! The plugin (`llvm/memlens_pass.cpp`, built by `build.rs` against the
//! `llvm-22-dev` headers and embedded in this crate) instruments exactly what TSan
//! leaves out, and versions simple innermost loops so that they are recorded as
//! runs (the runtime's `loops.rs`). [`install`] writes it where clang can load it:
//!
//! ```no_run
//! if let Some(so) = memlens_pass::install(std::path::Path::new("/tmp/memlens-cache")).unwrap() {
//!     println!("clang -fpass-plugin={}", so.display());
//! }
//! ```

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The plugin, empty when memlens was built without LLVM's headers.
static PLUGIN: &[u8] = include_bytes!(env!("MEMLENS_PASS_SO"));

/// The LLVM major version the plugin was built for (0: not built).
pub const LLVM_MAJOR: u32 = parse_u32(env!("MEMLENS_PASS_LLVM_MAJOR"));

const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut v = 0u32;
    while i < b.len() {
        v = v * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    v
}

/// Why the plugin could not be written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory could not be created.
    #[error("cannot write the memlens LLVM pass plugin into {path}: {source}")]
    Write {
        /// The path tried.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

/// Whether this build of memlens carries the plugin.
pub fn available() -> bool {
    !PLUGIN.is_empty()
}

fn fnv(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Writes the plugin into `dir` (created 0700 if missing) under a name that
/// carries its hash, unless it is there already; returns its path, or `None`
/// when this build has no plugin. Safe under parallel builds: the file is written
/// under a fresh private name and renamed into place.
pub fn install(dir: &Path) -> Result<Option<PathBuf>, Error> {
    if !available() {
        return Ok(None);
    }
    let path = dir.join(format!("libmemlens_pass-{:016x}.so", fnv(PLUGIN)));
    if std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() == PLUGIN.len() as u64) {
        return Ok(Some(path));
    }
    let err = |p: &Path| {
        let p = p.to_path_buf();
        move |source| Error::Write { path: p, source }
    };
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(err(dir))?;
    let tmp = dir.join(format!(
        ".libmemlens_pass-{}-{:x}.tmp",
        std::process::id(),
        fnv(format!("{:?}", std::time::SystemTime::now()).as_bytes())
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(err(&tmp))?;
    let written = f.write_all(PLUGIN).and_then(|_| f.sync_all());
    drop(f);
    if let Err(e) = written.and_then(|_| std::fs::rename(&tmp, &path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::Write { path, source: e });
    }
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installs_once_under_its_hash() {
        let dir = std::env::temp_dir().join(format!("memlens-pass-test-{}", std::process::id()));
        let a = install(&dir).unwrap();
        let b = install(&dir).unwrap();
        assert_eq!(a, b);
        if let Some(p) = a {
            assert_eq!(std::fs::read(&p).unwrap(), PLUGIN);
            assert_ne!(LLVM_MAJOR, 0, "a plugin was embedded, so its LLVM version is known");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
