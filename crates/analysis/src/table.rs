//! Rendered results: a [`Table`] of named sections of JSON rows, printable as aligned
//! text or as JSON.
//!
//! Every kernel result implements [`Render`]. Rows are `serde_json` objects so nested
//! values (misses per cache level, per-thread counts) keep their shape in JSON; the
//! text form picks columns by dotted path (`misses.D1`) and prints nested values
//! compactly.

use crate::names::Namer;
use serde_json::{Map, Value};
use std::fmt;

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

/// The widest line of a text table.
pub const MAX_WIDTH: usize = 120;

/// Text columns are not shortened below this many characters.
const MIN_NAME_WIDTH: usize = 12;

/// Lays a text table out: right-aligned (number) columns first, then left-aligned
/// (name) columns in their order, the widest names shortened with `…` until no line
/// is wider than [`MAX_WIDTH`] (paths lose their start, other names their end).
pub fn layout(headers: &[&str], align: &[Align], rows: &[Vec<String>]) -> String {
    let mut order: Vec<usize> = (0..headers.len()).filter(|&i| align[i] == Align::Right).collect();
    order.extend((0..headers.len()).filter(|&i| align[i] == Align::Left));
    let len = |s: &str| s.chars().count();
    let mut widths: Vec<usize> = order.iter().map(|&i| len(headers[i])).collect();
    for row in rows {
        for (w, &i) in widths.iter_mut().zip(&order) {
            *w = (*w).max(row.get(i).map_or(0, |c| len(c)));
        }
    }
    let total = |w: &[usize]| w.iter().sum::<usize>() + 2 * w.len().saturating_sub(1);
    while total(&widths) > MAX_WIDTH {
        let widest = (0..order.len())
            .filter(|&k| align[order[k]] == Align::Left && widths[k] > MIN_NAME_WIDTH)
            .max_by_key(|&k| widths[k]);
        let Some(k) = widest else { break };
        widths[k] -= 1;
    }
    let mut out = String::new();
    let mut emit = |cells: &dyn Fn(usize) -> String| {
        let mut line = String::new();
        for (k, &i) in order.iter().enumerate() {
            if k > 0 {
                line.push_str("  ");
            }
            let v = shorten(&cells(i), widths[k]);
            let pad = widths[k].saturating_sub(len(&v));
            if align[i] == Align::Right {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(&v);
            } else {
                line.push_str(&v);
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    };
    emit(&|i| headers[i].to_string());
    for row in rows {
        emit(&|i| row.get(i).cloned().unwrap_or_default());
    }
    out
}

/// `s` in at most `w` characters, `…` marking what was cut.
fn shorten(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n <= w {
        return s.to_string();
    }
    let keep = w.saturating_sub(1);
    if s.contains('/') {
        let tail: String = s.chars().skip(n - keep).collect();
        format!("…{tail}")
    } else {
        let head: String = s.chars().take(keep).collect();
        format!("{head}…")
    }
}

/// `text` broken at spaces into lines of at most [`MAX_WIDTH`] characters after `indent`.
pub fn wrap(text: &str, indent: &str) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let w = line.chars().count();
        if w > 0 && w + 1 + word.chars().count() + indent.len() > MAX_WIDTH {
            out.push_str(indent);
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(indent);
    out.push_str(&line);
    out.push('\n');
    out
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
    if !s.columns.is_empty() {
        let headers: Vec<&str> = s.columns.iter().map(|c| c.header.as_str()).collect();
        let align: Vec<Align> = s.columns.iter().map(|c| c.align).collect();
        f.write_str(&layout(&headers, &align, &cells))?;
    }
    for n in &s.notes {
        f.write_str(&wrap(n, "  "))?;
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
        assert_eq!(t.to_text(), "Cache levels\nD1 misses  level\n       12  D1\n     3456  LL\n");
        assert_eq!(t.to_json()["levels"][1]["misses"]["D1"], 3456);
        assert_eq!(t.json_rows().count(), 2);
        assert_eq!(cell_text(&serde_json::json!(0.5)), "0.5000");
    }

    #[test]
    fn wide_tables_fit_with_names_last() {
        let long = format!("/very/long/path/{}/file.c:12", "dir/".repeat(40));
        let name = "f".repeat(200);
        let rows = vec![vec![long.clone(), "7".into(), name.clone()]];
        let t = layout(
            &["where", "count", "function"],
            &[Align::Left, Align::Right, Align::Left],
            &rows,
        );
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines.iter().all(|l| l.chars().count() <= MAX_WIDTH), "{t}");
        assert!(lines[0].starts_with("count  where"), "{t}");
        assert!(lines[1].starts_with("    7  …"), "{t}");
        assert!(lines[1].contains("/file.c:12  ffff"), "{t}");
        assert!(lines[1].ends_with("f…"), "{t}");
        let w = wrap(&"word ".repeat(60), "  ");
        assert!(
            w.lines().all(|l| l.chars().count() <= MAX_WIDTH && l.starts_with("  word")),
            "{w}"
        );
    }
}
