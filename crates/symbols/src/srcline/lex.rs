//! Tokens of a C/C++ line and the statement around a source line.

/// A C/C++ token; literals and numbers carry no text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Tok {
    Ident(String),
    Punct(&'static str),
    Lit,
}

const PUNCTS: &[&str] = &[
    "::", "->", "==", "!=", "<=", ">=", "&&", "||", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=",
    "++", "--", "(", ")", "[", "]", "{", "}", "<", ">", "=", "*", "&", ",", ";", ".", "+", "-",
    "/", "%", "!", "~", "?", ":", "^", "|", "#",
];

pub(super) fn lex(s: &str) -> Vec<Tok> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let st = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident(s[st..i].to_owned()));
        } else if c.is_ascii_digit() {
            while i < b.len()
                && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'_' | b'.' | b'\''))
            {
                i += 1;
            }
            out.push(Tok::Lit);
        } else if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push(Tok::Lit);
        } else if let Some(p) = PUNCTS.iter().find(|p| s[i..].starts_with(**p)) {
            out.push(Tok::Punct(p));
            i += p.len();
        } else {
            i += s[i..].chars().next().map_or(1, char::len_utf8);
        }
    }
    out
}

/// Removes `//` and `/* */` comments (a comment left open ends the line).
pub(super) fn strip_comments(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    loop {
        let slc = rest.find("//");
        let blc = rest.find("/*");
        match (slc, blc) {
            (Some(a), b) if b.is_none_or(|b| a < b) => {
                out.push_str(&rest[..a]);
                return out;
            }
            (_, Some(b)) => {
                out.push_str(&rest[..b]);
                out.push(' ');
                match rest[b + 2..].find("*/") {
                    Some(e) => rest = &rest[b + 2 + e + 2..],
                    None => return out,
                }
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

/// The statement around 1-based `line`: the line itself, earlier lines that end in
/// the middle of an expression (`=`, `,`, `(`, `+`, `*`, `?`), and later lines up to
/// the one ending it with `;` (at most three each way).
pub(crate) fn statement(lines: &[String], line: usize) -> Option<String> {
    let idx = line.checked_sub(1).filter(|&i| i < lines.len())?;
    let at = |i: usize| strip_comments(&lines[i]);
    let mut text = at(idx);
    let mut i = idx;
    for _ in 0..3 {
        let Some(prev) = i.checked_sub(1) else { break };
        let p = at(prev);
        if !p.trim_end().ends_with(['=', ',', '(', '+', '*', '?']) {
            break;
        }
        text = format!("{p} {text}");
        i = prev;
    }
    let mut j = idx;
    for _ in 0..3 {
        if text.contains([';', '{', '}']) || j + 1 >= lines.len() {
            break;
        }
        j += 1;
        text.push(' ');
        text.push_str(&at(j));
    }
    Some(text)
}
