//! The live control socket both ends must agree on: where it lives, who may
//! connect, and the protocol version. The runtime listens on
//! [`runtime_socket`] in the directory [`socket_dir`] names (made private with
//! [`private_dir`]); `memlens live` connects there, and its own collector socket
//! ([`collector_socket`]) sits beside it. Every peer's uid is checked
//! ([`peer_uid`]).

use std::io;
use std::os::fd::RawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The control protocol's version, in the runtime's `hello` answer: a collector
/// refuses a runtime of another one (2: the `heap` answer gained allocs and frees).
pub const PROTOCOL: u32 = 2;

/// `$XDG_RUNTIME_DIR/memlens` when that is an absolute directory, else
/// `/tmp/memlens-<uid>` (not created here: see [`private_dir`]).
pub fn socket_dir(uid: u32) -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(d) if d.is_absolute() && d.is_dir() => d.join("memlens"),
        _ => PathBuf::from(format!("/tmp/memlens-{uid}")),
    }
}

/// The runtime's control socket in process `pid`.
pub fn runtime_socket(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("rt-{pid}.sock"))
}

/// The socket of the collector holding process `pid`.
pub fn collector_socket(dir: &Path, pid: i32) -> PathBuf {
    dir.join(format!("live-{pid}.sock"))
}

/// Why a directory is not private.
#[derive(Debug)]
pub enum NotPrivate {
    /// It could not be created or looked at.
    Io(io::Error),
    /// It is not a directory of ours that only we can enter (a symlink counts as
    /// not a directory: it is never followed).
    Foreign {
        /// Its owner.
        owner: u32,
        /// Its permission bits.
        mode: u32,
    },
}

/// Creates `dir` mode 0700 if it is missing, then checks that it is a directory
/// (not a link to one) owned by `uid` that nobody else can enter.
pub fn private_dir(dir: &Path, uid: u32) -> Result<(), NotPrivate> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(NotPrivate::Io(e)),
    }
    // lstat: a symlink planted in /tmp is refused, not followed.
    let md = std::fs::symlink_metadata(dir).map_err(NotPrivate::Io)?;
    if !md.is_dir() || md.uid() != uid || md.mode() & 0o077 != 0 {
        return Err(NotPrivate::Foreign { owner: md.uid(), mode: md.mode() & 0o7777 });
    }
    Ok(())
}

/// The uid of the process at the other end of the Unix socket `fd` (SO_PEERCRED).
pub fn peer_uid(fd: RawFd) -> io::Result<u32> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = core::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes a ucred of the given length.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_socket_pair_peer_is_us() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        // SAFETY: no preconditions.
        assert_eq!(peer_uid(a.as_raw_fd()).unwrap(), unsafe { libc::geteuid() });
        assert!(peer_uid(-1).is_err());
    }

    #[test]
    fn only_a_directory_of_ours_nobody_else_enters_is_private() {
        // SAFETY: no preconditions.
        let uid = unsafe { libc::geteuid() };
        let base = std::env::temp_dir().join(format!("mlctl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let d = base.join("d");
        private_dir(&d, uid).unwrap();
        assert_eq!(std::fs::metadata(&d).unwrap().permissions().mode() & 0o777, 0o700);
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(private_dir(&d, uid), Err(NotPrivate::Foreign { mode: 0o755, .. })));
        let link = base.join("l");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(matches!(private_dir(&link, uid), Err(NotPrivate::Foreign { .. })));
        assert!(matches!(private_dir(&d, uid + 1), Err(NotPrivate::Foreign { .. })));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
