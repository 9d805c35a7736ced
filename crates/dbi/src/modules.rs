//! The guest's modules: the executable (from QEMU) and shared libraries (reported by
//! the preload library), with their function entry points for traced code.

use crate::filter::{Filter, Item};
use memlens_format::{Module, Segment};
use object::read::elf::{FileHeader, ProgramHeader};
use object::{Object, ObjectSymbol, SymbolKind};
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

struct State {
    filter: Filter,
    modules: Vec<Module>,
    /// Whether each module's code is traced.
    traced: Vec<bool>,
    func_starts: HashSet<u64>,
    /// Static executables: allocator entry points (runtime address -> kind).
    alloc_hooks: HashMap<u64, u8>,
}

/// A static executable's allocator entry, hooked by symbol: `malloc`.
pub const HOOK_MALLOC: u8 = 0;
/// `calloc`.
pub const HOOK_CALLOC: u8 = 1;
/// `realloc`.
pub const HOOK_REALLOC: u8 = 2;
/// `free`.
pub const HOOK_FREE: u8 = 3;

static STATE: Mutex<Option<State>> = Mutex::new(None);

struct Elf {
    segments: Vec<Segment>,
    build_id: Vec<u8>,
    funcs: Vec<u64>,
    /// No PT_INTERP: a static executable (no preload library possible).
    is_static: bool,
    /// Addresses of malloc, calloc, realloc, free.
    allocators: Vec<(u64, u8)>,
}

fn read_elf(path: &str) -> Result<Elf, String> {
    let data = std::fs::read(path).map_err(|e| e.to_string())?;
    let hdr = object::elf::FileHeader64::<object::Endianness>::parse(&*data)
        .map_err(|e| e.to_string())?;
    let endian = hdr.endian().map_err(|e| e.to_string())?;
    let mut segments = Vec::new();
    for ph in hdr.program_headers(endian, &*data).map_err(|e| e.to_string())? {
        if ph.p_type(endian) == object::elf::PT_LOAD {
            segments.push(Segment {
                vaddr: ph.p_vaddr(endian),
                memsz: ph.p_memsz(endian),
                flags: ph.p_flags(endian),
            });
        }
    }
    let file = object::File::parse(&*data).map_err(|e| e.to_string())?;
    let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec).unwrap_or_default();
    let mut funcs: Vec<u64> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0 && s.address() != 0)
        .map(|s| s.address())
        .collect();
    funcs.sort_unstable();
    funcs.dedup();
    let is_static = !hdr
        .program_headers(endian, &*data)
        .map_err(|e| e.to_string())?
        .iter()
        .any(|ph| ph.p_type(endian) == object::elf::PT_INTERP);
    let allocators = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
        .filter_map(|s| {
            let k = match s.name().ok()? {
                "malloc" => HOOK_MALLOC,
                "calloc" => HOOK_CALLOC,
                "realloc" => HOOK_REALLOC,
                "free" => HOOK_FREE,
                _ => return None,
            };
            Some((s.address(), k))
        })
        .collect();
    Ok(Elf { segments, build_id, funcs, is_static, allocators })
}

/// Sets up the executable (module 0), whose lowest executable segment QEMU loaded
/// at `start_code`.
/// Returns whether the executable is static.
pub fn init_exe(path: &str, start_code: u64, mut filter: Filter) -> Result<bool, String> {
    let elf = read_elf(path)?;
    let text = elf.segments.iter().filter(|s| s.flags & 1 != 0).map(|s| s.vaddr).min();
    let bias = start_code.wrapping_sub(text.unwrap_or(0));
    for i in &mut filter.0 {
        if let Item::ExeRange(lo, hi) = *i {
            *i = Item::Range(lo.wrapping_add(bias), hi.wrapping_add(bias));
        }
    }
    let traced = filter.0.iter().any(|i| matches!(i, Item::Exe | Item::All));
    let mut func_starts = HashSet::new();
    if traced || filter.0.iter().any(|i| matches!(i, Item::Range(..))) {
        func_starts.extend(elf.funcs.iter().map(|a| a.wrapping_add(bias)));
    }
    let alloc_hooks: HashMap<u64, u8> = if elf.is_static {
        elf.allocators.iter().map(|&(a, k)| (a.wrapping_add(bias), k)).collect()
    } else {
        HashMap::new()
    };
    let is_static = elf.is_static;
    let m = Module {
        id: 0,
        path: path.to_string(),
        build_id: elf.build_id,
        bias,
        segments: elf.segments,
    };
    *STATE.lock().unwrap() =
        Some(State { filter, modules: vec![m], traced: vec![traced], func_starts, alloc_hooks });
    Ok(is_static)
}

/// A shared library reported by the preload library.
pub fn add_lib(path: &str, bias: u64) {
    let mut g = STATE.lock().unwrap();
    let Some(st) = g.as_mut() else { return };
    if st.modules.iter().any(|m| m.path == path && m.bias == bias) {
        return;
    }
    if st.modules.first().is_some_and(|m| m.bias == bias && m.path == path) {
        return;
    }
    let Ok(elf) = read_elf(path) else { return };
    let traced = st.filter.wants_lib(path);
    if traced || st.filter.0.iter().any(|i| matches!(i, Item::Range(..))) {
        st.func_starts.extend(elf.funcs.iter().map(|a| a.wrapping_add(bias)));
    }
    let id = st.modules.len() as u32;
    st.modules.push(Module {
        id,
        path: path.to_string(),
        build_id: elf.build_id,
        bias,
        segments: elf.segments,
    });
    st.traced.push(traced);
}

/// All modules known now.
pub fn all() -> Vec<Module> {
    STATE.lock().unwrap().as_ref().map(|s| s.modules.clone()).unwrap_or_default()
}

/// A locked view for the translation callback.
pub struct View(MutexGuard<'static, Option<State>>);

/// Locks the module state.
pub fn view() -> View {
    View(STATE.lock().unwrap())
}

impl View {
    /// Whether the instruction at `pc` is traced.
    pub fn traced(&self, pc: u64) -> bool {
        let Some(st) = self.0.as_ref() else { return false };
        st.filter.0.iter().any(|i| match *i {
            Item::All => true,
            Item::Range(lo, hi) => pc >= lo && pc < hi,
            Item::ExeRange(..) => false, // made a Range by `init_exe`
            Item::Exe | Item::Lib(_) => {
                st.modules.iter().zip(&st.traced).any(|(m, &t)| t && m.contains(pc))
            }
        })
    }

    /// The allocator hooked at `pc` (static executables).
    pub fn alloc_hook(&self, pc: u64) -> Option<u8> {
        self.0.as_ref().and_then(|s| s.alloc_hooks.get(&pc).copied())
    }

    /// Whether `pc` is the first instruction of a known function.
    pub fn is_func_start(&self, pc: u64) -> bool {
        self.0.as_ref().is_some_and(|s| s.func_starts.contains(&pc))
    }
}
