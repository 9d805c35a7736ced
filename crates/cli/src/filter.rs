//! `--functions` / `--files` filters and DINAMITE's `function_filter.json`, turned
//! into code ranges the runtime checks each event's pc against.

use anyhow::{Context, Result};
use std::path::Path;

/// Include and exclude globs (`*`, `?`). Empty includes mean "everything".
#[derive(Clone, Debug, Default)]
pub struct FilterSpec {
    /// Functions to trace.
    pub include_functions: Vec<String>,
    /// Functions never to trace.
    pub exclude_functions: Vec<String>,
    /// Source files to trace.
    pub include_files: Vec<String>,
    /// Source files never to trace.
    pub exclude_files: Vec<String>,
}

impl FilterSpec {
    /// Nothing filtered.
    pub fn is_empty(&self) -> bool {
        self.include_functions.is_empty()
            && self.exclude_functions.is_empty()
            && self.include_files.is_empty()
            && self.exclude_files.is_empty()
    }

    /// Splits comma-separated glob lists; a leading `!` excludes.
    pub fn add_list(&mut self, list: &str, files: bool) {
        for g in list.split(',').map(str::trim).filter(|g| !g.is_empty()) {
            let (excl, g) = match g.strip_prefix('!') {
                Some(rest) => (true, rest.to_string()),
                None => (false, g.to_string()),
            };
            match (files, excl) {
                (false, false) => self.include_functions.push(g),
                (false, true) => self.exclude_functions.push(g),
                (true, false) => self.include_files.push(g),
                (true, true) => self.exclude_files.push(g),
            }
        }
    }

    /// Reads DINAMITE's `function_filter.json`: blacklists exclude, whitelists
    /// include (an empty whitelist includes everything). Its globs match anywhere
    /// at the start (an implicit leading `*`).
    pub fn add_dinamite_json(&mut self, path: &Path) -> Result<()> {
        let text = crate::files::read_text(path, "filter file", crate::files::LIST_CAP)?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not valid JSON", path.display()))?;
        let star = |s: &str| if s.starts_with('*') { s.to_string() } else { format!("*{s}") };
        let strings = |v: Option<&serde_json::Value>| -> Vec<String> {
            v.and_then(|x| x.as_array())
                .map(|a| a.iter().filter_map(|s| s.as_str()).map(star).collect())
                .unwrap_or_default()
        };
        let bl = v.get("blacklist");
        self.exclude_functions.extend(strings(bl.and_then(|b| b.get("function_filters"))));
        self.exclude_files.extend(strings(bl.and_then(|b| b.get("file_filters"))));
        let wl = v.get("whitelist");
        self.include_files.extend(strings(wl.and_then(|w| w.get("file_filters"))));
        if let Some(obj) = wl.and_then(|w| w.get("function_filters")).and_then(|f| f.as_object()) {
            for (k, cfg) in obj {
                let events = cfg.get("events").and_then(|e| e.as_array());
                let traced = events.is_none_or(|e| {
                    e.iter().any(|x| x.as_str() == Some("access") || x.as_str() == Some("function"))
                });
                if k != "*" && traced {
                    self.include_functions.push(star(k));
                }
            }
        }
        Ok(())
    }
}

/// `*` and `?` glob match.
pub fn glob(p: &str, s: &str) -> bool {
    let (p, s) = (p.as_bytes(), s.as_bytes());
    let (mut pi, mut si, mut star, mut mark) = (0, 0, usize::MAX, 0);
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = pi;
            mark = si;
            pi += 1;
        } else if star != usize::MAX {
            pi = star + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

/// Whether a function defined in `file` is traced.
pub fn selected(spec: &FilterSpec, function: &str, file: &str) -> bool {
    let any = |globs: &[String], s: &str| globs.iter().any(|g| glob(g, s));
    let file_name = Path::new(file).file_name().map(|f| f.to_string_lossy().into_owned());
    let file_match =
        |globs: &[String]| any(globs, file) || file_name.as_deref().is_some_and(|n| any(globs, n));
    if any(&spec.exclude_functions, function) || file_match(&spec.exclude_files) {
        return false;
    }
    let inc_f = !spec.include_functions.is_empty();
    let inc_s = !spec.include_files.is_empty();
    if !inc_f && !inc_s {
        return true;
    }
    (inc_f && any(&spec.include_functions, function)) || (inc_s && file_match(&spec.include_files))
}

/// The runtime's filter file: included code ranges of the executable, one per line
/// as `module-path<TAB>start-hex<TAB>end-hex` in file addresses.
pub fn code_ranges(exe: &Path, spec: &FilterSpec) -> Result<String> {
    let exe = std::fs::canonicalize(exe)?;
    let module = memlens_symbols::module_from_file(&exe, 0)
        .with_context(|| format!("cannot read {}", exe.display()))?;
    let syms = memlens_symbols::ModuleSymbols::load(&module, &Default::default())
        .with_context(|| format!("cannot read the symbols of {}", exe.display()))?;
    let mut out = String::new();
    for f in syms.functions() {
        // The file of a function: where its first instruction's line is.
        let loc = syms.frames(memlens_symbols::Pc(f.start.0 + 1));
        let file = loc.outermost().and_then(|fr| fr.file.clone());
        if selected(spec, &f.name, file.as_deref().unwrap_or("")) {
            let r = f.range();
            out += &format!("{}\t{:x}\t{:x}\n", exe.display(), r.start.0, r.end.0);
        }
    }
    // An empty selection would record nothing without a word (a typo, or `[`
    // taken for a character class).
    if out.is_empty() {
        let inc = spec.include_functions.iter().chain(&spec.include_files).cloned();
        let exc = spec.exclude_functions.iter().chain(&spec.exclude_files).map(|g| format!("!{g}"));
        let globs: Vec<String> = inc.chain(exc).collect();
        anyhow::bail!(
            "--functions/--files/--filter-file ({}) select no function of {}; globs take `*` and `?` only, other characters match themselves",
            globs.join(", "),
            exe.display()
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("foo*", "foobar"));
        assert!(glob("*bar", "foobar"));
        assert!(glob("f?o", "foo"));
        assert!(!glob("f?o", "fo"));
        assert!(glob("*", ""));
        assert!(!glob("a*b", "acbd"));
    }

    #[test]
    fn selection_rules() {
        let mut s = FilterSpec::default();
        assert!(selected(&s, "main", "a.c"));
        s.add_list("work*,!work_skip", false);
        assert!(selected(&s, "work1", "a.c"));
        assert!(!selected(&s, "work_skip", "a.c"));
        assert!(!selected(&s, "main", "a.c"));
        s.add_list("util.c", true);
        assert!(selected(&s, "helper", "/src/util.c"));
        s.add_list("!/src/util.c", true);
        assert!(!selected(&s, "helper", "/src/util.c"));
    }
}
