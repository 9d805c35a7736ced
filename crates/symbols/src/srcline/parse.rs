//! The candidates a statement gives: `new`, `sizeof`, casts and assigned pointers.

use super::lex::{lex, Tok};

/// A type as spelled in the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Spelled {
    /// Written with `struct`, `union`, `class` or `enum`.
    pub tag: bool,
    /// A built-in type (`name` is canonical: `unsigned long`, `double`).
    pub builtin: bool,
    /// The (possibly qualified) name, `ns::Node`.
    pub name: String,
    /// Pointer levels after the name (`Node *` is 1).
    pub stars: u8,
}

/// One thing on the line that says what the block holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Cand {
    /// A type written out.
    Type(Spelled),
    /// The type of a variable, dereferenced `deref` times (`sizeof *p`: 1).
    Var { name: String, deref: u8 },
    /// `sizeof(X)`: a type or a variable named `X`.
    TypeOrVar(String),
    /// Something not understood (`sizeof(s->len)`): the line gives no type.
    Opaque,
}

/// What a line says, by how sure it is.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Candidates {
    /// Types of `new` expressions: they are the allocated type, whatever the rest says.
    pub news: Vec<Cand>,
    /// `sizeof` operands: each must resolve.
    pub sizes: Vec<Cand>,
    /// Casts of a call's result and the pointers assigned to: `void *`/`char *` and
    /// non-pointers say nothing, others must agree.
    pub weak: Vec<Cand>,
}

const BUILTIN_WORDS: &[&str] = &[
    "void", "char", "short", "int", "long", "float", "double", "signed", "unsigned", "bool",
    "_Bool", "wchar_t", "char8_t", "char16_t", "char32_t",
];
const QUALIFIERS: &[&str] = &["const", "volatile", "restrict", "__restrict", "_Atomic"];
const KEYWORDS: &[&str] = &[
    "return",
    "new",
    "delete",
    "sizeof",
    "struct",
    "union",
    "class",
    "enum",
    "if",
    "else",
    "while",
    "for",
    "do",
    "switch",
    "case",
    "goto",
    "auto",
    "static",
    "extern",
    "typedef",
    "operator",
    "this",
    "nullptr",
    "NULL",
    "const",
    "volatile",
    "static_cast",
    "reinterpret_cast",
    "const_cast",
    "dynamic_cast",
    "throw",
];

/// The canonical spelling and size of a built-in type named by `words`
/// (`long unsigned int` and `unsigned long` both give `unsigned long`, 8).
pub(crate) fn builtin(words: &[&str]) -> Option<(String, Option<u64>)> {
    let (mut unsigned, mut signed, mut short, mut long) = (false, false, false, 0u8);
    let mut base: Option<&str> = None;
    for w in words {
        match *w {
            "unsigned" => unsigned = true,
            "signed" => signed = true,
            "short" => short = true,
            "long" => long += 1,
            // `int` only adds to the integer words, never to another base type
            "int" if base.is_none() => {}
            b if BUILTIN_WORDS.contains(&b) => {
                if base.is_some() || words.contains(&"int") {
                    return None;
                }
                base = Some(b);
            }
            _ => return None,
        }
    }
    let u = if unsigned { "unsigned " } else { "" };
    Some(match (base, short, long) {
        (Some("char"), false, 0) if signed => ("signed char".into(), Some(1)),
        (Some("char"), false, 0) => (format!("{u}char"), Some(1)),
        (None, true, 0) => (format!("{u}short"), Some(2)),
        (None, false, 0) => (format!("{u}int"), Some(4)),
        (None, false, 1) => (format!("{u}long"), Some(8)),
        (None, false, 2) => (format!("{u}long long"), Some(8)),
        (Some("double"), false, 1) => ("long double".into(), Some(16)),
        (Some("float"), false, 0) => ("float".into(), Some(4)),
        (Some("double"), false, 0) => ("double".into(), Some(8)),
        (Some("bool" | "_Bool"), false, 0) => ("bool".into(), Some(1)),
        (Some("wchar_t" | "char32_t"), false, 0) => (base?.into(), Some(4)),
        (Some("char16_t"), false, 0) => ("char16_t".into(), Some(2)),
        (Some("char8_t"), false, 0) => ("char8_t".into(), Some(1)),
        (Some("void"), false, 0) => ("void".into(), None),
        _ => return None,
    })
}

