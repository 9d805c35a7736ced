//! Resolving the candidates to one type in the allocating function's scope.

use std::sync::Arc;

use gimli::UnitOffset;

use super::parse::{builtin, Cand, Candidates, Spelled};
use super::types::{fixed_width, TypeEntry, TypeIndex};
use crate::dwarf::{self, is_cxx, Die, Units};
use crate::heaptype::{HeapType, Parents, TypeSource};
use crate::layout::{LayoutCache, TypeLayout};

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
            let Some((uid, die)) = strip(units, ty, true) else { return Resolved::Fail };
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
        let (uid, die) = strip(self.units, ty, false)?;
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

/// The type DIE with qualifiers (and, with `typedefs`, typedefs) looked through.
fn strip(units: &Units, mut ty: (usize, UnitOffset), typedefs: bool) -> Option<(usize, Die)> {
    for _ in 0..16 {
        let die = units.entry(ty.0, ty.1)?;
        match die.tag() {
            gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type
            | gimli::DW_TAG_atomic_type => ty = units.type_of(ty.0, &die)?,
            gimli::DW_TAG_typedef if typedefs => ty = units.type_of(ty.0, &die)?,
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
