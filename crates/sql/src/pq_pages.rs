//! The `accesses` and `calls` files' column chunks, encoded here.
//!
//! parquet-rs's generic column writer tops out near 13 M rows/s on one core
//! whatever the settings (levels, statistics and page-size checks per value),
//! an eighth of what the export must reach. These tables only hold unsigned
//! integers, a three-word `kind` and a flag, so their pages are simple to encode
//! straight from the Arrow arrays: integers delta-binary-packed (a loop's
//! addresses and `seq` take a few bits a row), `kind` through a dictionary with
//! run-length indices, flags bit-packed, each page zstd-compressed. parquet-rs
//! still writes the page headers, the footer and the Arrow schema, so any
//! Parquet reader (pyarrow, DuckDB, Spark, DataFusion) reads the files.
//!
//! Pages are encoded as the batches arrive: each column fills one page of
//! [`PAGE_ROWS`] rows at a time (in the cache) and keeps only the compressed
//! pages until its row group is written; no column of a row group is ever
//! gathered whole.

use crate::run_rows::{RowSeg, SegRows};
use crate::Error;
use bytes::Bytes;
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Int8Type, SchemaRef, UInt32Type, UInt64Type};
use parquet::arrow::{add_encoded_arrow_schema_to_metadata, ArrowSchemaConverter};
use parquet::basic::{Compression, Encoding, EncodingMask, ZstdLevel};
use parquet::column::page::{CompressedPage, Page, PageWriter};
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::file::properties::WriterProperties;
use parquet::file::statistics::{Statistics, ValueStatistics};
use parquet::file::writer::{SerializedFileWriter, SerializedPageWriter, TrackedWrite};
use parquet::schema::types::ColumnDescPtr;
use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;

/// Rows per data page: large enough for zstd, small enough to skip by.
const PAGE_ROWS: usize = 1 << 16;
/// The zstd level of every page (as the ArrowWriter path used).
const ZSTD_LEVEL: i32 = 1;

/// One Parquet file written from batches of the `accesses` or `calls` schema.
pub(crate) struct PageFile {
    w: SerializedFileWriter<File>,
    schema: SchemaRef,
    cols: Vec<Col>,
    rows: usize,
    row_group: usize,
    z: zstd::bulk::Compressor<'static>,
    /// The row at each place of the batch being written (scratch).
    perm: Vec<u32>,
    /// A page's bytes before compression (scratch).
    buf: Vec<u8>,
    /// The last column is finished at the end (see [`PageFile::deferring_last`]).
    defer: Option<Deferred>,
}

/// The last column's values as written, and the row groups waiting for them.
#[derive(Default)]
struct Deferred {
    values: Vec<u64>,
    groups: Vec<(Vec<(Bytes, ColumnCloseResult)>, usize)>,
}

impl PageFile {
    /// A writer of batches of `schema` (text as `Dictionary(Int8, Utf8)`, stored
    /// as plain `Utf8` in `plain`, the schema readers see) into `file`.
    pub(crate) fn new(
        file: File,
        schema: SchemaRef,
        plain: &SchemaRef,
        row_group: usize,
    ) -> Result<PageFile, Error> {
        let level = ZstdLevel::try_new(ZSTD_LEVEL).map_err(perr)?;
        let mut props =
            WriterProperties::builder().set_compression(Compression::ZSTD(level)).build();
        add_encoded_arrow_schema_to_metadata(plain, &mut props);
        let pschema = ArrowSchemaConverter::new().convert(plain).map_err(perr)?;
        let w = SerializedFileWriter::new(file, pschema.root_schema_ptr(), Arc::new(props))
            .map_err(perr)?;
        let z = zstd::bulk::Compressor::new(ZSTD_LEVEL)
            .map_err(|e| Error::Input(format!("zstd: {e}")))?;
        let descrs = w.schema_descr().columns().to_vec();
        if descrs.len() != schema.fields().len() {
            return Err(Error::Input("a nested schema".into()));
        }
        let mut cols = Vec::with_capacity(descrs.len());
        for (f, d) in schema.fields().iter().zip(descrs) {
            let ty = match f.data_type() {
                DataType::UInt64 => Ty::Int { bits32: false },
                DataType::UInt32 => Ty::Int { bits32: true },
                DataType::Dictionary(k, v) if **k == DataType::Int8 && **v == DataType::Utf8 => {
                    Ty::Words
                }
                DataType::Boolean => Ty::Bool,
                other => {
                    return Err(Error::Input(format!("no page encoder for a column of {other}")))
                }
            };
            cols.push(Col::new(d, ty));
        }
        Ok(PageFile {
            w,
            schema,
            cols,
            rows: 0,
            row_group,
            z,
            perm: Vec::new(),
            buf: Vec::new(),
            defer: None,
        })
    }

    /// The last column (an integer one without nulls) is kept as written and
    /// finished by [`PageFile::close_with`], which rewrites it first: a column
    /// that depends on what comes after the file's rows (a call's depth
    /// depends on every earlier part of its stream). The other columns are
    /// encoded as they come; the row groups wait, compressed, for the last one.
    pub(crate) fn deferring_last(mut self) -> PageFile {
        self.defer = Some(Deferred::default());
        self
    }

    /// Adds a batch, row `i` going to place `order[i]` among the batch's rows
    /// (a permutation; None: as they are); a row group is written once
    /// `row_group` rows are waiting.
    pub(crate) fn write(&mut self, b: RecordBatch, order: Option<Vec<u32>>) -> Result<(), Error> {
        if b.schema().fields() != self.schema.fields() {
            return Err(Error::Input("a batch of another schema".into()));
        }
        let n = b.num_rows();
        let perm = match order {
            Some(o) => {
                if o.len() != n {
                    return Err(Error::Input("an order of another length".into()));
                }
                // u32::MAX: a place no row took (the order is not a permutation)
                self.perm.clear();
                self.perm.resize(n, u32::MAX);
                for (row, &at) in o.iter().enumerate() {
                    match self.perm.get_mut(at as usize) {
                        Some(p) if *p == u32::MAX => *p = row as u32,
                        _ => return Err(Error::Input("an order that is no permutation".into())),
                    }
                }
                Some(&self.perm[..])
            }
            None => None,
        };
        let last = self.cols.len() - 1;
        for (ci, col) in self.cols.iter_mut().enumerate() {
            let mut piece = Piece::of(b.column(ci).as_ref(), &mut col.words)?;
            if let Some(d) = self.defer.as_mut().filter(|_| ci == last) {
                let rows = |k: usize| perm.map_or(k, |p| p[k] as usize);
                match piece {
                    Piece::U64(v, None) => d.values.extend((0..n).map(|k| v[rows(k)])),
                    Piece::U32(v, None) => d.values.extend((0..n).map(|k| u64::from(v[rows(k)]))),
                    _ => return Err(Error::Input("a deferred column of nulls or text".into())),
                }
                continue;
            }
            fill(col, &mut self.z, &mut self.buf, n, |col, z, buf, places| {
                match (perm, &mut piece) {
                    // a whole page of integers in their order: encoded where it lies
                    (None, Piece::U64(v, None)) if places.len() == PAGE_ROWS => {
                        let v: &[u64] = v;
                        if col.optional {
                            col.valid.resize(PAGE_ROWS, 1);
                        }
                        col.page_rows = PAGE_ROWS;
                        return col.finish_page_of(z, buf, Some(&v[places]));
                    }
                    (Some(p), piece) => col.append(piece, p[places].iter().map(|&r| r as usize)),
                    (None, piece) => col.append_span(piece, places),
                }
                Ok(())
            })?;
        }
        self.rows += n;
        if self.rows >= self.row_group {
            self.flush()?;
        }
        Ok(())
    }

