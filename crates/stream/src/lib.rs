//! Traces over TCP (DINAMITE's TCP logging library, for memlens): `memlens record
//! --sink tcp://HOST:PORT` forwards the recording's chunks as they land in the trace
//! file, and `memlens collect --listen ADDR -o DIR` receives any number of programs
//! at once, each into a trace file that every command reads (and `analyze --follow`
//! follows) while it grows.
//!
//! The sender tails the file the runtime writes, so the traced program never waits
//! for the network: a connection that drops is reported by `record`, the local
//! trace stays complete, and the program runs on. The wire format is the trace's
//! own bytes in frames:
//!
//! ```text
//! "MEMLENS-STREAM1\n"
//! frame: kind (1 byte) | length (u32 LE) | bytes
//!   'N' hello: JSON {"name": program, "pid": pid}    (first; pid from the header)
//!   'H' the trace's file header (4096 bytes)          (first after hello, and at the end)
//!   'C' one chunk: its 64-byte header and payload      (checksums verified on arrival)
//!   'E' end of trace
//! ```
//!
//! The collector checks every frame (magic, sizes, both checksums of a chunk) and
//! cuts a peer off at the first bad one with a logged reason; what arrived before
//! stays a readable (partial) trace.
//!
//! # Example
//! ```no_run
//! use memlens_stream::{collect, Collected, Sender};
//! use std::sync::{atomic::AtomicBool, Arc};
//! let l = std::net::TcpListener::bind("127.0.0.1:0")?;
//! let addr = l.local_addr()?;
//! std::thread::spawn(move || collect(l, "traces".as_ref(), &|e: Collected| eprintln!("{e:?}")));
//! let done = Arc::new(AtomicBool::new(true));
//! let mut s = Sender::connect(&addr.to_string(), "prog")?;
//! s.run("memlens.trace".as_ref(), &done)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use memlens_analysis::{ChunkSource, TailState, TraceTail};
use memlens_format::{ChunkHeader, FileHeader, CHUNK_HEADER_SIZE, HEADER_SIZE};

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A network or file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The peer sent something that is not a memlens stream.
    #[error("{0}")]
    Protocol(String),
    /// The trace being sent could not be read.
    #[error("{0}")]
    Trace(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// The stream's first bytes.
pub const MAGIC: &[u8; 16] = b"MEMLENS-STREAM1\n";
/// Largest frame accepted (a chunk is about a mebibyte; metadata chunks less).
pub const MAX_FRAME: u32 = 64 << 20;

const HELLO: u8 = b'N';
const HEADER: u8 = b'H';
const CHUNK: u8 = b'C';
const END: u8 = b'E';

/// Forwards one recording to a collector.
pub struct Sender {
    sock: TcpStream,
    name: String,
    /// Wall clock at connection: the recording's trace header starts after it.
    since_ns: u64,
    /// Chunks sent.
    pub chunks: u64,
    /// Bytes sent.
    pub bytes: u64,
}

impl Sender {
    /// Connects to `addr` (`HOST:PORT`) for the program `name` (its pid comes from
    /// the trace header, once the recording has written it).
    pub fn connect(addr: &str, name: &str) -> Result<Sender, Error> {
        let sock = TcpStream::connect(addr).map_err(io(format!("cannot connect to {addr}")))?;
        let _ = sock.set_nodelay(true);
        let since_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut s = Sender { sock, name: name.to_string(), since_ns, chunks: 0, bytes: 0 };
        s.sock.write_all(MAGIC).map_err(io("sending"))?;
        Ok(s)
    }

    fn frame(&mut self, kind: u8, parts: &[&[u8]]) -> Result<(), Error> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut head = [0u8; 5];
        head[0] = kind;
        head[1..].copy_from_slice(&(len as u32).to_le_bytes());
        self.sock.write_all(&head).map_err(io("sending"))?;
        for p in parts {
            self.sock.write_all(p).map_err(io("sending"))?;
        }
        self.bytes += 5 + len as u64;
        Ok(())
    }

    /// Sends the trace at `path` as it grows, until `done` is set (the recording
    /// ended and its header is final), then the final header and the end mark.
    pub fn run(&mut self, path: &Path, done: &AtomicBool) -> Result<(), Error> {
        // A trace left at `path` by an earlier run is not this one: wait for the
        // recording's own (a new file whose header started after we did).
        loop {
            let fresh = File::open(path)
                .ok()
                .and_then(|f| read_at(&f, 0, HEADER_SIZE).ok())
                .and_then(|h| FileHeader::decode(&h).ok())
                .is_some_and(|h| h.start_ns >= self.since_ns);
            if fresh {
                break;
            }
            if done.load(SeqCst) {
                return Err(Error::Trace(format!("{}: no trace was written", path.display())));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut tail = TraceTail::new(path);
        let file = || File::open(path).map_err(io(format!("cannot read {}", path.display())));
        let mut f: Option<File> = None;
        let mut header_sent = false;
        loop {
            let last = done.load(SeqCst);
            let got = tail.poll().map_err(|e| Error::Trace(e.to_string()))?;
            if tail.state() != TailState::Waiting && f.is_none() {
                f = Some(file()?);
            }
            if let Some(f) = &f {
                if !header_sent {
                    let h = read_at(f, 0, HEADER_SIZE)?;
                    let pid = FileHeader::decode(&h).map(|h| h.pid).unwrap_or(0);
                    let hello = serde_json::json!({ "name": self.name, "pid": pid }).to_string();
                    self.frame(HELLO, &[hello.as_bytes()])?;
                    self.frame(HEADER, &[&h])?;
                    header_sent = true;
                }
                for c in got {
                    let len = CHUNK_HEADER_SIZE + c.header.payload_len as usize;
                    self.frame(CHUNK, &[&read_at(f, c.offset, len)?])?;
                    self.chunks += 1;
                }
            }
            if last {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        match &f {
            Some(f) => self.frame(HEADER, &[&read_at(f, 0, HEADER_SIZE)?])?,
            None => return Err(Error::Trace(format!("{}: no trace was written", path.display()))),
        }
        self.frame(END, &[])?;
        self.sock.flush().map_err(io("sending"))?;
        let _ = self.sock.shutdown(std::net::Shutdown::Write);
        // wait for the collector to close: everything arrived
        let mut b = [0u8; 1];
        let _ = self.sock.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = self.sock.read(&mut b);
        Ok(())
    }
}

fn read_at(f: &File, off: u64, len: usize) -> Result<Vec<u8>, Error> {
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, off).map_err(io("reading the trace"))?;
    Ok(b)
}

/// What the collector reports.
#[derive(Debug)]
pub enum Collected {
    /// A program connected; its trace goes to `path`.
    Started {
        /// The peer's address.
        peer: String,
        /// Where its trace is written.
        path: PathBuf,
    },
    /// A program's trace ended (`complete`: its end mark arrived).
    Ended {
        /// The peer's address.
        peer: String,
        /// Its trace.
        path: PathBuf,
        /// Chunks received.
        chunks: u64,
        /// Whether the stream ended properly.
        complete: bool,
    },
    /// A peer was cut off.
    CutOff {
        /// The peer's address.
        peer: String,
        /// Why.
        reason: String,
    },
}

/// Receives programs on `listener` forever, one thread each, writing their traces
/// into `dir`; `report` hears about each.
pub fn collect(listener: TcpListener, dir: &Path, report: &(dyn Fn(Collected) + Sync)) {
    std::thread::scope(|s| {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            s.spawn(move || {
                let peer = conn.peer_addr().map(|a| a.to_string()).unwrap_or_default();
                if let Err(reason) = receive(conn, dir, &peer, report) {
                    report(Collected::CutOff { peer, reason });
                }
            });
        }
    });
}

fn read_frame(r: &mut impl Read) -> Result<Option<(u8, Vec<u8>)>, String> {
    let mut head = [0u8; 5];
    match r.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(format!("connection lost: {e}")),
    }
    let len = u32::from_le_bytes(head[1..].try_into().unwrap());
    if len > MAX_FRAME {
        return Err(format!("a frame of {len} bytes (at most {MAX_FRAME})"));
    }
    let mut b = vec![0u8; len as usize];
    r.read_exact(&mut b).map_err(|e| format!("connection lost mid-frame: {e}"))?;
    Ok(Some((head[0], b)))
}

/// A file name part from the peer's program name: letters, digits, `-_.` only.
fn clean(name: &str) -> String {
    let s: String =
        name.chars().filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c)).take(64).collect();
    let s = s.trim_start_matches('.').to_string();
    if s.is_empty() {
        "program".into()
    } else {
        s
    }
}

