//! The compact form of a level's cells and window sums on disk.
//!
//! A map cell of a line nobody touched in a bucket is fully determined by the line's
//! state at its last touch (bytes used, last thread, insertion stamp) and the bucket's
//! insertion counter, and the working set is exactly the lines whose stamp is less
//! than `max_age` insertions old. So a bucket stores only the lines touched in it;
//! the first bucket of each block also stores every other line of the working set (a
//! key frame), and blocks are zstd frames. The reader replays a block to rebuild every
//! cell of every bucket, byte for byte the cells a full table would hold.

use crate::CELL_BYTES;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;

/// Bytes per entry of a block index (`blocksN.bin`, `wblocksN.bin`): first bucket,
/// byte offset in the data file, decompressed length (all `u64`).
pub(crate) const BLOCK_ENTRY: usize = 24;
/// A decompressed block larger than this is refused (a damaged or planted index):
/// two requests at once stay well within 1 GB. Real blocks are about 1 MB + 41 B
/// per line of the working set.
const MAX_RAW: u64 = 256 << 20;
/// zstd level: level 1 compresses the columns about as well as 3 at twice the speed.
const ZSTD_LEVEL: i32 = 1;

/// One line touched within a bucket, as written.
#[derive(Clone, Copy, Default)]
pub(crate) struct TouchRec {
    pub addr: u64,
    pub pc: u32,
    pub var: u32,
    pub loads: u16,
    pub stores: u16,
    pub used: u8,
    pub thread: u8,
    pub off: u8,
    /// Insertions since the line was last stamped (`ins - stamp`).
    pub dist: u32,
}

/// A data file cut into zstd frames at bucket boundaries, with its block index.
pub(crate) struct BlockWriter {
    out: BufWriter<File>,
    raw: Vec<u8>,
    first: u64,
    bucket: u64,
    bytes: u64,
    index: Vec<u8>,
}

impl BlockWriter {
    pub(crate) fn new(f: File) -> BlockWriter {
        BlockWriter {
            out: BufWriter::with_capacity(1 << 16, f),
            raw: Vec::new(),
            first: 0,
            bucket: 0,
            bytes: 0,
            index: Vec::new(),
        }
    }

    /// Compressed bytes written so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Bytes of the block being filled.
    pub(crate) fn raw_len(&self) -> usize {
        self.raw.len()
    }

    /// Appends to the current bucket.
    pub(crate) fn push(&mut self, b: &[u8]) {
        self.raw.extend_from_slice(b);
    }

    /// The current bucket is complete.
    pub(crate) fn end_bucket(&mut self) {
        self.bucket += 1;
    }

    /// Closes the block being filled (the next bucket starts a new one).
    pub(crate) fn cut(&mut self) -> std::io::Result<()> {
        if self.bucket == self.first {
            return Ok(());
        }
        let z = zstd::bulk::compress(&self.raw, ZSTD_LEVEL)?;
        self.out.write_all(&z)?;
        for v in [self.first, self.bytes, self.raw.len() as u64] {
            self.index.extend_from_slice(&v.to_le_bytes());
        }
        self.bytes += z.len() as u64;
        self.first = self.bucket;
        self.raw.clear();
        Ok(())
    }

    /// Closes the last block; returns the block index (with a final entry: bucket
    /// count, file length, 0) and the data file's length.
    pub(crate) fn finish(mut self) -> std::io::Result<(Vec<u8>, u64)> {
        self.cut()?;
        self.out.flush()?;
        for v in [self.bucket, self.bytes, 0] {
            self.index.extend_from_slice(&v.to_le_bytes());
        }
        Ok((self.index, self.bytes))
    }
}

/// Encodes one bucket of a level: its insertion counter, the touched lines and, in a
/// key frame, the untouched lines of the working set (`addr, used, thread, dist`),
/// each list in address order, column after column (columns compress far better).
pub(crate) fn encode_bucket(
    out: &mut BlockWriter,
    ins: u64,
    touched: &[TouchRec],
    rest: &[(u64, u8, u8, u32)],
) {
    let mut b = Vec::with_capacity(16 + touched.len() * 27 + rest.len() * 14);
    b.extend_from_slice(&ins.to_le_bytes());
    b.extend_from_slice(&(touched.len() as u32).to_le_bytes());
    b.extend_from_slice(&(rest.len() as u32).to_le_bytes());
    let mut prev = 0u64;
    for t in touched {
        b.extend_from_slice(&t.addr.wrapping_sub(prev).to_le_bytes());
        prev = t.addr;
    }
    touched.iter().for_each(|t| b.extend_from_slice(&t.pc.to_le_bytes()));
    touched.iter().for_each(|t| b.extend_from_slice(&t.var.to_le_bytes()));
    touched.iter().for_each(|t| b.extend_from_slice(&t.loads.to_le_bytes()));
    touched.iter().for_each(|t| b.extend_from_slice(&t.stores.to_le_bytes()));
    touched.iter().for_each(|t| b.push(t.used));
    touched.iter().for_each(|t| b.push(t.thread));
    touched.iter().for_each(|t| b.push(t.off));
    touched.iter().for_each(|t| b.extend_from_slice(&t.dist.to_le_bytes()));
    prev = 0;
    for r in rest {
        b.extend_from_slice(&r.0.wrapping_sub(prev).to_le_bytes());
        prev = r.0;
    }
    rest.iter().for_each(|r| b.push(r.1));
    rest.iter().for_each(|r| b.push(r.2));
    rest.iter().for_each(|r| b.extend_from_slice(&r.3.to_le_bytes()));
    out.push(&b);
}

