//! The module's C and C++ types by qualified name.

use std::collections::HashMap;

use gimli::UnitOffset;

use crate::dwarf::{self, is_c_family, Units};

/// Type names of `<stdint.h>` and `<stddef.h>`, when the DWARF does not describe them
/// (a type used only in `sizeof` is not emitted).
pub(super) fn fixed_width(name: &str) -> Option<u64> {
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
    pub(super) by_name: HashMap<String, Vec<TypeEntry>>,
    /// Types inside namespaces or classes by their last name segment (`Point` for
    /// `geo::Point`), for names brought into scope by `using`.
    pub(super) by_last: HashMap<String, Vec<TypeEntry>>,
}

#[derive(Clone, Copy)]
pub(super) struct TypeEntry {
    pub(super) uid: usize,
    pub(super) off: UnitOffset,
    /// A struct/union/class/enum (named with a tag in C).
    pub(super) tag: bool,
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