    /// Adds a chunk's `accesses` rows given as segments (see
    /// [`crate::run_rows::access_segs`]): a run's steady columns are encoded
    /// without being written out row by row.
    pub(crate) fn write_segs(&mut self, r: &SegRows) -> Result<(), Error> {
        if self.defer.is_some() {
            return Err(Error::Input("segments for a file with a deferred column".into()));
        }
        let n = r.rows;
        let names: Vec<String> = self.schema.fields().iter().map(|f| f.name().clone()).collect();
        let nulls = datafusion::arrow::buffer::NullBuffer::new_null(n);
        let atomic = datafusion::arrow::buffer::BooleanBuffer::from(&r.atomic[..]);
        for (col, name) in self.cols.iter_mut().zip(&names) {
            let (z, buf) = (&mut self.z, &mut self.buf);
            match name.as_str() {
                "seq" | "clock" | "size" | "address" | "pc" => {
                    let k = ["seq", "address", "clock", "size", "pc"]
                        .iter()
                        .position(|x| x == name)
                        .unwrap_or(4);
                    let arena = [&r.seq, &r.addr, &r.clock, &r.size, &r.pc][k];
                    for g in &r.segs {
                        fill(col, z, buf, g.len(), |col, _, _, part| {
                            match *g {
                                RowSeg::Rows { at, .. } => {
                                    col.push_vals(&arena[at + part.start..at + part.end])
                                }
                                RowSeg::Run { seq, addr, clock, size, pc, .. } => {
                                    let (first, step) =
                                        [seq, addr, (clock, 0), (size, 0), (pc, 0)][k];
                                    let first =
                                        first.wrapping_add(step.wrapping_mul(part.start as u64));
                                    col.push_steps(first, step, part.len());
                                }
                                RowSeg::Empty => {}
                            }
                            Ok(())
                        })?;
                    }
                }
                "kind" => {
                    // the file's words: load, store and rmw where the dictionary has them
                    let mut map = [0u8; 3];
                    for (m, w) in map.iter_mut().zip(crate::tables::ACCESS_KINDS) {
                        let at = match col.words.iter().position(|x| x == w) {
                            Some(p) => p,
                            None => {
                                col.words.push(w.to_string());
                                col.words.len() - 1
                            }
                        };
                        *m = at as u8;
                    }
                    let mut ids =
                        Piece::Words(r.kind.iter().map(|&k| map[(k as usize).min(2)]).collect());
                    fill(col, z, buf, n, |col, _, _, part| {
                        col.append(&mut ids, part);
                        Ok(())
                    })?;
                }
                "value" => {
                    let mut none = Piece::U64(&[], Some(&nulls));
                    fill(col, z, buf, n, |col, _, _, part| {
                        col.append(&mut none, part);
                        Ok(())
                    })?;
                }
                "atomic" => {
                    let mut b = Piece::Bool(atomic.clone());
                    fill(col, z, buf, n, |col, _, _, part| {
                        col.append(&mut b, part);
                        Ok(())
                    })?;
                }
                other => return Err(Error::Input(format!("no segments for a column {other}"))),
            }
        }
        self.rows += n;
        if self.rows >= self.row_group {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Error> {
        if self.rows == 0 {
            return Ok(());
        }
        let rows = std::mem::take(&mut self.rows);
        let mut chunks = Vec::with_capacity(self.cols.len());
        let n = self.cols.len() - usize::from(self.defer.is_some());
        for col in self.cols[..n].iter_mut() {
            col.finish_page(&mut self.z, &mut self.buf)?;
            chunks.push(col.close(&mut self.z)?);
        }
        if let Some(d) = self.defer.as_mut() {
            d.groups.push((chunks, rows));
            return Ok(());
        }
        self.append_group(chunks)
    }

    fn append_group(&mut self, chunks: Vec<(Bytes, ColumnCloseResult)>) -> Result<(), Error> {
        let mut rg = self.w.next_row_group().map_err(perr)?;
        for (bytes, close) in chunks {
            rg.append_column(&bytes, close).map_err(perr)?;
        }
        rg.close().map_err(perr)?;
        Ok(())
    }

    /// Writes what is waiting and the footer.
    pub(crate) fn close(self) -> Result<(), Error> {
        self.close_with(|_| {})
    }

    /// Like [`PageFile::close`], after `f` rewrote the deferred last column's
    /// values (every row of the file, in order; see [`PageFile::deferring_last`]).
    pub(crate) fn close_with(mut self, f: impl FnOnce(&mut [u64])) -> Result<(), Error> {
        self.flush()?;
        if let Some(mut d) = self.defer.take() {
            f(&mut d.values);
            let mut at = 0;
            for (mut chunks, rows) in d.groups {
                let col = self.cols.last_mut().ok_or_else(|| Error::Input("no column".into()))?;
                let end = at + rows;
                let v =
                    d.values.get(at..end).ok_or_else(|| Error::Input("deferred rows".into()))?;
                for page in v.chunks(PAGE_ROWS) {
                    col.append_span(&mut Piece::U64(page, None), 0..page.len());
                    col.finish_page(&mut self.z, &mut self.buf)?;
                }
                chunks.push(col.close(&mut self.z)?);
                self.append_group(chunks)?;
                at = end;
            }
        }
        self.w.close().map_err(perr)?;
        Ok(())
    }
}

/// Appends `n` rows to `col` through `put` (given the rows' range, at most the
/// rest of a page), a page at a time: each page is encoded as soon as it is full
/// (`put` may encode a whole page itself).
fn fill(
    col: &mut Col,
    z: &mut zstd::bulk::Compressor<'static>,
    buf: &mut Vec<u8>,
    n: usize,
    mut put: impl FnMut(
        &mut Col,
        &mut zstd::bulk::Compressor<'static>,
        &mut Vec<u8>,
        std::ops::Range<usize>,
    ) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut at = 0;
    while at < n {
        let take = (PAGE_ROWS - col.page_rows).min(n - at);
        put(col, z, buf, at..at + take)?;
        at += take;
        if col.page_rows == PAGE_ROWS {
            col.finish_page(z, buf)?;
        }
    }
    Ok(())
}

fn perr(e: parquet::errors::ParquetError) -> Error {
    Error::Input(format!("parquet: {e}"))
}

fn zerr(e: std::io::Error) -> Error {
    Error::Input(format!("zstd: {e}"))
}

/// What a column holds.
#[derive(Clone, Copy, PartialEq)]
enum Ty {
    /// Unsigned integers (`bits32`: an INT32 column).
    Int {
        bits32: bool,
    },
    /// Text through a dictionary (`kind`).
    Words,
    Bool,
}

/// One column of a batch, ready to be read row by row.
enum Piece<'a> {
    U64(&'a [u64], Option<&'a datafusion::arrow::buffer::NullBuffer>),
    U32(&'a [u32], Option<&'a datafusion::arrow::buffer::NullBuffer>),
    /// Each row's index in the file's words.
    Words(Vec<u8>),
    Bool(datafusion::arrow::buffer::BooleanBuffer),
}

impl<'a> Piece<'a> {
    /// Column `c` of a batch; text is looked up in (and added to) `words`.
    fn of(c: &'a dyn Array, words: &mut Vec<String>) -> Result<Piece<'a>, Error> {
        let nulls = c.nulls().filter(|n| n.null_count() > 0);
        if let Some(a) = c.as_primitive_opt::<UInt64Type>() {
            return Ok(Piece::U64(a.values(), nulls));
        }
        if let Some(a) = c.as_primitive_opt::<UInt32Type>() {
            return Ok(Piece::U32(a.values(), nulls));
        }
        if let Some(a) = c.as_boolean_opt() {
            return Ok(Piece::Bool(a.values().clone()));
        }
        let unsupported =
            || Error::Input(format!("no page encoder for a column of {}", c.data_type()));
        let d = c.as_dictionary_opt::<Int8Type>().ok_or_else(unsupported)?;
        let dv = d.values().as_string_opt::<i32>().ok_or_else(unsupported)?;
        // this batch's keys → indices of the file's dictionary
        let mut map = Vec::with_capacity(dv.len());
        for w in dv.iter() {
            let w = w.unwrap_or_default();
            let at = match words.iter().position(|x| x == w) {
                Some(p) => p,
                None => {
                    words.push(w.to_string());
                    words.len() - 1
                }
            };
            map.push(u8::try_from(at).map_err(|_| unsupported())?);
        }
        // a null row's key may be anything (`kind` has none)
        Ok(Piece::Words(
            d.keys().values().iter().map(|&k| map.get(k as usize).copied().unwrap_or(0)).collect(),
        ))
    }
}

/// A column of the row group being written: its compressed data pages so far
/// (written after its dictionary page when the row group closes) and the page
/// being filled.
struct Col {
    descr: ColumnDescPtr,
    ty: Ty,
    optional: bool,
    // the page being filled: its rows, their validity (when optional), and the
    // values of the valid ones
    page_rows: usize,
    page_nulls: usize,
    valid: Vec<u8>,
    ints: Vec<u64>,
    ids: Vec<u8>,
    bools: Vec<bool>,
    // the chunk so far
    pages: Vec<CompressedPage>,
    rows: usize,
    nulls: u64,
    lo: u64,
    hi: u64,
    all: bool,
    any: bool,
    /// The dictionary of an integer chunk whose first page packed smaller that way.
    dict: Option<IntDict>,
    /// Pages still go through `dict` (until a 257th value).
    dict_on: bool,
    /// The file dictionary of a text column (its pages' indices point into it).
    words: Vec<String>,
    /// None: decided on the first data page.
    zstd: Option<bool>,
    /// The page's integers as segments (steady runs and slices of `ints`);
    /// empty: `ints` holds them all.
    segs: Vec<Seg>,
    /// Scratch: segments read as values.
    mat: Vec<u64>,
}

/// Consecutive values of an integer page.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Seg {
    /// `ints[at..at + n]`.
    Vals { at: usize, n: usize },
    /// `first`, `first + step`, ... (`n` values, wrapping).
    Steps { first: u64, step: u64, n: usize },
}

impl Seg {
    /// The smallest and largest value.
    fn bounds(&self, ints: &[u64]) -> (u64, u64) {
        match *self {
            Seg::Vals { at, n } => {
                ints[at..at + n].iter().fold((u64::MAX, 0), |(lo, hi), &x| (lo.min(x), hi.max(x)))
            }
            Seg::Steps { first, step, n } => {
                let last = i128::from(first) + i128::from(step as i64) * (n as i128 - 1);
                match u64::try_from(last) {
                    Ok(last) => (first.min(last), first.max(last)),
                    // wraps: read every value
                    Err(_) => {
                        let mut v = Vec::new();
                        self.extend(ints, &mut v);
                        v.iter().fold((u64::MAX, 0), |(lo, hi), &x| (lo.min(x), hi.max(x)))
                    }
                }
            }
        }
    }

