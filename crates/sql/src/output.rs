//! Query results as a text table, JSON (an array of row objects) or CSV.

use crate::Error;
use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use std::io::Write;

/// How results are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Aligned columns with a header.
    Table,
    /// One JSON array of row objects.
    Json,
    /// RFC 4180 CSV with a header line.
    Csv,
}

fn is_number(t: &DataType) -> bool {
    t.is_numeric() || matches!(t, DataType::Boolean)
}

/// The cells of every row as text (None: NULL).
fn cells(batches: &[RecordBatch]) -> Result<Vec<Vec<Option<String>>>, Error> {
    let opts = FormatOptions::default();
    let mut rows = Vec::new();
    for b in batches {
        let fmts: Vec<ArrayFormatter> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
            .collect::<Result<_, _>>()
            .map_err(datafusion::error::DataFusionError::from)?;
        for r in 0..b.num_rows() {
            rows.push(
                b.columns()
                    .iter()
                    .zip(&fmts)
                    .map(|(c, f)| (!c.is_null(r)).then(|| f.value(r).to_string()))
                    .collect(),
            );
        }
    }
    Ok(rows)
}

/// Writes the result.
pub fn write(
    schema: &Schema,
    batches: &[RecordBatch],
    f: Format,
    out: &mut dyn Write,
) -> Result<(), Error> {
    let io = |e| Error::Io("output".into(), e);
    let rows = cells(batches)?;
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    let numeric: Vec<bool> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Dictionary(_, v) => is_number(v),
            t => is_number(t),
        })
        .collect();
    match f {
        Format::Json => {
            let mut arr = Vec::with_capacity(rows.len());
            for r in &rows {
                let mut o = serde_json::Map::new();
                for ((n, c), &num) in names.iter().zip(r).zip(&numeric) {
                    let v = match c {
                        None => serde_json::Value::Null,
                        Some(s) if num => serde_json::from_str(s)
                            .unwrap_or_else(|_| serde_json::Value::String(s.clone())),
                        Some(s) => serde_json::Value::String(s.clone()),
                    };
                    o.insert(n.to_string(), v);
                }
                arr.push(serde_json::Value::Object(o));
            }
            serde_json::to_writer(&mut *out, &arr).map_err(|e| io(e.into()))?;
            writeln!(out).map_err(io)?;
        }
        Format::Csv => {
            let q = |s: &str| {
                if s.contains([',', '"', '\n', '\r']) {
                    format!("\"{}\"", s.replace('"', "\"\""))
                } else {
                    s.to_string()
                }
            };
            writeln!(out, "{}", names.iter().map(|n| q(n)).collect::<Vec<_>>().join(","))
                .map_err(io)?;
            for r in &rows {
                let line: Vec<String> =
                    r.iter().map(|c| c.as_deref().map(q).unwrap_or_default()).collect();
                writeln!(out, "{}", line.join(",")).map_err(io)?;
            }
        }
        Format::Table => {
            let mut w: Vec<usize> = names.iter().map(|n| n.chars().count()).collect();
            for r in &rows {
                for (i, c) in r.iter().enumerate() {
                    w[i] = w[i].max(c.as_deref().unwrap_or("NULL").chars().count());
                }
            }
            let line = |cells: Vec<&str>, out: &mut dyn Write| -> std::io::Result<()> {
                let n = cells.len();
                let mut s = String::new();
                for (i, c) in cells.into_iter().enumerate() {
                    let pad = w[i].saturating_sub(c.chars().count());
                    if numeric[i] {
                        s.push_str(&" ".repeat(pad));
                        s.push_str(c);
                    } else {
                        s.push_str(c);
                        if i + 1 < n {
                            s.push_str(&" ".repeat(pad));
                        }
                    }
                    if i + 1 < n {
                        s.push_str("  ");
                    }
                }
                writeln!(out, "{}", s.trim_end())
            };
            line(names.clone(), out).map_err(io)?;
            for r in &rows {
                line(r.iter().map(|c| c.as_deref().unwrap_or("NULL")).collect(), out)
                    .map_err(io)?;
            }
            writeln!(out, "({} row{})", rows.len(), if rows.len() == 1 { "" } else { "s" })
                .map_err(io)?;
        }
    }
    Ok(())
}
