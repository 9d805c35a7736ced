//! Per-function variable information, for naming stack addresses.
//!
//! Locals and parameters are described where they live in the frame: a single
//! `DW_OP_fbreg` (the usual case at `-O0`), or, at `-O2`, the entries of a location
//! list that put the variable (or pieces of it, `DW_OP_piece`) at `DW_OP_fbreg` or
//! `DW_OP_breg6` (rbp) offsets over given code ranges. Parts in registers or
//! rsp-relative slots are skipped.

use std::sync::Arc;

use memlens_format::Pc;

use crate::code::CodeRange;
use crate::data::{DataKind, DataName};
use crate::dwarf::{self, Die, Units};
use crate::layout::{LayoutCache, TypeLayout};

/// How a function computes its frame base (`DW_AT_frame_base`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameBase {
    /// `DW_OP_call_frame_cfa`: the canonical frame address (the caller's stack pointer
    /// before the call; on x86-64 the return address sits at CFA − 8).
    Cfa,
    /// `DW_OP_regN`: the value of DWARF register `N` (e.g. 6 = `rbp` on x86-64).
    Register(u16),
    /// `DW_OP_bregN off`: DWARF register `N` plus an offset.
    RegisterOffset(u16, i64),
    /// Anything else.
    Unknown,
}

/// A local variable or parameter stored at a fixed offset from the frame base.
#[derive(Clone, Debug)]
pub struct LocalVariable {
    /// Source name.
    pub name: Arc<str>,
    /// Offset from the frame base (`DW_OP_fbreg`).
    pub frame_offset: i64,
    /// Size in bytes, when known.
    pub size: Option<u64>,
    /// Whether this is a formal parameter.
    pub is_parameter: bool,
    /// Runtime code ranges of the enclosing lexical block; empty for the whole function.
    pub scope: Vec<CodeRange>,
    /// Layout of the variable's type.
    pub layout: Option<Arc<TypeLayout>>,
    /// Where the variable lives when it is not at one fixed `frame_offset`: pieces
    /// (from location lists and `DW_OP_piece`), each valid over a code range. Empty
    /// for a variable at `frame_offset` throughout its scope.
    pub pieces: Vec<LocalPiece>,
}

/// A part of a variable at a frame-base offset, over a range of code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalPiece {
    /// Offset of the piece's first byte from the frame base.
    pub frame_offset: i64,
    /// Offset of the piece in the variable.
    pub var_offset: u64,
    /// Size of the piece in bytes.
    pub size: u64,
    /// Code where this location is valid (`None`: the variable's whole scope).
    pub code: Option<CodeRange>,
}

/// The frame description of one (out-of-line) function.
#[derive(Clone, Debug)]
pub struct FunctionFrame {
    /// Id of the module that holds the function.
    pub module_id: u32,
    /// Demangled function name.
    pub name: Arc<str>,
    /// Runtime code ranges of the function.
    pub ranges: Vec<CodeRange>,
    /// How the frame base is computed.
    pub frame_base: FrameBase,
    /// Frame-base-relative locals and parameters, including those of nested lexical
    /// blocks and inlined calls.
    pub locals: Vec<LocalVariable>,
}

impl FunctionFrame {
    /// Names the stack byte at `frame_offset` from the frame base, as seen by code at
    /// return address `pc` (scopes are checked with `pc − 1`).
    pub fn name_at(&self, pc: Pc, frame_offset: i64) -> Option<DataName> {
        let (v, offset) = self.locals.iter().find_map(|v| {
            let in_scope =
                v.scope.is_empty() || v.scope.iter().any(|r| r.contains_return_address(pc));
            if !in_scope {
                return None;
            }
            if v.pieces.is_empty() {
                let size = v.size.unwrap_or(1).max(1);
                let off = frame_offset.checked_sub(v.frame_offset)?;
                return (off >= 0 && (off as u64) < size).then_some((v, off as u64));
            }
            v.pieces.iter().find_map(|p| {
                let here = p.code.is_none_or(|r| r.contains_return_address(pc));
                let off = frame_offset.checked_sub(p.frame_offset)?;
                (here && off >= 0 && (off as u64) < p.size).then(|| (v, p.var_offset + off as u64))
            })
        })?;
        let (path, leaf_type) = match &v.layout {
            Some(l) => {
                let p = l.describe(offset);
                (p.path, p.leaf_type)
            }
            None if offset > 0 => (format!("+{offset}"), None),
            None => (String::new(), None),
        };
        Some(DataName {
            kind: DataKind::Stack,
            module_id: self.module_id,
            base: v.name.clone(),
            path,
            offset,
            leaf_type,
        })
    }
}