    fn extend(&self, ints: &[u64], out: &mut Vec<u64>) {
        match *self {
            Seg::Vals { at, n } => out.extend_from_slice(&ints[at..at + n]),
            Seg::Steps { first, step, n } => {
                let mut x = first;
                out.extend((0..n).map(|_| {
                    let v = x;
                    x = x.wrapping_add(step);
                    v
                }));
            }
        }
    }
}

impl Col {
    fn new(descr: ColumnDescPtr, ty: Ty) -> Col {
        Col {
            optional: descr.max_def_level() > 0,
            descr,
            ty,
            page_rows: 0,
            page_nulls: 0,
            valid: Vec::new(),
            ints: Vec::new(),
            ids: Vec::new(),
            bools: Vec::new(),
            pages: Vec::new(),
            rows: 0,
            nulls: 0,
            lo: u64::MAX,
            hi: 0,
            all: true,
            any: false,
            dict: None,
            dict_on: false,
            words: Vec::new(),
            zstd: None,
            segs: Vec::new(),
            mat: Vec::new(),
        }
    }

    /// Appends `v` to the page being filled (a column without nulls).
    fn push_vals(&mut self, v: &[u64]) {
        if v.is_empty() {
            return;
        }
        if self.optional {
            self.valid.resize(self.valid.len() + v.len(), 1);
        }
        let before = self.ints.len();
        self.ints.extend_from_slice(v);
        self.page_rows += v.len();
        self.note_vals(before);
    }

    /// Appends `n` values `first`, `first + step`, ... without writing them out.
    fn push_steps(&mut self, first: u64, step: u64, n: usize) {
        if n == 0 {
            return;
        }
        if self.optional {
            self.valid.resize(self.valid.len() + n, 1);
        }
        if self.segs.is_empty() && !self.ints.is_empty() {
            self.segs.push(Seg::Vals { at: 0, n: self.ints.len() });
        }
        self.page_rows += n;
        // A run's first iteration is an explicit row before it, on its line: the
        // segment takes it (a block across both is then steady too).
        let (mut first, mut n) = (first, n);
        while let Some(Seg::Vals { at, n: m }) = self.segs.last_mut() {
            if *m == 0 || self.ints[*at + *m - 1] != first.wrapping_sub(step) {
                break;
            }
            *m -= 1;
            first = first.wrapping_sub(step);
            n += 1;
            if *m == 0 {
                self.segs.pop();
            }
        }
        self.segs.push(Seg::Steps { first, step, n });
    }

    /// Once the page has segments, values appended from `ints[before..]` are one
    /// (those that go on a steady segment's line join it).
    fn note_vals(&mut self, mut before: usize) {
        if let Some(Seg::Steps { first, step, n }) = self.segs.last_mut() {
            while before < self.ints.len()
                && self.ints[before] == first.wrapping_add(step.wrapping_mul(*n as u64))
            {
                *n += 1;
                before += 1;
            }
        }
        let n = self.ints.len() - before;
        if self.segs.is_empty() || n == 0 {
            return;
        }
        match self.segs.last_mut() {
            Some(Seg::Vals { at, n: m }) if *at + *m == before => *m += n,
            _ => self.segs.push(Seg::Vals { at: before, n }),
        }
    }

    /// [`Col::append`] of rows in their order: integers are copied, not gathered.
    fn append_span(&mut self, piece: &mut Piece, rows: std::ops::Range<usize>) {
        if let Piece::U64(v, None) = piece {
            if self.optional {
                self.valid.resize(self.valid.len() + rows.len(), 1);
            }
            self.page_rows += rows.len();
            let before = self.ints.len();
            self.ints.extend_from_slice(&v[rows]);
            self.note_vals(before);
            return;
        }
        self.append(piece, rows)
    }

