//! The type of the objects in a heap block, from the allocation's call site.
//!
//! Two sources, both in the DWARF the compilers already emit:
//! - clang's `DW_AT_LLVM_alloc_type` on the `DW_TAG_call_site` of a C++ `new T`
//!   (emitted at `-O1` and above, where call sites are described);
//! - the template type parameter of an allocator frame in the allocation's inlined
//!   and out-of-line call chain: `std::__new_allocator<T>::allocate`,
//!   `std::allocator<T>`, Rust's `Box<T>` and `RawVec<T>` (behind `Vec<T>`).

use std::collections::HashMap;
use std::sync::Arc;

use gimli::UnitOffset;

use crate::dwarf::{self, Die, Units};
use crate::dyntls::TlsBlock;
use crate::frame::SubprogramRange;
use crate::layout::{LayoutCache, TypeLayout};

/// `DW_AT_LLVM_alloc_type` (LLVM's `Dwarf.def`: 0x3e0e).
const DW_AT_LLVM_ALLOC_TYPE: gimli::DwAt = gimli::DwAt(0x3e0e);

/// The element type of the objects in a heap block.
#[derive(Clone, Debug)]
pub struct HeapType {
    /// Type name as written in the source (`Node`, `Point`).
    pub name: Arc<str>,
    /// Its layout; the block holds one object or an array of them.
    pub layout: Arc<TypeLayout>,
    /// Where the type was learned.
    pub source: TypeSource,
}

/// Where a [`HeapType`] comes from, most reliable first.
#[derive(Clone, Debug)]
pub enum TypeSource {
    /// clang's `DW_AT_LLVM_alloc_type` on the allocating call site.
    AllocSite,
    /// The template parameter of an allocator frame (`std::allocator<T>`, `Box<T>`).
    Allocator,
    /// The allocating source line (`new T`, `sizeof(struct T)`, `T *p = malloc`). Only
    /// valid for blocks whose size is a multiple of the type's: check with
    /// [`HeapType::fits`].
    SourceLine,
    /// Not objects but a `dlopen`ed module's thread-local block, allocated by the
    /// dynamic loader: the candidate modules' blocks; the block's size picks one
    /// ([`HeapType::tls_block`]).
    DynamicTls(Arc<[TlsBlock]>),
}

impl HeapType {
    /// For a dynamic TLS allocation, the index (in [`TypeSource::DynamicTls`]) of the
    /// one module whose TLS block has this size; `None` when none or several have.
    pub fn tls_block(&self, size: u64) -> Option<usize> {
        let TypeSource::DynamicTls(blocks) = &self.source else { return None };
        let mut hits = blocks.iter().enumerate().filter(|(_, b)| b.size == size);
        let (first, _) = hits.next()?;
        hits.next().is_none().then_some(first)
    }

    /// Whether a block of `size` bytes can hold this type: always for types from the
    /// DWARF, and for a type read from the source line when `size` is a non-zero
    /// multiple of the type's size (one object or an array); never for a dynamic
    /// TLS block (see [`HeapType::tls_block`]).
    pub fn fits(&self, size: u64) -> bool {
        match &self.source {
            TypeSource::SourceLine => {
                self.layout.size().is_some_and(|s| s > 0 && size > 0 && size.is_multiple_of(s))
            }
            TypeSource::DynamicTls(_) => false,
            _ => true,
        }
    }
}

/// What one frame of an allocation's call chain says about the block's type.
pub(crate) enum FrameVerdict {
    /// An allocator frame gave the element type.
    Found(HeapType),
    /// A library frame (std, alloc, core): look further out.
    Continue,
    /// User code (or nothing known): the type is not known.
    Stop,
}