fn receive(
    conn: TcpStream,
    dir: &Path,
    peer: &str,
    report: &(dyn Fn(Collected) + Sync),
) -> Result<(), String> {
    // a silent peer does not hold a thread forever
    let _ = conn.set_read_timeout(Some(Duration::from_secs(600)));
    let mut r = BufReader::new(&conn);
    let mut magic = [0u8; 16];
    r.read_exact(&mut magic).map_err(|_| "no stream magic".to_string())?;
    if &magic != MAGIC {
        return Err("not a memlens stream (bad magic)".into());
    }
    let (kind, hello) = read_frame(&mut r)?.ok_or("closed before its hello")?;
    if kind != HELLO {
        return Err("no hello frame".into());
    }
    let hello: serde_json::Value =
        serde_json::from_slice(&hello).map_err(|e| format!("bad hello: {e}"))?;
    let name = clean(hello["name"].as_str().unwrap_or("program"));
    let pid = hello["pid"].as_u64().unwrap_or(0);
    let (file, path) =
        create(dir, &name, pid).map_err(|e| format!("cannot create its trace: {e}"))?;
    report(Collected::Started { peer: peer.into(), path: path.clone() });
    let mut at = HEADER_SIZE as u64;
    let mut chunks = 0u64;
    let mut header = false;
    let result = (|| {
        while let Some((kind, b)) = read_frame(&mut r)? {
            match kind {
                HEADER => {
                    if b.len() != HEADER_SIZE {
                        return Err(format!("a header of {} bytes", b.len()));
                    }
                    FileHeader::decode(&b).map_err(|e| format!("bad trace header: {e}"))?;
                    file.write_all_at(&b, 0).map_err(|e| format!("writing: {e}"))?;
                    header = true;
                }
                CHUNK => {
                    if !header {
                        return Err("a chunk before the trace header".into());
                    }
                    let hb: &[u8; CHUNK_HEADER_SIZE] = b
                        .get(..CHUNK_HEADER_SIZE)
                        .and_then(|h| h.try_into().ok())
                        .ok_or("a chunk shorter than its header")?;
                    let h = ChunkHeader::decode(hb, at).map_err(|e| format!("bad chunk: {e}"))?;
                    let payload = &b[CHUNK_HEADER_SIZE..];
                    if payload.len() != h.payload_len as usize
                        || crc32fast::hash(payload) != h.payload_crc
                    {
                        return Err("a chunk whose payload does not match its header".into());
                    }
                    file.write_all_at(&b, at).map_err(|e| format!("writing: {e}"))?;
                    at += b.len() as u64;
                    chunks += 1;
                }
                END => return Ok(true),
                k => return Err(format!("unknown frame kind {k:#x}")),
            }
        }
        Ok(false)
    })();
    let _ = file.sync_data();
    match result {
        Ok(complete) => {
            report(Collected::Ended { peer: peer.into(), path, chunks, complete });
            Ok(())
        }
        Err(e) => {
            report(Collected::Ended { peer: peer.into(), path, chunks, complete: false });
            Err(e)
        }
    }
}

/// `DIR/NAME-PID.trace` (or `-2`, `-3`... when taken), created exclusively and
/// never through a link.
fn create(dir: &Path, name: &str, pid: u64) -> std::io::Result<(File, PathBuf)> {
    for n in 1..1000 {
        let file =
            if n == 1 { format!("{name}-{pid}.trace") } else { format!("{name}-{pid}-{n}.trace") };
        let path = dir.join(file);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(f) => return Ok((f, path)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no free trace name"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_peers_are_plain_file_names() {
        assert_eq!(clean("../../etc/passwd"), "etcpasswd");
        assert_eq!(clean("a b/c"), "abc");
        assert_eq!(clean(""), "program");
        assert_eq!(clean("..."), "program");
    }

    #[test]
    fn frames_are_bounded() {
        let mut big = vec![CHUNK];
        big.extend_from_slice(&(MAX_FRAME + 1).to_le_bytes());
        assert!(read_frame(&mut &big[..]).unwrap_err().contains("at most"));
        assert_eq!(read_frame(&mut &[][..]).unwrap(), None);
    }
}