    /// Appends rows `rows` of `piece` to the page being filled.
    fn append(&mut self, piece: &mut Piece, rows: impl ExactSizeIterator<Item = usize> + Clone) {
        let nulls = match piece {
            Piece::U64(_, n) | Piece::U32(_, n) => *n,
            _ => None,
        };
        let count = rows.len();
        // a column of nulls (`value` of a trace recorded without values)
        if self.optional && nulls.is_some_and(|n| n.null_count() == n.len()) {
            self.valid.resize(self.valid.len() + count, 0);
            self.page_nulls += count;
            self.page_rows += count;
            return;
        }
        if self.optional {
            match nulls {
                Some(n) => {
                    let before = self.valid.len();
                    self.valid.extend(rows.clone().map(|r| u8::from(n.is_valid(r))));
                    self.page_nulls += self.valid[before..].iter().filter(|&&v| v == 0).count();
                }
                None => self.valid.resize(self.valid.len() + count, 1),
            }
        }
        let before = self.ints.len();
        match piece {
            Piece::U64(v, None) => self.ints.extend(rows.map(|r| v[r])),
            Piece::U32(v, None) => self.ints.extend(rows.map(|r| u64::from(v[r]))),
            Piece::U64(v, Some(n)) => {
                self.ints.extend(rows.filter(|&r| n.is_valid(r)).map(|r| v[r]))
            }
            Piece::U32(v, Some(n)) => {
                self.ints.extend(rows.filter(|&r| n.is_valid(r)).map(|r| u64::from(v[r])))
            }
            Piece::Words(k) => self.ids.extend(rows.map(|r| k[r])),
            Piece::Bool(b) => self.bools.extend(rows.map(|r| b.value(r))),
        }
        self.note_vals(before);
        self.page_rows += count;
    }

    /// Encodes and compresses the page being filled (nothing when it is empty).
    fn finish_page(
        &mut self,
        z: &mut zstd::bulk::Compressor<'static>,
        buf: &mut Vec<u8>,
    ) -> Result<(), Error> {
        self.finish_page_of(z, buf, None)
    }

    /// [`Col::finish_page`] of an integer page whose values are `ext` (a whole
    /// page of a batch, encoded where it lies instead of copied first), else the
    /// ones appended.
    fn finish_page_of(
        &mut self,
        z: &mut zstd::bulk::Compressor<'static>,
        buf: &mut Vec<u8>,
        ext: Option<&[u64]>,
    ) -> Result<(), Error> {
        let rows = std::mem::take(&mut self.page_rows);
        if rows == 0 {
            return Ok(());
        }
        buf.clear();
        if self.optional {
            let mut levels = Vec::new();
            if self.page_nulls == 0 {
                rle_hybrid_run(rows, 1, 1, &mut levels);
            } else if self.page_nulls == rows {
                rle_hybrid_run(rows, 0, 1, &mut levels);
            } else {
                rle_hybrid(&self.valid, 1, &mut levels);
            }
            buf.extend_from_slice(&(levels.len() as u32).to_le_bytes());
            buf.extend_from_slice(&levels);
            self.nulls += self.page_nulls as u64;
        }
        self.valid.clear();
        self.page_nulls = 0;
        self.rows += rows;
        let encoding = match self.ty {
            Ty::Int { bits32 } => {
                let segs = std::mem::take(&mut self.segs);
                // a page of segments is read as values only where a dictionary
                // may take it (the chunk's first page decides, see below)
                let steady = !segs.is_empty() && !self.pages.is_empty();
                if steady {
                    let encoding = self.encode_segs(&segs, bits32, buf);
                    self.segs = segs;
                    self.segs.clear();
                    self.ints.clear();
                    return self.store_page(rows, encoding, z, buf);
                }
                if !segs.is_empty() {
                    self.mat.clear();
                    for g in &segs {
                        g.extend(&self.ints, &mut self.mat);
                    }
                    std::mem::swap(&mut self.mat, &mut self.ints);
                    self.segs = segs;
                    self.segs.clear();
                }
                let v: &[u64] = match ext {
                    Some(e) => e,
                    None => &self.ints,
                };
                // four lanes: one min/max chain each
                let (mut lo, mut hi) = ([u64::MAX; 4], [0u64; 4]);
                let mut quads = v.chunks_exact(4);
                for q in &mut quads {
                    for k in 0..4 {
                        lo[k] = lo[k].min(q[k]);
                        hi[k] = hi[k].max(q[k]);
                    }
                }
                for &x in quads.remainder() {
                    lo[0] = lo[0].min(x);
                    hi[0] = hi[0].max(x);
                }
                self.lo = lo.iter().fold(self.lo, |a, &x| a.min(x));
                self.hi = hi.iter().fold(self.hi, |a, &x| a.max(x));
                self.any |= !v.is_empty();
                // the chunk's first page decides
                if self.pages.is_empty() {
                    self.dict = IntDict::pays(v, bits32);
                    self.dict_on = self.dict.is_some();
                    if self.dict_on {
                        self.zstd = Some(true);
                    }
                }
                let mut dict_ids = false;
                if let Some(d) = self.dict.as_mut().filter(|_| self.dict_on) {
                    self.ids.clear();
                    if d.add(v, &mut self.ids).is_some() {
                        dict_ids = true;
                        let w = width(d.values.len());
                        buf.push(w as u8);
                        rle_hybrid(&self.ids, w, buf);
                    } else {
                        // a 257th value: this page and the rest of the chunk fall back
                        self.dict_on = false;
                    }
                    self.ids.clear();
                }
                if dict_ids {
                    Encoding::RLE_DICTIONARY
                } else {
                    delta_binary_packed(v, bits32, buf);
                    Encoding::DELTA_BINARY_PACKED
                }
            }
            Ty::Words => {
                self.zstd = Some(true);
                let w = width(self.words.len());
                buf.push(w as u8);
                rle_hybrid(&self.ids, w, buf);
                Encoding::RLE_DICTIONARY
            }
            Ty::Bool => {
                self.all &= self.bools.iter().all(|&b| b);
                self.any |= self.bools.iter().any(|&b| b);
                bit_pack_bools(&self.bools, buf);
                Encoding::PLAIN
            }
        };
        self.ints.clear();
        self.ids.clear();
        self.bools.clear();
        self.store_page(rows, encoding, z, buf)
    }

    /// Encodes a page given as segments into `buf`, after the chunk's first page
    /// (which decided on a dictionary): a repeat is one dictionary lookup, a
    /// delta block inside a steady segment its step.
    fn encode_segs(&mut self, segs: &[Seg], bits32: bool, buf: &mut Vec<u8>) -> Encoding {
        for g in segs {
            let (lo, hi) = g.bounds(&self.ints);
            self.lo = self.lo.min(lo);
            self.hi = self.hi.max(hi);
        }
        self.any = true;
        if let Some(d) = self.dict.as_mut().filter(|_| self.dict_on) {
            self.ids.clear();
            let fits = d.add_segs(segs, &self.ints, &mut self.mat, &mut self.ids).is_some();
            if fits {
                let w = width(d.values.len());
                buf.push(w as u8);
                rle_hybrid(&self.ids, w, buf);
                self.ids.clear();
                return Encoding::RLE_DICTIONARY;
            }
            // a 257th value: this page and the rest of the chunk fall back
            self.dict_on = false;
            self.ids.clear();
        }
        delta_segs(segs, &self.ints, bits32, buf);
        Encoding::DELTA_BINARY_PACKED
    }

