//! ELF-level facts about a module: segments, build-id, debug links and symbol tables.

use std::path::Path;

use memlens_format::{Module, Segment};
use object::read::elf::{ElfFile, FileHeader, ProgramHeader};
use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, SymbolKind};

use crate::Error;

/// The `PT_TLS` segment of a module: the initialisation image of its thread-local block.
///
/// Thread-local variables are named by their offset in this block (see
/// [`ThreadLocal`](crate::ThreadLocal)); the runtime address of a thread's block is
/// determined by the dynamic loader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlsSegment {
    /// `p_vaddr`: file virtual address of the initialisation image.
    pub vaddr: u64,
    /// `p_filesz`: bytes of initialised data (`.tdata`).
    pub file_size: u64,
    /// `p_memsz`: total block size including `.tbss`.
    pub mem_size: u64,
    /// `p_align`.
    pub align: u64,
}

/// Builds a [`Module`] description from an ELF file on disk: its PT_LOAD segments and
/// build-id, with the given load bias (0 for a non-PIE executable, or for file
/// addresses). The module id is 0; set [`Module::id`] afterwards if it matters.
///
/// The path is stored as given.
pub fn module_from_file(path: impl AsRef<Path>, bias: u64) -> Result<Module, Error> {
    let path = path.as_ref();
    let data = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    module_from_elf_bytes(&path.to_string_lossy(), &data, bias)
        .map_err(|source| Error::Object { path: path.to_owned(), source })
}

/// Like [`module_from_file`], for ELF bytes already in memory; `path` is only recorded.
pub fn module_from_elf_bytes(path: &str, data: &[u8], bias: u64) -> Result<Module, object::Error> {
    let obj = object::File::parse(data)?;
    let (segments, _) = program_headers(&obj);
    let build_id = obj.build_id()?.map(<[u8]>::to_vec).unwrap_or_default();
    Ok(Module { id: 0, path: path.to_owned(), build_id, bias, segments })
}

/// The PT_LOAD segments and the PT_TLS segment of an ELF object.
pub(crate) fn program_headers(obj: &object::File<'_>) -> (Vec<Segment>, Option<TlsSegment>) {
    match obj {
        object::File::Elf32(elf) => phdrs(elf),
        object::File::Elf64(elf) => phdrs(elf),
        _ => (Vec::new(), None),
    }
}

fn phdrs<Elf: FileHeader>(elf: &ElfFile<'_, Elf>) -> (Vec<Segment>, Option<TlsSegment>) {
    let endian = elf.endian();
    let mut loads = Vec::new();
    let mut tls = None;
    for ph in elf.elf_program_headers() {
        match ph.p_type(endian) {
            object::elf::PT_LOAD => loads.push(Segment {
                vaddr: ph.p_vaddr(endian).into(),
                memsz: ph.p_memsz(endian).into(),
                flags: ph.p_flags(endian),
            }),
            object::elf::PT_TLS => {
                tls = Some(TlsSegment {
                    vaddr: ph.p_vaddr(endian).into(),
                    file_size: ph.p_filesz(endian).into(),
                    mem_size: ph.p_memsz(endian).into(),
                    align: ph.p_align(endian).into(),
                })
            }
            _ => {}
        }
    }
    (loads, tls)
}

/// What is needed to find a module's separate debug files.
#[derive(Clone, Debug, Default)]
pub(crate) struct ElfIdentity {
    pub build_id: Option<Vec<u8>>,
    /// `.gnu_debuglink`: file name and CRC-32 of the debug file.
    pub debuglink: Option<(String, u32)>,
    /// `.gnu_debugaltlink`: path and build-id of the supplementary (dwz) file.
    pub altlink: Option<(String, Vec<u8>)>,
    /// Whether the object has a non-empty `.debug_info`.
    pub has_dwarf: bool,
}

pub(crate) fn identity(obj: &object::File<'_>) -> ElfIdentity {
    let build_id = obj.build_id().ok().flatten().map(<[u8]>::to_vec);
    let debuglink = obj
        .gnu_debuglink()
        .ok()
        .flatten()
        .map(|(name, crc)| (String::from_utf8_lossy(name).into_owned(), crc));
    let altlink = obj
        .gnu_debugaltlink()
        .ok()
        .flatten()
        .map(|(name, id)| (String::from_utf8_lossy(name).into_owned(), id.to_vec()));
    let has_dwarf = obj
        .section_by_name(".debug_info")
        .is_some_and(|s| s.size() > 0 && s.kind() != object::SectionKind::UninitializedData);
    ElfIdentity { build_id, debuglink, altlink, has_dwarf }
}

/// The kind of an ELF symbol we keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SymKind {
    Function,
    Data,
    Tls,
}

/// A defined ELF symbol, still mangled. `addr` is a file virtual address (a TLS offset
/// for [`SymKind::Tls`]).
#[derive(Clone, Debug)]
pub(crate) struct RawSymbol {
    pub name: String,
    pub addr: u64,
    pub size: u64,
    pub kind: SymKind,
    pub global: bool,
}

