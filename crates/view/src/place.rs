//! Building an index in place: into a fresh sibling directory of ours, moved over
//! `TRACE.mlview/` when complete, so nothing planted there is written through.

use crate::Error;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Runs `write` on a fresh sibling directory of `dir` and, when it succeeds, moves
/// that over `dir` (replacing an older one); on failure removes it.
pub(crate) fn replace_dir(
    dir: &Path,
    write: impl FnOnce(&Path) -> Result<Value, Error>,
) -> Result<Value, Error> {
    // Written in a fresh directory of ours and moved into place: a link planted at
    // `dir` or inside it is never written through.
    if let Some(why) = crate::not_a_real_dir(dir) {
        return Err(Error::Io(why));
    }
    let tmp = fresh_sibling_dir(dir)?;
    let meta = match write(&tmp) {
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

/// Removes the index `dir` and what interrupted builds left beside it
/// (`<dir>.tmp-XXXXXXXX/`); returns the bytes freed, `None` when there was nothing.
/// A `dir` that is a symbolic link is refused; links inside are removed, never
/// followed.
pub fn clean(dir: &Path) -> Result<Option<u64>, Error> {
    if let Some(why) = crate::not_a_real_dir(dir) {
        return Err(Error::Io(why));
    }
    let mut victims = Vec::new();
    if dir.exists() {
        victims.push(dir.to_path_buf());
    }
    if let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) {
        let prefix = format!("{}.tmp-", name.to_string_lossy());
        let parent = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
        for e in std::fs::read_dir(parent).into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            let ours = n
                .strip_prefix(&prefix)
                .is_some_and(|h| h.len() == 8 && h.bytes().all(|b| b.is_ascii_hexdigit()));
            // Only real directories of ours: a link by that name is left alone.
            if ours && e.file_type().is_ok_and(|t| t.is_dir()) {
                victims.push(e.path());
            }
        }
    }
    if victims.is_empty() {
        return Ok(None);
    }
    let mut bytes = 0;
    for v in victims {
        bytes += size_of_dir(&v);
        std::fs::remove_dir_all(&v)
            .map_err(|e| Error::Io(format!("cannot remove {}: {e}", v.display())))?;
    }
    Ok(Some(bytes))
}

/// Bytes of the regular files directly in `dir` (an index has no subdirectories).
pub fn size_of_dir(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok().filter(|m| m.is_file()))
        .map(|m| m.len())
        .sum()
}
