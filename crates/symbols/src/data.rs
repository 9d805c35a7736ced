//! Naming data addresses: static variables (globals, statics, class statics) and
//! thread-locals.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use gimli::UnitOffset;

use crate::demangle::demangle;
use crate::dwarf::{self, Units};
use crate::elf::{RawSymbol, SymKind};
use crate::layout::{LayoutCache, TypeLayout};

/// What kind of storage a [`DataName`] refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DataKind {
    /// A variable with static storage duration: a global, a file or function `static`, a
    /// C++ class static, a Rust `static`.
    Global,
    /// A thread-local variable (`_Thread_local`, `thread_local`, `#[thread_local]`).
    ThreadLocal,
    /// A local variable or parameter in a stack frame.
    Stack,
}

/// A data address named after the variable that holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataName {
    /// Storage kind.
    pub kind: DataKind,
    /// Id of the module that defines the variable.
    pub module_id: u32,
    /// The variable's name, qualified with namespaces where DWARF or the linkage name
    /// gives them (`ns::counter`, `prog::COUNTER`, `main::calls` for a function static).
    pub base: Arc<str>,
    /// Member and index path inside the variable: `.limits.max`, `[3]`, `.v[2].b[1]`,
    /// `+4<pad>`; empty for the variable's first byte when it is a scalar.
    pub path: String,
    /// Byte offset of the address from the start of the variable.
    pub offset: u64,
    /// Type name of the innermost member or element, when DWARF describes the type.
    pub leaf_type: Option<Arc<str>>,
}

impl DataName {
    /// `base` followed by `path`, e.g. `stats.v[3]` or `cfg.limits.max`.
    pub fn display(&self) -> String {
        format!("{}{}", self.base, self.path)
    }
}

impl fmt::Display for DataName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.base, self.path)
    }
}

/// A thread-local variable of a module, located by its offset in the module's TLS block
/// (see [`TlsSegment`](crate::TlsSegment)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadLocal {
    /// Qualified name.
    pub name: Arc<str>,
    /// Offset of the variable from the start of the module's TLS block.
    pub offset: u64,
    /// Size in bytes (0 when unknown).
    pub size: u64,
}

/// One indexed variable: `start` is a file virtual address for globals and a TLS-block
/// offset for thread-locals.
#[derive(Clone, Debug)]
pub(crate) struct VarEntry {
    pub name: Arc<str>,
    pub start: u64,
    pub size: u64,
    pub ty: Option<(usize, UnitOffset)>,
}

impl VarEntry {
    fn contains(&self, a: u64) -> bool {
        a >= self.start && a - self.start < self.size.max(1)
    }
}

/// Sorted interval tables of a module's static and thread-local variables.
#[derive(Default)]
pub(crate) struct DataIndex {
    pub globals: Vec<VarEntry>,
    pub tls: Vec<VarEntry>,
    /// Types of unit-level `extern` declarations, by name: a variable defined in a
    /// shared library but copy-relocated into the executable has only an ELF symbol
    /// there, and its declaration gives it a type.
    decls: HashMap<String, (usize, UnitOffset)>,
}

impl DataIndex {
    /// Indexes every variable with a static or TLS location in the DWARF, then adds ELF
    /// data symbols not covered by DWARF.
    pub fn build(units: Option<&Units>, layouts: &LayoutCache, symbols: &[RawSymbol]) -> Self {
        let mut index = DataIndex::default();
        if let Some(units) = units {
            for uid in 0..units.units.len() {
                index_unit(units, uid, layouts, &mut index);
            }
        }
        for list in [&mut index.globals, &mut index.tls] {
            list.sort_by(|a, b| a.start.cmp(&b.start).then(b.size.cmp(&a.size)));
            list.dedup_by(|later, first| later.start == first.start);
        }
        // Fill unknown sizes from the symbol table, then add symbols DWARF doesn't know.
        let mut extra_globals = Vec::new();
        let mut extra_tls = Vec::new();
        for sym in symbols {
            let (list, extra) = match sym.kind {
                SymKind::Data => (&mut index.globals, &mut extra_globals),
                SymKind::Tls => (&mut index.tls, &mut extra_tls),
                SymKind::Function => continue,
            };
            match find(list, sym.addr) {
                Some(i) if list[i].start == sym.addr && list[i].size == 0 => {
                    list[i].size = sym.size
                }
                Some(_) => {}
                None if sym.size > 0 => extra.push(VarEntry {
                    name: demangle(&sym.name, None).into(),
                    start: sym.addr,
                    size: sym.size,
                    ty: index.decls.get(sym.name.as_str()).copied(),
                }),
                None => {}
            }
        }
        for (list, extra) in [(&mut index.globals, extra_globals), (&mut index.tls, extra_tls)] {
            if !extra.is_empty() {
                list.extend(extra);
                list.sort_by(|a, b| a.start.cmp(&b.start).then(b.size.cmp(&a.size)));
                list.dedup_by(|later, first| later.start == first.start);
            }
        }
        index
    }
}

/// Index of the entry containing `a` in a list sorted by start.
pub(crate) fn find(list: &[VarEntry], a: u64) -> Option<usize> {
    let end = list.partition_point(|e| e.start <= a);
    // Look back a few entries in case of nesting (an alias inside a larger object).
    (end.saturating_sub(4)..end).rev().find(|&i| list[i].contains(a))
}

