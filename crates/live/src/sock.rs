//! The control socket: a Unix socket in a private directory (mode 0700, ours), the
//! socket itself mode 0600, and every peer's uid checked with SO_PEERCRED.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;

use crate::{Error, Result};
use memlens_contract::control::{self, NotPrivate};

/// Our effective uid.
pub fn own_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// The control directory ([`control::socket_dir`]), created mode 0700 and checked
/// to be a directory of ours that nobody else can enter.
pub fn socket_dir() -> Result<PathBuf> {
    let uid = own_uid();
    let dir = control::socket_dir(uid);
    match control::private_dir(&dir, uid) {
        Ok(()) => Ok(dir),
        Err(NotPrivate::Io(e)) => Err(Error::io(format!("cannot create {}", dir.display()), e)),
        Err(NotPrivate::Foreign { owner, mode }) => Err(Error::Collector(format!(
            "{} is not a private directory of uid {uid} (owner {owner}, mode {mode:o}): remove it and retry",
            dir.display()
        ))),
    }
}

/// The socket of the collector holding `pid`.
pub fn socket_path(pid: i32) -> Result<PathBuf> {
    Ok(control::collector_socket(&socket_dir()?, pid))
}

/// Binds the socket for `pid`, mode 0600. A live collector there is an error; a stale
/// socket (its collector was killed) is replaced.
pub fn bind(pid: i32) -> Result<(UnixListener, PathBuf)> {
    let path = socket_path(pid)?;
    if std::fs::symlink_metadata(&path).is_ok() {
        if UnixStream::connect(&path).is_ok() {
            return Err(Error::Collector(format!(
                "a collector already holds PID {pid} ({}): use `memlens probe --pid {pid}`",
                path.display()
            )));
        }
        let _ = std::fs::remove_file(&path);
    }
    // SAFETY: umask only changes this process's creation mask; restored below.
    let old = unsafe { libc::umask(0o177) };
    let r = UnixListener::bind(&path);
    // SAFETY: restores the mask.
    unsafe { libc::umask(old) };
    let l = r.map_err(|e| Error::io(format!("cannot listen on {}", path.display()), e))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io(format!("chmod {}", path.display()), e))?;
    l.set_nonblocking(true).map_err(|e| Error::io("socket", e))?;
    Ok((l, path))
}

/// The uid of the process at the other end (SO_PEERCRED).
pub fn peer_uid(s: &UnixStream) -> io::Result<u32> {
    control::peer_uid(s.as_raw_fd())
}

/// Only our own uid may control the probes.
pub fn check_peer(peer: u32, own: u32) -> Result<()> {
    if peer == own {
        Ok(())
    } else {
        Err(Error::Collector(format!(
            "refused: the peer runs as uid {peer}, this collector belongs to uid {own}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_uid_is_refused() {
        assert!(check_peer(1000, 1000).is_ok());
        let e = check_peer(1001, 1000).unwrap_err().to_string();
        assert!(e.contains("uid 1001") && e.contains("refused"), "{e}");
    }

    #[test]
    fn peer_of_a_socketpair_is_us() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(peer_uid(&a).unwrap(), own_uid());
    }
}