    /// Compresses the encoded page in `buf` (`rows` rows) and keeps it.
    fn store_page(
        &mut self,
        rows: usize,
        encoding: Encoding,
        z: &mut zstd::bulk::Compressor<'static>,
        buf: &mut [u8],
    ) -> Result<(), Error> {
        // Random addresses do not shrink: a chunk whose first page zstd leaves
        // above 90 % is stored uncompressed (a tenth of the export's time saved).
        let body = match self.zstd {
            Some(true) => Bytes::from(z.compress(buf).map_err(zerr)?),
            Some(false) => Bytes::copy_from_slice(buf),
            None => {
                let c = z.compress(buf).map_err(zerr)?;
                let worth = c.len() * 10 <= buf.len() * 9;
                self.zstd = Some(worth);
                if worth {
                    Bytes::from(c)
                } else {
                    Bytes::copy_from_slice(buf)
                }
            }
        };
        let page = Page::DataPage {
            buf: body,
            num_values: rows as u32,
            encoding,
            def_level_encoding: Encoding::RLE,
            rep_level_encoding: Encoding::RLE,
            statistics: None,
        };
        self.pages.push(CompressedPage::new(page, buf.len()));
        Ok(())
    }

    /// The chunk's bytes (its dictionary page, then its data pages) and what the
    /// row group needs of it; the column starts a new chunk.
    fn close(
        &mut self,
        z: &mut zstd::bulk::Compressor<'static>,
    ) -> Result<(Bytes, ColumnCloseResult), Error> {
        let nulls = self.nulls;
        let stats = match self.ty {
            Ty::Int { bits32 } => {
                let (lo, hi) = if self.any { (Some(self.lo), Some(self.hi)) } else { (None, None) };
                Some(if bits32 {
                    let s = ValueStatistics::new(
                        lo.map(|x| x as u32 as i32),
                        hi.map(|x| x as u32 as i32),
                        None,
                        Some(nulls),
                        false,
                    );
                    Statistics::Int32(s.with_backwards_compatible_min_max(false))
                } else {
                    let s = ValueStatistics::new(
                        lo.map(|x| x as i64),
                        hi.map(|x| x as i64),
                        None,
                        Some(nulls),
                        false,
                    );
                    Statistics::Int64(s.with_backwards_compatible_min_max(false))
                })
            }
            Ty::Bool => {
                let some = self.rows as u64 > nulls;
                let s = ValueStatistics::new(
                    some.then_some(self.all),
                    some.then_some(self.any),
                    None,
                    Some(nulls),
                    false,
                );
                Some(Statistics::Boolean(s))
            }
            // three words prune nothing
            Ty::Words => None,
        };
        // the dictionary page, when a page points into one (an integer chunk's
        // first page does when it has a dictionary; a text chunk's always)
        let dict: Option<(Vec<u8>, usize)> = match (self.ty, &self.dict) {
            (Ty::Int { bits32 }, Some(d)) => {
                let width = if bits32 { 4 } else { 8 };
                let mut plain = Vec::with_capacity(d.values.len() * width);
                for &x in &d.values {
                    plain.extend_from_slice(&x.to_le_bytes()[..width]);
                }
                Some((plain, d.values.len()))
            }
            (Ty::Words, _) => {
                let mut plain = Vec::new();
                for w in &self.words {
                    plain.extend_from_slice(&(w.len() as u32).to_le_bytes());
                    plain.extend_from_slice(w.as_bytes());
                }
                Some((plain, self.words.len()))
            }
            _ => None,
        };
        let mut sink = TrackedWrite::new(Vec::new());
        let mut pw = SerializedPageWriter::new(&mut sink);
        let (mut compressed, mut uncompressed) = (0i64, 0i64);
        let mut encodings = vec![];
        let mut dict_offset = None;
        let mut data_offset = None;
        if let Some((plain, len)) = dict {
            let page = Page::DictionaryPage {
                buf: Bytes::from(z.compress(&plain).map_err(zerr)?),
                num_values: len as u32,
                encoding: Encoding::PLAIN,
                is_sorted: false,
            };
            let spec = pw.write_page(CompressedPage::new(page, plain.len())).map_err(perr)?;
            dict_offset = Some(spec.offset as i64);
            compressed += spec.bytes_written as i64;
            uncompressed += spec.uncompressed_size as i64;
            encodings.push(Encoding::PLAIN);
        }
        encodings.extend(self.pages.iter().map(|p| p.encoding()));
        if self.optional {
            encodings.push(Encoding::RLE);
        }
        for page in self.pages.drain(..) {
            let spec = pw.write_page(page).map_err(perr)?;
            data_offset.get_or_insert(spec.offset as i64);
            compressed += spec.bytes_written as i64;
            uncompressed += spec.uncompressed_size as i64;
        }
        pw.close().map_err(perr)?;
        let bytes = Bytes::from(sink.into_inner().map_err(perr)?);
        let codec = match self.zstd {
            Some(false) => Compression::UNCOMPRESSED,
            _ => Compression::ZSTD(ZstdLevel::try_new(ZSTD_LEVEL).map_err(perr)?),
        };
        let mut md = ColumnChunkMetaData::builder(self.descr.clone())
            .set_compression(codec)
            .set_encodings_mask(EncodingMask::new_from_encodings(encodings.iter()))
            .set_total_compressed_size(compressed)
            .set_total_uncompressed_size(uncompressed)
            .set_num_values(self.rows as i64)
            .set_data_page_offset(data_offset.unwrap_or(0))
            .set_dictionary_page_offset(dict_offset);
        if let Some(s) = stats {
            md = md.set_statistics(s);
        }
        let close = ColumnCloseResult {
            bytes_written: compressed as u64,
            rows_written: self.rows as u64,
            metadata: md.build().map_err(perr)?,
            bloom_filter: None,
            column_index: None,
            offset_index: None,
        };
        *self = Col::new(self.descr.clone(), self.ty);
        Ok((bytes, close))
    }
}

/// Bits of a dictionary index among `n` entries.
fn width(n: usize) -> u32 {
    usize::BITS - n.saturating_sub(1).leading_zeros()
}

/// Integers with at most 256 distinct values (the `pc`s of an unsorted chunk,
/// `size`) as a dictionary: its values, their index, the last values seen.
struct IntDict {
    values: Vec<u64>,
    index: HashMap<u64, u8>,
    cache: Vec<(u64, u8)>,
}

impl IntDict {
    /// The dictionary of a chunk's first page `v`, when it packs smaller that way.
    fn pays(v: &[u64], bits32: bool) -> Option<IntDict> {
        let mut d =
            IntDict { values: Vec::new(), index: HashMap::new(), cache: vec![(u64::MAX, 0); 64] };
        let mut ids = Vec::with_capacity(v.len());
        d.add(v, &mut ids)?;
        if d.values.is_empty() {
            return None;
        }
        let mut delta = Vec::new();
        delta_binary_packed(v, bits32, &mut delta);
        let mut dictionary = Vec::new();
        rle_hybrid(&ids, width(d.values.len()), &mut dictionary);
        let bytes = if bits32 { 4 } else { 8 };
        (dictionary.len() + 1 + d.values.len() * bytes < delta.len()).then_some(d)
    }

    /// [`IntDict::add`] of a page given as segments (`mat`: scratch).
    fn add_segs(
        &mut self,
        segs: &[Seg],
        ints: &[u64],
        mat: &mut Vec<u64>,
        ids: &mut Vec<u8>,
    ) -> Option<()> {
        for g in segs {
            match *g {
                Seg::Steps { first, step: 0, n } => {
                    let before = ids.len();
                    self.add(&[first], ids)?;
                    let id = ids[before];
                    ids.resize(before + n, id);
                }
                Seg::Vals { at, n } => self.add(&ints[at..at + n], ids)?,
                Seg::Steps { .. } => {
                    mat.clear();
                    g.extend(ints, mat);
                    self.add(mat, ids)?;
                }
            }
        }
        Some(())
    }

