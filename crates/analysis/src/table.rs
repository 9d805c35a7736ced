//! Rendered results: a [`Table`] of named sections of JSON rows, printable as aligned
//! text or as JSON.
//!
//! Every kernel result implements [`Render`]. Rows are `serde_json` objects so nested
//! values (misses per cache level, per-thread counts) keep their shape in JSON; the
//! text form picks columns by dotted path (`misses.D1`) and prints nested values
//! compactly.

use crate::names::Namer;
use serde_json::{Map, Value};
use std::fmt::{self, Write as _};

/// One row: column key to value.
pub type Row = Map<String, Value>;

/// How rendering trims and orders rows.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RenderOpts {
    /// Keep at most this many rows per ranked section (0: all). Default 20.
    pub top: usize,
    /// Drop rows whose ranking metric is below this. Default 0.
    pub min_count: u64,
    /// Add secondary sections (per core, per thread, histograms). Default false.
    pub verbose: bool,
}

impl Default for RenderOpts {
    fn default() -> RenderOpts {
        RenderOpts { top: 20, min_count: 0, verbose: false }
    }
}

impl RenderOpts {
    /// Options keeping `top` rows per section.
    pub fn top(top: usize) -> RenderOpts {
        RenderOpts { top, ..RenderOpts::default() }
    }

    /// Sets verbosity.
    pub fn verbose(mut self, v: bool) -> RenderOpts {
        self.verbose = v;
        self
    }

    /// Truncates a ranked list to `top`.
    pub(crate) fn cut<T>(&self, v: &mut Vec<T>) {
        if self.top > 0 && v.len() > self.top {
            v.truncate(self.top);
        }
    }
}

/// Text alignment of a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Flush left (names).
    Left,
    /// Flush right (numbers).
    Right,
}

/// A column of a section's text form.
#[derive(Clone, Debug)]
pub struct Column {
    /// Dotted path into the row (`misses.D1`).
    pub key: String,
    /// Header text.
    pub header: String,
    /// Alignment.
    pub align: Align,
}

impl Column {
    /// A right-aligned (numeric) column.
    pub fn num(key: &str, header: &str) -> Column {
        Column { key: key.into(), header: header.into(), align: Align::Right }
    }

    /// A left-aligned (text) column.
    pub fn text(key: &str, header: &str) -> Column {
        Column { key: key.into(), header: header.into(), align: Align::Left }
    }
}

/// A named list of rows.
#[derive(Clone, Debug, Default)]
pub struct Section {
    /// JSON key (`levels`, `by_line`).
    pub name: String,
    /// Heading of the text form.
    pub title: String,
    /// Columns of the text form (JSON keeps every key of every row).
    pub columns: Vec<Column>,
    /// The rows, in rank order.
    pub rows: Vec<Row>,
    /// Free text printed under the table (advice, notes).
    pub notes: Vec<String>,
}

impl Section {
    /// An empty section.
    pub fn new(name: &str, title: &str, columns: Vec<Column>) -> Section {
        Section { name: name.into(), title: title.into(), columns, ..Section::default() }
    }
}

/// A rendered result.
#[derive(Clone, Debug, Default)]
pub struct Table {
    /// Sections in print order.
    pub sections: Vec<Section>,
}

impl Table {
    /// The section with this JSON key.
    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// The JSON form: an object with one array of row objects per section.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        for s in &self.sections {
            m.insert(
                s.name.clone(),
                Value::Array(s.rows.iter().cloned().map(Value::Object).collect()),
            );
        }
        Value::Object(m)
    }

    /// Every row as one JSON object with a `"section"` key, for JSON Lines output.
    pub fn json_rows(&self) -> impl Iterator<Item = Value> + '_ {
        self.sections.iter().flat_map(|s| {
            s.rows.iter().map(move |r| {
                let mut o = Map::new();
                o.insert("section".into(), Value::String(s.name.clone()));
                o.extend(r.clone());
                Value::Object(o)
            })
        })
    }

    /// The aligned text form.
    pub fn to_text(&self) -> String {
        self.to_string()
    }
}

