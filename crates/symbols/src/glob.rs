//! The one glob matcher of every function and source-file filter (`record
//! --functions/--files`, `--dbi`, `analyze --function/--file/--variable`, live probes),
//! built on `globset`.

use crate::Error;

/// A compiled glob.
///
/// `*` matches any sequence of characters (including none, and including `/` and `:`),
/// `?` exactly one byte (a non-ASCII character is several), `[abc]`/`[!a-z]` one character of a class, `{a,b}` either
/// alternative; `\` escapes the next character. Matching is case-sensitive.
#[derive(Clone, Debug)]
pub struct Glob {
    text: String,
    matcher: globset::GlobMatcher,
}

impl Glob {
    /// Compiles `pattern`; a malformed one (`[` without `]`) is [`Error::Glob`].
    pub fn new(pattern: &str) -> Result<Glob, Error> {
        let glob = globset::GlobBuilder::new(pattern)
            .literal_separator(false)
            .backslash_escape(true)
            .build()
            .map_err(|e| Error::Glob {
                pattern: pattern.to_owned(),
                reason: e.kind().to_string(),
            })?;
        Ok(Glob { text: pattern.to_owned(), matcher: glob.compile_matcher() })
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `text` matches as a whole.
    pub fn is_match(&self, text: &str) -> bool {
        self.matcher.is_match(text)
    }

    /// Whether a source path matches: the whole path or any suffix of it that starts
    /// after a `/`, so `foo.c`, `src/*.c` and `/abs/src/foo.c` all match `/abs/src/foo.c`.
    /// The path is first made lexically normal (`src/../lib/x.h` is `lib/x.h`).
    pub fn is_path_match(&self, path: &str) -> bool {
        let path = normal(path);
        self.is_match(&path) || path.match_indices('/').any(|(i, _)| self.is_match(&path[i + 1..]))
    }
}

/// `path` without `.` components and with `dir/..` pairs removed.
pub(crate) fn normal(path: &str) -> std::borrow::Cow<'_, str> {
    if !path.split('/').any(|c| c == "." || c == "..") {
        return path.into();
    }
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "." => {}
            ".." if parts.last().is_some_and(|p| !p.is_empty() && *p != "..") => {
                parts.pop();
            }
            _ => parts.push(c),
        }
    }
    parts.join("/").into()
}

/// Whether `text` matches the glob `pattern` as a whole (see [`Glob`]; a malformed
/// pattern matches nothing).
///
/// ```
/// use memlens_symbols::glob_match;
/// assert!(glob_match("ns::*::bar*", "ns::Foo::bar(int)"));
/// assert!(glob_match("a?c", "abc"));
/// assert!(!glob_match("a?c", "ac"));
/// ```
pub fn glob_match(pattern: &str, text: &str) -> bool {
    Glob::new(pattern).is_ok_and(|g| g.is_match(text))
}

/// Whether a source path matches a file filter (see [`Glob::is_path_match`]).
///
/// ```
/// use memlens_symbols::path_glob_match;
/// assert!(path_glob_match("foo.c", "/abs/src/foo.c"));
/// assert!(path_glob_match("src/*.c", "/abs/src/foo.c"));
/// assert!(!path_glob_match("oo.c", "/abs/src/foo.c"));
/// ```
pub fn path_glob_match(pattern: &str, path: &str) -> bool {
    Glob::new(pattern).is_ok_and(|g| g.is_path_match(path))
}

/// Splits a comma-separated glob list, keeping commas inside `{a,b}` and `[,]`.
pub fn split_glob_list(list: &str) -> Vec<&str> {
    let (mut out, mut depth, mut class, mut start) = (Vec::new(), 0usize, false, 0);
    let mut chars = list.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '[' if !class => class = true,
            ']' if class => class = false,
            '{' if !class => depth += 1,
            '}' if !class => depth = depth.saturating_sub(1),
            ',' if !class && depth == 0 => {
                out.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(list[start..].trim());
    out.retain(|g| !g.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one table of what a filter glob means (`record` and `analyze` both
    /// match through [`Glob`]): (pattern, text, name match, path match).
    pub(crate) const TABLE: &[(&str, &str, bool, bool)] = &[
        ("", "", true, true),
        ("", "a", false, false),
        ("*", "", true, true),
        ("*", "anything::at(all)", true, true),
        ("abc", "abc", true, true),
        ("abc", "abd", false, false),
        ("a*c", "abbbc", true, true),
        ("a*c", "ac", true, true),
        ("a*c", "acb", false, false),
        ("*b*", "abc", true, true),
        // globset matches bytes: `?` is one byte, `*` any bytes
        ("?", "é", false, false),
        ("*", "é", true, true),
        ("a*b*c", "aXbYbZc", true, true),
        ("a*b*c", "aXbYbZ", false, false),
        ("**x", "x", true, true),
        ("ns::*::bar*", "ns::Foo::bar(int)", true, true),
        ("*.c", "/a/b.c", true, true),
        ("b.c", "/a/b.c", false, true),
        ("/a/*", "/a/b.c", true, true),
        ("a", "/a/b.c", false, false),
        ("oo.c", "/abs/src/foo.c", false, false),
        ("src/*.cpp", "/abs/src/main.cpp", false, true),
        ("src/*.cpp", "src/main.cpp", true, true),
        ("src/*.cpp", "/abs/lib/main.cpp", false, false),
        ("[mu]*.c", "/p/util.c", false, true),
        ("{main,util}.c", "/p/util.c", false, true),
        ("f\\*", "f*", true, true),
        ("f\\*", "fx", false, false),
        ("src/*", "/p/src/../lib/x.h", false, false),
        ("lib/x.h", "/p/src/../lib/x.h", false, true),
    ];

    #[test]
    fn table() {
        for &(p, t, name, path) in TABLE {
            let g = Glob::new(p).unwrap();
            assert_eq!(g.is_match(t), name, "{p:?} against {t:?}");
            assert_eq!(g.is_path_match(t), path, "{p:?} as a path against {t:?}");
        }
    }

    #[test]
    fn malformed() {
        let e = Glob::new("[").unwrap_err().to_string();
        assert!(e.contains("bad glob '['"), "{e}");
        assert!(!glob_match("[", "["));
    }

    #[test]
    fn lists() {
        assert_eq!(split_glob_list("a, b,,!c"), ["a", "b", "!c"]);
        assert_eq!(split_glob_list("{a,b}.c,x"), ["{a,b}.c", "x"]);
        assert_eq!(split_glob_list("[,]x,\\,y"), ["[,]x", "\\,y"]);
    }
}