/// A block index read back: `(first bucket, offset, raw length)` per block, then the
/// final entry. `None` when it is not one (lengths, order, sizes).
pub(crate) fn parse_blocks(b: &[u8], buckets: u64, file_len: u64) -> Option<Vec<[u64; 3]>> {
    if !b.len().is_multiple_of(BLOCK_ENTRY) || b.len() < BLOCK_ENTRY {
        return None;
    }
    let v: Vec<[u64; 3]> = b
        .chunks_exact(BLOCK_ENTRY)
        .map(|c| {
            let u = |o: usize| u64::from_le_bytes(c[o..o + 8].try_into().unwrap_or_default());
            [u(0), u(8), u(16)]
        })
        .collect();
    let last = v[v.len() - 1];
    let ordered = v.windows(2).all(|w| w[0][0] < w[1][0] && w[0][1] <= w[1][1]);
    let sane = v.iter().all(|e| e[2] <= MAX_RAW) && v[0][0] == 0;
    (ordered && sane && last[0] == buckets && last[1] == file_len).then_some(v)
}

/// The block holding bucket `b` (the last block whose first bucket is ≤ b).
pub(crate) fn block_of(blocks: &[[u64; 3]], b: u64) -> usize {
    blocks[..blocks.len() - 1].partition_point(|e| e[0] <= b).saturating_sub(1)
}

/// Block `k`, decompressed.
pub(crate) fn read_block(f: &File, blocks: &[[u64; 3]], k: usize) -> Result<Vec<u8>, String> {
    let (e, next) = (blocks[k], blocks[k + 1]);
    let mut z = vec![0u8; (next[1] - e[1]) as usize];
    f.read_exact_at(&mut z, e[1]).map_err(|e| format!("cannot read the index: {e}"))?;
    let raw = zstd::bulk::decompress(&z, e[2] as usize)
        .map_err(|e| format!("damaged index block: {e}"))?;
    if raw.len() as u64 != e[2] {
        return Err("damaged index block".into());
    }
    Ok(raw)
}

/// A line of the working set being replayed.
struct Line {
    used: u8,
    thread: u8,
    stamp: u64,
    /// Touched in bucket `bucket` with this record.
    bucket: u64,
    touch: TouchRec,
}