    /// Appends the ids of `part`; None once there would be a 257th value.
    fn add(&mut self, part: &[u64], ids: &mut Vec<u8>) -> Option<()> {
        let mut last: Option<(u64, u8)> = None;
        let mut i = 0;
        while i < part.len() {
            let x = part[i];
            // rows grouped by pc repeat one value: the whole repeat at once
            if let Some((_, id)) = last.filter(|l| l.0 == x) {
                let same = part[i..].iter().take_while(|&&y| y == x).count();
                ids.resize(ids.len() + same, id);
                i += same;
                continue;
            }
            i += 1;
            let slot = &mut self.cache[((x ^ (x >> 6)) & 63) as usize];
            // an empty slot holds an id no value has yet
            if slot.0 != x || self.values.get(slot.1 as usize) != Some(&x) {
                let id = match self.index.get(&x) {
                    Some(&id) => id,
                    None if self.values.len() == 256 => return None,
                    None => {
                        let id = self.values.len() as u8;
                        self.index.insert(x, id);
                        self.values.push(x);
                        id
                    }
                };
                *slot = (x, id);
            }
            last = Some(*slot);
            ids.push(slot.1);
        }
        Some(())
    }
}

fn uleb(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push(x as u8 | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

fn zigzag(out: &mut Vec<u8>, x: i64) {
    uleb(out, ((x << 1) ^ (x >> 63)) as u64);
}

/// Parquet's DELTA_BINARY_PACKED: blocks of 128 differences, each block's
/// minimum taken out and its four miniblocks of 32 bit-packed at their own
/// width. Differences wrap in the column's width (`bits32`: INT32).
fn delta_binary_packed(v: &[u64], bits32: bool, out: &mut Vec<u8>) {
    delta_header(v.len(), v.first().copied(), bits32, out);
    let mut d = [0u64; 128];
    let mut i = 1;
    while i < v.len() {
        let m = (v.len() - i).min(128);
        delta_block(v[i - 1], &v[i..i + m], bits32, &mut d, out);
        i += m;
    }
}

fn signed(x: u64, bits32: bool) -> i64 {
    if bits32 {
        i64::from(x as u32 as i32)
    } else {
        x as i64
    }
}

fn delta_header(n: usize, first: Option<u64>, bits32: bool, out: &mut Vec<u8>) {
    uleb(out, 128);
    uleb(out, 4);
    uleb(out, n as u64);
    zigzag(out, first.map_or(0, |x| signed(x, bits32)));
}

/// One block: the differences of `v` (at most 128 values), `prev` before it.
fn delta_block(prev: u64, v: &[u64], bits32: bool, d: &mut [u64; 128], out: &mut Vec<u8>) {
    let m = v.len();
    // a loop's steady stride: every difference the minimum, no bits packed
    let d0 = v[0].wrapping_sub(prev);
    if v.windows(2).all(|w| w[1].wrapping_sub(w[0]) == d0) {
        zigzag(out, signed(d0, bits32));
        out.extend_from_slice(&[0; 4]);
        return;
    }
    let mut min = i64::MAX;
    let mut last = prev;
    for (k, &x) in v.iter().enumerate() {
        let y = signed(x.wrapping_sub(last), bits32);
        last = x;
        d[k] = y as u64;
        min = min.min(y);
    }
    zigzag(out, min);
    let mask = if bits32 { u64::from(u32::MAX) } else { u64::MAX };
    for x in &mut d[..m] {
        *x = x.wrapping_sub(min as u64) & mask;
    }
    d[m..].fill(0);
    let mut widths = [0u8; 4];
    for (mb, w) in widths.iter_mut().enumerate() {
        if mb * 32 < m {
            let or = d[mb * 32..mb * 32 + 32].iter().fold(0, |a, &x| a | x);
            *w = (64 - or.leading_zeros()) as u8;
        }
    }
    out.extend_from_slice(&widths);
    for (mb, &w) in widths.iter().enumerate() {
        if mb * 32 < m {
            bit_pack(&d[mb * 32..mb * 32 + 32], u32::from(w), out);
        }
    }
}

/// [`delta_binary_packed`] of a page given as segments: a block inside one
/// steady segment is its step and four zero widths, without reading a value.
fn delta_segs(segs: &[Seg], ints: &[u64], bits32: bool, out: &mut Vec<u8>) {
    let total: usize = segs
        .iter()
        .map(|g| match *g {
            Seg::Vals { n, .. } | Seg::Steps { n, .. } => n,
        })
        .sum();
    let mut cur = SegCursor { segs, ints, k: 0, off: 0 };
    let first = (total > 0).then(|| cur.next());
    delta_header(total, first, bits32, out);
    let mut prev = first.unwrap_or(0);
    let mut d = [0u64; 128];
    let mut block = [0u64; 128];
    let mut i = 1;
    while i < total {
        let m = (total - i).min(128);
        if let Some((x, step, left)) = cur.steady() {
            if left >= m && x.wrapping_sub(prev) == step {
                zigzag(out, signed(step, bits32));
                out.extend_from_slice(&[0; 4]);
                prev = x.wrapping_add(step.wrapping_mul(m as u64 - 1));
                cur.off += m;
                i += m;
                continue;
            }
        }
        cur.fill(&mut block[..m]);
        delta_block(prev, &block[..m], bits32, &mut d, out);
        prev = block[m - 1];
        i += m;
    }
}

/// Reads a page's segments front to back.
struct SegCursor<'a> {
    segs: &'a [Seg],
    ints: &'a [u64],
    k: usize,
    off: usize,
}

impl SegCursor<'_> {
    fn skip_done(&mut self) {
        while let Some(g) = self.segs.get(self.k) {
            let n = match *g {
                Seg::Vals { n, .. } | Seg::Steps { n, .. } => n,
            };
            if self.off < n {
                return;
            }
            self.k += 1;
            self.off = 0;
        }
    }

    fn next(&mut self) -> u64 {
        self.skip_done();
        let x = match self.segs[self.k] {
            Seg::Vals { at, .. } => self.ints[at + self.off],
            Seg::Steps { first, step, .. } => {
                first.wrapping_add(step.wrapping_mul(self.off as u64))
            }
        };
        self.off += 1;
        x
    }

    /// The next `out.len()` values.
    fn fill(&mut self, mut out: &mut [u64]) {
        while !out.is_empty() {
            self.skip_done();
            let (n, take) = match self.segs[self.k] {
                Seg::Vals { at, n } => {
                    let take = (n - self.off).min(out.len());
                    out[..take].copy_from_slice(&self.ints[at + self.off..at + self.off + take]);
                    (n, take)
                }
                Seg::Steps { first, step, n } => {
                    let take = (n - self.off).min(out.len());
                    let mut x = first.wrapping_add(step.wrapping_mul(self.off as u64));
                    for o in out[..take].iter_mut() {
                        *o = x;
                        x = x.wrapping_add(step);
                    }
                    (n, take)
                }
            };
            debug_assert!(self.off + take <= n);
            self.off += take;
            out = &mut out[take..];
        }
    }

    /// In a steady segment: the next value, the step and the values left in it.
    fn steady(&mut self) -> Option<(u64, u64, usize)> {
        self.skip_done();
        match *self.segs.get(self.k)? {
            Seg::Steps { first, step, n } => {
                Some((first.wrapping_add(step.wrapping_mul(self.off as u64)), step, n - self.off))
            }
            Seg::Vals { .. } => None,
        }
    }
}

/// `v` at `w` bits each, least significant bit first (a multiple of 8 values).
fn bit_pack(v: &[u64], w: u32, out: &mut Vec<u8>) {
    if w == 0 {
        return;
    }
    let mut acc: u128 = 0;
    let mut bits = 0u32;
    for &x in v {
        acc |= u128::from(x) << bits;
        bits += w;
        if bits >= 64 {
            out.extend_from_slice(&(acc as u64).to_le_bytes());
            acc >>= 64;
            bits -= 64;
        }
    }
    let tail = bits.div_ceil(8) as usize;
    out.extend_from_slice(&(acc as u64).to_le_bytes()[..tail]);
}

/// Values per bit-packed run at most (63 groups of 8: a one-byte header, as
/// other writers keep it).
const PACKED_RUN: usize = 504;

/// The RLE / bit-packing hybrid of `v` (`w` ≤ 8 bits a value): runs of 8 or
/// more equal values as one repeated value, the rest bit-packed in groups of 8.
fn rle_hybrid(v: &[u8], w: u32, out: &mut Vec<u8>) {
    let packed = |vals: &[u8], out: &mut Vec<u8>| {
        for part in vals.chunks(PACKED_RUN) {
            let groups = part.len().div_ceil(8);
            uleb(out, ((groups as u64) << 1) | 1);
            // w ≤ 8: eight values fill w bytes
            for g in part.chunks(8) {
                let mut acc = 0u64;
                for (i, &x) in g.iter().enumerate() {
                    acc |= u64::from(x) << (i as u32 * w);
                }
                out.extend_from_slice(&acc.to_le_bytes()[..w as usize]);
            }
        }
    };
    let (mut start, mut i) = (0usize, 0usize);
    while i < v.len() {
        let x = v[i];
        let run = same_run(&v[i..]);
        if run >= 8 {
            packed(&v[start..i], out);
            rle_hybrid_run(run, x, w, out);
            i += run;
            start = i;
        } else {
            i = (i + 8).min(v.len());
        }
    }
    packed(&v[start..], out);
}

/// How many values at the start of `v` equal the first (eight compared at once).
fn same_run(v: &[u8]) -> usize {
    let Some(&x) = v.first() else { return 0 };
    let wide = u64::from_ne_bytes([x; 8]);
    let mut n = 0;
    for c in v.chunks_exact(8) {
        if u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])) != wide {
            break;
        }
        n += 8;
    }
    n + v[n..].iter().take_while(|&&y| y == x).count()
}

