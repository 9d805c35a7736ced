//! Shell-style glob matching for function and source-file filters.

/// Whether `text` matches the glob `pattern` as a whole.
///
/// `*` matches any sequence of characters (including none, and including `/` and `:`),
/// `?` matches exactly one character; every other character matches itself.
///
/// ```
/// use memlens_symbols::glob_match;
/// assert!(glob_match("ns::*::bar*", "ns::Foo::bar(int)"));
/// assert!(glob_match("a?c", "abc"));
/// assert!(!glob_match("a?c", "ac"));
/// ```
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    // Position of the last `*` in the pattern, and the text position it was tried at.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            // Let the last `*` swallow one more character and retry.
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Whether a source path matches a file filter.
///
/// The pattern is matched against the whole path and against every suffix of it that
/// starts after a `/`, so `foo.c`, `src/*.c` and `/abs/src/foo.c` all match
/// `/abs/src/foo.c`.
///
/// ```
/// use memlens_symbols::path_glob_match;
/// assert!(path_glob_match("foo.c", "/abs/src/foo.c"));
/// assert!(path_glob_match("src/*.c", "/abs/src/foo.c"));
/// assert!(!path_glob_match("oo.c", "/abs/src/foo.c"));
/// ```
pub fn path_glob_match(pattern: &str, path: &str) -> bool {
    if glob_match(pattern, path) {
        return true;
    }
    path.match_indices('/').any(|(i, _)| glob_match(pattern, &path[i + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_and_wildcards() {
        assert!(glob_match("", ""));
        assert!(!glob_match("", "a"));
        assert!(glob_match("*", ""));
        assert!(glob_match("*", "anything::at(all)"));
        assert!(glob_match("abc", "abc"));
        assert!(!glob_match("abc", "abd"));
        assert!(glob_match("a*c", "abbbc"));
        assert!(glob_match("a*c", "ac"));
        assert!(!glob_match("a*c", "acb"));
        assert!(glob_match("*b*", "abc"));
        assert!(glob_match("?", "é"));
        assert!(glob_match("a*b*c", "aXbYbZc"));
        assert!(!glob_match("a*b*c", "aXbYbZ"));
        assert!(glob_match("**x", "x"));
    }

    #[test]
    fn paths() {
        assert!(path_glob_match("*.c", "/a/b.c"));
        assert!(path_glob_match("b.c", "/a/b.c"));
        assert!(path_glob_match("/a/*", "/a/b.c"));
        assert!(!path_glob_match("a", "/a/b.c"));
    }
}
