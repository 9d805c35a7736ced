//! Reading an index back: metadata in memory, tiles and spans from disk per request.

use crate::index::LEVEL_FACTOR;
use crate::sparse::{block_of, parse_blocks, read_block, replay};
use crate::{Error, CELL_BYTES, SPAN_BYTES, WINDOW_BYTES};
use serde_json::Value;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

struct Level {
    bucket: u64,
    /// Index of each bucket's first cell (and the total): what an answer costs.
    offsets: Vec<u64>,
    cells: File,
    /// `cellsN.bin`'s zstd blocks (see `sparse`).
    blocks: Vec<[u64; 3]>,
    /// Per-bucket code-address metrics (`windowN.bin`, `woffsetsN.bin`, their
    /// blocks in `wblocksN.bin`); absent for levels that grew too large.
    window: Option<(Vec<u64>, File, Vec<[u64; 3]>)>,
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

/// Which tile fields a [`Index::tiles_soa_parts`] answer carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TileFields {
    /// What drawing needs: row, line rank, bytes used, age, flags (11 bytes per cell).
    Draw,
    /// What hover and selection need: address, code address, name, loads, stores,
    /// thread, offset (22 bytes per cell).
    Detail,
}

/// Which cells a tile answer holds: those of buckets `buckets` of `level` (clamped
/// to the level) whose row is in `rows`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TileQuery {
    /// The level (0 is the finest).
    pub level: usize,
    /// Buckets of the level.
    pub buckets: std::ops::Range<u64>,
    /// Each cell's row is the rank of its line among all lines of the trace, instead
    /// of its working-set row.
    pub by_address: bool,
    /// Rows kept.
    pub rows: std::ops::Range<u32>,
}