/// Looks a dotted path up in a row.
pub fn lookup<'a>(row: &'a Row, path: &str) -> Option<&'a Value> {
    let mut parts = path.split('.');
    let mut v = row.get(parts.next()?)?;
    for p in parts {
        v = match v {
            Value::Object(o) => o.get(p)?,
            Value::Array(a) => a.get(p.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(v)
}

/// A value as table text: numbers plainly, floats with up to 4 significant decimals,
/// arrays and objects compactly.
pub fn cell_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
                fmt_float(f)
            } else {
                n.to_string()
            }
        }
        Value::String(s) => s.clone(),
        Value::Array(a) => {
            let parts: Vec<String> = a.iter().map(cell_text).collect();
            parts.join(" ")
        }
        Value::Object(o) => {
            let parts: Vec<String> =
                o.iter().map(|(k, v)| format!("{k}={}", cell_text(v))).collect();
            parts.join(" ")
        }
    }
}

fn fmt_float(f: f64) -> String {
    if f == 0.0 {
        "0".into()
    } else if f.abs() >= 100.0 {
        format!("{f:.1}")
    } else if f.abs() >= 1.0 {
        format!("{f:.2}")
    } else {
        format!("{f:.4}")
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.sections.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write_section(f, s)?;
        }
        Ok(())
    }
}

fn write_section(f: &mut fmt::Formatter<'_>, s: &Section) -> fmt::Result {
    if !s.title.is_empty() {
        writeln!(f, "{}", s.title)?;
    }
    let cells: Vec<Vec<String>> = s
        .rows
        .iter()
        .map(|r| {
            s.columns.iter().map(|c| lookup(r, &c.key).map(cell_text).unwrap_or_default()).collect()
        })
        .collect();
    let mut widths: Vec<usize> = s.columns.iter().map(|c| c.header.chars().count()).collect();
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut line = String::new();
    let emit = |f: &mut fmt::Formatter<'_>, line: &mut String, vals: &[&str]| -> fmt::Result {
        line.clear();
        for (k, (c, v)) in s.columns.iter().zip(vals).enumerate() {
            if k > 0 {
                line.push_str("  ");
            }
            let pad = widths[k].saturating_sub(v.chars().count());
            let last = k + 1 == s.columns.len();
            match c.align {
                Align::Right => {
                    line.extend(std::iter::repeat_n(' ', pad));
                    line.push_str(v);
                }
                Align::Left => {
                    line.push_str(v);
                    if !last {
                        line.extend(std::iter::repeat_n(' ', pad));
                    }
                }
            }
        }
        writeln!(f, "{}", line.trim_end())
    };
    if !s.columns.is_empty() {
        let headers: Vec<&str> = s.columns.iter().map(|c| c.header.as_str()).collect();
        emit(f, &mut line, &headers)?;
        for row in &cells {
            let vals: Vec<&str> = row.iter().map(String::as_str).collect();
            emit(f, &mut line, &vals)?;
        }
    }
    for n in &s.notes {
        let mut t = String::new();
        let _ = write!(t, "  {n}");
        writeln!(f, "{t}")?;
    }
    Ok(())
}

/// A kernel result that can be shown to people.
pub trait Render {
    /// Names addresses with `namer`, ranks and trims by `opts`.
    fn render(&self, namer: &dyn Namer, opts: &RenderOpts) -> Table;
}

/// Ratio `a / b`, 0 when `b` is 0.
pub(crate) fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_json() {
        let mut s = Section::new(
            "levels",
            "Cache levels",
            vec![Column::text("name", "level"), Column::num("misses.D1", "D1 misses")],
        );
        s.rows.push(row! {"name" => "D1", "misses" => serde_json::json!({"D1": 12})});
        s.rows.push(row! {"name" => "LL", "misses" => serde_json::json!({"D1": 3456})});
        let t = Table { sections: vec![s] };
        assert_eq!(
            t.to_text(),
            "Cache levels\nlevel  D1 misses\nD1            12\nLL          3456\n"
        );
        assert_eq!(t.to_json()["levels"][1]["misses"]["D1"], 3456);
        assert_eq!(t.json_rows().count(), 2);
        assert_eq!(cell_text(&serde_json::json!(0.5)), "0.5000");
    }
}
