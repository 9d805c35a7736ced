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
    pending: Vec<(RecordBatch, Option<Vec<u32>>)>,
    rows: usize,
    row_group: usize,
    z: zstd::bulk::Compressor<'static>,
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
        Ok(PageFile { w, schema, pending: Vec::new(), rows: 0, row_group, z })
    }

    /// Adds a batch, its rows in `order` (indices into it; None: as they are);
    /// a row group is written once `row_group` rows are waiting.
    pub(crate) fn write(&mut self, b: RecordBatch, order: Option<Vec<u32>>) -> Result<(), Error> {
        if b.schema().fields() != self.schema.fields() {
            return Err(Error::Input("a batch of another schema".into()));
        }
        if order.as_ref().is_some_and(|o| o.len() != b.num_rows()) {
            return Err(Error::Input("an order of another length".into()));
        }
        self.rows += b.num_rows();
        self.pending.push((b, order));
        if self.rows >= self.row_group {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), Error> {
        if self.rows == 0 {
            return Ok(());
        }
        let batches = std::mem::take(&mut self.pending);
        let rows = std::mem::take(&mut self.rows);
        let descrs: Vec<ColumnDescPtr> = self.w.schema_descr().columns().to_vec();
        let mut chunks = Vec::with_capacity(descrs.len());
        for (ci, d) in descrs.iter().enumerate() {
            chunks.push(encode_chunk(&batches, ci, rows, d.clone(), &mut self.z)?);
        }
        let mut rg = self.w.next_row_group().map_err(perr)?;
        for (bytes, close) in chunks {
            rg.append_column(&bytes, close).map_err(perr)?;
        }
        rg.close().map_err(perr)?;
        Ok(())
    }

    /// Writes what is waiting and the footer.
    pub(crate) fn close(mut self) -> Result<(), Error> {
        self.flush()?;
        self.w.close().map_err(perr)?;
        Ok(())
    }
}

fn perr(e: parquet::errors::ParquetError) -> Error {
    Error::Input(format!("parquet: {e}"))
}

/// A column of a row group, gathered from its batches.
enum Values {
    /// Unsigned integers (`bits32`: an INT32 column).
    Int {
        v: Vec<u64>,
        bits32: bool,
    },
    /// Dictionary indices, and the dictionary: its entries and their PLAIN bytes.
    Dict {
        ids: Vec<u8>,
        len: usize,
        plain: Vec<u8>,
    },
    Bool(Vec<bool>),
}