/// Replays one decompressed cell block whose first bucket is `first`, calling
/// `f(bucket, cell)` for every cell of the buckets in `b0..b1`, in row order.
/// `line_var(addr)` is the name of an untouched line (its first byte's).
pub(crate) fn replay(
    raw: &[u8],
    first: u64,
    b0: u64,
    b1: u64,
    max_age: u64,
    line_var: &dyn Fn(u64) -> u32,
    f: &mut dyn FnMut(u64, &[u8; CELL_BYTES]),
) -> Result<(), String> {
    let bad = || "damaged index block (memlens view --reindex rebuilds it)".to_string();
    let mut ws: BTreeMap<u64, Line> = BTreeMap::new();
    let mut p = 0usize;
    let mut bucket = first;
    let take = |p: &mut usize, n: usize| -> Result<&[u8], String> {
        let s = raw.get(*p..*p + n).ok_or_else(bad)?;
        *p += n;
        Ok(s)
    };
    let u64s =
        |s: &[u8], i: usize| u64::from_le_bytes(s[i * 8..i * 8 + 8].try_into().unwrap_or_default());
    let u32s =
        |s: &[u8], i: usize| u32::from_le_bytes(s[i * 4..i * 4 + 4].try_into().unwrap_or_default());
    let u16s = |s: &[u8], i: usize| u16::from_le_bytes([s[i * 2], s[i * 2 + 1]]);
    while p < raw.len() && bucket < b1 {
        let h = take(&mut p, 16)?;
        let ins = u64s(h, 0);
        let (n, m) = (u32s(h, 2) as usize, u32s(h, 3) as usize);
        let cols = take(&mut p, n.checked_mul(27).ok_or_else(bad)?)?;
        let (addrs, rest) = cols.split_at(8 * n);
        let (pcs, rest) = rest.split_at(4 * n);
        let (vars, rest) = rest.split_at(4 * n);
        let (loads, rest) = rest.split_at(2 * n);
        let (stores, rest) = rest.split_at(2 * n);
        let (used, rest) = rest.split_at(n);
        let (threads, rest) = rest.split_at(n);
        let (offs, dists) = rest.split_at(n);
        let mut a = 0u64;
        for i in 0..n {
            a = a.wrapping_add(u64s(addrs, i));
            let dist = u32s(dists, i);
            let touch = TouchRec {
                addr: a,
                pc: u32s(pcs, i),
                var: u32s(vars, i),
                loads: u16s(loads, i),
                stores: u16s(stores, i),
                used: used[i],
                thread: threads[i],
                off: offs[i],
                dist,
            };
            let stamp = ins.wrapping_sub(dist as u64);
            ws.insert(a, Line { used: used[i], thread: threads[i], stamp, bucket, touch });
        }
        let cols = take(&mut p, m.checked_mul(14).ok_or_else(bad)?)?;
        let (addrs, rest) = cols.split_at(8 * m);
        let (used, rest) = rest.split_at(m);
        let (threads, dists) = rest.split_at(m);
        a = 0;
        for i in 0..m {
            a = a.wrapping_add(u64s(addrs, i));
            let stamp = ins.wrapping_sub(u32s(dists, i) as u64);
            let l = Line {
                used: used[i],
                thread: threads[i],
                stamp,
                bucket: u64::MAX,
                touch: TouchRec::default(),
            };
            ws.insert(a, l);
        }
        if bucket >= b0 {
            // Lines whose age ran out have left the working set.
            ws.retain(|_, l| ins.wrapping_sub(l.stamp) < max_age);
            for (row, (&addr, l)) in ws.iter().enumerate() {
                let t = if l.bucket == bucket { Some(&l.touch) } else { None };
                let age_left = max_age.saturating_sub(ins.wrapping_sub(l.stamp));
                let mut c = [0u8; CELL_BYTES];
                c[0..8].copy_from_slice(&addr.to_le_bytes());
                c[16..20].copy_from_slice(&(row as u32).to_le_bytes());
                c[24] = l.used;
                c[25] = l.thread;
                // u128: a planted max_age cannot overflow it.
                c[26] = (age_left as u128 * 255 / max_age.max(1) as u128) as u8;
                match t {
                    Some(t) => {
                        c[8..12].copy_from_slice(&t.pc.to_le_bytes());
                        c[12..16].copy_from_slice(&t.var.to_le_bytes());
                        c[20..22].copy_from_slice(&t.loads.to_le_bytes());
                        c[22..24].copy_from_slice(&t.stores.to_le_bytes());
                        c[27] = u8::from(t.loads as u32 + t.stores as u32 > 0);
                        c[28] = t.off;
                    }
                    None => c[12..16].copy_from_slice(&line_var(addr).to_le_bytes()),
                }
                f(bucket, &c);
            }
        }
        bucket += 1;
    }
    Ok(())
}

/// The files of level `i`: cells, their block index and cell offsets, then the
/// window sums, their block index and record offsets.
fn level_files(i: usize) -> [String; 6] {
    ["cells", "blocks", "offsets", "window", "wblocks", "woffsets"].map(|f| format!("{f}{i}.bin"))
}

/// Keeps the index within `avail` bytes (beyond the files every index has): the
/// coarsest levels whose cells fit stay (the coarsest always), then their window
/// sums from the coarsest down while they fit; the rest is removed and the kept
/// levels renumbered from 0. `sizes` is `(cells, windows)` bytes per level.
pub(crate) fn fit(
    dir: &std::path::Path,
    levels: &mut Vec<serde_json::Value>,
    sizes: &[(u64, u64)],
    avail: u64,
) -> std::io::Result<()> {
    let n = sizes.len();
    let mut used = 0u64;
    let mut keep_from = n.saturating_sub(1);
    for i in (0..n).rev() {
        if i + 1 < n && used + sizes[i].0 > avail {
            break;
        }
        used += sizes[i].0;
        keep_from = i;
    }
    let mut windows_ok = true;
    for i in (keep_from..n).rev() {
        windows_ok &= !levels[i]["windows"].is_null() && used + sizes[i].1 <= avail;
        if windows_ok {
            used += sizes[i].1;
        } else {
            levels[i]["windows"] = serde_json::Value::Null;
            for f in &level_files(i)[3..] {
                let _ = std::fs::remove_file(dir.join(f));
            }
        }
    }
    for i in 0..keep_from {
        for f in level_files(i) {
            let _ = std::fs::remove_file(dir.join(f));
        }
    }
    for i in (keep_from..n).filter(|_| keep_from > 0) {
        for (from, to) in level_files(i).iter().zip(level_files(i - keep_from)) {
            match std::fs::rename(dir.join(from), dir.join(to)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    levels.drain(..keep_from);
    Ok(())
}