fn ident(t: Option<&Tok>) -> Option<&str> {
    match t {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

fn is(t: Option<&Tok>, p: &str) -> bool {
    matches!(t, Some(Tok::Punct(q)) if *q == p)
}

/// Index just past the bracket matching the opening one at `i`.
fn skip_group(toks: &[Tok], i: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (j, t) in toks.iter().enumerate().skip(i) {
        match t {
            Tok::Punct("(" | "[" | "{") => depth += 1,
            Tok::Punct(")" | "]" | "}") => {
                depth -= 1;
                if depth == 0 {
                    return Some(j + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Template arguments `<...>` at `i`, returned as text, and the index past them.
fn template_args(toks: &[Tok], i: usize) -> Option<(String, usize)> {
    let mut depth = 0i32;
    let mut text = String::new();
    for (j, t) in toks.iter().enumerate().skip(i) {
        match t {
            Tok::Punct("<") => depth += 1,
            Tok::Punct(">") => depth -= 1,
            Tok::Punct(";" | "{" | "}") => return None,
            _ => {}
        }
        match t {
            Tok::Ident(s) => {
                if text.chars().last().is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    text.push(' ');
                }
                text.push_str(s);
            }
            Tok::Punct(p) => {
                text.push_str(p);
                if *p == "," {
                    text.push(' ');
                }
            }
            Tok::Lit => return None,
        }
        if depth == 0 {
            return Some((text, j + 1));
        }
    }
    None
}

/// A type name at `i` (`const struct a::B<int> **`), and the index past it.
fn parse_type(toks: &[Tok], mut i: usize) -> Option<(Spelled, usize)> {
    let skip_quals = |i: &mut usize| {
        while ident(toks.get(*i)).is_some_and(|s| QUALIFIERS.contains(&s)) {
            *i += 1;
        }
    };
    skip_quals(&mut i);
    let mut tag = false;
    if ident(toks.get(i)).is_some_and(|s| matches!(s, "struct" | "union" | "class" | "enum")) {
        tag = true;
        i += 1;
    }
    let (name, builtin_ty) =
        if !tag && ident(toks.get(i)).is_some_and(|s| BUILTIN_WORDS.contains(&s)) {
            let mut words = Vec::new();
            while let Some(w) = ident(toks.get(i)) {
                if BUILTIN_WORDS.contains(&w) {
                    words.push(w);
                } else if !QUALIFIERS.contains(&w) {
                    break;
                }
                i += 1;
            }
            (builtin(&words)?.0, true)
        } else {
            let mut name = String::new();
            if is(toks.get(i), "::") {
                i += 1;
            }
            loop {
                let id = ident(toks.get(i))?;
                if KEYWORDS.contains(&id) || BUILTIN_WORDS.contains(&id) {
                    return None;
                }
                name.push_str(id);
                i += 1;
                if is(toks.get(i), "<") {
                    let (args, next) = template_args(toks, i)?;
                    name.push_str(&args);
                    i = next;
                }
                if is(toks.get(i), "::") {
                    name.push_str("::");
                    i += 1;
                } else {
                    break;
                }
            }
            (name, false)
        };
    skip_quals(&mut i);
    let mut stars = 0u8;
    while is(toks.get(i), "*") {
        stars = stars.saturating_add(1);
        i += 1;
        skip_quals(&mut i);
    }
    Some((Spelled { tag, builtin: builtin_ty, name, stars }, i))
}

/// The operand of `sizeof` at `i`.
fn sizeof_operand(toks: &[Tok], i: usize) -> (Cand, usize) {
    if is(toks.get(i), "(") {
        let Some(end) = skip_group(toks, i) else { return (Cand::Opaque, toks.len()) };
        let inner = &toks[i + 1..end - 1];
        if let Some((t, n)) = parse_type(inner, 0) {
            if n == inner.len() {
                let c = if !t.tag && !t.builtin && t.stars == 0 && !t.name.contains([':', '<']) {
                    Cand::TypeOrVar(t.name)
                } else {
                    Cand::Type(t)
                };
                return (c, end);
            }
        }
        let c =
            unary_var(inner, 0).filter(|(_, n)| *n == inner.len()).map_or(Cand::Opaque, |v| v.0);
        return (c, end);
    }
    unary_var(toks, i).unwrap_or((Cand::Opaque, toks.len()))
}

/// `**p`, `p[0]` or `x` at `i`.
fn unary_var(toks: &[Tok], mut i: usize) -> Option<(Cand, usize)> {
    let mut deref = 0u8;
    while is(toks.get(i), "*") {
        deref += 1;
        i += 1;
    }
    let name = ident(toks.get(i)).filter(|s| !KEYWORDS.contains(s))?.to_owned();
    i += 1;
    while is(toks.get(i), "[") {
        i = skip_group(toks, i)?;
        deref += 1;
    }
    if is(toks.get(i), "(") || is(toks.get(i), ".") || is(toks.get(i), "->") {
        return None;
    }
    Some((Cand::Var { name, deref }, i))
}

/// What the statement text says about the type of the block it allocates.
pub(crate) fn candidates(text: &str) -> Candidates {
    let toks = lex(text);
    let mut out = Candidates::default();
    for i in 0..toks.len() {
        let prev = i.checked_sub(1).and_then(|p| toks.get(p));
        match &toks[i] {
            Tok::Ident(s) if s == "new" => {
                // `Foo::new(...)`, `x.new`, `operator new` are not new-expressions;
                // `::new T` is.
                let member = is(prev, "::") && i >= 2 && ident(toks.get(i - 2)).is_some();
                if member || is(prev, ".") || is(prev, "->") || ident(prev) == Some("operator") {
                    continue;
                }
                let mut j = i + 1;
                if is(toks.get(j), "(") {
                    match skip_group(&toks, j) {
                        Some(n) => j = n,
                        None => {
                            out.news.push(Cand::Opaque);
                            continue;
                        }
                    }
                }
                match parse_type(&toks, j) {
                    Some((t, _)) => out.news.push(Cand::Type(t)),
                    None => out.news.push(Cand::Opaque),
                }
            }
            Tok::Ident(s) if s == "sizeof" => {
                if is(toks.get(i + 1), ".") {
                    continue;
                }
                let (c, end) = sizeof_operand(&toks, i + 1);
                // `sizeof(struct hdr) + len`: a header before other data, not an
                // element size.
                let added = |t: Option<&Tok>| is(t, "+") || is(t, "-");
                let header = added(prev) || added(toks.get(end));
                out.sizes.push(if header { Cand::Opaque } else { c });
            }
            Tok::Ident(s) if matches!(s.as_str(), "static_cast" | "reinterpret_cast") => {
                if !is(toks.get(i + 1), "<") {
                    continue;
                }
                if let Some((t, n)) = parse_type(&toks, i + 2) {
                    if t.stars > 0 && is(toks.get(n), ">") {
                        out.weak.push(Cand::Type(Spelled { stars: t.stars - 1, ..t }));
                    }
                }
            }
            // A cast of a call's result: `(T *)malloc(...)`.
            Tok::Punct("(") => {
                if ident(prev).is_some() || is(prev, ")") || is(prev, "]") || is(prev, ">") {
                    continue;
                }
                if let Some((t, n)) = parse_type(&toks, i + 1) {
                    let called = ident(toks.get(n + 1)).is_some() || is(toks.get(n + 1), "(");
                    if t.stars > 0 && is(toks.get(n), ")") && called {
                        out.weak.push(Cand::Type(Spelled { stars: t.stars - 1, ..t }));
                    }
                }
            }
            // `x = ...` at the top level of a statement or declarator.
            Tok::Punct("=") => {
                if let Some(c) = assigned(&toks, i) {
                    out.weak.push(c);
                }
            }
            _ => {}
        }
    }
    out
}

/// The pointer assigned to by the `=` at `eq`, when it is a plain variable at the
/// statement's top level: `struct rec *r =` and `r =` give `r` (its pointee),
/// `*pp =` gives `pp`'s pointee's pointee.
fn assigned(toks: &[Tok], eq: usize) -> Option<Cand> {
    // Only at bracket depth 0 of the statement.
    let mut depth = 0i32;
    let mut start = 0;
    // A later declarator of a declaration (`int *a = .., *b = ..`).
    let mut later = false;
    for (j, t) in toks[..eq].iter().enumerate() {
        match t {
            Tok::Punct("(" | "[") => depth += 1,
            Tok::Punct(")" | "]") => depth -= 1,
            Tok::Punct(";" | "{" | "}") => {
                depth = 0;
                start = j + 1;
                later = false;
            }
            Tok::Punct(",") if depth == 0 => {
                start = j + 1;
                later = true;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return None;
    }
    let lhs = &toks[start..eq];
    let (last, before) = lhs.split_last()?;
    let name = ident(Some(last)).filter(|s| !KEYWORDS.contains(s) && !QUALIFIERS.contains(s))?;
    let mut k = before.len();
    let mut stars = 0u8;
    while k > 0 && is(before.get(k - 1), "*") {
        stars += 1;
        k -= 1;
    }
    let declared = later
        || k > 0
            && (ident(before.get(k - 1)).is_some_and(|s| !KEYWORDS.contains(&s) || s == "auto")
                || is(before.get(k - 1), ">"));
    if k > 0 && !declared {
        // `s->p =`, `a[i] =`, `ns::p =`: not a plain variable.
        return None;
    }
    let deref = if declared { 1 } else { 1 + stars };
    Some(Cand::Var { name: name.to_owned(), deref })
}
