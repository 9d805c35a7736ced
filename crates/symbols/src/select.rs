//! `--functions`/`--files` filters resolved to code ranges: the one meaning of
//! `record` (compiled and `--dbi`) and `analyze`.

use crate::code::{merge_ranges, CodeRange};
use crate::glob::{split_glob_list, Glob};
use crate::{Error, ModuleSymbols, Pc};

/// Include and exclude globs for functions and source files. No include globs mean
/// "all code"; excludes win over includes.
#[derive(Clone, Debug, Default)]
pub struct CodeFilter {
    /// Functions to keep.
    pub include_functions: Vec<Glob>,
    /// Functions to leave out.
    pub exclude_functions: Vec<Glob>,
    /// Source files to keep.
    pub include_files: Vec<Glob>,
    /// Source files to leave out.
    pub exclude_files: Vec<Glob>,
}

/// What a [`CodeFilter`] selects in one module.
#[derive(Clone, Debug, Default)]
pub struct CodeSelection {
    /// Selected code, sorted and merged (runtime instruction addresses).
    pub ranges: Vec<CodeRange>,
    /// For each of [`CodeFilter::labels`], whether it matched anything here.
    pub matched: Vec<bool>,
}

impl CodeFilter {
    /// Nothing filtered.
    pub fn is_empty(&self) -> bool {
        self.include_functions.is_empty()
            && self.exclude_functions.is_empty()
            && self.include_files.is_empty()
            && self.exclude_files.is_empty()
    }

    /// Adds a comma-separated glob list (commas inside `{a,b}` stay); a leading `!`
    /// excludes.
    pub fn add_list(&mut self, list: &str, files: bool) -> Result<(), Error> {
        for g in split_glob_list(list) {
            let (excl, g) = match g.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, g),
            };
            self.add(Glob::new(g)?, files, excl);
        }
        Ok(())
    }

    /// Adds one glob.
    pub fn add(&mut self, g: Glob, files: bool, exclude: bool) {
        match (files, exclude) {
            (false, false) => self.include_functions.push(g),
            (false, true) => self.exclude_functions.push(g),
            (true, false) => self.include_files.push(g),
            (true, true) => self.exclude_files.push(g),
        }
    }

    fn all(&self) -> impl Iterator<Item = (&Glob, bool, bool)> {
        (self.include_functions.iter().map(|g| (g, false, false)))
            .chain(self.exclude_functions.iter().map(|g| (g, false, true)))
            .chain(self.include_files.iter().map(|g| (g, true, false)))
            .chain(self.exclude_files.iter().map(|g| (g, true, true)))
    }

    /// Every glob as the user would write it (`--files src/*.c`, `--functions !main`),
    /// in the order of [`CodeSelection::matched`].
    pub fn labels(&self) -> Vec<String> {
        self.all()
            .map(|(g, files, excl)| {
                let flag = if files { "--files" } else { "--functions" };
                format!("{flag} {}{}", if excl { "!" } else { "" }, g.as_str())
            })
            .collect()
    }
}

impl ModuleSymbols {
    /// The code of this module that `filter` selects: functions by symbol (demangled,
    /// without parameters, or raw name) and source files by line table (see
    /// [`ModuleSymbols::source_file_ranges`]); without include globs, every executable
    /// segment. Excluded code is cut out of the result.
    pub fn select_code(&self, filter: &CodeFilter) -> Result<CodeSelection, Error> {
        let mut inc = Vec::new();
        let mut exc = Vec::new();
        let mut matched = Vec::new();
        for (g, files, excl) in filter.all() {
            let found: Vec<CodeRange> = if files {
                self.source_file_ranges(g)?
            } else {
                self.functions_matching(g).iter().map(|f| f.range()).collect()
            };
            matched.push(!found.is_empty());
            if excl { &mut exc } else { &mut inc }.extend(found);
        }
        if filter.include_functions.is_empty() && filter.include_files.is_empty() {
            let m = self.module();
            inc.extend(m.segments.iter().filter(|s| s.flags & 1 != 0).map(|s| CodeRange {
                start: Pc(s.vaddr.wrapping_add(m.bias)),
                end: Pc(s.vaddr.wrapping_add(m.bias).wrapping_add(s.memsz)),
            }));
        }
        Ok(CodeSelection { ranges: subtract(merge_ranges(inc), &merge_ranges(exc)), matched })
    }
}

/// `a` without `b` (both sorted and merged).
fn subtract(a: Vec<CodeRange>, b: &[CodeRange]) -> Vec<CodeRange> {
    let mut out = Vec::new();
    for r in a {
        let mut start = r.start.0;
        for x in b.iter().filter(|x| x.start.0 < r.end.0 && x.end.0 > r.start.0) {
            if x.start.0 > start {
                out.push(CodeRange { start: Pc(start), end: x.start });
            }
            start = start.max(x.end.0);
        }
        if start < r.end.0 {
            out.push(CodeRange { start: Pc(start), end: r.end });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(a: u64, b: u64) -> CodeRange {
        CodeRange { start: Pc(a), end: Pc(b) }
    }

    #[test]
    fn subtracts() {
        assert_eq!(subtract(vec![r(0, 10)], &[r(2, 4), r(6, 12)]), [r(0, 2), r(4, 6)]);
        assert_eq!(subtract(vec![r(0, 10), r(20, 30)], &[]), [r(0, 10), r(20, 30)]);
        assert_eq!(subtract(vec![r(5, 10)], &[r(0, 20)]), []);
    }

    #[test]
    fn lists_and_labels() {
        let mut f = CodeFilter::default();
        f.add_list("work*,!work_skip", false).unwrap();
        f.add_list("src/{a,b}.c", true).unwrap();
        assert_eq!(
            f.labels(),
            ["--functions work*", "--functions !work_skip", "--files src/{a,b}.c"]
        );
        assert!(f.add_list("ok,[", true).is_err());
    }
}
