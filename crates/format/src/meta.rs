//! Metadata records: the process, its modules, how it ended.
//!
//! They travel in [`crate::ChunkKind::Meta`] chunks of stream [`crate::META_STREAM`],
//! each record a tag byte followed by varints and length-prefixed strings. Later
//! records win (a module table written at exit supersedes the one written at start).

use crate::types::{Module, Segment};
use crate::varint;

/// How the traced process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndStatus {
    /// Not recorded (killed, or still running).
    Unknown,
    /// `exit(code)` or return from main.
    Exited(i32),
    /// A fatal signal.
    Signaled(i32),
    /// The process replaced itself with `exec`.
    Exec,
}

impl EndStatus {
    /// (kind, value) as stored in the file header.
    pub fn to_parts(self) -> (u32, i32) {
        match self {
            EndStatus::Unknown => (0, 0),
            EndStatus::Exited(c) => (1, c),
            EndStatus::Signaled(s) => (2, s),
            EndStatus::Exec => (3, 0),
        }
    }

    /// Inverse of [`EndStatus::to_parts`].
    pub fn from_parts(kind: u32, value: i32) -> EndStatus {
        match kind {
            1 => EndStatus::Exited(value),
            2 => EndStatus::Signaled(value),
            3 => EndStatus::Exec,
            _ => EndStatus::Unknown,
        }
    }
}

/// One metadata record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaRecord {
    /// The traced process.
    Process {
        /// pid.
        pid: u32,
        /// Executable path.
        exe: String,
        /// Command line.
        argv: Vec<String>,
    },
    /// A loaded module.
    Module(Module),
    /// A recording option in force (`name`, `value`).
    Option(String, String),
    /// Final counters of the runtime.
    Stats {
        /// Events not recorded or not written.
        dropped_events: u64,
        /// Chunk bytes not written.
        dropped_bytes: u64,
    },
    /// How the process ended.
    End(EndStatus),
    /// The process's memory map (`/proc/self/maps` text) near its end, to say which
    /// mapping an address that has no better name falls in.
    Maps(String),
    /// A forked child writes its own trace at this path.
    Child {
        /// Child pid.
        pid: u32,
        /// Its trace file.
        path: String,
    },
}

const PROCESS: u8 = 1;
const MODULE: u8 = 2;
const OPTION: u8 = 3;
const STATS: u8 = 4;
const END: u8 = 5;
const CHILD: u8 = 6;
const MAPS: u8 = 7;

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

fn put_bytes(out: &mut Vec<u8>, s: &[u8]) {
    varint::push(out, s.len() as u64);
    out.extend_from_slice(s);
}

