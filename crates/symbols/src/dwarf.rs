//! Loading DWARF sections and small helpers over DIEs.

use std::borrow::Cow;
use std::sync::Arc;

use gimli::{AttributeValue, DwAt, DwLang, Reader as _, UnitOffset};
use object::{Object, ObjectSection};

/// The reader used everywhere: sections copied into reference-counted buffers, so parsed
/// state can outlive the file bytes and be shared between threads.
pub(crate) type R = gimli::EndianArcSlice<gimli::RunTimeEndian>;
pub(crate) type Die = gimli::DebuggingInformationEntry<R>;

/// Loads the DWARF sections of `obj`, with `sup` as the supplementary (dwz) object.
pub(crate) fn load_dwarf(
    obj: &object::File<'_>,
    sup: Option<&object::File<'_>>,
) -> Result<gimli::Dwarf<R>, object::Error> {
    let mut dwarf = gimli::Dwarf::load(|id| section(obj, id))?;
    if let Some(sup) = sup {
        dwarf.load_sup(|id| section(sup, id))?;
    }
    Ok(dwarf)
}

fn section(obj: &object::File<'_>, id: gimli::SectionId) -> Result<R, object::Error> {
    let endian = if obj.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let data = match obj.section_by_name(id.name()) {
        Some(s) if s.kind() != object::SectionKind::UninitializedData => s.uncompressed_data()?,
        _ => Cow::Borrowed(&[][..]),
    };
    Ok(R::new(Arc::from(&*data), endian))
}

/// All compilation units of a module, parsed once, plus what is needed to follow
/// references between them.
pub(crate) struct Units {
    pub dwarf: Arc<gimli::Dwarf<R>>,
    pub units: Vec<gimli::Unit<R>>,
    /// `.debug_info` offset of each unit, ascending (units are parsed in section order).
    starts: Vec<usize>,
    /// Source language of each unit.
    pub langs: Vec<Option<DwLang>>,
}

impl Units {
    pub fn parse(dwarf: Arc<gimli::Dwarf<R>>) -> Result<Units, gimli::Error> {
        let mut units = Vec::new();
        let mut starts = Vec::new();
        let mut langs = Vec::new();
        let mut headers = dwarf.units();
        while let Some(header) = headers.next()? {
            let start = header.debug_info_offset().map_or(0, |o| o.0);
            let unit = dwarf.unit(header)?;
            let lang = unit.entry(unit.header.root_offset()).ok().and_then(|root| {
                match root.attr_value(gimli::DW_AT_language) {
                    Some(AttributeValue::Language(l)) => Some(l),
                    _ => None,
                }
            });
            units.push(unit);
            starts.push(start);
            langs.push(lang);
        }
        Ok(Units { dwarf, units, starts, langs })
    }

    /// The DIE at `off` in unit `uid`.
    pub fn entry(&self, uid: usize, off: UnitOffset) -> Option<Die> {
        self.units.get(uid)?.entry(off).ok()
    }

    /// Resolves a reference attribute value to (unit index, unit offset).
    pub fn resolve(&self, uid: usize, value: &AttributeValue<R>) -> Option<(usize, UnitOffset)> {
        match *value {
            AttributeValue::UnitRef(off) => Some((uid, off)),
            AttributeValue::DebugInfoRef(off) => {
                let idx = self.starts.partition_point(|&s| s <= off.0).checked_sub(1)?;
                let header = &self.units[idx].header;
                Some((idx, off.to_unit_offset(header)?))
            }
            _ => None,
        }
    }

    /// An attribute of `die`, looked up through `DW_AT_specification` and
    /// `DW_AT_abstract_origin` when the DIE itself lacks it. Returns the unit index the
    /// value belongs to (needed to interpret unit-relative forms).
    pub fn attr(&self, uid: usize, die: &Die, at: DwAt) -> Option<(usize, AttributeValue<R>)> {
        self.attr_depth(uid, die, at, 0)
    }

    fn attr_depth(
        &self,
        uid: usize,
        die: &Die,
        at: DwAt,
        depth: u32,
    ) -> Option<(usize, AttributeValue<R>)> {
        if let Some(v) = die.attr_value(at) {
            return Some((uid, v));
        }
        if depth > 4 {
            return None;
        }
        for link in [gimli::DW_AT_specification, gimli::DW_AT_abstract_origin] {
            if let Some(v) = die.attr_value(link) {
                let (u, off) = self.resolve(uid, &v)?;
                let target = self.entry(u, off)?;
                return self.attr_depth(u, &target, at, depth + 1);
            }
        }
        None
    }

    /// A string attribute (following specification/origin links).
    pub fn string_attr(&self, uid: usize, die: &Die, at: DwAt) -> Option<String> {
        let (u, v) = self.attr(uid, die, at)?;
        let s = self.dwarf.attr_string(&self.units[u], v).ok()?;
        Some(s.to_string_lossy().ok()?.into_owned())
    }