/// `name@plt` for each PLT stub, as objdump names them (and `.plt` for the lazy
/// binding entry): without them a stub is attributed to the symbol before it,
/// `_init`. x86-64 stubs are 16 bytes, in `.rela.plt` order, in `.plt.sec` when
/// there is one (IBT), else in `.plt` after its first entry.
fn plt_symbols(obj: &object::File<'_>, out: &mut Vec<RawSymbol>) {
    if obj.architecture() != object::Architecture::X86_64 {
        return;
    }
    let Some(data) = obj.section_by_name(".rela.plt").and_then(|s| s.data().ok()) else {
        return;
    };
    let (stubs, first) = match (obj.section_by_name(".plt.sec"), obj.section_by_name(".plt")) {
        (Some(s), _) => (s, 0),
        (None, Some(s)) => (s, 1),
        _ => return,
    };
    let end = stubs.address() + stubs.size();
    if first == 1 && stubs.size() >= 16 {
        out.push(RawSymbol {
            name: ".plt".into(),
            addr: stubs.address(),
            size: 16,
            kind: SymKind::Function,
            global: false,
        });
    }
    let dynsyms = obj.dynamic_symbol_table();
    // Elf64_Rela: r_offset, r_info (symbol index in the high half), r_addend
    for (i, rela) in data.chunks_exact(24).enumerate() {
        let addr = stubs.address() + 16 * (i as u64 + first);
        if addr + 16 > end {
            break;
        }
        let info = u64::from_le_bytes(rela[8..16].try_into().unwrap_or_default());
        let sym = dynsyms
            .as_ref()
            .and_then(|t| t.symbol_by_index(object::SymbolIndex((info >> 32) as usize)).ok());
        let Some(name) = sym.and_then(|s| s.name().ok()).filter(|n| !n.is_empty()) else {
            continue; // an IRELATIVE relocation: no name
        };
        out.push(RawSymbol {
            name: format!("{name}@plt"),
            addr,
            size: 16,
            kind: SymKind::Function,
            global: false,
        });
    }
    plt_got_symbols(obj, out);
}

/// `.plt.got`: 8-byte stubs `jmp *GOT(%rip)` for functions whose GOT slot the loader
/// fills at start-up (a `.rela.dyn` relocation names the slot's symbol).
fn plt_got_symbols(obj: &object::File<'_>, out: &mut Vec<RawSymbol>) {
    let Some(sec) = obj.section_by_name(".plt.got") else { return };
    let Ok(code) = sec.data() else { return };
    let Some(rela) = obj.section_by_name(".rela.dyn").and_then(|s| s.data().ok()) else {
        return;
    };
    let dynsyms = obj.dynamic_symbol_table();
    let slot_symbol = |slot: u64| {
        rela.chunks_exact(24).find_map(|r| {
            let off = u64::from_le_bytes(r[0..8].try_into().unwrap_or_default());
            let info = u64::from_le_bytes(r[8..16].try_into().unwrap_or_default());
            (off == slot && info >> 32 != 0).then_some((info >> 32) as usize)
        })
    };
    for (i, stub) in code.chunks_exact(8).enumerate() {
        let addr = sec.address() + 8 * i as u64;
        // jmp *disp32(%rip), optionally after a `bnd` prefix
        let (at, disp) = match stub {
            [0xff, 0x25, d @ ..] => (6, &d[..4]),
            [0xf2, 0xff, 0x25, d @ ..] => (7, &d[..4]),
            _ => continue,
        };
        let disp = i32::from_le_bytes(disp.try_into().unwrap_or_default());
        let slot = (addr + at).wrapping_add_signed(i64::from(disp));
        let sym = slot_symbol(slot)
            .and_then(|i| dynsyms.as_ref()?.symbol_by_index(object::SymbolIndex(i)).ok());
        if let Some(name) = sym.and_then(|s| s.name().ok()).filter(|n| !n.is_empty()) {
            out.push(RawSymbol {
                name: format!("{name}@plt"),
                addr,
                size: 8,
                kind: SymKind::Function,
                global: false,
            });
        }
    }
}

/// Defined function, data and TLS symbols from `.symtab` and `.dynsym`, and the
/// PLT stubs.
pub(crate) fn symbols(obj: &object::File<'_>, out: &mut Vec<RawSymbol>) {
    plt_symbols(obj, out);
    for sym in obj.symbols().chain(obj.dynamic_symbols()) {
        if !sym.is_definition() {
            continue;
        }
        let kind = match sym.kind() {
            SymbolKind::Text => SymKind::Function,
            SymbolKind::Data => SymKind::Data,
            SymbolKind::Tls => SymKind::Tls,
            _ => continue,
        };
        let Ok(name) = sym.name() else { continue };
        if name.is_empty() {
            continue;
        }
        out.push(RawSymbol {
            name: name.to_owned(),
            addr: sym.address(),
            size: sym.size(),
            kind,
            global: sym.is_global(),
        });
    }
}

/// The entry of a function compiled with `-fpatchable-function-entry=5` (what
/// `memlens cc` does): its 5-byte NOP pad, after an `endbr64`. `code` starts at the
/// function's symbol; returns the pad's offset from it. Used by `--trace-calls` and
/// by live probes, which turn the pad into a call to the runtime.
pub fn patch_pad(code: &[u8]) -> Option<u64> {
    let skip = if code.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]) { 4 } else { 0 };
    let pad = code.get(skip..skip + 5)?;
    (pad == [0x90; 5] || pad[..4] == [0x0f, 0x1f, 0x44, 0x00]).then_some(skip as u64)
}