impl MetaRecord {
    /// Appends the record's encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            MetaRecord::Process { pid, exe, argv } => {
                out.push(PROCESS);
                varint::push(out, u64::from(*pid));
                put_str(out, exe);
                varint::push(out, argv.len() as u64);
                for a in argv {
                    put_str(out, a);
                }
            }
            MetaRecord::Module(m) => {
                out.push(MODULE);
                varint::push(out, u64::from(m.id));
                put_str(out, &m.path);
                put_bytes(out, &m.build_id);
                varint::push(out, m.bias);
                varint::push(out, m.segments.len() as u64);
                for s in &m.segments {
                    varint::push(out, s.vaddr);
                    varint::push(out, s.memsz);
                    varint::push(out, u64::from(s.flags));
                }
            }
            MetaRecord::Option(k, v) => {
                out.push(OPTION);
                put_str(out, k);
                put_str(out, v);
            }
            MetaRecord::Stats { dropped_events, dropped_bytes } => {
                out.push(STATS);
                varint::push(out, *dropped_events);
                varint::push(out, *dropped_bytes);
            }
            MetaRecord::End(st) => {
                out.push(END);
                let (k, v) = st.to_parts();
                varint::push(out, u64::from(k));
                varint::push(out, varint::zigzag(i64::from(v)));
            }
            MetaRecord::Maps(text) => {
                out.push(MAPS);
                put_str(out, text);
            }
            MetaRecord::Child { pid, path } => {
                out.push(CHILD);
                varint::push(out, u64::from(*pid));
                put_str(out, path);
            }
        }
    }

    /// Decodes every record of a metadata payload.
    pub fn decode_all(buf: &[u8]) -> Option<Vec<MetaRecord>> {
        let mut pos = 0;
        let mut out = Vec::new();
        let v = |pos: &mut usize| varint::get(buf, pos);
        let bytes = |pos: &mut usize| -> Option<Vec<u8>> {
            let n = varint::get(buf, pos)? as usize;
            let s = buf.get(*pos..pos.checked_add(n)?)?.to_vec();
            *pos += n;
            Some(s)
        };
        let string = |pos: &mut usize| bytes(pos).map(|b| String::from_utf8_lossy(&b).into_owned());
        while pos < buf.len() {
            let t = buf[pos];
            pos += 1;
            let rec = match t {
                PROCESS => {
                    let pid = v(&mut pos)? as u32;
                    let exe = string(&mut pos)?;
                    let n = v(&mut pos)? as usize;
                    if n > buf.len() {
                        return None;
                    }
                    let mut argv = Vec::with_capacity(n);
                    for _ in 0..n {
                        argv.push(string(&mut pos)?);
                    }
                    MetaRecord::Process { pid, exe, argv }
                }
                MODULE => {
                    let id = v(&mut pos)? as u32;
                    let path = string(&mut pos)?;
                    let build_id = bytes(&mut pos)?;
                    let bias = v(&mut pos)?;
                    let n = v(&mut pos)? as usize;
                    if n > buf.len() {
                        return None;
                    }
                    let mut segments = Vec::with_capacity(n);
                    for _ in 0..n {
                        segments.push(Segment {
                            vaddr: v(&mut pos)?,
                            memsz: v(&mut pos)?,
                            flags: v(&mut pos)? as u32,
                        });
                    }
                    MetaRecord::Module(Module { id, path, build_id, bias, segments })
                }
                OPTION => MetaRecord::Option(string(&mut pos)?, string(&mut pos)?),
                STATS => {
                    MetaRecord::Stats { dropped_events: v(&mut pos)?, dropped_bytes: v(&mut pos)? }
                }
                END => {
                    let k = v(&mut pos)? as u32;
                    let val = varint::unzigzag(v(&mut pos)?) as i32;
                    MetaRecord::End(EndStatus::from_parts(k, val))
                }
                MAPS => MetaRecord::Maps(string(&mut pos)?),
                CHILD => MetaRecord::Child { pid: v(&mut pos)? as u32, path: string(&mut pos)? },
                _ => return None,
            };
            out.push(rec);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let recs = vec![
            MetaRecord::Process {
                pid: 1,
                exe: "/bin/x".into(),
                argv: vec!["x".into(), "-v".into()],
            },
            MetaRecord::Module(Module {
                id: 0,
                path: "/bin/x".into(),
                build_id: vec![1, 2, 3],
                bias: 0x5555_0000_0000,
                segments: vec![Segment { vaddr: 0, memsz: 4096, flags: 5 }],
            }),
            MetaRecord::Option("values".into(), "1".into()),
            MetaRecord::Stats { dropped_events: 3, dropped_bytes: 4 },
            MetaRecord::End(EndStatus::Signaled(11)),
            MetaRecord::Child { pid: 77, path: "t.77".into() },
            MetaRecord::Maps("00400000-00401000 r-xp 0 0:0 0 /bin/x\n".into()),
        ];
        let mut buf = Vec::new();
        for r in &recs {
            r.encode(&mut buf);
        }
        assert_eq!(MetaRecord::decode_all(&buf).unwrap(), recs);
        assert!(MetaRecord::decode_all(&buf[..buf.len() - 1]).is_none());
    }
}
