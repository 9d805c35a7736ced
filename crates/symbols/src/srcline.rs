//! Heap element types read from the allocating source line, for blocks whose DWARF
//! gives none: gcc's `new T` (gcc records no allocation type), clang's `new T` whose
//! heap-alloc-site type ThreadSanitizer's invoke rewriting dropped, and C's
//! `malloc(n * sizeof(struct T))`.
//!
//! The allocation's call site is known exactly (its return address); the line the
//! DWARF gives it is read from the source file the DWARF names, and the allocation
//! expressions on it are recognised: `new T`, `new T[n]`, `new T(...)`,
//! `new (std::nothrow) T`, `sizeof(T)`, `sizeof(struct T)`, `sizeof *p`,
//! `sizeof(p[0])`, casts `(T *)malloc(...)` and `static_cast<T *>(...)`, and the
//! pointer the result is assigned to (`T *p = malloc(...)`, `p = calloc(...)`), whose
//! declared type comes from the allocating function's DWARF. `T` is resolved in
//! the function's scope first (its template parameters, its class and namespaces, its
//! compilation unit), then as a unique name in the module. A line is used only when
//! every expression on it resolves and all name the same type; the caller also checks
//! that the block's size is a multiple of the type's.

use std::collections::HashMap;
use std::sync::Arc;

use gimli::UnitOffset;

use crate::dwarf::{self, Die, Units};
use crate::heaptype::{HeapType, Parents, TypeSource};
use crate::layout::{LayoutCache, TypeLayout};

/// A C/C++ token; literals and numbers carry no text.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    Punct(&'static str),
    Lit,
}

const PUNCTS: &[&str] = &[
    "::", "->", "==", "!=", "<=", ">=", "&&", "||", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=",
    "++", "--", "(", ")", "[", "]", "{", "}", "<", ">", "=", "*", "&", ",", ";", ".", "+", "-",
    "/", "%", "!", "~", "?", ":", "^", "|", "#",
];