/// Column `ci` of `batches` (each in its order): the values of its non-null
/// rows, and each row's validity when the column has nulls.
fn gather(
    batches: &[(RecordBatch, Option<Vec<u32>>)],
    ci: usize,
    rows: usize,
) -> Result<(Values, Option<Vec<bool>>), Error> {
    let dt = batches[0].0.column(ci).data_type().clone();
    let nulls = batches.iter().any(|(b, _)| b.column(ci).null_count() > 0);
    let unsupported = || Error::Input(format!("no page encoder for a column of {dt}"));
    // the rows of a batch in its order
    fn each<T: Copy>(v: &[T], order: &Option<Vec<u32>>, out: &mut Vec<T>) {
        match order {
            Some(o) => out.extend(o.iter().map(|&i| v[i as usize])),
            None => out.extend_from_slice(v),
        }
    }
    let mut valid = nulls.then(|| Vec::with_capacity(rows));
    let mut keep: Vec<bool> = Vec::new(); // one batch's validity, in its order
    for (b, order) in batches {
        let c = b.column(ci);
        if let Some(valid) = valid.as_mut() {
            keep.clear();
            match c.logical_nulls() {
                Some(n) => {
                    let bits: Vec<bool> = n.iter().collect();
                    each(&bits, order, &mut keep);
                }
                None => keep.resize(c.len(), true),
            }
            valid.extend_from_slice(&keep);
        }
    }
    // the values of the rows `valid` keeps, batch after batch
    let mut at = 0usize;
    let mut kept = |n: usize, f: &mut dyn FnMut(usize)| {
        for i in 0..n {
            if valid.as_ref().is_none_or(|v| v[at + i]) {
                f(i);
            }
        }
        at += n;
    };
    let vals = match &dt {
        DataType::UInt64 | DataType::UInt32 => {
            let mut v: Vec<u64> = Vec::with_capacity(rows);
            let mut tmp: Vec<u64> = Vec::new();
            for (b, order) in batches {
                let c = b.column(ci);
                let src: &[u64] = if let Some(a) = c.as_primitive_opt::<UInt64Type>() {
                    a.values()
                } else if let Some(a) = c.as_primitive_opt::<UInt32Type>() {
                    tmp.clear();
                    tmp.extend(a.values().iter().map(|&x| u64::from(x)));
                    &tmp
                } else {
                    return Err(unsupported());
                };
                if nulls {
                    let mut all = Vec::with_capacity(src.len());
                    each(src, order, &mut all);
                    kept(all.len(), &mut |i| v.push(all[i]));
                } else {
                    each(src, order, &mut v);
                }
            }
            Values::Int { v, bits32: dt == DataType::UInt32 }
        }
        DataType::Dictionary(k, _) if **k == DataType::Int8 => {
            let mut words: Vec<String> = Vec::new();
            let mut ids = Vec::with_capacity(rows);
            let mut keys: Vec<u8> = Vec::new();
            for (b, order) in batches {
                let d = b.column(ci).as_dictionary::<Int8Type>();
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
                keys.clear();
                for &k in d.keys().values().iter() {
                    // a null row's key may be anything: it is dropped below
                    keys.push(map.get(k as usize).copied().unwrap_or(0));
                }
                let mut all = Vec::with_capacity(keys.len());
                each(&keys, order, &mut all);
                if nulls {
                    kept(all.len(), &mut |i| ids.push(all[i]));
                } else {
                    ids.extend_from_slice(&all);
                }
            }
            let mut plain = Vec::new();
            for w in &words {
                plain.extend_from_slice(&(w.len() as u32).to_le_bytes());
                plain.extend_from_slice(w.as_bytes());
            }
            Values::Dict { ids, len: words.len(), plain }
        }
        DataType::Boolean => {
            let mut v = Vec::with_capacity(rows);
            for (b, order) in batches {
                let bits: Vec<bool> = b.column(ci).as_boolean().values().iter().collect();
                let mut all = Vec::with_capacity(bits.len());
                each(&bits, order, &mut all);
                if nulls {
                    kept(all.len(), &mut |i| v.push(all[i]));
                } else {
                    v.extend_from_slice(&all);
                }
            }
            Values::Bool(v)
        }
        _ => return Err(unsupported()),
    };
    Ok((vals, valid))
}