    /// `DW_AT_name`.
    pub fn name(&self, uid: usize, die: &Die) -> Option<String> {
        self.string_attr(uid, die, gimli::DW_AT_name)
    }

    /// `DW_AT_linkage_name` (or the pre-standard MIPS spelling).
    pub fn linkage_name(&self, uid: usize, die: &Die) -> Option<String> {
        self.string_attr(uid, die, gimli::DW_AT_linkage_name)
            .or_else(|| self.string_attr(uid, die, gimli::DW_AT_MIPS_linkage_name))
    }

    /// The DIE referenced by `DW_AT_type`.
    pub fn type_of(&self, uid: usize, die: &Die) -> Option<(usize, UnitOffset)> {
        let (u, v) = self.attr(uid, die, gimli::DW_AT_type)?;
        self.resolve(u, &v)
    }

    /// Evaluates an address-valued operation (`DW_OP_addr` or `DW_OP_addrx`).
    pub fn address_index(&self, uid: usize, index: gimli::DebugAddrIndex) -> Option<u64> {
        self.dwarf.address(&self.units[uid], index).ok()
    }

    /// Full path of a line-table file entry, joined like addr2line does.
    pub fn file_path(
        &self,
        uid: usize,
        header: &gimli::LineProgramHeader<R>,
        file: &gimli::FileEntry<R>,
    ) -> Option<String> {
        let unit = &self.units[uid];
        let mut path = match &unit.comp_dir {
            Some(dir) => dir.to_string_lossy().ok()?.into_owned(),
            None => String::new(),
        };
        if file.directory_index() != 0 {
            if let Some(dir) = file.directory(header) {
                let dir = self.dwarf.attr_string(unit, dir).ok()?;
                path_push(&mut path, &dir.to_string_lossy().ok()?);
            }
        }
        let name = self.dwarf.attr_string(unit, file.path_name()).ok()?;
        path_push(&mut path, &name.to_string_lossy().ok()?);
        Some(path)
    }
}

fn path_push(path: &mut String, p: &str) {
    if p.starts_with('/') {
        *path = p.to_owned();
    } else {
        if !path.is_empty() && !path.ends_with('/') {
            path.push('/');
        }
        path.push_str(p);
    }
}

/// A constant-valued attribute as an unsigned number.
pub(crate) fn udata(die: &Die, at: DwAt) -> Option<u64> {
    match die.attr_value(at)? {
        AttributeValue::Sdata(v) => u64::try_from(v).ok(),
        v => v.udata_value(),
    }
}

/// A constant-valued attribute as a signed number.
pub(crate) fn sdata(die: &Die, at: DwAt) -> Option<i64> {
    let v = die.attr_value(at)?;
    match v {
        AttributeValue::Data1(x) => Some(i64::from(x as i8)),
        AttributeValue::Data2(x) => Some(i64::from(x as i16)),
        AttributeValue::Data4(x) => Some(i64::from(x as i32)),
        v => v.sdata_value().or_else(|| v.udata_value().and_then(|x| i64::try_from(x).ok())),
    }
}

/// Whether the DIE has a flag attribute set.
pub(crate) fn flag(die: &Die, at: DwAt) -> bool {
    matches!(die.attr_value(at), Some(AttributeValue::Flag(true)))
}

/// The operations of an expression-valued attribute, if it is a simple `exprloc`.
pub(crate) fn expr_ops(
    units: &Units,
    uid: usize,
    value: AttributeValue<R>,
) -> Option<Vec<gimli::Operation<R>>> {
    let AttributeValue::Exprloc(expr) = value else { return None };
    let encoding = units.units[uid].encoding();
    let mut ops = expr.operations(encoding);
    let mut out = Vec::new();
    while let Some(op) = gimli::OperationIter::next(&mut ops).ok()? {
        out.push(op);
        if out.len() > 8 {
            return None;
        }
    }
    Some(out)
}

/// A C or C++ unit.
pub(crate) fn is_c_family(lang: Option<gimli::DwLang>) -> bool {
    is_c(lang) || is_cxx(lang)
}

/// A C unit.
fn is_c(lang: Option<gimli::DwLang>) -> bool {
    matches!(
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

/// A C++ unit.
pub(crate) fn is_cxx(lang: Option<gimli::DwLang>) -> bool {
    matches!(
        lang,
        Some(
            gimli::DW_LANG_C_plus_plus
                | gimli::DW_LANG_C_plus_plus_03
                | gimli::DW_LANG_C_plus_plus_11
                | gimli::DW_LANG_C_plus_plus_14
                | gimli::DW_LANG_C_plus_plus_17
                | gimli::DW_LANG_C_plus_plus_20
        )
    )
}