fn lex(s: &str) -> Vec<Tok> {
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
fn strip_comments(line: &str) -> String {
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

/// Type names of `<stdint.h>` and `<stddef.h>`, when the DWARF does not describe them
/// (a type used only in `sizeof` is not emitted).
fn fixed_width(name: &str) -> Option<u64> {
    Some(match name {
        "int8_t" | "uint8_t" => 1,
        "int16_t" | "uint16_t" => 2,
        "int32_t" | "uint32_t" => 4,
        "int64_t" | "uint64_t" | "size_t" | "ssize_t" | "ptrdiff_t" | "intptr_t" | "uintptr_t"
        | "off_t" => 8,
        _ => return None,
    })
}

/// Structure, class, union, enumeration, typedef and base types of the C and C++
/// units, by qualified name (`ns::Node`).
#[derive(Default)]
pub(crate) struct TypeIndex {
    by_name: HashMap<String, Vec<TypeEntry>>,
    /// Types inside namespaces or classes by their last name segment (`Point` for
    /// `geo::Point`), for names brought into scope by `using`.
    by_last: HashMap<String, Vec<TypeEntry>>,
}

#[derive(Clone, Copy)]
struct TypeEntry {
    uid: usize,
    off: UnitOffset,
    /// A struct/union/class/enum (named with a tag in C).
    tag: bool,
}

pub(crate) fn is_c_family(lang: Option<gimli::DwLang>) -> bool {
    matches!(
        lang,
        Some(
            gimli::DW_LANG_C
                | gimli::DW_LANG_C89
                | gimli::DW_LANG_C99
                | gimli::DW_LANG_C11
                | gimli::DW_LANG_C17
                | gimli::DW_LANG_C_plus_plus
                | gimli::DW_LANG_C_plus_plus_03
                | gimli::DW_LANG_C_plus_plus_11
                | gimli::DW_LANG_C_plus_plus_14
                | gimli::DW_LANG_C_plus_plus_17
                | gimli::DW_LANG_C_plus_plus_20
        )
    )
}

fn is_cxx(lang: Option<gimli::DwLang>) -> bool {
    is_c_family(lang)
        && !matches!(
            lang,
            Some(
                gimli::DW_LANG_C
                    | gimli::DW_LANG_C89
                    | gimli::DW_LANG_C99
                    | gimli::DW_LANG_C11
                    | gimli::DW_LANG_C17
            )
        )
}

impl TypeIndex {
    pub(crate) fn build(units: &Units) -> TypeIndex {
        let mut by_name: HashMap<String, Vec<TypeEntry>> = HashMap::new();
        let mut by_last: HashMap<String, Vec<TypeEntry>> = HashMap::new();
        for (uid, unit) in units.units.iter().enumerate() {
            if !is_c_family(units.langs[uid]) {
                continue;
            }
            let mut cursor = unit.entries();
            let mut scopes: Vec<(isize, Option<String>)> = Vec::new();
            while let Ok(Some(die)) = cursor.next_dfs() {
                let depth = die.depth();
                while scopes.last().is_some_and(|(d, _)| *d >= depth) {
                    scopes.pop();
                }
                let tag = die.tag();
                let aggregate = matches!(
                    tag,
                    gimli::DW_TAG_structure_type
                        | gimli::DW_TAG_class_type
                        | gimli::DW_TAG_union_type
                        | gimli::DW_TAG_enumeration_type
                );
                let named_type =
                    aggregate || matches!(tag, gimli::DW_TAG_typedef | gimli::DW_TAG_base_type);
                let scope = tag == gimli::DW_TAG_namespace || aggregate;
                if !named_type && !scope {
                    // Functions' own types are not reachable by qualified name.
                    if die.has_children() && tag == gimli::DW_TAG_subprogram {
                        scopes.push((depth, None));
                    }
                    continue;
                }
                let name = units.name(uid, die);
                let in_function = scopes.iter().any(|(_, s)| s.is_none());
                if named_type && !dwarf::flag(die, gimli::DW_AT_declaration) {
                    if let Some(n) = &name {
                        let mut q = String::new();
                        for (_, s) in scopes.iter().filter(|s| s.1.is_some()) {
                            q.push_str(s.as_deref().unwrap_or_default());
                            q.push_str("::");
                        }
                        q.push_str(n);
                        let e = TypeEntry { uid, off: die.offset(), tag: aggregate };
                        if q.len() > n.len() {
                            by_last.entry(n.clone()).or_default().push(e);
                        }
                        by_name.entry(q).or_default().push(e);
                    }
                }
                if scope && die.has_children() {
                    let s = match (in_function, name) {
                        (true, _) => None,
                        (false, Some(n)) => Some(n),
                        (false, None) => Some("(anonymous namespace)".to_owned()),
                    };
                    scopes.push((depth, s));
                }
            }
        }
        TypeIndex { by_name, by_last }
    }
}

/// The allocating function: the innermost (inlined) function DIE at the call site.
pub(crate) struct Context<'a> {
    pub units: &'a Units,
    pub layouts: &'a LayoutCache,
    pub types: &'a TypeIndex,
    pub parents: &'a dyn Fn(usize) -> Arc<Parents>,
    /// A static variable's type by name.
    pub global: &'a dyn Fn(&str) -> Option<(usize, UnitOffset)>,
    /// Innermost function DIE at the call site (subprogram or inlined subroutine).
    pub function: (usize, UnitOffset),
}

/// What resolving one candidate gave.
enum Resolved {
    Type(HeapType),
    /// Says nothing (`void *p = malloc(n)`).
    Nothing,
    /// Not understood: the line gives no type.
    Fail,
}

impl Context<'_> {
    /// The one type the candidates agree on.
    pub(crate) fn resolve(&self, c: &Candidates) -> Option<HeapType> {
        let mut found: Vec<HeapType> = Vec::new();
        let groups: Vec<(&Vec<Cand>, bool)> = if c.news.is_empty() {
            vec![(&c.sizes, false), (&c.weak, true)]
        } else {
            vec![(&c.news, false)]
        };
        for (cands, weak) in groups {
            for cand in cands {
                match self.candidate(cand, weak) {
                    Resolved::Type(t) => found.push(t),
                    Resolved::Nothing => {}
                    Resolved::Fail => return None,
                }
            }
        }
        let first = found.first()?.clone();
        let same = |t: &HeapType| t.name == first.name && t.layout.size() == first.layout.size();
        // A cast or an assigned pointer alone types a block only as a structure:
        // wrappers like sqlite's `sqlite3_int64 *p = malloc(n + 8)` keep a scalar
        // header in front of untyped memory.
        let strong = !c.news.is_empty() || !c.sizes.is_empty();
        let aggregate = !first.layout.describe(0).path.is_empty();
        (found.iter().all(same) && (strong || aggregate)).then_some(first)
    }

    fn candidate(&self, cand: &Cand, weak: bool) -> Resolved {
        let t = match cand {
            Cand::Opaque => return Resolved::Fail,
            Cand::Type(s) => self.spelled(s),
            Cand::Var { name, deref } => self.variable(name, *deref, weak),
            Cand::TypeOrVar(name) => match self.local(name) {
                Some(ty) => self.deref_type(ty, 0, weak),
                None => match self.spelled(&Spelled {
                    tag: false,
                    builtin: false,
                    name: name.clone(),
                    stars: 0,
                }) {
                    Resolved::Fail => self.variable(name, 0, weak),
                    r => r,
                },
            },
        };
        match t {
            Resolved::Type(t) if weak && is_bytes(&t.name) => Resolved::Nothing,
            Resolved::Fail if weak => Resolved::Nothing,
            r => r,
        }
    }

    fn variable(&self, name: &str, deref: u8, weak: bool) -> Resolved {
        let ty = match self.local(name) {
            Some(t) => t,
            None => match (self.global)(name) {
                Some(t) => t,
                None => return Resolved::Fail,
            },
        };
        self.deref_type(ty, deref, weak)
    }

    /// `ty` dereferenced `deref` times (pointers and arrays), as a heap type.
    fn deref_type(&self, mut ty: (usize, UnitOffset), deref: u8, weak: bool) -> Resolved {
        let units = self.units;
        for _ in 0..deref {
            let Some((uid, die)) = strip(units, ty) else { return Resolved::Fail };
            if !matches!(die.tag(), gimli::DW_TAG_pointer_type | gimli::DW_TAG_array_type) {
                return if weak { Resolved::Nothing } else { Resolved::Fail };
            }
            match units.type_of(uid, &die) {
                Some(t) => ty = t,
                // `void *`
                None => return Resolved::Nothing,
            }
        }
        match self.heap_type(ty) {
            Some(t) => Resolved::Type(t),
            None => Resolved::Fail,
        }
    }

    /// A type DIE as a heap type; built-in types under their canonical C name.
    fn heap_type(&self, ty: (usize, UnitOffset)) -> Option<HeapType> {
        let (uid, die) = strip_cv(self.units, ty)?;
        if die.tag() == gimli::DW_TAG_base_type {
            let name = self.units.name(uid, &die)?;
            let words: Vec<&str> = name.split_whitespace().collect();
            if let Some((n, Some(size))) = builtin(&words) {
                return Some(scalar(&n, size));
            }
        }
        let layout = self.layouts.get(self.units, uid, die.offset());
        layout.size().filter(|&s| s > 0)?;
        let name: Arc<str> = layout.name().unwrap_or("?").into();
        Some(HeapType { name, layout, source: TypeSource::SourceLine })
    }

    /// A variable or parameter of the allocating function (its lexical blocks, not
    /// the functions inlined into it), when all of that name have one type.
    fn local(&self, name: &str) -> Option<(usize, UnitOffset)> {
        let (uid, off) = self.function;
        let unit = &self.units.units[uid];
        let mut tree = unit.entries_tree(Some(off)).ok()?;
        let root = tree.root().ok()?;
        let mut found = Vec::new();
        walk_locals(self.units, uid, root, name, &mut found, 0);
        let first = *found.first()?;
        let same = |t: &(usize, UnitOffset)| {
            *t == first
                || self.heap_type(*t).map(|h| h.name) == self.heap_type(first).map(|h| h.name)
        };
        found.iter().all(same).then_some(first)
    }

    /// Resolves a spelled type in the function's scope.
    fn spelled(&self, s: &Spelled) -> Resolved {
        if s.stars > 0 {
            let mut name = s.name.clone();
            for _ in 0..s.stars {
                name.push('*');
            }
            return Resolved::Type(scalar(&name, 8));
        }
        if s.builtin {
            let words: Vec<&str> = s.name.split_whitespace().collect();
            return match builtin(&words) {
                Some((n, Some(size))) => Resolved::Type(scalar(&n, size)),
                _ => Resolved::Fail,
            };
        }
        let cxx = is_cxx(self.units.langs[self.function.0]);
        if !s.name.contains("::") {
            if let Some(t) = self.template_param(&s.name) {
                return self.heap_type(t).map_or(Resolved::Fail, Resolved::Type);
            }
        }
        let fits = |e: &TypeEntry| if s.tag { e.tag } else { cxx || !e.tag };
        let name = s.name.strip_prefix("::").unwrap_or(&s.name);
        for prefix in self.scopes() {
            let q = format!("{prefix}{name}");
            let Some(entries) = self.types.by_name.get(&q) else { continue };
            if let Some(r) = self.pick(entries, &fits) {
                return r;
            }
        }
        // Not visible by scope (a `using` declaration): a unique type of that name
        // in some namespace or class.
        if let Some(r) = self.types.by_last.get(name).and_then(|e| self.pick(e, &fits)) {
            return r;
        }
        match fixed_width(name) {
            Some(size) if !s.tag => Resolved::Type(scalar(name, size)),
            _ => Resolved::Fail,
        }
    }

    /// The type among same-named `entries`: this unit's definition, or another unit's
    /// when all agree. `None` when no entry fits.
    fn pick(&self, entries: &[TypeEntry], fits: &dyn Fn(&TypeEntry) -> bool) -> Option<Resolved> {
        let entries: Vec<TypeEntry> = entries.iter().copied().filter(|e| fits(e)).collect();
        if entries.is_empty() {
            return None;
        }
        let own: Vec<TypeEntry> =
            entries.iter().copied().filter(|e| e.uid == self.function.0).collect();
        let pick = if own.is_empty() { &entries } else { &own };
        let types: Vec<HeapType> =
            pick.iter().filter_map(|e| self.heap_type((e.uid, e.off))).collect();
        if types.len() != pick.len() {
            return Some(Resolved::Fail);
        }
        let first = &types[0];
        let agree =
            types.iter().all(|t| t.name == first.name && t.layout.size() == first.layout.size());
        Some(if agree { Resolved::Type(first.clone()) } else { Resolved::Fail })
    }

    /// The declaration DIEs of the function (following abstract origins and
    /// specifications), innermost first.
    fn declarations(&self) -> Vec<(usize, Die)> {
        let (mut uid, mut off) = self.function;
        let mut chain = Vec::new();
        for _ in 0..6 {
            let Some(die) = self.units.entry(uid, off) else { break };
            let link = die
                .attr_value(gimli::DW_AT_abstract_origin)
                .or_else(|| die.attr_value(gimli::DW_AT_specification));
            chain.push((uid, die));
            match link.and_then(|v| self.units.resolve(uid, &v)) {
                Some(next) => (uid, off) = next,
                None => break,
            }
        }
        chain
    }

    /// The enclosing classes and namespaces of the function, innermost first, as
    /// qualified-name prefixes (`ns::Outer::`, `ns::`, ``).
    fn scopes(&self) -> Vec<String> {
        let mut names = Vec::new();
        if let Some((uid, decl)) = self.declarations().pop() {
            let p = (self.parents)(uid);
            let mut scope = p.get(&decl.offset().0).copied();
            for _ in 0..32 {
                let Some(s) = scope else { break };
                let Some(die) = self.units.entry(uid, s) else { break };
                if die.tag() == gimli::DW_TAG_subprogram {
                    break;
                }
                names.push(
                    self.units.name(uid, &die).unwrap_or_else(|| "(anonymous namespace)".into()),
                );
                scope = p.get(&s.0).copied();
            }
        }
        names.reverse();
        let mut out: Vec<String> = (0..=names.len())
            .rev()
            .map(|n| names[..n].iter().map(|s| format!("{s}::")).collect())
            .collect();
        out.dedup();
        out
    }

    /// A template type parameter of the function or of its classes.
    fn template_param(&self, name: &str) -> Option<(usize, UnitOffset)> {
        let mut dies = self.declarations();
        // The classes around the declaration.
        if let Some((uid, decl)) = dies.last().cloned() {
            let p = (self.parents)(uid);
            let mut scope = p.get(&decl.offset().0).copied();
            for _ in 0..32 {
                let Some(s) = scope else { break };
                let Some(die) = self.units.entry(uid, s) else { break };
                dies.push((uid, die));
                scope = p.get(&s.0).copied();
            }
        }
        for (uid, die) in dies {
            let unit = &self.units.units[uid];
            let Ok(mut tree) = unit.entries_tree(Some(die.offset())) else { continue };
            let Ok(root) = tree.root() else { continue };
            let mut children = root.children();
            while let Ok(Some(child)) = children.next() {
                let c = child.entry();
                if c.tag() == gimli::DW_TAG_template_type_parameter
                    && self.units.name(uid, c).as_deref() == Some(name)
                {
                    return self.units.type_of(uid, c);
                }
            }
        }
        None
    }
}