/// A concrete subprogram: file-address range → DIE.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SubprogramRange {
    pub start: u64,
    pub end: u64,
    pub uid: usize,
    pub offset: gimli::UnitOffset,
}

/// All concrete subprograms, sorted by start address.
pub(crate) fn subprogram_index(units: &Units) -> Vec<SubprogramRange> {
    let mut out = Vec::new();
    for (uid, unit) in units.units.iter().enumerate() {
        let mut cursor = unit.entries();
        while let Ok(Some(die)) = cursor.next_dfs() {
            if die.tag() != gimli::DW_TAG_subprogram {
                continue;
            }
            let Ok(mut ranges) = units.dwarf.die_ranges(unit, die) else { continue };
            while let Ok(Some(r)) = ranges.next() {
                if r.begin < r.end && r.begin != 0 {
                    out.push(SubprogramRange {
                        start: r.begin,
                        end: r.end,
                        uid,
                        offset: die.offset(),
                    });
                }
            }
        }
    }
    out.sort_by_key(|r| (r.start, std::cmp::Reverse(r.end)));
    out
}

/// Builds the frame description of the subprogram at `range`.
pub(crate) fn build_frame(
    units: &Units,
    layouts: &LayoutCache,
    index: &[SubprogramRange],
    range: SubprogramRange,
    module_id: u32,
    bias: u64,
) -> Option<FunctionFrame> {
    let uid = range.uid;
    let unit = &units.units[uid];
    let die = unit.entry(range.offset).ok()?;
    let name = match units.linkage_name(uid, &die) {
        Some(l) => crate::demangle::demangle(&l, units.langs[uid]),
        None => units.name(uid, &die).unwrap_or_else(|| "?".to_owned()),
    };
    let frame_base = match die.attr_value(gimli::DW_AT_frame_base) {
        Some(v) => match dwarf::expr_ops(units, uid, v).as_deref() {
            Some([gimli::Operation::CallFrameCFA]) => FrameBase::Cfa,
            Some([gimli::Operation::Register { register }]) => FrameBase::Register(register.0),
            Some([gimli::Operation::RegisterOffset { register, offset, .. }]) => {
                FrameBase::RegisterOffset(register.0, *offset)
            }
            _ => FrameBase::Unknown,
        },
        None => FrameBase::Unknown,
    };
    let ranges = index
        .iter()
        .filter(|r| r.uid == uid && r.offset == range.offset)
        .map(|r| CodeRange { start: Pc(r.start + bias), end: Pc(r.end + bias) })
        .collect();
    let mut locals = Vec::new();
    let mut tree = unit.entries_tree(Some(range.offset)).ok()?;
    let root = tree.root().ok()?;
    Walk { units, layouts, uid, bias, frame_base }.collect(root, &[], &mut locals, 0);
    Some(FunctionFrame { module_id, name: name.into(), ranges, frame_base, locals })
}

/// What the recursive walk over a subprogram's children needs.
struct Walk<'a> {
    units: &'a Units,
    layouts: &'a LayoutCache,
    uid: usize,
    bias: u64,
    frame_base: FrameBase,
}

impl Walk<'_> {
    fn collect(
        &self,
        node: gimli::EntriesTreeNode<'_, '_, dwarf::R>,
        scope: &[CodeRange],
        out: &mut Vec<LocalVariable>,
        depth: u32,
    ) {
        if depth > 32 {
            return;
        }
        let mut children = node.children();
        while let Ok(Some(child)) = children.next() {
            let die: Die = child.entry().clone();
            match die.tag() {
                gimli::DW_TAG_variable | gimli::DW_TAG_formal_parameter => {
                    let (u, l, id, fb, b) =
                        (self.units, self.layouts, self.uid, self.frame_base, self.bias);
                    if let Some(v) = local(u, l, id, &die, scope, fb, b) {
                        out.push(v);
                    }
                }
                gimli::DW_TAG_lexical_block | gimli::DW_TAG_inlined_subroutine => {
                    let mut inner = Vec::new();
                    let unit = &self.units.units[self.uid];
                    if let Ok(mut rs) = self.units.dwarf.die_ranges(unit, &die) {
                        while let Ok(Some(r)) = rs.next() {
                            inner.push(CodeRange {
                                start: Pc(r.begin + self.bias),
                                end: Pc(r.end + self.bias),
                            });
                        }
                    }
                    let inner = if inner.is_empty() { scope.to_vec() } else { inner };
                    self.collect(child, &inner, out, depth + 1);
                }
                _ => {}
            }
        }
    }
}

