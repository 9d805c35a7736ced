//! Reading an index back: metadata in memory, tiles and spans from disk per request.

use crate::index::LEVEL_FACTOR;
use crate::{Error, CELL_BYTES, SPAN_BYTES};
use serde_json::Value;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

struct Level {
    bucket: u64,
    offsets: Vec<u64>,
    cells: File,
}

/// An opened index.
pub struct Index {
    dir: PathBuf,
    meta_json: Vec<u8>,
    meta: Value,
    levels: Vec<Level>,
    spans: Vec<(File, u64)>,
    /// Distinct cache lines, sorted by address (the by-variable Y mode's rows).
    lines: Vec<u64>,
}

/// One flame-chart frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// First memory operation inside it.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// Index into `meta.functions`.
    pub func: u32,
    /// Thread.
    pub thread: u16,
    /// Call depth (0 outermost).
    pub depth: u16,
}

impl Index {
    /// Opens the index in `dir`.
    pub fn open(dir: &Path) -> Result<Index, Error> {
        let read = |name: &str| {
            let p = dir.join(name);
            std::fs::read(&p)
                .map_err(|e| Error::BadIndex(format!("cannot read {}: {e}", p.display())))
        };
        let meta_json = read("meta.json")?;
        let meta: Value = serde_json::from_slice(&meta_json)
            .map_err(|e| Error::BadIndex(format!("damaged index {}: {e}", dir.display())))?;
        if meta["version"] != crate::INDEX_VERSION {
            return Err(Error::BadIndex(format!(
                "{} is from another memlens version",
                dir.display()
            )));
        }
        let bad = || Error::BadIndex(format!("damaged index {}", dir.display()));
        let mut levels = Vec::new();
        for (i, lv) in meta["levels"].as_array().ok_or_else(bad)?.iter().enumerate() {
            let offsets: Vec<u64> = read(&format!("offsets{i}.bin"))?
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
                .collect();
            let p = dir.join(format!("cells{i}.bin"));
            let cells = File::open(&p)
                .map_err(|e| Error::BadIndex(format!("cannot open {}: {e}", p.display())))?;
            let len = cells.metadata().map(|m| m.len()).unwrap_or(0);
            if offsets.last().is_none_or(|&n| n * CELL_BYTES as u64 != len) {
                return Err(bad());
            }
            levels.push(Level {
                bucket: lv["bucket"].as_u64().ok_or_else(bad)?.max(1),
                offsets,
                cells,
            });
        }
        if levels.is_empty() {
            return Err(bad());
        }
        let mut spans = Vec::new();
        for (k, n) in meta["span_levels"].as_array().ok_or_else(bad)?.iter().enumerate() {
            let p = dir.join(format!("spans{k}.bin"));
            let f = File::open(&p)
                .map_err(|e| Error::BadIndex(format!("cannot open {}: {e}", p.display())))?;
            spans.push((f, n.as_u64().ok_or_else(bad)?));
        }
        let lines = read("lines.bin")?
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        Ok(Index { dir: dir.to_path_buf(), meta_json, meta, levels, spans, lines })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The metadata (summary, levels, names, source metrics, tables).
    pub fn meta(&self) -> &Value {
        &self.meta
    }

    /// The metadata as JSON text.
    pub fn meta_json(&self) -> &[u8] {
        &self.meta_json
    }

    /// Number of resolution levels (0 finest).
    pub fn levels(&self) -> usize {
        self.levels.len()
    }

    /// Operations per bucket at a level.
    pub fn bucket_size(&self, level: usize) -> Option<u64> {
        self.levels.get(level).map(|l| l.bucket)
    }

    /// The raw cells of buckets `b0..b1` of a level, as `(bucket, cells)` with
    /// [`CELL_BYTES`]-byte records. With `by_address`, each cell's row is the rank of its
    /// line among all lines of the trace instead of its working-set row. Only rows in
    /// `rows` are kept.
    pub fn tiles(
        &self,
        level: usize,
        b0: u64,
        b1: u64,
        by_address: bool,
        rows: std::ops::Range<u32>,
    ) -> Result<Vec<(u64, Vec<u8>)>, Error> {
        let lv =
            self.levels.get(level).ok_or_else(|| Error::Config(format!("no level {level}")))?;
        let nb = lv.offsets.len() as u64 - 1;
        let (b0, b1) = (b0.min(nb), b1.min(nb).max(b0.min(nb)));
        let (c0, c1) = (lv.offsets[b0 as usize], lv.offsets[b1 as usize]);
        let mut buf = vec![0u8; ((c1 - c0) as usize) * CELL_BYTES];
        lv.cells
            .read_exact_at(&mut buf, c0 * CELL_BYTES as u64)
            .map_err(|e| Error::Io(format!("cannot read tiles: {e}")))?;
        let mut out = Vec::with_capacity((b1 - b0) as usize);
        for b in b0..b1 {
            let s = ((lv.offsets[b as usize] - c0) as usize) * CELL_BYTES;
            let e = ((lv.offsets[b as usize + 1] - c0) as usize) * CELL_BYTES;
            let mut cells = Vec::with_capacity(e - s);
            for c in buf[s..e].chunks_exact(CELL_BYTES) {
                let mut c: [u8; CELL_BYTES] = c.try_into().unwrap_or([0; CELL_BYTES]);
                if by_address {
                    let addr = u64::from_le_bytes(c[0..8].try_into().unwrap_or_default());
                    let rank = self.lines.binary_search(&addr).unwrap_or_else(|i| i) as u32;
                    c[16..20].copy_from_slice(&rank.to_le_bytes());
                }
                let row = u32::from_le_bytes(c[16..20].try_into().unwrap_or_default());
                if rows.contains(&row) {
                    cells.extend_from_slice(&c);
                }
            }
            out.push((b, cells));
        }
        Ok(out)
    }

    /// Flame frames overlapping `t0..t1` that last at least `min_dur` operations
    /// (at most `limit`).
    pub fn spans(&self, t0: u64, t1: u64, min_dur: u64, limit: usize) -> Result<Vec<Span>, Error> {
        let mut out = Vec::new();
        for (k, (f, n)) in self.spans.iter().enumerate() {
            let upper = LEVEL_FACTOR.saturating_pow(k as u32 + 1);
            if upper <= min_dur {
                continue;
            }
            // Frames of this class start at most `upper` before t0.
            let from = t0.saturating_sub(upper);
            let (mut lo, mut hi) = (0u64, *n);
            while lo < hi {
                let mid = (lo + hi) / 2;
                if read_span(f, mid)?.start < from {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            // Read in blocks from the first candidate.
            let mut i = lo;
            'outer: while i < *n {
                let cnt = (*n - i).min(4096);
                let mut buf = vec![0u8; cnt as usize * SPAN_BYTES];
                f.read_exact_at(&mut buf, i * SPAN_BYTES as u64)
                    .map_err(|e| Error::Io(format!("cannot read spans: {e}")))?;
                for c in buf.chunks_exact(SPAN_BYTES) {
                    let s = parse_span(c);
                    if s.start > t1 {
                        break 'outer;
                    }
                    let overlaps = s.end > t0 || (s.end == s.start && s.start >= t0);
                    if overlaps && s.end - s.start >= min_dur {
                        out.push(s);
                        if out.len() >= limit {
                            return Ok(out);
                        }
                    }
                }
                i += cnt;
            }
        }
        Ok(out)
    }
}

fn parse_span(c: &[u8]) -> Span {
    let u64_at = |o: usize| u64::from_le_bytes(c[o..o + 8].try_into().unwrap_or_default());
    Span {
        start: u64_at(0),
        end: u64_at(8),
        func: u32::from_le_bytes(c[16..20].try_into().unwrap_or_default()),
        thread: u16::from_le_bytes(c[20..22].try_into().unwrap_or_default()),
        depth: u16::from_le_bytes(c[22..24].try_into().unwrap_or_default()),
    }
}

fn read_span(f: &File, i: u64) -> Result<Span, Error> {
    let mut b = [0u8; SPAN_BYTES];
    f.read_exact_at(&mut b, i * SPAN_BYTES as u64)
        .map_err(|e| Error::Io(format!("cannot read spans: {e}")))?;
    Ok(parse_span(&b))
}