/// One column chunk of `rows` rows: its bytes and what the row group needs of it.
fn encode_chunk(
    batches: &[(RecordBatch, Option<Vec<u32>>)],
    ci: usize,
    rows: usize,
    descr: ColumnDescPtr,
    z: &mut zstd::bulk::Compressor<'static>,
) -> Result<(Bytes, ColumnCloseResult), Error> {
    let (vals, valid) = gather(batches, ci, rows)?;
    let nulls = valid.as_ref().map_or(0, |v| v.iter().filter(|&&b| !b).count()) as u64;
    let stats = match &vals {
        Values::Int { v, bits32 } => {
            // a plain fold vectorises; Iterator::min does not
            let (lo, hi) = v.iter().fold((u64::MAX, 0), |(l, h), &x| (l.min(x), h.max(x)));
            let (lo, hi) = if v.is_empty() { (None, None) } else { (Some(lo), Some(hi)) };
            Some(if *bits32 {
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
        Values::Bool(v) => {
            let (lo, hi) = (v.iter().all(|&b| b), v.iter().any(|&b| b));
            let s = ValueStatistics::new(
                (!v.is_empty()).then_some(lo),
                (!v.is_empty()).then_some(hi),
                None,
                Some(nulls),
                false,
            );
            Some(Statistics::Boolean(s))
        }
        // three words prune nothing
        Values::Dict { .. } => None,
    };
    let vals = match vals {
        Values::Int { v, bits32 } => {
            int_dictionary(&v, bits32).unwrap_or(Values::Int { v, bits32 })
        }
        other => other,
    };
    let optional = descr.max_def_level() > 0;
    let mut sink = TrackedWrite::new(Vec::new());
    let mut pw = SerializedPageWriter::new(&mut sink);
    let (mut compressed, mut uncompressed) = (0i64, 0i64);
    let mut encodings = vec![];
    let mut dict_offset = None;
    let mut data_offset = None;
    let mut compress = |buf: &[u8]| -> Result<Bytes, Error> {
        z.compress(buf).map(Bytes::from).map_err(|e| Error::Input(format!("zstd: {e}")))
    };
    // None: decided on the first data page
    let mut zstd = None;
    if let Values::Dict { len, plain, .. } = &vals {
        zstd = Some(true);
        let page = Page::DictionaryPage {
            buf: compress(plain)?,
            num_values: *len as u32,
            encoding: Encoding::PLAIN,
            is_sorted: false,
        };
        let spec = pw.write_page(CompressedPage::new(page, plain.len())).map_err(perr)?;
        dict_offset = Some(spec.offset as i64);
        compressed += spec.bytes_written as i64;
        uncompressed += spec.uncompressed_size as i64;
        encodings.push(Encoding::PLAIN);
    }
    let encoding = match vals {
        Values::Int { .. } => Encoding::DELTA_BINARY_PACKED,
        Values::Dict { .. } => Encoding::RLE_DICTIONARY,
        Values::Bool(_) => Encoding::PLAIN,
    };
    encodings.push(encoding);
    if optional {
        encodings.push(Encoding::RLE);
    }
    let mut buf = Vec::new();
    let mut levels = Vec::new();
    let mut at = 0usize; // the first non-null value of the page
    let mut row = 0usize;
    while row < rows {
        let end = (row + PAGE_ROWS).min(rows);
        buf.clear();
        let mut n_vals = end - row;
        if optional {
            levels.clear();
            match &valid {
                Some(v) => {
                    let lv: Vec<u8> = v[row..end].iter().map(|&b| u8::from(b)).collect();
                    n_vals = lv.iter().filter(|&&b| b == 1).count();
                    rle_hybrid(&lv, 1, &mut levels);
                }
                None => rle_hybrid_run(end - row, 1, 1, &mut levels),
            }
            buf.extend_from_slice(&(levels.len() as u32).to_le_bytes());
            buf.extend_from_slice(&levels);
        }
        match &vals {
            Values::Int { v, bits32 } => {
                delta_binary_packed(&v[at..at + n_vals], *bits32, &mut buf)
            }
            Values::Dict { ids, len, .. } => {
                let w = (usize::BITS - len.saturating_sub(1).leading_zeros()) as u8;
                buf.push(w);
                rle_hybrid(&ids[at..at + n_vals], u32::from(w), &mut buf);
            }
            Values::Bool(v) => bit_pack_bools(&v[at..at + n_vals], &mut buf),
        }
        at += n_vals;
        // Random addresses do not shrink: a chunk whose first page zstd leaves
        // above 90 % is stored uncompressed (a tenth of the export's time saved).
        let body = match zstd {
            Some(true) => compress(&buf)?,
            Some(false) => Bytes::copy_from_slice(&buf),
            None => {
                let c = compress(&buf)?;
                let worth = c.len() * 10 <= buf.len() * 9;
                zstd = Some(worth);
                if worth {
                    c
                } else {
                    Bytes::copy_from_slice(&buf)
                }
            }
        };
        let page = Page::DataPage {
            buf: body,
            num_values: (end - row) as u32,
            encoding,
            def_level_encoding: Encoding::RLE,
            rep_level_encoding: Encoding::RLE,
            statistics: None,
        };
        let spec = pw.write_page(CompressedPage::new(page, buf.len())).map_err(perr)?;
        data_offset.get_or_insert(spec.offset as i64);
        compressed += spec.bytes_written as i64;
        uncompressed += spec.uncompressed_size as i64;
        row = end;
    }
    pw.close().map_err(perr)?;
    let bytes = Bytes::from(sink.into_inner().map_err(perr)?);
    let codec = match zstd {
        Some(false) => Compression::UNCOMPRESSED,
        _ => Compression::ZSTD(ZstdLevel::try_new(ZSTD_LEVEL).map_err(perr)?),
    };
    let mut md = ColumnChunkMetaData::builder(descr)
        .set_compression(codec)
        .set_encodings_mask(EncodingMask::new_from_encodings(encodings.iter()))
        .set_total_compressed_size(compressed)
        .set_total_uncompressed_size(uncompressed)
        .set_num_values(rows as i64)
        .set_data_page_offset(data_offset.unwrap_or(0))
        .set_dictionary_page_offset(dict_offset);
    if let Some(s) = stats {
        md = md.set_statistics(s);
    }
    let close = ColumnCloseResult {
        bytes_written: compressed as u64,
        rows_written: rows as u64,
        metadata: md.build().map_err(perr)?,
        bloom_filter: None,
        column_index: None,
        offset_index: None,
    };
    Ok((bytes, close))
}

/// Integers with at most 256 distinct values (the `pc`s of an unsorted chunk,
/// `size`) as a dictionary, when their first page packs smaller that way.
fn int_dictionary(v: &[u64], bits32: bool) -> Option<Values> {
    /// The dictionary so far, its index, a cache of the last values seen.
    #[derive(Default)]
    struct Dict {
        values: Vec<u64>,
        index: HashMap<u64, u8>,
        cache: Vec<(u64, u8)>,
    }
    impl Dict {
        /// Appends the ids of `part`; None once there would be a 257th value.
        fn add(&mut self, part: &[u64], ids: &mut Vec<u8>) -> Option<()> {
            let mut last = (u64::MAX, 0u8);
            for &x in part {
                // rows grouped by pc repeat one value
                if x == last.0 {
                    ids.push(last.1);
                    continue;
                }
                let slot = &mut self.cache[((x ^ (x >> 6)) & 63) as usize];
                if slot.0 != x {
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
                last = *slot;
                ids.push(slot.1);
            }
            Some(())
        }
    }
    let mut d = Dict { cache: vec![(u64::MAX, 0); 64], ..Dict::default() };
    let mut ids = Vec::with_capacity(v.len());
    // the first page decides; the rest only when the dictionary won there
    let first = v.len().min(PAGE_ROWS);
    d.add(&v[..first], &mut ids)?;
    let dict = &d.values;
    if dict.is_empty() {
        return None;
    }
    let mut delta = Vec::new();
    delta_binary_packed(&v[..first], bits32, &mut delta);
    let mut dictionary = Vec::new();
    let w = (usize::BITS - dict.len().saturating_sub(1).leading_zeros()) as u32;
    rle_hybrid(&ids[..first], w, &mut dictionary);
    let width = if bits32 { 4 } else { 8 };
    if dictionary.len() + 1 + dict.len() * width >= delta.len() {
        return None;
    }
    d.add(&v[first..], &mut ids)?;
    let dict = &d.values;
    let mut plain = Vec::with_capacity(dict.len() * width);
    for &x in dict {
        plain.extend_from_slice(&x.to_le_bytes()[..width]);
    }
    Some(Values::Dict { ids, len: dict.len(), plain })
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
    uleb(out, 128);
    uleb(out, 4);
    uleb(out, v.len() as u64);
    let signed = |x: u64| if bits32 { i64::from(x as u32 as i32) } else { x as i64 };
    zigzag(out, v.first().map_or(0, |&x| signed(x)));
    let mut d = [0u64; 128];
    let mut i = 1;
    while i < v.len() {
        let m = (v.len() - i).min(128);
        let mut min = i64::MAX;
        for k in 0..m {
            let x = signed(v[i + k].wrapping_sub(v[i + k - 1]));
            d[k] = x as u64;
            min = min.min(x);
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
        i += m;
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
        let run = v[i..].iter().take_while(|&&y| y == x).count();
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
            ];
            out.push(RecordBatch::try_new(schema.clone(), cols).unwrap());
            at = end;
        }
        out
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
        ]));
        let plain = crate::tables::plain_schema(&schema);
        for rows in [0usize, 1, 2, 129, 300_000] {
            let dir = std::env::temp_dir().join(format!("pq-pages-{}-{rows}", std::process::id()));
            let _ = std::fs::remove_file(&dir);
            let mut w = PageFile::new(File::create(&dir).unwrap(), schema.clone(), &plain, 100_000)
                .unwrap();
            let mut input = batches(&schema, rows, 0x9e37_79b9_7f4a_7c15 + rows as u64);
            for (k, b) in input.iter_mut().enumerate() {
                // every other batch in an order of its own: last row first
                let o = (k % 2 == 1).then(|| (0..b.num_rows() as u32).rev().collect::<Vec<u32>>());
                w.write(b.clone(), o.clone()).unwrap();
                if let Some(o) = o {
                    let idx = UInt32Array::from(o);
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