fn local(
    units: &Units,
    layouts: &LayoutCache,
    uid: usize,
    die: &Die,
    scope: &[CodeRange],
    frame_base: FrameBase,
    bias: u64,
) -> Option<LocalVariable> {
    let value = die.attr_value(gimli::DW_AT_location)?;
    let name = units.name(uid, die)?;
    let layout = units.type_of(uid, die).map(|(u, o)| layouts.get(units, u, o));
    let size = layout.as_ref().and_then(|l| l.size());
    let mut v = LocalVariable {
        name: name.into(),
        frame_offset: 0,
        size,
        is_parameter: die.tag() == gimli::DW_TAG_formal_parameter,
        scope: scope.to_vec(),
        layout,
        pieces: Vec::new(),
    };
    let unit = &units.units[uid];
    if let gimli::AttributeValue::Exprloc(expr) = value {
        let pieces = memory_pieces(unit.encoding(), expr, frame_base, size.unwrap_or(1), None);
        match pieces.as_slice() {
            [] => return None,
            [p] if p.var_offset == 0 && Some(p.size) == size => v.frame_offset = p.frame_offset,
            _ => v.pieces = pieces,
        }
        return Some(v);
    }
    let mut locs = units.dwarf.attr_locations(unit, value).ok()??;
    while let Ok(Some(e)) = locs.next() {
        if e.range.begin >= e.range.end {
            continue;
        }
        let code = CodeRange { start: Pc(e.range.begin + bias), end: Pc(e.range.end + bias) };
        v.pieces.extend(memory_pieces(
            unit.encoding(),
            e.data,
            frame_base,
            size.unwrap_or(1),
            Some(code),
        ));
        if v.pieces.len() > 4096 {
            break;
        }
    }
    (!v.pieces.is_empty()).then_some(v)
}

/// The parts of a location description that are frame-base-relative memory.
fn memory_pieces(
    encoding: gimli::Encoding,
    expr: gimli::Expression<dwarf::R>,
    frame_base: FrameBase,
    size: u64,
    code: Option<CodeRange>,
) -> Vec<LocalPiece> {
    // rbp-relative offsets as frame-base-relative ones.
    let from_rbp = |off: i64| match frame_base {
        FrameBase::Register(6) => Some(off),
        FrameBase::RegisterOffset(6, o) => Some(off - o),
        FrameBase::Cfa => Some(off - 16),
        _ => None,
    };
    let mut out = Vec::new();
    let mut ops = expr.operations(encoding);
    let mut at: Option<i64> = None;
    let mut simple = true;
    let mut var_offset = 0u64;
    for _ in 0..512 {
        let Ok(Some(op)) = gimli::OperationIter::next(&mut ops) else { break };
        match op {
            gimli::Operation::FrameOffset { offset } if at.is_none() && simple => at = Some(offset),
            gimli::Operation::RegisterOffset { register, offset, .. }
                if register.0 == 6 && at.is_none() && simple =>
            {
                at = from_rbp(offset)
            }
            gimli::Operation::Piece { size_in_bits, bit_offset: None } => {
                let n = size_in_bits / 8;
                if let (Some(fo), true) = (at, simple) {
                    out.push(LocalPiece { frame_offset: fo, var_offset, size: n, code });
                }
                var_offset += n;
                at = None;
                simple = true;
            }
            // Anything else (a register, a computed value, an address): not a plain
            // frame slot.
            _ => simple = false,
        }
    }
    if var_offset == 0 {
        if let (Some(fo), true) = (at, simple) {
            out.push(LocalPiece { frame_offset: fo, var_offset: 0, size, code });
        }
    }
    out
}
