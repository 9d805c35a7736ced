//! Files memlens reads and writes on the user's behalf: bounded reads of the
//! small text files it is given, and outputs that never follow a planted link.

use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Cache configurations are a few lines.
pub const CONFIG_CAP: u64 = 1 << 20;
/// Function lists, filters and allocator lists may name many functions.
pub const LIST_CAP: u64 = 16 << 20;

/// Reads the text file `path` (`what` names it in errors), refusing one larger
/// than `cap` bytes: `/dev/zero` or a wrong file must not fill memory.
pub fn read_text(path: &Path, what: &str, cap: u64) -> Result<String> {
    let f = File::open(path).with_context(|| format!("cannot read {what} {}", path.display()))?;
    let mut buf = Vec::new();
    f.take(cap + 1)
        .read_to_end(&mut buf)
        .with_context(|| format!("cannot read {what} {}", path.display()))?;
    if buf.len() as u64 > cap {
        bail!("{what} {} is larger than {} KiB; is it the right file?", path.display(), cap >> 10);
    }
    String::from_utf8(buf)
        .map_err(|_| anyhow::anyhow!("{what} {} is not UTF-8 text", path.display()))
}

/// An output file being written: a fresh file next to its destination, created
/// with `O_EXCL|O_NOFOLLOW` so no planted file or link is written through, and
/// renamed over the destination by [`Output::commit`] (a planted link at the
/// destination is replaced, its target untouched). Dropped uncommitted, it is
/// removed.
pub struct Output {
    file: Option<File>,
    tmp: PathBuf,
    dest: PathBuf,
}

impl Output {
    /// Creates the temporary file for `dest`. A device or pipe (`-o /dev/stdout`) is
    /// written directly: no file is overwritten there, and it cannot be replaced.
    pub fn create(dest: &Path) -> Result<Output> {
        if is_special(dest) {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(dest)
                .with_context(|| format!("cannot write {}", dest.display()))?;
            return Ok(Output { file: Some(file), tmp: PathBuf::new(), dest: dest.to_path_buf() });
        }
        let (file, tmp) = create_exclusive(dest, "tmp")
            .with_context(|| format!("cannot create {}", dest.display()))?;
        Ok(Output { file: Some(file), tmp, dest: dest.to_path_buf() })
    }

    /// The file to write.
    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("an uncommitted output has its file")
    }

    /// Takes the file out (to hand to a writer that consumes it); the output can
    /// still be committed after the writer closed it.
    pub fn take_file(&mut self) -> File {
        self.file.take().expect("the file is taken once")
    }

    /// Moves the file into place.
    pub fn commit(mut self) -> Result<()> {
        drop(self.file.take());
        if self.tmp.as_os_str().is_empty() {
            return Ok(());
        }
        std::fs::rename(&self.tmp, &self.dest)
            .with_context(|| format!("cannot write {}", self.dest.display()))?;
        self.tmp = PathBuf::new();
        Ok(())
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Creates `<dest>.<tag>-XXXXXX` (random) with `O_CREAT|O_EXCL|O_NOFOLLOW`, mode
/// 0644 less the umask.
pub fn create_exclusive(dest: &Path, tag: &str) -> std::io::Result<(File, PathBuf)> {
    let name = dest.file_name().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path names no file")
    })?;
    let mut last = None;
    for _ in 0..64 {
        let mut n = name.to_owned();
        n.push(format!(".{tag}-{}", random_suffix()));
        let tmp = dest.with_file_name(n);
        match std::fs::OpenOptions::new()
            .write(true)
            .read(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free temporary name")))
}

fn random_suffix() -> String {
    let mut b = [0u8; 6];
    // SAFETY: writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        // No getrandom: time and pid still make a collision unlikely, and O_EXCL
        // makes one harmless.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        b.copy_from_slice(&((t as u64) ^ u64::from(std::process::id()) << 32).to_le_bytes()[..6]);
    }
    const ALPHA: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    b.iter().map(|x| ALPHA[*x as usize % ALPHA.len()] as char).collect()
}

