//! `--functions` / `--files` filters and DINAMITE's `function_filter.json`, turned
//! into code ranges the runtime checks each event's pc against.

use anyhow::{Context, Result};
use memlens_symbols::Glob;
use std::path::Path;

/// Include and exclude globs; one meaning for `record` (both recorders) and
/// `analyze` (see [`memlens_symbols::CodeFilter`]).
pub type FilterSpec = memlens_symbols::CodeFilter;

/// DINAMITE's `function_filter.json` added to a [`FilterSpec`].
pub trait DinamiteFilter {
    /// Reads DINAMITE's `function_filter.json`: blacklists exclude, whitelists
    /// include (an empty whitelist includes everything). Its globs match anywhere
    /// at the start (an implicit leading `*`).
    fn add_dinamite_json(&mut self, path: &Path) -> Result<()>;
}

impl DinamiteFilter for FilterSpec {
    fn add_dinamite_json(&mut self, path: &Path) -> Result<()> {
        let text = crate::files::read_text(path, "filter file", crate::files::LIST_CAP)?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not valid JSON", path.display()))?;
        let star = |s: &str| {
            let g = if s.starts_with('*') { s.to_string() } else { format!("*{s}") };
            Glob::new(&g).with_context(|| format!("in {}", path.display()))
        };
        let strings = |v: Option<&serde_json::Value>| -> Result<Vec<Glob>> {
            v.and_then(|x| x.as_array())
                .map(|a| a.iter().filter_map(|s| s.as_str()).map(star).collect())
                .unwrap_or(Ok(Vec::new()))
        };
        let bl = v.get("blacklist");
        self.exclude_functions.extend(strings(bl.and_then(|b| b.get("function_filters")))?);
        self.exclude_files.extend(strings(bl.and_then(|b| b.get("file_filters")))?);
        let wl = v.get("whitelist");
        self.include_files.extend(strings(wl.and_then(|w| w.get("file_filters")))?);
        if let Some(obj) = wl.and_then(|w| w.get("function_filters")).and_then(|f| f.as_object()) {
            for (k, cfg) in obj {
                let events = cfg.get("events").and_then(|e| e.as_array());
                let traced = events.is_none_or(|e| {
                    e.iter().any(|x| x.as_str() == Some("access") || x.as_str() == Some("function"))
                });
                if k != "*" && traced {
                    self.include_functions.push(star(k)?);
                }
            }
        }
        Ok(())
    }
}

/// The code of the executable `spec` selects, as sorted file-address instruction
/// ranges `[start, end)`. Warns once about globs that match nothing; an empty
/// selection is an error.
pub fn code_ranges(exe: &Path, spec: &FilterSpec) -> Result<Vec<(u64, u64)>> {
    let module = memlens_symbols::module_from_file(exe, 0)
        .with_context(|| format!("cannot read {}", exe.display()))?;
    let syms = memlens_symbols::ModuleSymbols::load(&module, &Default::default())
        .with_context(|| format!("cannot read the symbols of {}", exe.display()))?;
    let sel = syms.select_code(spec)?;
    let labels = spec.labels();
    let what = exe.display().to_string();
    if sel.ranges.is_empty() {
        anyhow::bail!(
            "{} select no function or source line of {what}; see its functions and files with `memlens report --by function` on a full recording",
            labels.join(", ")
        );
    }
    warn_unmatched(&labels, &sel.matched, &what);
    Ok(sel.ranges.iter().map(|r| (r.start.0, r.end.0)).collect())
}

/// One warning line naming the globs (of `labels`) that matched nothing in `what`.
pub fn warn_unmatched(labels: &[String], matched: &[bool], what: &str) {
    let none: Vec<&str> =
        labels.iter().zip(matched).filter(|(_, m)| !**m).map(|(l, _)| l.as_str()).collect();
    if !none.is_empty() {
        let verb = if none.len() == 1 { "matches" } else { "match" };
        eprintln!("memlens: warning: {} {verb} nothing in {what}", none.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dinamite_filter_globs() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.json");
        std::fs::write(
            &p,
            r#"{"blacklist":{"function_filters":["skip"]},"whitelist":{"file_filters":["a.c"]}}"#,
        )
        .unwrap();
        let mut s = FilterSpec::default();
        s.add_dinamite_json(&p).unwrap();
        assert_eq!(s.labels(), ["--functions !*skip", "--files *a.c"]);
    }
}
