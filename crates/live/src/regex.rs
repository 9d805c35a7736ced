//! A small backtracking regular-expression matcher for `/REGEX/` locations (function
//! names): literals, `.`, `[...]`/`[^...]` with ranges, `*`, `+`, `?`, `^`, `$`, `|`
//! and `\` escapes. Unanchored, like grep.

#[derive(Clone, Debug)]
enum Atom {
    Any,
    Lit(char),
    Class(bool, Vec<(char, char)>),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Rep {
    One,
    Star,
    Plus,
    Opt,
}

#[derive(Clone, Debug)]
struct Alt {
    start: bool,
    end: bool,
    items: Vec<(Atom, Rep)>,
}

/// A compiled pattern.
#[derive(Clone, Debug)]
pub struct Regex {
    alts: Vec<Alt>,
}

impl Regex {
    /// Parses `pattern`; `Err` names the problem.
    pub fn new(pattern: &str) -> Result<Regex, String> {
        let mut alts = Vec::new();
        for part in split_alts(pattern) {
            alts.push(parse_alt(&part)?);
        }
        Ok(Regex { alts })
    }

    /// Whether the pattern matches somewhere in `text`.
    pub fn is_match(&self, text: &str) -> bool {
        let t: Vec<char> = text.chars().collect();
        self.alts.iter().any(|a| {
            let last = if a.start { 0 } else { t.len() };
            (0..=last).any(|i| match_here(&a.items, &t[i..], a.end))
        })
    }
}

fn split_alts(p: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let (mut esc, mut class) = (false, false);
    for c in p.chars() {
        let cur = out.last_mut().expect("never empty");
        if esc {
            cur.push(c);
            esc = false;
        } else if c == '\\' {
            cur.push(c);
            esc = true;
        } else if c == '[' {
            class = true;
            cur.push(c);
        } else if c == ']' {
            class = false;
            cur.push(c);
        } else if c == '|' && !class {
            out.push(String::new());
        } else {
            cur.push(c);
        }
    }
    out
}

fn parse_alt(p: &str) -> Result<Alt, String> {
    let mut c: Vec<char> = p.chars().collect();
    let start = c.first() == Some(&'^');
    if start {
        c.remove(0);
    }
    let end = c.last() == Some(&'$') && !(c.len() >= 2 && c[c.len() - 2] == '\\');
    if end {
        c.pop();
    }
    let mut items: Vec<(Atom, Rep)> = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let atom = match c[i] {
            '.' => Atom::Any,
            '\\' => {
                i += 1;
                Atom::Lit(*c.get(i).ok_or("a trailing backslash")?)
            }
            '[' => {
                i += 1;
                let neg = c.get(i) == Some(&'^');
                if neg {
                    i += 1;
                }
                let mut ranges = Vec::new();
                while i < c.len() && c[i] != ']' {
                    let lo = c[i];
                    if c.get(i + 1) == Some(&'-') && c.get(i + 2).is_some_and(|&h| h != ']') {
                        ranges.push((lo, c[i + 2]));
                        i += 3;
                    } else {
                        ranges.push((lo, lo));
                        i += 1;
                    }
                }
                if i >= c.len() {
                    return Err("an unclosed `[`".into());
                }
                Atom::Class(neg, ranges)
            }
            '*' | '+' | '?' => return Err(format!("`{}` with nothing to repeat", c[i])),
            '(' | ')' => return Err("groups `( )` are not supported".into()),
            ch => Atom::Lit(ch),
        };
        i += 1;
        let rep = match c.get(i) {
            Some('*') => Rep::Star,
            Some('+') => Rep::Plus,
            Some('?') => Rep::Opt,
            _ => Rep::One,
        };
        if rep != Rep::One {
            i += 1;
        }
        items.push((atom, rep));
    }
    Ok(Alt { start, end, items })
}

fn atom_matches(a: &Atom, ch: char) -> bool {
    match a {
        Atom::Any => true,
        Atom::Lit(l) => *l == ch,
        Atom::Class(neg, ranges) => ranges.iter().any(|&(lo, hi)| lo <= ch && ch <= hi) != *neg,
    }
}

fn match_here(items: &[(Atom, Rep)], t: &[char], end: bool) -> bool {
    let Some(((atom, rep), rest)) = items.split_first() else {
        return !end || t.is_empty();
    };
    let (min, max) = match rep {
        Rep::One => (1, 1),
        Rep::Opt => (0, 1),
        Rep::Star => (0, usize::MAX),
        Rep::Plus => (1, usize::MAX),
    };
    let mut n = 0;
    while n < max && n < t.len() && atom_matches(atom, t[n]) {
        n += 1;
    }
    (min..=n).rev().any(|k| match_here(rest, &t[k..], end))
}

#[cfg(test)]
mod tests {
    use super::Regex;

    #[test]
    fn matches_like_grep() {
        let m = |p: &str, t: &str| Regex::new(p).unwrap().is_match(t);
        assert!(m("^work", "work_a"));
        assert!(!m("^work$", "work_a"));
        assert!(m("^work_[ab]$", "work_b"));
        assert!(!m("^work_[ab]$", "work_c"));
        assert!(m("a.*c", "xxabbbcx"));
        assert!(m("^ab+c?$", "abbb"));
        assert!(m("foo|bar", "xbar"));
        assert!(m("[^0-9]x", "ax"));
        assert!(!m("[^0-9]x", "1x"));
        assert!(m("a\\.b", "a.b") && !m("a\\.b", "axb"));
        assert!(Regex::new("*a").is_err() && Regex::new("[ab").is_err());
    }
}