/// Names `a` within `entry`.
pub(crate) fn name_in(
    entry: &VarEntry,
    a: u64,
    kind: DataKind,
    module_id: u32,
    units: Option<&Units>,
    layouts: &LayoutCache,
) -> DataName {
    let offset = a - entry.start;
    let layout: Option<Arc<TypeLayout>> =
        entry.ty.and_then(|(u, o)| Some(layouts.get(units?, u, o)));
    let (path, leaf_type) = match layout {
        Some(l) => {
            let p = l.describe(offset);
            (p.path, p.leaf_type)
        }
        None if offset > 0 => (format!("+{offset}"), None),
        None => (String::new(), None),
    };
    DataName { kind, module_id, base: entry.name.clone(), path, offset, leaf_type }
}

/// Where a variable's `DW_AT_location` puts it.
enum StaticLoc {
    Addr(u64),
    Tls(u64),
}

fn static_location(units: &Units, uid: usize, die: &dwarf::Die) -> Option<StaticLoc> {
    let value = die.attr_value(gimli::DW_AT_location)?;
    let ops = dwarf::expr_ops(units, uid, value)?;
    let addr = |op: &gimli::Operation<dwarf::R>| match *op {
        gimli::Operation::Address { address } => Some(address),
        gimli::Operation::AddressIndex { index } | gimli::Operation::ConstantIndex { index } => {
            units.address_index(uid, index)
        }
        gimli::Operation::UnsignedConstant { value } => Some(value),
        _ => None,
    };
    match ops.as_slice() {
        [op @ (gimli::Operation::Address { .. } | gimli::Operation::AddressIndex { .. })] => {
            addr(op)
                .filter(|&a| a != 0 && !units.units[uid].header.is_tombstone_address(a))
                .map(StaticLoc::Addr)
        }
        [op, gimli::Operation::TLS] => addr(op).map(StaticLoc::Tls),
        _ => None,
    }
}

/// Walks one unit's DIE tree, indexing variables with static or TLS locations.
fn index_unit(units: &Units, uid: usize, layouts: &LayoutCache, index: &mut DataIndex) {
    let unit = &units.units[uid];
    let lang = units.langs[uid];
    let mut cursor = unit.entries();
    // Enclosing named scopes (namespaces, types, functions): depth and DIE offset. Their
    // names are only looked up for variables that need them.
    let mut scopes: Vec<(isize, UnitOffset)> = Vec::new();
    // Scopes of declarations, for definitions that refer to them through
    // `DW_AT_specification` (gcc puts the definition of a namespace member at unit level).
    let mut decl_scopes: HashMap<usize, Vec<UnitOffset>> = HashMap::new();
    let mut scope_names: HashMap<usize, String> = HashMap::new();
    let mut prefix = |scopes: &mut dyn Iterator<Item = UnitOffset>| {
        let mut q = String::new();
        for off in scopes {
            let name = scope_names.entry(off.0).or_insert_with(|| {
                let die = units.entry(uid, off);
                let named = die.as_ref().and_then(|d| units.name(uid, d));
                named.unwrap_or_else(|| match die.map(|d| d.tag()) {
                    Some(gimli::DW_TAG_namespace) => "(anonymous namespace)".to_owned(),
                    _ => "?".to_owned(),
                })
            });
            q.push_str(name);
            q.push_str("::");
        }
        q
    };
    while let Ok(Some(die)) = cursor.next_dfs() {
        let depth = die.depth();
        while scopes.last().is_some_and(|(d, _)| *d >= depth) {
            scopes.pop();
        }
        match die.tag() {
            gimli::DW_TAG_namespace
            | gimli::DW_TAG_structure_type
            | gimli::DW_TAG_class_type
            | gimli::DW_TAG_union_type
            | gimli::DW_TAG_subprogram
                if die.has_children() =>
            {
                scopes.push((depth, die.offset()));
            }
            gimli::DW_TAG_variable | gimli::DW_TAG_member
                if dwarf::flag(die, gimli::DW_AT_declaration) && !scopes.is_empty() =>
            {
                decl_scopes.insert(die.offset().0, scopes.iter().map(|s| s.1).collect());
            }
            gimli::DW_TAG_variable => {
                let Some(loc) = static_location(units, uid, die) else {
                    if scopes.is_empty() && dwarf::flag(die, gimli::DW_AT_declaration) {
                        if let (Some(n), Some(ty)) = (units.name(uid, die), units.type_of(uid, die))
                        {
                            index.decls.entry(n).or_insert(ty);
                        }
                    }
                    continue;
                };
                let name = match units.linkage_name(uid, die) {
                    Some(l) => demangle(&l, lang),
                    None => {
                        let Some(n) = units.name(uid, die) else { continue };
                        let spec = die
                            .attr_value(gimli::DW_AT_specification)
                            .and_then(|v| units.resolve(uid, &v))
                            .filter(|&(u, _)| u == uid)
                            .and_then(|(_, o)| decl_scopes.get(&o.0));
                        let mut q = match spec {
                            Some(s) => prefix(&mut s.iter().copied()),
                            None => prefix(&mut scopes.iter().map(|s| s.1)),
                        };
                        q.push_str(&n);
                        q
                    }
                };
                let ty = units.type_of(uid, die);
                let size = ty.and_then(|(u, o)| layouts.get(units, u, o).size()).unwrap_or(0);
                let entry = |start| VarEntry { name: name.clone().into(), start, size, ty };
                match loc {
                    StaticLoc::Addr(a) => index.globals.push(entry(a)),
                    StaticLoc::Tls(o) => index.tls.push(entry(o)),
                }
            }
            _ => {}
        }
    }
}