/// Return addresses (file addresses) of call sites with an allocation type.
pub(crate) fn alloc_site_index(units: &Units) -> HashMap<u64, (usize, UnitOffset)> {
    let mut out = HashMap::new();
    for (uid, unit) in units.units.iter().enumerate() {
        // Only clang's C++ emits the attribute; skip the (large) Rust and C units.
        let cxx = crate::dwarf::is_cxx(units.langs[uid]);
        if !cxx {
            continue;
        }
        let mut cursor = unit.entries();
        while let Ok(Some(die)) = cursor.next_dfs() {
            if !matches!(die.tag(), gimli::DW_TAG_call_site | gimli::DW_TAG_GNU_call_site) {
                continue;
            }
            let Some(ty) = die.attr_value(DW_AT_LLVM_ALLOC_TYPE) else { continue };
            let Some(target) = units.resolve(uid, &ty) else { continue };
            let ret = die
                .attr_value(gimli::DW_AT_call_return_pc)
                .or_else(|| die.attr_value(gimli::DW_AT_low_pc))
                .and_then(|v| units.dwarf.attr_address(unit, v).ok().flatten());
            if let Some(ret) = ret {
                out.insert(ret, target);
            }
        }
    }
    out
}

/// A [`HeapType`] for the type DIE, when it has a size.
pub(crate) fn heap_type(
    units: &Units,
    layouts: &LayoutCache,
    (uid, off): (usize, UnitOffset),
    source: TypeSource,
) -> Option<HeapType> {
    let layout = layouts.get(units, uid, off);
    layout.size().filter(|&s| s > 0)?;
    let name: Arc<str> = layout.name().unwrap_or("?").into();
    Some(HeapType { name, layout, source })
}

/// Parents of the DIEs that matter for naming a frame's scope (subprograms,
/// namespaces and types), for one unit.
pub(crate) type Parents = HashMap<usize, UnitOffset>;

pub(crate) fn parents(units: &Units, uid: usize) -> Parents {
    let mut out = HashMap::new();
    let unit = &units.units[uid];
    let mut cursor = unit.entries();
    let mut stack: Vec<(isize, UnitOffset)> = Vec::new();
    while let Ok(Some(die)) = cursor.next_dfs() {
        let depth = die.depth();
        while stack.last().is_some_and(|(d, _)| *d >= depth) {
            stack.pop();
        }
        if matches!(
            die.tag(),
            gimli::DW_TAG_subprogram
                | gimli::DW_TAG_namespace
                | gimli::DW_TAG_structure_type
                | gimli::DW_TAG_class_type
                | gimli::DW_TAG_union_type
        ) {
            if let Some(&(_, p)) = stack.last() {
                out.insert(die.offset().0, p);
            }
            if die.has_children() {
                stack.push((depth, die.offset()));
            }
        }
    }
    out
}

/// The subprogram and inlined-subroutine DIEs containing file address `a`,
/// innermost first.
pub(crate) fn inline_chain(
    units: &Units,
    index: &[SubprogramRange],
    a: u64,
) -> Vec<(usize, UnitOffset)> {
    let end = index.partition_point(|r| r.start <= a);
    let Some(range) = (end.saturating_sub(8)..end).rev().map(|i| &index[i]).find(|r| a < r.end)
    else {
        return Vec::new();
    };
    let uid = range.uid;
    let unit = &units.units[uid];
    let mut chain = vec![(uid, range.offset)];
    let Ok(mut tree) = unit.entries_tree(Some(range.offset)) else { return chain };
    let Ok(root) = tree.root() else { return chain };
    descend(units, uid, root, a, &mut chain, 0);
    chain.reverse();
    chain
}

fn descend(
    units: &Units,
    uid: usize,
    node: gimli::EntriesTreeNode<'_, '_, dwarf::R>,
    a: u64,
    chain: &mut Vec<(usize, UnitOffset)>,
    depth: u32,
) {
    if depth > 64 {
        return;
    }
    let unit = &units.units[uid];
    let mut children = node.children();
    while let Ok(Some(child)) = children.next() {
        let die = child.entry();
        let tag = die.tag();
        if tag != gimli::DW_TAG_inlined_subroutine && tag != gimli::DW_TAG_lexical_block {
            continue;
        }
        let mut hit = false;
        if let Ok(mut rs) = units.dwarf.die_ranges(unit, die) {
            while let Ok(Some(r)) = rs.next() {
                if r.begin <= a && a < r.end {
                    hit = true;
                    break;
                }
            }
        }
        if hit {
            if tag == gimli::DW_TAG_inlined_subroutine {
                chain.push((uid, die.offset()));
            }
            descend(units, uid, child, a, chain, depth + 1);
            return;
        }
    }
}