fn walk_locals(
    units: &Units,
    uid: usize,
    node: gimli::EntriesTreeNode<'_, '_, dwarf::R>,
    name: &str,
    found: &mut Vec<(usize, UnitOffset)>,
    depth: u32,
) {
    if depth > 32 {
        return;
    }
    let mut children = node.children();
    while let Ok(Some(child)) = children.next() {
        let die = child.entry();
        match die.tag() {
            gimli::DW_TAG_variable | gimli::DW_TAG_formal_parameter
                if units.name(uid, die).as_deref() == Some(name) =>
            {
                found.extend(units.type_of(uid, die));
            }
            gimli::DW_TAG_lexical_block => walk_locals(units, uid, child, name, found, depth + 1),
            _ => {}
        }
    }
}

/// The type DIE with qualifiers and typedefs looked through.
fn strip(units: &Units, mut ty: (usize, UnitOffset)) -> Option<(usize, Die)> {
    for _ in 0..16 {
        let die = units.entry(ty.0, ty.1)?;
        match die.tag() {
            gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type
            | gimli::DW_TAG_atomic_type
            | gimli::DW_TAG_typedef => ty = units.type_of(ty.0, &die)?,
            _ => return Some((ty.0, die)),
        }
    }
    None
}

/// The type DIE with qualifiers (not typedefs) looked through.
fn strip_cv(units: &Units, mut ty: (usize, UnitOffset)) -> Option<(usize, Die)> {
    for _ in 0..16 {
        let die = units.entry(ty.0, ty.1)?;
        match die.tag() {
            gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type
            | gimli::DW_TAG_atomic_type => ty = units.type_of(ty.0, &die)?,
            _ => return Some((ty.0, die)),
        }
    }
    None
}

