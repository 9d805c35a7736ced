//! Per-access annotation: the level that served every memory access of every thread.
//!
//! One 4-bit entry per access event (access, range or RMW) in stream order: 0 for the
//! first cache level, `levels` for memory; an access spanning several lines gets the
//! deepest level any of its lines reached. Threads are independent streams, so the
//! annotation lines up with each stream whatever order the driver used.
//!
//! # File format (`write_to` / `read_from`), little-endian
//!
//! ```text
//! magic   "MLCACHE1"              8 bytes
//! levels  u32                     number of cache levels (memory = levels)
//! threads u32
//! per thread, by thread id:
//!   thread u32, accesses u64, ceil(accesses / 2) bytes:
//!   access k is byte k/2, low nibble when k is even, high nibble when odd
//! ```

use crate::Error;
use memlens_format::ThreadId;
use std::io::{Read, Write};

const MAGIC: &[u8; 8] = b"MLCACHE1";

/// Packed 4-bit levels of one thread's accesses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LevelStream {
    len: u64,
    bytes: Vec<u8>,
}

impl LevelStream {
    /// Appends one access's level (0..=15).
    #[inline]
    pub fn push(&mut self, level: u8) {
        let v = level.min(15);
        if self.len.is_multiple_of(2) {
            self.bytes.push(v);
        } else if let Some(b) = self.bytes.last_mut() {
            *b |= v << 4;
        }
        self.len += 1;
    }

    /// Number of accesses.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// No accesses.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The level of access `k`.
    pub fn get(&self, k: u64) -> Option<u8> {
        if k >= self.len {
            return None;
        }
        let b = self.bytes[(k / 2) as usize];
        Some(if k.is_multiple_of(2) { b & 15 } else { b >> 4 })
    }

    /// Levels in order.
    pub fn iter(&self) -> impl Iterator<Item = u8> + '_ {
        (0..self.len).map(|k| self.get(k).unwrap_or(0))
    }
}

/// The served-by level of every access, per thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Annotation {
    /// Number of cache levels; a value equal to it means memory.
    pub levels: u32,
    /// Streams indexed by thread id (threads without accesses are empty).
    pub threads: Vec<LevelStream>,
}

impl Annotation {
    /// The stream of a thread.
    pub fn thread(&self, t: ThreadId) -> Option<&LevelStream> {
        self.threads.get(t.0 as usize)
    }

    #[inline]
    pub(crate) fn push(&mut self, t: ThreadId, level: u8) {
        let i = t.0 as usize;
        if i >= self.threads.len() {
            self.threads.resize_with(i + 1, LevelStream::default);
        }
        self.threads[i].push(level);
    }

    /// Writes the file format.
    pub fn write_to(&self, mut w: impl Write) -> std::io::Result<()> {
        w.write_all(MAGIC)?;
        w.write_all(&self.levels.to_le_bytes())?;
        w.write_all(&(self.threads.len() as u32).to_le_bytes())?;
        for (t, s) in self.threads.iter().enumerate() {
            w.write_all(&(t as u32).to_le_bytes())?;
            w.write_all(&s.len.to_le_bytes())?;
            w.write_all(&s.bytes)?;
        }
        Ok(())
    }

    /// Reads the file format.
    pub fn read_from(mut r: impl Read) -> Result<Annotation, Error> {
        let io =
            |e: std::io::Error| Error::Annotation(format!("cannot read cache annotation: {e}"));
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic).map_err(io)?;
        if &magic != MAGIC {
            return Err(Error::Annotation(
                "not a memlens cache annotation (no MLCACHE1 magic)".into(),
            ));
        }
        let mut b4 = [0u8; 4];
        let mut b8 = [0u8; 8];
        r.read_exact(&mut b4).map_err(io)?;
        let levels = u32::from_le_bytes(b4);
        r.read_exact(&mut b4).map_err(io)?;
        let n = u32::from_le_bytes(b4);
        let mut threads = Vec::new();
        for _ in 0..n {
            r.read_exact(&mut b4).map_err(io)?;
            let t = u32::from_le_bytes(b4) as usize;
            r.read_exact(&mut b8).map_err(io)?;
            let len = u64::from_le_bytes(b8);
            let mut bytes = vec![0u8; len.div_ceil(2) as usize];
            r.read_exact(&mut bytes).map_err(io)?;
            if t >= threads.len() {
                threads.resize_with(t + 1, LevelStream::default);
            }
            threads[t] = LevelStream { len, bytes };
        }
        Ok(Annotation { levels, threads })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut a = Annotation { levels: 2, threads: Vec::new() };
        for (i, l) in [0u8, 2, 1, 0, 2].iter().enumerate() {
            a.push(ThreadId((i % 2) as u32 * 2), *l);
        }
        let mut buf = Vec::new();
        a.write_to(&mut buf).unwrap();
        // header, three thread entries (thread 1 empty), 3 + 2 packed levels
        assert_eq!(buf.len(), 16 + 3 * 12 + 2 + 1);
        let b = Annotation::read_from(&buf[..]).unwrap();
        assert_eq!(a, b);
        assert_eq!(b.thread(ThreadId(0)).unwrap().iter().collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(b.thread(ThreadId(2)).unwrap().iter().collect::<Vec<_>>(), [2, 0]);
        assert!(Annotation::read_from(&b"nope"[..]).is_err());
    }
}