/// Classes whose type parameter is the type of the memory they allocate.
const ALLOCATOR_CLASSES: &[&str] =
    &["allocator", "__new_allocator", "new_allocator", "__malloc_allocator", "Box", "RawVec"];

/// Top-level namespaces of the compilers' own libraries.
const LIBRARY_NAMESPACES: &[&str] = &["std", "__gnu_cxx", "__cxxabiv1", "alloc", "core"];

/// Template parameters naming an allocator rather than an element type.
const ALLOCATOR_PARAMS: &[&str] = &["A", "_Alloc", "Alloc", "Allocator", "_Allocator"];

/// What the function DIE at `site` (a subprogram or inlined subroutine) says.
pub(crate) fn verdict(
    units: &Units,
    layouts: &LayoutCache,
    parents: &dyn Fn(usize) -> Arc<Parents>,
    by_name: &dyn Fn(&str) -> Option<HeapType>,
    site: (usize, UnitOffset),
) -> FrameVerdict {
    // Follow abstract origins and specifications to the declaration, which sits in
    // its class or namespace.
    let (mut uid, mut off) = site;
    let mut chain = Vec::new();
    for _ in 0..6 {
        let Some(die) = units.entry(uid, off) else { return FrameVerdict::Stop };
        let link = die
            .attr_value(gimli::DW_AT_abstract_origin)
            .or_else(|| die.attr_value(gimli::DW_AT_specification));
        chain.push((uid, die));
        match link.and_then(|v| units.resolve(uid, &v)) {
            Some(next) => (uid, off) = next,
            None => break,
        }
    }
    // Rust puts some methods in an `{impl#N}` namespace rather than in their type:
    // the linkage name (`<alloc::boxed::Box<T>>::new`) names the type, and the
    // function carries the impl's type parameters.
    let demangled = chain
        .iter()
        .find_map(|(u, d)| units.linkage_name(*u, d))
        .map(|l| crate::demangle::demangle(&l, units.langs[uid]));
    if let Some((ty, first_arg)) = demangled.as_deref().and_then(self_type) {
        if ALLOCATOR_CLASSES.contains(&ty) {
            if let Some(t) = chain.iter().find_map(|(u, d)| element_param(units, layouts, *u, d)) {
                return FrameVerdict::Found(t);
            }
            // The standard library's own code has no template parameters in its
            // (line-tables-only) DWARF: find the type by name instead.
            if let Some(t) = first_arg.and_then(|a| primitive(a).or_else(|| by_name(a))) {
                return FrameVerdict::Found(t);
            }
        }
    }
    let p = parents(uid);
    let mut scope = p.get(&off.0).copied();
    let mut top: Option<String> = None;
    let mut class: Option<Die> = None;
    for _ in 0..32 {
        let Some(s) = scope else { break };
        let Some(die) = units.entry(uid, s) else { break };
        match die.tag() {
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type | gimli::DW_TAG_union_type
                if class.is_none() =>
            {
                class = Some(die.clone())
            }
            gimli::DW_TAG_namespace => top = units.name(uid, &die),
            _ => {}
        }
        scope = p.get(&s.0).copied();
    }
    if let Some(c) = &class {
        let name = units.name(uid, c).unwrap_or_default();
        let base = name.split('<').next().unwrap_or("");
        if ALLOCATOR_CLASSES.contains(&base) {
            if let Some(t) = element_param(units, layouts, uid, c) {
                return FrameVerdict::Found(t);
            }
        }
    }
    match top {
        Some(t) if LIBRARY_NAMESPACES.contains(&t.as_str()) => FrameVerdict::Continue,
        _ => FrameVerdict::Stop,
    }
}

