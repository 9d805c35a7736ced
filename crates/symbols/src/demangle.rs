//! Demangling of C++ and Rust symbol names.

use gimli::DwLang;

/// Demangles a linkage name, using the unit's source language when it is known.
///
/// Rust names lose their hash suffix (`prog::main`, not `prog::main::h0123…`). Names
/// that are not mangled, or that fail to demangle, are returned unchanged.
pub(crate) fn demangle(name: &str, language: Option<DwLang>) -> String {
    match language {
        Some(gimli::DW_LANG_Rust) => demangle_rust(name),
        l if crate::dwarf::is_cxx(l) => demangle_cpp(name),
        _ => demangle_guess(name),
    }
    .unwrap_or_else(|| name.to_owned())
}

/// Demangles a name of unknown origin (an ELF symbol).
pub(crate) fn demangle_guess(name: &str) -> Option<String> {
    if name.starts_with("_R") {
        return demangle_rust(name);
    }
    if name.starts_with("_ZN") && is_rust_legacy(name) {
        if let Some(s) = demangle_rust(name) {
            return Some(s);
        }
    }
    if name.starts_with("_Z") {
        return demangle_cpp(name);
    }
    None
}

/// Whether a `_ZN…E` name carries the legacy Rust hash component `17h<16 hex>E`.
fn is_rust_legacy(name: &str) -> bool {
    // Strip an LLVM suffix such as `.llvm.1234`.
    let base = name.split('.').next().unwrap_or(name);
    let Some(body) = base.strip_suffix('E') else { return false };
    body.len() > 19
        && body[body.len() - 19..].starts_with("17h")
        && body[body.len() - 16..].bytes().all(|b| b.is_ascii_hexdigit())
}

fn demangle_rust(name: &str) -> Option<String> {
    rustc_demangle::try_demangle(name).ok().map(|d| format!("{d:#}"))
}

fn demangle_cpp(name: &str) -> Option<String> {
    let sym = cpp_demangle::Symbol::new(name).ok()?;
    sym.demangle().ok()
}

/// Demangles a C++ or Rust symbol name of unknown language; Rust names lose their hash.
///
/// Unmangled names are returned unchanged.
///
/// ```
/// assert_eq!(memlens_symbols::demangle_symbol("_ZN2ns3Foo3barEi"), "ns::Foo::bar(int)");
/// assert_eq!(memlens_symbols::demangle_symbol("main"), "main");
/// ```
pub fn demangle_symbol(name: &str) -> String {
    demangle(name, None)
}

/// Strips a trailing C++ parameter list (and `const`/`&` qualifiers after it):
/// `ns::Foo::bar(int) const` becomes `ns::Foo::bar`.
pub(crate) fn strip_params(name: &str) -> &str {
    let trimmed = name
        .trim_end_matches(" const")
        .trim_end_matches(" volatile")
        .trim_end_matches(" &&")
        .trim_end_matches(" &");
    if !trimmed.ends_with(')') {
        return name;
    }
    let mut depth = 0usize;
    for (i, c) in trimmed.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    return if i == 0 { name } else { &trimmed[..i] };
                }
            }
            _ => {}
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpp_and_rust() {
        assert_eq!(demangle("_ZN2ns3Foo3barEi", None), "ns::Foo::bar(int)");
        assert_eq!(demangle("_ZN4prog4main17h0123456789abcdefE", None), "prog::main");
        assert_eq!(
            demangle("_ZN4prog4main17h0123456789abcdefE", Some(gimli::DW_LANG_Rust)),
            "prog::main"
        );
        assert_eq!(demangle("main", Some(gimli::DW_LANG_C99)), "main");
        assert_eq!(demangle("_Znotvalid", None), "_Znotvalid");
    }

    #[test]
    fn params() {
        assert_eq!(strip_params("ns::Foo::bar(int)"), "ns::Foo::bar");
        assert_eq!(strip_params("ns::Foo::bar(int) const"), "ns::Foo::bar");
        assert_eq!(strip_params("f(void (*)(int))"), "f");
        assert_eq!(strip_params("main"), "main");
        assert_eq!(strip_params("operator()(int)"), "operator()");
    }
}