fn scalar(name: &str, size: u64) -> HeapType {
    HeapType {
        name: name.into(),
        layout: Arc::new(TypeLayout::scalar_named(name, size)),
        source: TypeSource::SourceLine,
    }
}

/// Byte-buffer types, which say nothing about what a block holds.
fn is_bytes(name: &str) -> bool {
    matches!(name, "char" | "signed char" | "unsigned char" | "void" | "int8_t" | "uint8_t")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(tag: bool, name: &str, stars: u8) -> Cand {
        Cand::Type(Spelled { tag, builtin: false, name: name.into(), stars })
    }
    fn var(name: &str, deref: u8) -> Cand {
        Cand::Var { name: name.into(), deref }
    }

    #[test]
    fn new_expressions() {
        let c = candidates("    Node *n = new Node; // x");
        assert_eq!(c.news, vec![ty(false, "Node", 0)]);
        assert_eq!(candidates("p = new ns::Point[8];").news, vec![ty(false, "ns::Point", 0)]);
        assert_eq!(
            candidates("p = new (std::nothrow) Node(1, 2);").news,
            vec![ty(false, "Node", 0)]
        );
        assert_eq!(
            candidates("auto *v = new std::vector<int>{};").news,
            vec![ty(false, "std::vector<int>", 0)]
        );
        let b = candidates("q = new unsigned long[4];");
        assert_eq!(
            b.news,
            vec![Cand::Type(Spelled {
                tag: false,
                builtin: true,
                name: "unsigned long".into(),
                stars: 0
            })]
        );
        assert_eq!(candidates("x = Foo::new(3);").news, vec![]);
        assert_eq!(candidates("void *operator new(size_t n);").news, vec![]);
        assert_eq!(candidates("s = f ? (void *)new A : (void *)new B;").news.len(), 2);
    }

    #[test]
    fn sizeof_casts_and_assignments() {
        let c = candidates("struct rec *r = malloc(n * sizeof(struct rec)); // @rec");
        assert_eq!(c.sizes, vec![ty(true, "rec", 0)]);
        assert_eq!(c.weak, vec![var("r", 1)]);
        let c = candidates("p = calloc(n, sizeof *p);");
        assert_eq!(c.sizes, vec![var("p", 1)]);
        assert_eq!(c.weak, vec![var("p", 1)]);
        assert_eq!(candidates("x = malloc(sizeof(p[0]) * 3)").sizes, vec![var("p", 1)]);
        assert_eq!(
            candidates("x = malloc(sizeof(Node))").sizes,
            vec![Cand::TypeOrVar("Node".into())]
        );
        assert_eq!(candidates("x = malloc(sizeof(s->len))").sizes, vec![Cand::Opaque]);
        assert_eq!(candidates("o = malloc(sizeof(struct obj) + n)").sizes, vec![Cand::Opaque]);
        assert_eq!(candidates("o = malloc(n - sizeof *o)").sizes, vec![Cand::Opaque]);
        assert_eq!(candidates("o = malloc(n * sizeof *o)").sizes, vec![var("o", 1)]);
        assert_eq!(candidates("x = malloc(sizeof(char *) * 3)").sizes.len(), 1);
        let c = candidates("v->items = (struct item *)malloc(k);");
        assert_eq!(c.weak, vec![ty(true, "item", 0)]);
        let c = candidates("*pp = static_cast<Node *>(malloc(16));");
        assert_eq!(c.weak, vec![var("pp", 2), ty(false, "Node", 0)]);
        assert_eq!(candidates("if (a == b) f(x = 1);").weak, vec![]);
        assert_eq!(candidates("s.p = malloc(4);").weak, vec![]);
        assert_eq!(
            candidates("int *a = malloc(4), *b = malloc(8);").weak,
            vec![var("a", 1), var("b", 1)]
        );
        // an arithmetic group is not a cast
        assert_eq!(candidates("x = (a * b) + c(d);").weak, vec![var("x", 1)]);
    }

    #[test]
    fn statements_span_lines() {
        let lines: Vec<String> = [
            "int x;",
            "struct rec *r =",
            "    malloc(n *",
            "           sizeof(struct rec));",
            "y();",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let s = statement(&lines, 3).unwrap();
        assert!(s.contains("struct rec *r") && s.contains("sizeof(struct rec)"), "{s}");
        assert!(!s.contains("y()"), "{s}");
        assert_eq!(statement(&lines, 9), None);
        assert_eq!(strip_comments("a /* b */ c // d"), "a   c ");
    }

    #[test]
    fn builtins_are_canonical() {
        assert_eq!(builtin(&["long", "unsigned", "int"]).unwrap().0, "unsigned long");
        assert_eq!(builtin(&["long"]).unwrap(), ("long".into(), Some(8)));
        assert_eq!(builtin(&["long", "long", "int"]).unwrap().0, "long long");
        assert_eq!(builtin(&["char"]).unwrap().0, "char");
        assert!(builtin(&["float", "int"]).is_none());
    }
}