/// The self type's last path segment and its first generic argument, from a
/// demangled method name: `<alloc::boxed::Box<T>>::new` (Rust v0 mangling) or
/// `alloc::raw_vec::RawVec<T,A>::grow` (legacy).
pub(crate) fn self_type(d: &str) -> Option<(&str, Option<&str>)> {
    let rest = d.strip_prefix('<').unwrap_or(d);
    let lt = rest.find('<')?;
    let path = &rest[..lt];
    if path.contains([' ', '>', '(']) {
        return None;
    }
    // The first generic argument, brackets balanced.
    let args = &rest[lt + 1..];
    let mut depth = 0;
    let mut end = None;
    for (i, c) in args.char_indices() {
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' | ')' | ']' if depth > 0 => depth -= 1,
            ',' | '>' if depth == 0 => {
                end = Some(i);
                break;
            }
            _ => {}
        }
    }
    let arg = end.map(|e| args[..e].trim());
    Some((path.rsplit("::").next()?, arg))
}

/// Qualified names (`alloc::collections::btree::node::LeafNode<u64, usize>`) of the
/// sized structure, union and class types of Rust units.
pub(crate) fn rust_type_index(units: &Units) -> HashMap<String, (usize, UnitOffset)> {
    let mut out = HashMap::new();
    for (uid, unit) in units.units.iter().enumerate() {
        if units.langs[uid] != Some(gimli::DW_LANG_Rust) {
            continue;
        }
        let mut cursor = unit.entries();
        let mut scopes: Vec<(isize, String)> = Vec::new();
        while let Ok(Some(die)) = cursor.next_dfs() {
            let depth = die.depth();
            while scopes.last().is_some_and(|(d, _)| *d >= depth) {
                scopes.pop();
            }
            let tag = die.tag();
            let is_type = matches!(
                tag,
                gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type | gimli::DW_TAG_class_type
            );
            if tag != gimli::DW_TAG_namespace && !is_type {
                continue;
            }
            let Some(name) = units.name(uid, die) else { continue };
            let mut q = String::new();
            for (_, s) in &scopes {
                q.push_str(s);
                q.push_str("::");
            }
            q.push_str(&name);
            if is_type
                && !dwarf::flag(die, gimli::DW_AT_declaration)
                && dwarf::udata(die, gimli::DW_AT_byte_size).is_some_and(|s| s > 0)
            {
                out.entry(q.clone()).or_insert((uid, die.offset()));
            }
            if die.has_children() {
                scopes.push((depth, name));
            }
        }
    }
    out
}

/// A Rust primitive type by name.
fn primitive(name: &str) -> Option<HeapType> {
    let size = match name {
        "u8" | "i8" | "bool" => 1,
        "u16" | "i16" => 2,
        "u32" | "i32" | "f32" | "char" => 4,
        "u64" | "i64" | "f64" | "usize" | "isize" => 8,
        "u128" | "i128" => 16,
        _ => return None,
    };
    Some(HeapType {
        name: name.into(),
        layout: Arc::new(TypeLayout::scalar_named(name, size)),
        source: TypeSource::Allocator,
    })
}

/// The first template type parameter of a class that is not its allocator.
fn element_param(
    units: &Units,
    layouts: &LayoutCache,
    uid: usize,
    class: &Die,
) -> Option<HeapType> {
    let unit = &units.units[uid];
    let mut tree = unit.entries_tree(Some(class.offset())).ok()?;
    let root = tree.root().ok()?;
    let mut children = root.children();
    while let Ok(Some(child)) = children.next() {
        let c = child.entry();
        if c.tag() != gimli::DW_TAG_template_type_parameter {
            continue;
        }
        let name = units.name(uid, c).unwrap_or_default();
        if ALLOCATOR_PARAMS.contains(&name.as_str()) {
            continue;
        }
        return heap_type(units, layouts, units.type_of(uid, c)?, TypeSource::Allocator);
    }
    None
}