/// One RLE run: `n` times `x`.
fn rle_hybrid_run(n: usize, x: u8, w: u32, out: &mut Vec<u8>) {
    uleb(out, (n as u64) << 1);
    if w > 0 {
        out.push(x);
    }
}

/// PLAIN booleans: one bit each, least significant first.
fn bit_pack_bools(v: &[bool], out: &mut Vec<u8>) {
    for part in v.chunks(8) {
        out.push(part.iter().enumerate().fold(0u8, |a, (i, &b)| a | (u8::from(b) << i)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{
        ArrayRef, BooleanArray, DictionaryArray, Int8Array, StringArray, UInt32Array, UInt64Array,
    };
    use datafusion::arrow::datatypes::{Field, Schema};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    fn xorshift(n: usize, mut x: u64) -> Vec<u64> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            })
            .collect()
    }

    /// Batches of every column kind the encoder takes, with awkward values:
    /// full-width random integers, wrapping steps, runs, nulls, page and
    /// row-group boundaries.
    fn batches(schema: &SchemaRef, rows: usize, seed: u64) -> Vec<RecordBatch> {
        let r = xorshift(rows, seed);
        let mut out = Vec::new();
        let mut at = 0;
        for len in [1usize, 7, 1000, 70_000, 9, rows] {
            let end = (at + len).min(rows);
            if at >= end {
                break;
            }
            let ix = at..end;
            let u64s = |f: &dyn Fn(usize) -> u64| -> ArrayRef {
                Arc::new(UInt64Array::from(ix.clone().map(f).collect::<Vec<_>>()))
            };
            let cols: Vec<ArrayRef> = vec![
                u64s(&|i| i as u64 * 3),
                u64s(&|i| r[i]),
                u64s(&|i| if i % 300 < 150 { u64::MAX - i as u64 } else { 5 }),
                Arc::new(UInt64Array::from(
                    ix.clone()
                        .map(|i| (!r[i].is_multiple_of(3)).then_some(r[i] >> (i % 64)))
                        .collect::<Vec<_>>(),
                )),
                Arc::new(UInt32Array::from(
                    ix.clone().map(|i| (r[i] >> 40) as u32).collect::<Vec<_>>(),
                )),
                Arc::new(
                    DictionaryArray::<Int8Type>::try_new(
                        Int8Array::from(
                            ix.clone()
                                .map(|i| if (i / 37) % 2 == 0 { 1 } else { (r[i] % 3) as i8 })
                                .collect::<Vec<_>>(),
                        ),
                        // each batch its own word order
                        Arc::new(StringArray::from(if at % 2 == 0 {
                            vec!["load", "store", "rmw"]
                        } else {
                            vec!["rmw", "load", "store"]
                        })),
                    )
                    .unwrap(),
                ),
                Arc::new(BooleanArray::from(
                    ix.clone().map(|i| r[i].is_multiple_of(5)).collect::<Vec<_>>(),
                )),
                Arc::new(UInt64Array::from(vec![None::<u64>; end - at])),
                // few distinct values in no order: a dictionary
                u64s(&|i| [1, 2, 4, 8, 16][(r[i] % 5) as usize] << 40),
                Arc::new(UInt32Array::from(
                    ix.clone().map(|i| (r[i] % 7) as u32 * 1000).collect::<Vec<_>>(),
                )),
                // few values on the first page, then many: the chunk starts with a
                // dictionary and falls back to delta packing at the 257th value
                u64s(&|i| if i < 70_000 { [5, 1 << 40, 77][i % 3] } else { r[i] }),
            ];
            out.push(RecordBatch::try_new(schema.clone(), cols).unwrap());
            at = end;
        }
        out
    }

    /// `accesses` rows as segments (explicit rows, runs across pages, falling and
    /// wrapping steps, pcs for a dictionary and pcs beyond one), between batches of
    /// rows, read back equal to the same rows written out.
    #[test]
    fn segments_read_back_as_their_rows() {
        let (full, _) = crate::parquet_out::stream_schema_for_tests();
        let plain = crate::tables::plain_schema(&full);
        let r = xorshift(400_000, 0x1234_5678);
        let mut segs = SegRows::default();
        let mut rows: Vec<[u64; 7]> = Vec::new(); // seq clock kind size addr pc atomic
        let mut seq = 0u64;
        for (i, &x) in r.iter().enumerate().take(60) {
            // a run, then a few explicit rows of the same pc
            let n = [1usize, 5, 70_000, 129, 128, 3000][i % 6];
            let step = [8u64, u64::MAX - 7, 1 << 63, 0, 64, 4][i % 6];
            let (a0, pc) = (x >> 8, 0x400 + (i as u64 % 40) * 4 + if i > 30 { x % 900 } else { 0 });
            if i % 5 == 0 {
                // the loop's first iteration, explicit, on the run's line
                let v = [seq, i as u64 / 7, i as u64 % 2, 8, a0.wrapping_sub(step), pc, 0];
                rows.push(v);
                segs.segs.push(RowSeg::Rows { at: segs.seq.len(), n: 1 });
                segs.seq.push(v[0]);
                segs.clock.push(v[1]);
                segs.size.push(v[3]);
                segs.addr.push(v[4]);
                segs.pc.push(v[5]);
                segs.kind.push(v[2] as i8);
                segs.atomic.push(false);
                seq += 3;
            }
            segs.segs.push(RowSeg::Run {
                n,
                seq: (seq, 3),
                addr: (a0, step),
                clock: i as u64 / 7,
                size: 8,
                pc,
            });
            for k in 0..n as u64 {
                rows.push([
                    seq + 3 * k,
                    i as u64 / 7,
                    i as u64 % 2,
                    8,
                    a0.wrapping_add(step.wrapping_mul(k)),
                    pc,
                    0,
                ]);
                segs.kind.push((i % 2) as i8);
                segs.atomic.push(false);
            }
            seq += 3 * n as u64;
            let at = segs.seq.len();
            for k in 0..(i % 4) {
                let v = [seq, 9, 2, 4, r[i + k] & 0xffff_fff8, pc, 1];
                rows.push(v);
                segs.seq.push(v[0]);
                segs.clock.push(v[1]);
                segs.size.push(v[3]);
                segs.addr.push(v[4]);
                segs.pc.push(v[5]);
                segs.kind.push(2);
                segs.atomic.push(true);
                seq += 1;
            }
            if i % 4 > 0 {
                segs.segs.push(RowSeg::Rows { at, n: i % 4 });
            }
        }
        segs.rows = rows.len();
        let batch = |rows: &[[u64; 7]]| {
            let u = |c: usize| -> ArrayRef {
                Arc::new(UInt64Array::from(rows.iter().map(|r| r[c]).collect::<Vec<_>>()))
            };
            let kinds = Int8Array::from(rows.iter().map(|r| r[2] as i8).collect::<Vec<_>>());
            let words = Arc::new(StringArray::from(vec!["load", "store", "rmw"]));
            let cols: Vec<ArrayRef> = vec![
                u(0),
                u(1),
                Arc::new(DictionaryArray::<Int8Type>::try_new(kinds, words).unwrap()),
                u(3),
                u(4),
                u(5),
                Arc::new(UInt64Array::from(vec![None::<u64>; rows.len()])),
                Arc::new(BooleanArray::from(rows.iter().map(|r| r[6] == 1).collect::<Vec<_>>())),
            ];
            RecordBatch::try_new(full.clone(), cols).unwrap()
        };
        let path = std::env::temp_dir().join(format!("pq-segs-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut w =
            PageFile::new(File::create(&path).unwrap(), full.clone(), &plain, 1 << 20).unwrap();
        let before = &rows[..1000.min(rows.len())];
        w.write(batch(&rows[..777]), None).unwrap();
        w.write_segs(&segs).unwrap();
        w.write(batch(before), None).unwrap();
        w.write_segs(&segs).unwrap();
        w.close().unwrap();
        let mut want_rows = rows[..777].to_vec();
        want_rows.extend_from_slice(&rows);
        want_rows.extend_from_slice(before);
        want_rows.extend_from_slice(&rows);
        let want = crate::tables::plain_batch(batch(&want_rows), &plain).unwrap();
        let rd = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap()).unwrap();
        let got: Vec<RecordBatch> = rd.build().unwrap().map(|b| b.unwrap()).collect();
        let got = datafusion::arrow::compute::concat_batches(&plain, &got).unwrap();
        for c in 0..want.num_columns() {
            assert_eq!(got.column(c), want.column(c), "column {}", plain.field(c).name());
        }
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn every_value_reads_back_through_the_parquet_reader() {
        let dict = DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8));
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("seq", DataType::UInt64, false),
            Field::new("address", DataType::UInt64, false),
            Field::new("wrap", DataType::UInt64, false),
            Field::new("value", DataType::UInt64, true),
            Field::new("depth", DataType::UInt32, false),
            Field::new("kind", dict, false),
            Field::new("atomic", DataType::Boolean, false),
            Field::new("none", DataType::UInt64, true),
            Field::new("size", DataType::UInt64, false),
            Field::new("small32", DataType::UInt32, false),
            Field::new("grows", DataType::UInt64, false),
        ]));
        let plain = crate::tables::plain_schema(&schema);
        for rows in [0usize, 1, 2, 129, 300_000] {
            let dir = std::env::temp_dir().join(format!("pq-pages-{}-{rows}", std::process::id()));
            let _ = std::fs::remove_file(&dir);
            let mut w = PageFile::new(File::create(&dir).unwrap(), schema.clone(), &plain, 100_000)
                .unwrap();
            let mut input = batches(&schema, rows, 0x9e37_79b9_7f4a_7c15 + rows as u64);
            for (k, b) in input.iter_mut().enumerate() {
                // every other batch in an order of its own: row i to place i + 7
                // (mod n), so a gather where a scatter is meant reads back wrong
                let n = b.num_rows() as u32;
                let o = (k % 2 == 1).then(|| (0..n).map(|i| (i + 7) % n).collect::<Vec<u32>>());
                w.write(b.clone(), o.clone()).unwrap();
                if o.is_some() {
                    // the row at place j came from row j - 7
                    let idx =
                        UInt32Array::from((0..n).map(|j| (j + n - 7 % n) % n).collect::<Vec<_>>());
                    let cols = b
                        .columns()
                        .iter()
                        .map(|c| datafusion::arrow::compute::take(c.as_ref(), &idx, None).unwrap())
                        .collect();
                    *b = RecordBatch::try_new(b.schema(), cols).unwrap();
                }
            }
            w.close().unwrap();
            let r = ParquetRecordBatchReaderBuilder::try_new(File::open(&dir).unwrap()).unwrap();
            assert_eq!(r.schema().as_ref(), plain.as_ref());
            let got: Vec<RecordBatch> = r.build().unwrap().map(|b| b.unwrap()).collect();
            let got = datafusion::arrow::compute::concat_batches(&plain, &got).unwrap();
            let want: Vec<RecordBatch> =
                input.into_iter().map(|b| crate::tables::plain_batch(b, &plain).unwrap()).collect();
            let want = datafusion::arrow::compute::concat_batches(&plain, &want).unwrap();
            for c in 0..want.num_columns() {
                assert_eq!(
                    got.column(c),
                    want.column(c),
                    "{rows} rows, column {}",
                    plain.field(c).name()
                );
            }
            if rows > 1000 {
                let md =
                    parquet::file::reader::SerializedFileReader::new(File::open(&dir).unwrap())
                        .unwrap();
                use parquet::file::reader::FileReader;
                let rg = md.metadata().row_group(0);
                for c in [8, 9] {
                    let cc = rg.column(c);
                    assert!(
                        cc.dictionary_page_offset().is_some(),
                        "{} has no dictionary",
                        cc.column_path()
                    );
                }
                assert!(rg.column(0).dictionary_page_offset().is_none());
                if rows > 100_000 {
                    let g = rg.column(10);
                    assert!(g.dictionary_page_offset().is_some(), "grows has no dictionary");
                    let e: Vec<Encoding> = g.encodings().collect();
                    assert!(e.contains(&Encoding::DELTA_BINARY_PACKED), "grows: {e:?}");
                }
            }
            std::fs::remove_file(&dir).unwrap();
        }
    }

    #[test]
    fn delta_packing_takes_no_bits_for_a_steady_step() {
        let mut out = Vec::new();
        delta_binary_packed(
            &(0..1000u64).map(|i| 0x7000 + 8 * i).collect::<Vec<_>>(),
            false,
            &mut out,
        );
        // header (2+1+2+3 bytes) and, per block of 128, the minimum (1 byte) and four widths
        assert!(out.len() < 8 + 8 * 5 + 4, "{} bytes", out.len());
    }
}
