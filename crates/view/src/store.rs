//! Reading an index back: metadata in memory, tiles and spans from disk per request.

use crate::index::LEVEL_FACTOR;
use crate::{Error, CELL_BYTES, SPAN_BYTES, WINDOW_BYTES};
use serde_json::Value;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

struct Level {
    bucket: u64,
    offsets: Vec<u64>,
    cells: File,
    /// Per-bucket code-address metrics (`windowN.bin`, `woffsetsN.bin`); absent in
    /// indexes written before they existed or for levels that grew too large.
    window: Option<(Vec<u64>, File)>,
}

/// What one code address did within a time window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PcWindow {
    /// Loads.
    pub loads: u64,
    /// Stores.
    pub stores: u64,
    /// Bytes accessed.
    pub bytes: u64,
    /// Accesses to a line another thread touched before.
    pub shared: u64,
    /// Accesses that missed the first cache level (with a cachesim annotation).
    pub misses: u64,
    /// Accesses that went to memory (missed the last level).
    pub mem: u64,
}

/// The level a window was summed at, and per code address its sums (sorted by pc id).
pub type WindowSums = (usize, Vec<(u32, PcWindow)>);

/// Which tile fields a [`Index::tiles_soa`] answer carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TileFields {
    /// What drawing needs: row, line rank, bytes used, age, flags (11 bytes per cell).
    Draw,
    /// What hover and selection need: address, code address, name, loads, stores,
    /// thread, offset (22 bytes per cell).
    Detail,
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
        let bad = || {
            Error::BadIndex(format!(
                "damaged index {} (memlens view --reindex rebuilds it)",
                dir.display()
            ))
        };
        // Offsets must not run backwards: a planted or damaged file would otherwise make
        // a bucket's cell count underflow.
        let sorted = |o: &[u64]| o.windows(2).all(|w| w[0] <= w[1]);
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
            if !sorted(&offsets)
                || offsets.last().is_none_or(|&n| n.checked_mul(CELL_BYTES as u64) != Some(len))
            {
                return Err(bad());
            }
            let window = match (
                std::fs::read(dir.join(format!("woffsets{i}.bin"))),
                File::open(dir.join(format!("window{i}.bin"))),
            ) {
                (Ok(o), Ok(f)) => {
                    let o: Vec<u64> = o
                        .chunks_exact(8)
                        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
                        .collect();
                    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                    let ok = o.len() == offsets.len()
                        && sorted(&o)
                        && o.last()
                            .is_some_and(|&n| n.checked_mul(WINDOW_BYTES as u64) == Some(len));
                    ok.then_some((o, f))
                }
                _ => None,
            };
            levels.push(Level {
                bucket: lv["bucket"].as_u64().ok_or_else(bad)?.max(1),
                offsets,
                cells,
                window,
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

    /// Number of cells in buckets `b0..b1` of a level (clamped to the level), before
    /// any row filter: what an answer over them costs, known without reading them.
    pub fn cell_count(&self, level: usize, b0: u64, b1: u64) -> Result<u64, Error> {
        let lv =
            self.levels.get(level).ok_or_else(|| Error::Config(format!("no level {level}")))?;
        let nb = lv.offsets.len() as u64 - 1;
        let (b0, b1) = (b0.min(nb), b1.min(nb).max(b0.min(nb)));
        Ok(lv.offsets[b1 as usize] - lv.offsets[b0 as usize])
    }

    /// Calls `f(bucket, cell)` for every cell of buckets `b0..b1` (clamped), reading
    /// the file in blocks so that memory does not grow with the range. With
    /// `by_address`, the cell's row is its line's rank among all lines.
    pub fn for_each_cell(
        &self,
        level: usize,
        b0: u64,
        b1: u64,
        by_address: bool,
        mut f: impl FnMut(u64, &[u8; CELL_BYTES]),
    ) -> Result<(), Error> {
        const BLOCK: u64 = 1 << 16;
        let lv =
            self.levels.get(level).ok_or_else(|| Error::Config(format!("no level {level}")))?;
        let nb = lv.offsets.len() as u64 - 1;
        let (b0, b1) = (b0.min(nb), b1.min(nb).max(b0.min(nb)));
        let (c0, c1) = (lv.offsets[b0 as usize], lv.offsets[b1 as usize]);
        let mut buf = vec![0u8; (c1 - c0).min(BLOCK) as usize * CELL_BYTES];
        let (mut b, mut c) = (b0, c0);
        while c < c1 {
            let n = (c1 - c).min(BLOCK);
            let buf = &mut buf[..n as usize * CELL_BYTES];
            lv.cells
                .read_exact_at(buf, c * CELL_BYTES as u64)
                .map_err(|e| Error::Io(format!("cannot read tiles: {e}")))?;
            for (k, raw) in buf.chunks_exact(CELL_BYTES).enumerate() {
                while b + 1 < b1 && lv.offsets[b as usize + 1] <= c + k as u64 {
                    b += 1;
                }
                let mut cell: [u8; CELL_BYTES] = raw.try_into().unwrap_or([0; CELL_BYTES]);
                if by_address {
                    let addr = u64::from_le_bytes(cell[0..8].try_into().unwrap_or_default());
                    cell[16..20].copy_from_slice(&self.rank(addr).to_le_bytes());
                }
                f(b, &cell);
            }
            c += n;
        }
        Ok(())
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
        let nb = self.levels.get(level).map_or(0, |l| l.offsets.len() as u64 - 1);
        let (b0, b1) = (b0.min(nb), b1.min(nb).max(b0.min(nb)));
        let mut out: Vec<(u64, Vec<u8>)> = (b0..b1).map(|b| (b, Vec::new())).collect();
        self.for_each_cell(level, b0, b1, by_address, |b, c| {
            let row = u32::from_le_bytes(c[16..20].try_into().unwrap_or_default());
            if rows.contains(&row) {
                out[(b - b0) as usize].1.extend_from_slice(c);
            }
        })?;
        Ok(out)
    }

    /// Rank of a line address among all lines of the trace (its by-address row).
    pub fn rank(&self, line_addr: u64) -> u32 {
        self.lines.binary_search(&line_addr).unwrap_or_else(|i| i) as u32
    }

    /// Buckets `b0..b1` of a level as structure-of-arrays little-endian columns, so
    /// the browser views them as typed arrays without decoding: `u32 buckets`, the
    /// bucket numbers (`u32` each), the first cell of each bucket and the total
    /// (`u32` each), then per field one column over all cells. [`TileFields::Draw`]:
    /// `row u32, rank u32, used u8, age u8, flags u8` (bit 0 touched, bit 1 stored).
    /// [`TileFields::Detail`]: `addr_lo u32, addr_hi u32, pc u32, name u32, loads u16,
    /// stores u16, thread u8, offset u8`. Columns start 4-byte aligned.
    pub fn tiles_soa(
        &self,
        level: usize,
        b0: u64,
        b1: u64,
        by_address: bool,
        rows: std::ops::Range<u32>,
        fields: TileFields,
    ) -> Result<Vec<u8>, Error> {
        Ok(self.tiles_soa_parts(level, b0, b1, by_address, rows, fields)?.concat())
    }

    /// [`Index::tiles_soa`] in pieces (the header, then each column padded to 4
    /// bytes), so a server can send them without copying them into one buffer.
    pub fn tiles_soa_parts(
        &self,
        level: usize,
        b0: u64,
        b1: u64,
        by_address: bool,
        rows: std::ops::Range<u32>,
        fields: TileFields,
    ) -> Result<Vec<Vec<u8>>, Error> {
        // (column, cell byte range) of the plain copied columns.
        let plain: &[std::ops::Range<usize>] = match fields {
            TileFields::Draw => &[16..20, 24..25, 26..27],
            TileFields::Detail => &[0..4, 4..8, 8..12, 12..16, 20..22, 22..24, 25..26, 28..29],
        };
        let mut cols: Vec<Vec<u8>> = vec![Vec::new(); plain.len()];
        let (mut ranks, mut flags) = (Vec::new(), Vec::new());
        let mut buckets: Vec<(u64, u32)> = Vec::new();
        // A bucket's cells are in address order: gallop from the last rank instead of
        // a full binary search per cell.
        let mut lo = 0usize;
        let lines = &self.lines;
        self.for_each_cell(level, b0, b1, false, |b, c| {
            if buckets.last().is_none_or(|x| x.0 != b) {
                buckets.push((b, 0));
                lo = 0;
            }
            let addr = u64::from_le_bytes(c[0..8].try_into().unwrap_or_default());
            let row = if by_address {
                self.rank(addr)
            } else {
                u32::from_le_bytes(c[16..20].try_into().unwrap_or_default())
            };
            if !rows.contains(&row) {
                return;
            }
            if let Some(x) = buckets.last_mut() {
                x.1 += 1;
            }
            let mut c = *c;
            c[16..20].copy_from_slice(&row.to_le_bytes());
            for (col, r) in cols.iter_mut().zip(plain) {
                col.extend_from_slice(&c[r.clone()]);
            }
            if fields == TileFields::Draw {
                if lo >= lines.len() || lines[lo] > addr {
                    lo = 0;
                }
                let mut step = 1;
                while lo + step < lines.len() && lines[lo + step] < addr {
                    lo += step;
                    step *= 2;
                }
                let end = (lo + step + 1).min(lines.len());
                lo += lines[lo..end].partition_point(|&x| x < addr);
                ranks.extend_from_slice(&(lo as u32).to_le_bytes());
                let stored = u16::from_le_bytes([c[22], c[23]]) > 0;
                flags.push((c[27] & 1) | (u8::from(stored) << 1));
            }
        })?;
        // Buckets without cells (after the row filter) still get their entry.
        let nb = self.levels.get(level).map_or(0, |l| l.offsets.len() as u64 - 1);
        let (b0, b1) = (b0.min(nb), b1.min(nb).max(b0.min(nb)));
        let mut all = Vec::with_capacity((b1 - b0) as usize);
        let mut it = buckets.into_iter().peekable();
        for b in b0..b1 {
            let n =
                if it.peek().is_some_and(|x| x.0 == b) { it.next().map_or(0, |x| x.1) } else { 0 };
            all.push((b, n));
        }
        let mut head = Vec::with_capacity(8 + all.len() * 8);
        head.extend_from_slice(&(all.len() as u32).to_le_bytes());
        for (b, _) in &all {
            head.extend_from_slice(&(*b as u32).to_le_bytes());
        }
        let mut start = 0u32;
        for (_, n) in &all {
            head.extend_from_slice(&start.to_le_bytes());
            start += n;
        }
        head.extend_from_slice(&start.to_le_bytes());
        let mut parts = vec![head];
        if fields == TileFields::Draw {
            let mut it = cols.into_iter();
            parts.extend(it.next());
            parts.push(ranks);
            parts.extend(it);
            parts.push(flags);
        } else {
            parts.extend(cols);
        }
        // The u32 columns come first, so only the end needs padding to keep the answer
        // a whole number of words.
        let len: usize = parts.iter().map(Vec::len).sum();
        if let Some(last) = parts.last_mut() {
            last.resize(last.len() + (4 - len % 4) % 4, 0);
        }
        Ok(parts)
    }

    /// Per code address (its index in `meta.pcs`), what happened in operations
    /// `t0..t1`, rounded outwards to whole buckets of the finest level that has
    /// window metrics and answers with at most `max_records` records; the level used
    /// comes first. `None` when the index has no window metrics.
    pub fn window(&self, t0: u64, t1: u64, max_records: u64) -> Result<Option<WindowSums>, Error> {
        let mut pick = None;
        for (li, lv) in self.levels.iter().enumerate() {
            let Some((offs, _)) = &lv.window else { continue };
            let nb = offs.len() as u64 - 1;
            let (b0, b1) = ((t0 / lv.bucket).min(nb), t1.div_ceil(lv.bucket).min(nb));
            let b1 = b1.max(b0);
            pick = Some((li, b0, b1));
            if offs[b1 as usize] - offs[b0 as usize] <= max_records {
                break;
            }
        }
        let Some((li, b0, b1)) = pick else { return Ok(None) };
        let Some((offs, f)) = &self.levels[li].window else { return Ok(None) };
        let (r0, r1) = (offs[b0 as usize], offs[b1 as usize]);
        let mut per: std::collections::HashMap<u32, PcWindow> = Default::default();
        let mut r = r0;
        while r < r1 {
            let cnt = (r1 - r).min(1 << 16);
            let mut buf = vec![0u8; cnt as usize * WINDOW_BYTES];
            f.read_exact_at(&mut buf, r * WINDOW_BYTES as u64)
                .map_err(|e| Error::Io(format!("cannot read window metrics: {e}")))?;
            for c in buf.chunks_exact(WINDOW_BYTES) {
                let u = |o: usize| u32::from_le_bytes(c[o..o + 4].try_into().unwrap_or_default());
                let e = per.entry(u(0)).or_default();
                e.loads += u(4) as u64;
                e.stores += u(8) as u64;
                e.shared += u(12) as u64;
                e.misses += u(16) as u64;
                e.mem += u(20) as u64;
                e.bytes += u64::from_le_bytes(c[24..32].try_into().unwrap_or_default());
            }
            r += cnt;
        }
        let mut v: Vec<(u32, PcWindow)> = per.into_iter().collect();
        v.sort_unstable_by_key(|x| x.0);
        Ok(Some((li, v)))
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

#[cfg(test)]
mod tests {
    use crate::index::tests::trace_of;
    use crate::{build, BuildOptions, Index, TileFields, CELL_BYTES};
    use memlens_analysis::NoNames;
    use memlens_format::TraceReader;

    /// Cells read in blocks (many blocks here) are exactly the file's, bucket by
    /// bucket, and the drawing columns agree with them.
    #[test]
    fn block_reads_give_the_cells_of_the_file() {
        // 40 lines round and round: 40 cells per bucket, ~1.2 M cells in all.
        let addrs: Vec<u64> = (0..30_000u64).map(|i| 0x10000 + 64 * (i % 40)).collect();
        let path = trace_of("blocks", &addrs);
        let dir = crate::index_dir(&path);
        let r = TraceReader::open(&path).unwrap();
        build(&r, &path, &dir, &NoNames, BuildOptions::default(), &mut |_, _| {}).unwrap();
        let ix = Index::open(&dir).unwrap();
        let file = std::fs::read(dir.join("cells0.bin")).unwrap();
        let nb = ix.levels[0].offsets.len() as u64 - 1;
        assert!(file.len() / CELL_BYTES > 4 << 16, "several blocks");
        assert_eq!(ix.cell_count(0, 0, nb).unwrap() as usize, file.len() / CELL_BYTES);
        let t = ix.tiles(0, 0, nb, false, 0..u32::MAX).unwrap();
        assert_eq!(t.len() as u64, nb);
        assert_eq!(t.iter().flat_map(|(_, c)| c.iter().copied()).collect::<Vec<u8>>(), file);
        for (b, c) in &t {
            let off = &ix.levels[0].offsets;
            assert_eq!(c.len() as u64, (off[*b as usize + 1] - off[*b as usize]) * 32);
        }
        // A row filter keeps rows 5..10 of each bucket.
        let f = ix.tiles(0, 100, 2100, false, 5..10).unwrap();
        assert!(f.iter().all(|(_, c)| c.len() == 5 * CELL_BYTES));
        // Drawing columns across block boundaries: rows and ranks as in the cells.
        let (b0, b1) = (1000, 4000);
        let soa = ix.tiles_soa(0, b0, b1, false, 0..u32::MAX, TileFields::Draw).unwrap();
        let u = |k: usize| u32::from_le_bytes(soa[k * 4..k * 4 + 4].try_into().unwrap());
        let nbk = (b1 - b0) as usize;
        assert_eq!(u(0) as usize, nbk);
        let n = u(1 + nbk + nbk) as usize;
        let cells: Vec<&[u8]> = t[b0 as usize..b1 as usize]
            .iter()
            .flat_map(|(_, c)| c.chunks_exact(CELL_BYTES))
            .collect();
        assert_eq!(n, cells.len());
        let col = 4 * (2 + 2 * nbk);
        for (k, c) in cells.iter().enumerate() {
            let row = u32::from_le_bytes(c[16..20].try_into().unwrap());
            let addr = u64::from_le_bytes(c[0..8].try_into().unwrap());
            assert_eq!(u(col / 4 + k), row);
            assert_eq!(u(col / 4 + n + k), ix.rank(addr));
        }
        assert_eq!(soa.len(), (col + 11 * n).div_ceil(4) * 4);
        // Offsets that run backwards (planted or damaged) are refused at open, with
        // what to do, instead of underflowing later.
        let mut off = std::fs::read(dir.join("offsets0.bin")).unwrap();
        off[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        std::fs::write(dir.join("offsets0.bin"), off).unwrap();
        let e = Index::open(&dir).err().expect("a damaged index opened").to_string();
        assert!(e.contains("damaged index") && e.contains("--reindex"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_file(&path).unwrap();
    }
}