/// Whether `dest` is (or links to) something other than a regular file or a
/// directory: a device, a pipe or a socket.
fn is_special(dest: &Path) -> bool {
    std::fs::metadata(dest).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// Refuses a trace path that is not a regular file (or a link, or nothing): it is
/// replaced, and `-o /dev/null` as root must not replace the device.
fn refuse_special(dest: &Path) -> Result<()> {
    if is_special(dest) || std::fs::symlink_metadata(dest).is_ok_and(|m| m.is_dir()) {
        bail!("{} is not a regular file; choose another path with -o", dest.display());
    }
    Ok(())
}

/// Creates `dest` as a fresh file of ours: made under a random name with
/// `O_EXCL|O_NOFOLLOW` and renamed over `dest` at once, so a planted file or link
/// at `dest` is replaced, never written through, and the path is there to follow
/// (`analyze --follow`) while the file is written.
pub fn create_in_place(dest: &Path) -> Result<File> {
    let what = || format!("cannot write {}; choose another path with -o", dest.display());
    refuse_special(dest)?;
    let (file, tmp) = create_exclusive(dest, "tmp").with_context(what)?;
    if let Err(e) = std::fs::rename(&tmp, dest) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(what);
    }
    Ok(file)
}

/// An exclusive lock on an output path, held while a recording writes it: a
/// second `memlens record -o` of the same path fails instead of interleaving its
/// trace with the first one's. The lock file `<dest>.lock` is removed on drop.
pub struct Lock {
    path: PathBuf,
    _file: File,
}

impl Lock {
    /// Takes the lock of `dest`, or fails at once naming who holds it.
    pub fn take(dest: &Path) -> Result<Lock> {
        refuse_special(dest)?;
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let mut name = dest.file_name().map(|n| n.to_owned()).unwrap_or_default();
        name.push(".lock");
        let path = dest.with_file_name(name);
        // A holder may remove the file between our open and our flock: retry.
        for _ in 0..100 {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
                .with_context(|| {
                    format!(
                        "cannot write the trace to {} (nor its lock file {}); choose another path with -o",
                        dest.display(),
                        path.display()
                    )
                })?;
            // SAFETY: a valid descriptor.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::WouldBlock {
                    return Err(e).with_context(|| format!("cannot lock {}", path.display()));
                }
                bail!(
                    "{} is being written by another `memlens record`; wait for it to end or choose another path with -o",
                    dest.display()
                );
            }
            let mine = f.metadata()?;
            let same = std::fs::symlink_metadata(&path)
                .is_ok_and(|m| m.ino() == mine.ino() && m.dev() == mine.dev());
            if !same {
                continue;
            }
            return Ok(Lock { path, _file: f });
        }
        bail!("cannot lock {}: the lock file keeps changing", path.display())
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // removed while still locked, so no one locks a file about to vanish unseen
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new().prefix(name).tempdir().unwrap()
    }

    #[test]
    fn a_planted_link_is_replaced_not_followed() {
        let d = scratch("files-link");
        let victim = d.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let dest = d.path().join("out");
        std::os::unix::fs::symlink(&victim, &dest).unwrap();
        let mut o = Output::create(&dest).unwrap();
        std::io::Write::write_all(o.file(), b"new").unwrap();
        o.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert_eq!(std::fs::read_to_string(&dest).unwrap(), "new");
        assert!(!std::fs::symlink_metadata(&dest).unwrap().file_type().is_symlink());
        // an output dropped before commit leaves nothing
        drop(Output::create(&d.path().join("never")).unwrap());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
    }

    #[test]
    fn a_held_lock_refuses_a_second_taker_and_goes_away() {
        let d = scratch("files-lock");
        let dest = d.path().join("t.trace");
        let lock = Lock::take(&dest).unwrap();
        let err = Lock::take(&dest).err().unwrap().to_string();
        assert!(err.contains("being written by another"), "{err}");
        drop(lock);
        assert!(!d.path().join("t.trace.lock").exists());
        drop(Lock::take(&dest).unwrap());
    }

    #[test]
    fn reads_are_capped() {
        let d = scratch("files-cap");
        let p = d.path().join("big");
        std::fs::write(&p, vec![b'x'; 2048]).unwrap();
        assert!(read_text(&p, "test file", 2048).is_ok());
        let err = read_text(&p, "test file", 1024).err().unwrap().to_string();
        assert!(err.contains("larger than 1 KiB"), "{err}");
    }
}
