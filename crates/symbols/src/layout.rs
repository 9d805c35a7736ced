//! Type layouts: DWARF types flattened into a tree that maps a byte offset to a member
//! path such as `.limits.max` or `.v[2].b[1]`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use gimli::UnitOffset;

use crate::dwarf::{self, Die, Units};

/// The memory layout of a variable's type, as far as naming offsets is concerned.
///
/// Typedefs and `const`/`volatile`/`_Atomic` qualifiers are looked through; structures,
/// classes and unions list their members with offsets; arrays list their dimensions.
/// Everything else (base types, pointers, enums, …) is a scalar. Layouts are built once
/// per DWARF type and shared.
#[derive(Debug)]
pub struct TypeLayout {
    name: Option<Arc<str>>,
    size: Option<u64>,
    kind: LayoutKind,
}

#[derive(Clone, Debug)]
enum LayoutKind {
    Scalar,
    Aggregate { members: Arc<[Member]> },
    Array { element: Arc<TypeLayout>, dims: Arc<[Option<u64>]> },
}

#[derive(Debug)]
struct Member {
    /// `None` for anonymous structs/unions and base classes: their members are named
    /// as if they belonged to the enclosing type.
    name: Option<Arc<str>>,
    offset: u64,
    layout: Arc<TypeLayout>,
}

/// Where an offset falls inside a [`TypeLayout`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberPath {
    /// Member and index path, e.g. `.limits.max`, `[3]`, `.v[2]+4<pad>`; empty for the
    /// start of a scalar.
    pub path: String,
    /// Type name of the innermost member or element reached.
    pub leaf_type: Option<Arc<str>>,
    /// Offset left inside the innermost member or element (for a scalar this is also
    /// shown in `path` as `+N`).
    pub leaf_offset: u64,
    /// The offset falls in padding between or after members.
    pub padding: bool,
}

impl TypeLayout {
    fn scalar(name: Option<Arc<str>>, size: Option<u64>) -> Self {
        TypeLayout { name, size, kind: LayoutKind::Scalar }
    }

    pub(crate) fn scalar_named(name: &str, size: u64) -> Self {
        TypeLayout::scalar(Some(name.into()), Some(size))
    }

    /// The type's name as written in the source (`int`, `struct_name`, `T*`, `int[4]`).
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Size in bytes, when DWARF gives it.
    pub fn size(&self) -> Option<u64> {
        self.size
    }

    /// Names the byte at `offset` within an object of this type.
    pub fn describe(&self, offset: u64) -> MemberPath {
        let mut path = String::new();
        let mut t = self;
        let mut off = offset;
        let mut padding = false;
        // Bounded: every step descends into a strictly smaller part of the type tree.
        for _ in 0..256 {
            match &t.kind {
                LayoutKind::Scalar => break,
                LayoutKind::Array { element, dims } => {
                    let Some(esz) = element.size.filter(|&s| s > 0) else { break };
                    let mut flat = off / esz;
                    off %= esz;
                    let mut idx = vec![0u64; dims.len()];
                    for (i, d) in dims.iter().enumerate().rev() {
                        match d {
                            // The outermost dimension absorbs whatever is left, so an
                            // out-of-bounds access still gets an (out-of-bounds) index.
                            Some(n) if *n > 0 && i > 0 => {
                                idx[i] = flat % n;
                                flat /= n;
                            }
                            _ => {
                                idx[i] = flat;
                                flat = 0;
                            }
                        }
                    }
                    for i in idx {
                        let _ = write!(path, "[{i}]");
                    }
                    t = element;
                }
                LayoutKind::Aggregate { members } => {
                    let end_of = |m: &Member| m.layout.size.map_or(u64::MAX, |s| m.offset + s);
                    let hit = members
                        .iter()
                        .filter(|m| m.offset <= off && off < end_of(m))
                        // In unions every member starts at 0: prefer the smallest one that
                        // covers the offset, then source order.
                        .min_by_key(|m| m.layout.size.unwrap_or(u64::MAX));
                    let Some(m) = hit else {
                        let _ = write!(path, "+{off}<pad>");
                        padding = true;
                        off = 0;
                        break;
                    };
                    if let Some(name) = &m.name {
                        path.push('.');
                        path.push_str(name);
                    }
                    off -= m.offset;
                    t = &m.layout;
                }
            }
        }
        if !padding && off > 0 {
            let _ = write!(path, "+{off}");
        }
        MemberPath { path, leaf_type: t.name.clone(), leaf_offset: off, padding }
    }
}

