//! Building an index in place: into a fresh sibling directory of ours, moved over
//! `TRACE.mlview/` when complete, so nothing planted there is written through.

use crate::index::BuildOptions;
use crate::Error;
use memlens_analysis::Namer;
use memlens_format::TraceReader;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Builds the index of `r` into `dir` (replacing an older index there).
/// `progress(done, total)` gets event counts.
pub fn build(
    r: &TraceReader,
    trace: &Path,
    dir: &Path,
    namer: &dyn Namer,
    opts: BuildOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Value, Error> {
    // Built in a fresh directory of ours and moved into place: a link planted at
    // `dir` or inside it is never written through.
    if let Some(why) = crate::not_a_real_dir(dir) {
        return Err(Error::Io(why));
    }
    let tmp = fresh_sibling_dir(dir)?;
    let meta = match crate::index::build_in(r, trace, &tmp, namer, opts, progress) {
        Ok(m) => m,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    // remove_dir_all removes links inside, never what they point to
    let replaced = match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => std::fs::rename(&tmp, dir),
    };
    if let Err(e) = replaced {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(Error::Io(format!("cannot replace the index {}: {e}", dir.display())));
    }
    Ok(meta)
}

/// Creates `<dir>.tmp-XXXXXXXX` (random, created exclusively).
fn fresh_sibling_dir(dir: &Path) -> Result<PathBuf, Error> {
    let mut last = None;
    for _ in 0..16 {
        let mut b = [0u8; 4];
        getrandom::fill(&mut b).map_err(|e| Error::Io(format!("no random numbers: {e}")))?;
        let mut name = dir.as_os_str().to_owned();
        name.push(format!(".tmp-{:08x}", u32::from_le_bytes(b)));
        let p = PathBuf::from(name);
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => {
                return Err(Error::Io(format!("cannot create {}: {e}", p.display())));
            }
        }
    }
    Err(Error::Io(format!("cannot create a directory next to {}: {last:?}", dir.display())))
}