impl TileQuery {
    /// Every cell of `buckets` of `level`, in working-set rows.
    pub fn all(level: usize, buckets: std::ops::Range<u64>) -> TileQuery {
        TileQuery { level, buckets, by_address: false, rows: 0..u32::MAX }
    }
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
    /// Each line's name (its first byte's), in `lines` order.
    line_vars: Vec<u32>,
    max_age: u64,
    lanes: crate::lanes::Lanes,
    /// The call tree and the heap over time.
    profile: crate::profile::Profile,
    /// Merged operation → ns (empty without time stamps).
    clock: Vec<(u64, u64)>,
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
            let nb = offsets.len().saturating_sub(1) as u64;
            let blocks = parse_blocks(&read(&format!("blocks{i}.bin"))?, nb, len);
            let Some(blocks) = blocks.filter(|_| sorted(&offsets) && !offsets.is_empty()) else {
                return Err(bad());
            };
            let window = match (
                std::fs::read(dir.join(format!("woffsets{i}.bin"))),
                File::open(dir.join(format!("window{i}.bin"))),
                std::fs::read(dir.join(format!("wblocks{i}.bin"))),
            ) {
                (Ok(o), Ok(f), Ok(wb)) => {
                    let o: Vec<u64> = o
                        .chunks_exact(8)
                        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
                        .collect();
                    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                    let wb = parse_blocks(&wb, nb, len);
                    let ok = o.len() == offsets.len() && sorted(&o);
                    wb.filter(|_| ok).map(|wb| (o, f, wb))
                }
                _ => None,
            };
            levels.push(Level {
                bucket: lv["bucket"].as_u64().ok_or_else(bad)?.max(1),
                offsets,
                cells,
                blocks,
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
        let lines: Vec<u64> = read("lines.bin")?
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        let line_vars: Vec<u32> = read("linevars.bin")?
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        if line_vars.len() != lines.len() {
            return Err(bad());
        }
        let max_age = meta["max_age"].as_u64().ok_or_else(bad)?;
        let lanes = crate::lanes::Lanes::open(dir, &meta)?;
        let profile = crate::profile::Profile::open(dir)?;
        let clock = lanes.op_clock();
        Ok(Index {
            dir: dir.to_path_buf(),
            meta_json,
            meta,
            levels,
            spans,
            lines,
            line_vars,
            max_age,
            lanes,
            profile,
            clock,
        })
    }

    /// The wall-clock lanes' stamps covering CLOCK_MONOTONIC `t0..t1` ns, about `n`
    /// per thread (`{"t0", "t1", "lanes": [{"thread", "stamps": [[ns, op, own op]]}]}`).
    pub fn lanes(&self, t0: u64, t1: u64, n: usize) -> Value {
        self.lanes.window(t0, t1, n)
    }

    /// The call tree and the heap over time.
    pub(crate) fn profile(&self) -> &crate::profile::Profile {
        &self.profile
    }

    /// Merged operation → CLOCK_MONOTONIC ns, from every thread's stamps (empty
    /// when the trace has none).
    pub(crate) fn clock(&self) -> &[(u64, u64)] {
        &self.clock
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
        let lv =
            self.levels.get(level).ok_or_else(|| Error::Config(format!("no level {level}")))?;
        let nb = lv.offsets.len() as u64 - 1;
        let (b0, b1) = (b0.min(nb), b1.min(nb).max(b0.min(nb)));
        let line_var = |addr: u64| self.line_vars.get(self.rank(addr) as usize).copied();
        let line_var = |addr: u64| line_var(addr).unwrap_or(0);
        let mut k = block_of(&lv.blocks, b0);
        // One block in memory at a time: memory does not grow with the range.
        while b0 < b1 && k + 1 < lv.blocks.len() && lv.blocks[k][0] < b1 {
            let raw = read_block(&lv.cells, &lv.blocks, k).map_err(Error::BadIndex)?;
            replay(&raw, lv.blocks[k][0], b0, b1, self.max_age, &line_var, &mut |b, c| {
                if by_address {
                    let mut c = *c;
                    let addr = u64::from_le_bytes(c[0..8].try_into().unwrap_or_default());
                    c[16..20].copy_from_slice(&self.rank(addr).to_le_bytes());
                    f(b, &c);
                } else {
                    f(b, c);
                }
            })
            .map_err(Error::BadIndex)?;
            k += 1;
        }
        Ok(())
    }

    /// The raw cells `q` asks for, as `(bucket, cells)` with [`CELL_BYTES`]-byte
    /// records.
    pub fn tiles(&self, q: &TileQuery) -> Result<Vec<(u64, Vec<u8>)>, Error> {
        let (level, b0, b1, by_address) = (q.level, q.buckets.start, q.buckets.end, q.by_address);
        let nb = self.levels.get(level).map_or(0, |l| l.offsets.len() as u64 - 1);
        let (b0, b1) = (b0.min(nb), b1.min(nb).max(b0.min(nb)));
        let mut out: Vec<(u64, Vec<u8>)> = (b0..b1).map(|b| (b, Vec::new())).collect();
        self.for_each_cell(level, b0, b1, by_address, |b, c| {
            let row = u32::from_le_bytes(c[16..20].try_into().unwrap_or_default());
            if q.rows.contains(&row) {
                out[(b - b0) as usize].1.extend_from_slice(c);
            }
        })?;
        Ok(out)
    }

    /// Rank of a line address among all lines of the trace (its by-address row).
    pub fn rank(&self, line_addr: u64) -> u32 {
        self.lines.binary_search(&line_addr).unwrap_or_else(|i| i) as u32
    }

    /// The cells `q` asks for as structure-of-arrays little-endian columns, so
    /// the browser views them as typed arrays without decoding: `u32 buckets`, the
    /// bucket numbers (`u32` each), the first cell of each bucket and the total
    /// (`u32` each), then per field one column over all cells. [`TileFields::Draw`]:
    /// `row u32, rank u32, used u8, age u8, flags u8` (bit 0 touched, bit 1 stored).
    /// [`TileFields::Detail`]: `addr_lo u32, addr_hi u32, pc u32, name u32, loads u16,
    /// stores u16, thread u8, offset u8`. Columns start 4-byte aligned. Returned in
    /// pieces (the header, then each column padded to 4 bytes), so a server can send
    /// them without copying them into one buffer.
    pub fn tiles_soa_parts(
        &self,
        q: &TileQuery,
        fields: TileFields,
    ) -> Result<Vec<Vec<u8>>, Error> {
        let (level, b0, b1, by_address) = (q.level, q.buckets.start, q.buckets.end, q.by_address);
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
            if !q.rows.contains(&row) {
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
            let Some((offs, _, _)) = &lv.window else { continue };
            let nb = offs.len() as u64 - 1;
            let (b0, b1) = ((t0 / lv.bucket).min(nb), t1.div_ceil(lv.bucket).min(nb));
            let b1 = b1.max(b0);
            pick = Some((li, b0, b1));
            if offs[b1 as usize] - offs[b0 as usize] <= max_records {
                break;
            }
        }
        let Some((li, b0, b1)) = pick else { return Ok(None) };
        let Some((offs, f, blocks)) = &self.levels[li].window else { return Ok(None) };
        let mut per: std::collections::HashMap<u32, PcWindow> = Default::default();
        let mut k = block_of(blocks, b0);
        while b0 < b1 && k + 1 < blocks.len() && blocks[k][0] < b1 {
            let raw = read_block(f, blocks, k).map_err(Error::BadIndex)?;
            let fb = blocks[k][0] as usize;
            let (x, y) = (b0.max(blocks[k][0]) as usize, b1.min(blocks[k + 1][0]) as usize);
            let at = |b: usize| (offs[b] - offs[fb]) as usize * WINDOW_BYTES;
            let recs = raw.get(at(x)..at(y)).ok_or_else(|| {
                Error::BadIndex("damaged window sums (memlens view --reindex rebuilds them)".into())
            })?;
            for c in recs.chunks_exact(WINDOW_BYTES) {
                let u = |o: usize| u32::from_le_bytes(c[o..o + 4].try_into().unwrap_or_default());
                let e = per.entry(u(0)).or_default();
                e.loads += u(4) as u64;
                e.stores += u(8) as u64;
                e.shared += u(12) as u64;
                e.misses += u(16) as u64;
                e.mem += u(20) as u64;
                e.bytes += u64::from_le_bytes(c[24..32].try_into().unwrap_or_default());
            }
            k += 1;
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
    use crate::{build, BuildOptions, Index, TileFields, TileQuery, CELL_BYTES};
    use memlens_analysis::NoNames;
    use memlens_format::TraceReader;

    /// The working set as the viewer defines it, simulated directly (no ring, no
    /// sparse form): per bucket of `bs` operations, every live line in address order
    /// with `(addr, row, loads, used, age, flags, off)`.
    fn reference(addrs: &[u64], bs: usize, max_age: u64) -> Vec<Vec<[u64; 7]>> {
        use std::collections::{BTreeMap, HashMap};
        let mut ins = 0u64;
        // line → (stamp, mask)
        let mut live: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        let mut out = Vec::new();
        for chunk in addrs.chunks(bs) {
            let mut touch: HashMap<u64, (u64, u64)> = HashMap::new();
            for &a in chunk {
                let (line, off) = (a >> 6, a & 63);
                let bits = 0xffu64 << off;
                if let Some(e) = live.get_mut(&line) {
                    *e = (ins, e.1 | bits);
                } else {
                    ins += 1;
                    live.retain(|_, e| ins - e.0 < max_age);
                    live.insert(line, (ins, bits));
                }
                let t = touch.entry(line).or_default();
                *t = (t.0 + 1, off);
            }
            let cells = live
                .iter()
                .enumerate()
                .map(|(row, (&line, &(stamp, mask)))| {
                    let (loads, off) = touch.get(&line).copied().unwrap_or_default();
                    let age = (max_age - (ins - stamp)) * 255 / max_age;
                    let used = mask.count_ones() as u64;
                    [line << 6, row as u64, loads, used, age, u64::from(loads > 0), off]
                })
                .collect();
            out.push(cells);
        }
        out
    }

    fn fields(c: &[u8]) -> [u64; 7] {
        let u = |r: std::ops::Range<usize>| {
            let mut b = [0u8; 8];
            b[..r.len()].copy_from_slice(&c[r]);
            u64::from_le_bytes(b)
        };
        [u(0..8), u(16..20), u(20..22), u(24..25), u(26..27), u(27..28), u(28..29)]
    }

    /// The cells rebuilt from the sparse blocks (many blocks, many key frames, lines
    /// entering and leaving) are exactly the working set of every bucket, read from
    /// any bucket on; a coarse bucket is the finest bucket at its end with the touches
    /// of its finer buckets summed; the drawing columns agree with the cells.
    #[test]
    fn sparse_blocks_rebuild_the_working_set_of_every_bucket() {
        // A hot set of 40 lines and a wandering one: lines enter, age and leave.
        let addrs: Vec<u64> = (0..200_000u64)
            .map(|i| {
                if i % 3 == 0 {
                    0x10000 + 64 * (i % 40)
                } else {
                    0x100000 + 64 * ((i * 7919) % 5000) + 8 * (i % 8)
                }
            })
            .collect();
        let path = trace_of("blocks", &addrs);
        let dir = crate::index_dir(&path);
        let r = TraceReader::open(&path).unwrap();
        let opts = BuildOptions { max_age: 64, ..BuildOptions::default() };
        build(&r, &path, &dir, &NoNames, opts, &mut |_, _| {}).unwrap();
        let ix = Index::open(&dir).unwrap();
        assert_eq!(ix.bucket_size(0), Some(4));
        assert!(ix.levels[0].blocks.len() > 4, "several blocks: {}", ix.levels[0].blocks.len());
        let want = reference(&addrs, 4, 64);
        let nb = ix.levels[0].offsets.len() as u64 - 1;
        assert_eq!(nb as usize, want.len());
        let t = ix.tiles(&TileQuery::all(0, 0..nb)).unwrap();
        let got: Vec<Vec<[u64; 7]>> =
            t.iter().map(|(_, c)| c.chunks_exact(CELL_BYTES).map(fields).collect()).collect();
        for (b, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "bucket {b}");
        }
        assert_eq!(
            ix.cell_count(0, 0, nb).unwrap() as usize,
            want.iter().map(Vec::len).sum::<usize>()
        );
        // Any window, from inside any block.
        for (b0, b1) in [(1, 2), (777, 1900), (nb - 3, nb), (20_000, 40_000)] {
            let part = ix.tiles(&TileQuery::all(0, b0..b1)).unwrap();
            assert_eq!(part[..], t[b0 as usize..b1 as usize], "{b0}..{b1}");
        }
        // Coarse levels: the working set at the bucket's end, touches summed.
        for level in 1..ix.levels() {
            let f = (ix.bucket_size(level).unwrap() / 4) as usize;
            let n = ix.levels[level].offsets.len() as u64 - 1;
            for (b, cells) in ix.tiles(&TileQuery::all(level, 0..n)).unwrap() {
                let last = ((b as usize + 1) * f).min(want.len()) - 1;
                let mut w = want[last].clone();
                for c in w.iter_mut() {
                    let loads: u64 = (b as usize * f..=last)
                        .flat_map(|k| want[k].iter().filter(|x| x[0] == c[0]))
                        .map(|x| x[2])
                        .sum();
                    c[2] = loads.min(u16::MAX as u64);
                    c[5] = u64::from(loads > 0);
                    c[6] = 0; // the offset of the last touch: checked at the finest level
                }
                let g: Vec<[u64; 7]> = cells
                    .chunks_exact(CELL_BYTES)
                    .map(|c| {
                        let mut x = fields(c);
                        x[6] = 0;
                        x
                    })
                    .collect();
                assert_eq!(g, w, "level {level} bucket {b}");
            }
        }
        // A row filter keeps rows 5..10 of each bucket.
        let f = ix.tiles(&TileQuery { rows: 5..10, ..TileQuery::all(0, 100..2100) }).unwrap();
        assert!(f.iter().all(|(_, c)| c.len() == 5 * CELL_BYTES));
        // Drawing columns across block boundaries: rows and ranks as in the cells.
        let (b0, b1) = (1000, 40000);
        let soa =
            ix.tiles_soa_parts(&TileQuery::all(0, b0..b1), TileFields::Draw).unwrap().concat();
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
        // Small beside the table of every cell it stands for.
        let size: u64 =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum();
        let full: u64 = (0..ix.levels()).map(|l| ix.levels[l].offsets.last().unwrap() * 32).sum();
        assert!(size * 20 < full, "{size} B for {full} B of cells");
        // A block claiming a huge decompressed size is refused, never allocated; a
        // block whose bytes are not what its entry says fails the read, not the server.
        let good = std::fs::read(dir.join("blocks1.bin")).unwrap();
        let mut blocks = good.clone();
        blocks[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
        std::fs::write(dir.join("blocks1.bin"), &blocks).unwrap();
        let e = Index::open(&dir).err().expect("a planted block size opened").to_string();
        assert!(e.contains("damaged index") && e.contains("--reindex"), "{e}");
        blocks[16..24].copy_from_slice(
            &(u64::from_le_bytes(good[16..24].try_into().unwrap()) + 1).to_le_bytes(),
        );
        std::fs::write(dir.join("blocks1.bin"), &blocks).unwrap();
        let e = Index::open(&dir).unwrap().tiles(&TileQuery::all(1, 0..4)).unwrap_err();
        assert!(e.to_string().contains("damaged index block"), "{e}");
        std::fs::write(dir.join("blocks1.bin"), &good).unwrap();
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