/// Per-module cache of type layouts, keyed by (unit index, DIE offset).
#[derive(Default)]
pub(crate) struct LayoutCache {
    map: Mutex<HashMap<(usize, usize), Arc<TypeLayout>>>,
}

impl LayoutCache {
    /// The layout of the type DIE at `off` in unit `uid`.
    pub fn get(&self, units: &Units, uid: usize, off: UnitOffset) -> Arc<TypeLayout> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        build(&mut map, units, uid, off, 0)
    }
}

type Map = HashMap<(usize, usize), Arc<TypeLayout>>;

const MAX_DEPTH: u32 = 64;

fn build(map: &mut Map, units: &Units, uid: usize, off: UnitOffset, depth: u32) -> Arc<TypeLayout> {
    if let Some(l) = map.get(&(uid, off.0)) {
        return l.clone();
    }
    let layout = match units.entry(uid, off) {
        Some(die) if depth < MAX_DEPTH => build_die(map, units, uid, &die, depth),
        _ => Arc::new(TypeLayout::scalar(None, None)),
    };
    map.insert((uid, off.0), layout.clone());
    layout
}

fn inner(map: &mut Map, units: &Units, uid: usize, die: &Die, depth: u32) -> Arc<TypeLayout> {
    match units.type_of(uid, die) {
        Some((u, o)) => build(map, units, u, o, depth + 1),
        None => Arc::new(TypeLayout::scalar(Some("void".into()), None)),
    }
}

fn build_die(map: &mut Map, units: &Units, uid: usize, die: &Die, depth: u32) -> Arc<TypeLayout> {
    let name: Option<Arc<str>> = units.name(uid, die).map(Into::into);
    let byte_size = dwarf::udata(die, gimli::DW_AT_byte_size);
    match die.tag() {
        gimli::DW_TAG_const_type
        | gimli::DW_TAG_volatile_type
        | gimli::DW_TAG_atomic_type
        | gimli::DW_TAG_restrict_type
        | gimli::DW_TAG_immutable_type
        | gimli::DW_TAG_packed_type
        | gimli::DW_TAG_shared_type => inner(map, units, uid, die, depth),
        gimli::DW_TAG_typedef => {
            let t = inner(map, units, uid, die, depth);
            Arc::new(TypeLayout {
                name: name.or(t.name.clone()),
                size: t.size,
                kind: t.kind.clone(),
            })
        }
        gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type | gimli::DW_TAG_union_type => {
            let members = aggregate_members(map, units, uid, die, depth);
            let kind = if members.is_empty() {
                LayoutKind::Scalar
            } else {
                LayoutKind::Aggregate { members: members.into() }
            };
            Arc::new(TypeLayout { name, size: byte_size, kind })
        }
        gimli::DW_TAG_array_type => {
            let element = inner(map, units, uid, die, depth);
            let dims = array_dims(units, uid, die);
            let count: Option<u64> = dims.iter().try_fold(1u64, |a, d| a.checked_mul((*d)?));
            let size = byte_size.or_else(|| element.size?.checked_mul(count?));
            let mut full = element.name.as_deref().unwrap_or("?").to_owned();
            for d in &dims {
                match d {
                    Some(n) => {
                        let _ = write!(full, "[{n}]");
                    }
                    None => full.push_str("[]"),
                }
            }
            let dims = if dims.is_empty() { vec![None] } else { dims };
            Arc::new(TypeLayout {
                name: Some(full.into()),
                size,
                kind: LayoutKind::Array { element, dims: dims.into() },
            })
        }
        tag @ (gimli::DW_TAG_pointer_type
        | gimli::DW_TAG_reference_type
        | gimli::DW_TAG_rvalue_reference_type) => {
            let size = byte_size.or(Some(u64::from(units.units[uid].encoding().address_size)));
            let pointee = units
                .type_of(uid, die)
                .and_then(|(u, o)| pointee_name(units, u, o, 0))
                .unwrap_or_else(|| "void".to_owned());
            let sigil = match tag {
                gimli::DW_TAG_pointer_type => "*",
                gimli::DW_TAG_reference_type => "&",
                _ => "&&",
            };
            Arc::new(TypeLayout::scalar(name.or(Some(format!("{pointee}{sigil}").into())), size))
        }
        _ => Arc::new(TypeLayout::scalar(name, byte_size)),
    }
}

/// A short name for a pointee type without building its layout (pointers may be cyclic).
fn pointee_name(units: &Units, uid: usize, off: UnitOffset, depth: u32) -> Option<String> {
    let die = units.entry(uid, off)?;
    if let Some(n) = units.name(uid, &die) {
        return Some(n);
    }
    if depth > 4 {
        return None;
    }
    let next = || units.type_of(uid, &die).and_then(|(u, o)| pointee_name(units, u, o, depth + 1));
    match die.tag() {
        gimli::DW_TAG_pointer_type => Some(format!("{}*", next().unwrap_or_else(|| "void".into()))),
        gimli::DW_TAG_const_type => {
            Some(format!("const {}", next().unwrap_or_else(|| "void".into())))
        }
        gimli::DW_TAG_volatile_type => next(),
        gimli::DW_TAG_subroutine_type => Some("fn".to_owned()),
        _ => None,
    }
}

/// Data members (and base classes) of a structure, class or union, with their offsets.
fn aggregate_members(
    map: &mut Map,
    units: &Units,
    uid: usize,
    die: &Die,
    depth: u32,
) -> Vec<Member> {
    // Collect first, then build member layouts: building needs the unit again.
    type RawMember = (Option<Arc<str>>, u64, Option<(usize, UnitOffset)>);
    let mut raw: Vec<RawMember> = Vec::new();
    let unit = &units.units[uid];
    let Ok(mut tree) = unit.entries_tree(Some(die.offset())) else { return Vec::new() };
    let Ok(root) = tree.root() else { return Vec::new() };
    let mut children = root.children();
    while let Ok(Some(child)) = children.next() {
        let c = child.entry();
        let is_base = match c.tag() {
            gimli::DW_TAG_member => false,
            gimli::DW_TAG_inheritance => true,
            _ => continue,
        };
        // Static data members are declarations without a location in the object.
        if dwarf::flag(c, gimli::DW_AT_declaration) || dwarf::flag(c, gimli::DW_AT_external) {
            continue;
        }
        let offset = member_offset(units, uid, c).unwrap_or(0);
        let name = if is_base { None } else { units.name(uid, c).map(Into::into) };
        raw.push((name, offset, units.type_of(uid, c)));
    }
    raw.into_iter()
        .map(|(name, offset, ty)| Member {
            name,
            offset,
            layout: match ty {
                Some((u, o)) => build(map, units, u, o, depth + 1),
                None => Arc::new(TypeLayout::scalar(None, None)),
            },
        })
        .collect()
}

fn member_offset(units: &Units, uid: usize, die: &Die) -> Option<u64> {
    if let Some(bits) = dwarf::udata(die, gimli::DW_AT_data_bit_offset) {
        return Some(bits / 8);
    }
    match die.attr_value(gimli::DW_AT_data_member_location)? {
        v @ gimli::AttributeValue::Exprloc(_) => match dwarf::expr_ops(units, uid, v)?.as_slice() {
            [gimli::Operation::PlusConstant { value }] => Some(*value),
            _ => None,
        },
        _ => dwarf::udata(die, gimli::DW_AT_data_member_location),
    }
}

/// Element counts of each dimension of an array type, outermost first.
fn array_dims(units: &Units, uid: usize, die: &Die) -> Vec<Option<u64>> {
    let mut dims = Vec::new();
    let unit = &units.units[uid];
    let Ok(mut tree) = unit.entries_tree(Some(die.offset())) else { return dims };
    let Ok(root) = tree.root() else { return dims };
    let mut children = root.children();
    while let Ok(Some(child)) = children.next() {
        let c = child.entry();
        if c.tag() != gimli::DW_TAG_subrange_type {
            continue;
        }
        let count = dwarf::udata(c, gimli::DW_AT_count).or_else(|| {
            let upper = dwarf::sdata(c, gimli::DW_AT_upper_bound)?;
            let lower = dwarf::sdata(c, gimli::DW_AT_lower_bound).unwrap_or(0);
            u64::try_from(upper - lower + 1).ok()
        });
        // A count given as a reference (VLA) or an absurd value is unknown.
        dims.push(count.filter(|&n| n < (1 << 48)));
    }
    dims
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int() -> Arc<TypeLayout> {
        Arc::new(TypeLayout::scalar(Some("int".into()), Some(4)))
    }

    fn array(element: Arc<TypeLayout>, dims: &[u64]) -> Arc<TypeLayout> {
        let size = element.size.unwrap() * dims.iter().product::<u64>();
        let dims: Vec<Option<u64>> = dims.iter().map(|&d| Some(d)).collect();
        Arc::new(TypeLayout {
            name: None,
            size: Some(size),
            kind: LayoutKind::Array { element, dims: dims.into() },
        })
    }

    fn strukt(size: u64, members: Vec<(&str, u64, Arc<TypeLayout>)>) -> Arc<TypeLayout> {
        let members: Vec<Member> = members
            .into_iter()
            .map(|(n, offset, layout)| Member { name: Some(n.into()), offset, layout })
            .collect();
        Arc::new(TypeLayout {
            name: Some("s".into()),
            size: Some(size),
            kind: LayoutKind::Aggregate { members: members.into() },
        })
    }

    #[test]
    fn nested_paths() {
        // struct in { char a; int b[2]; };  // size 12, b at 4
        let inner = strukt(
            12,
            vec![
                ("a", 0, Arc::new(TypeLayout::scalar(Some("char".into()), Some(1)))),
                ("b", 4, array(int(), &[2])),
            ],
        );
        let outer = strukt(4 + 36, vec![("n", 0, int()), ("v", 4, array(inner, &[3]))]);
        assert_eq!(outer.describe(0).path, ".n");
        assert_eq!(outer.describe(2).path, ".n+2");
        assert_eq!(outer.describe(4).path, ".v[0].a");
        let pad = outer.describe(4 + 12 + 2);
        assert_eq!(pad.path, ".v[1]+2<pad>");
        assert!(pad.padding);
        assert_eq!(outer.describe(4 + 24 + 8).path, ".v[2].b[1]");
        assert_eq!(outer.describe(4 + 24 + 8).leaf_type.as_deref(), Some("int"));
    }

    #[test]
    fn self_types_from_method_names() {
        use crate::heaptype::self_type;
        assert_eq!(
            self_type("<alloc::boxed::Box<rsnames::Point>>::new"),
            Some(("Box", Some("rsnames::Point")))
        );
        assert_eq!(self_type("alloc::raw_vec::RawVec<T,A>::grow"), Some(("RawVec", Some("T"))));
        assert_eq!(
            self_type("<alloc::raw_vec::RawVec<u8>>::with_capacity_in"),
            Some(("RawVec", Some("u8")))
        );
        assert_eq!(self_type("alloc::alloc::alloc"), None);
        assert_eq!(
            self_type("<alloc::boxed::Box<a::LeafNode<u64, usize>>>::new_uninit_in"),
            Some(("Box", Some("a::LeafNode<u64, usize>")))
        );
        assert_eq!(self_type("<alloc::alloc::Global as core::alloc::Allocator>::allocate"), None);
    }

    #[test]
    fn multi_dim() {
        let a = array(int(), &[4, 10]);
        assert_eq!(a.describe(0).path, "[0][0]");
        assert_eq!(a.describe(4 * 13).path, "[1][3]");
        assert_eq!(a.describe(4 * 39 + 1).path, "[3][9]+1");
        // Out of bounds: the outer index keeps counting.
        assert_eq!(a.describe(4 * 41).path, "[4][1]");
    }
}
