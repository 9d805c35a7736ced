//! The guest's modules: the executable (from QEMU) and shared libraries (reported by
//! the preload library), with their function entry points for traced code.

use memlens_contract::filter::{Filter, Item};
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
    /// Each module's file, canonical: the loader and the preload library name
    /// some files by other paths than `/proc/self/maps` does.
    files: Vec<std::path::PathBuf>,
    /// Guest code ranges found to belong to no file (JIT code, the vDSO).
    anon: Vec<(u64, u64)>,
}

/// The guest preload library: never traced, it is memlens's, not the program's.
const PRELOAD: &str = "libmemlens_dbi_preload.so";

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
    let files = vec![std::fs::canonicalize(path).unwrap_or_else(|_| path.into())];
    *STATE.lock().unwrap() = Some(State {
        filter,
        modules: vec![m],
        traced: vec![traced],
        func_starts,
        alloc_hooks,
        files,
        anon: Vec::new(),
    });
    Ok(is_static)
}

/// A shared library reported by the preload library.
pub fn add_lib(path: &str, bias: u64) {
    let mut g = STATE.lock().unwrap();
    let Some(st) = g.as_mut() else { return };
    if st.modules.iter().any(|m| m.path == path && m.bias == bias) {
        return;
    }
    let file = std::fs::canonicalize(path).unwrap_or_else(|_| path.into());
    if st.modules.iter().zip(&st.files).any(|(m, f)| m.bias == bias && *f == file) {
        return; // found early in /proc/self/maps under another path
    }
    let Ok(elf) = read_elf(path) else { return };
    let preload = path.ends_with(PRELOAD);
    let traced = st.filter.wants_lib(path) && !preload;
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
    st.files.push(file);
}

/// Whether the guest code at `pc` lies in no module known yet.
pub fn unknown(pc: u64) -> bool {
    let g = STATE.lock().unwrap();
    let Some(st) = g.as_ref() else { return false };
    !st.modules.iter().any(|m| m.contains(pc))
        && !st.anon.iter().any(|&(lo, hi)| pc >= lo && pc < hi)
}

/// Finds the file mapped at guest code address `pc` (host address `pc + base`) in
/// QEMU's `/proc/self/maps` and adds it as a module: the loader runs, and the
/// preload library is entered, before the preload library reports the modules, so
/// `lib:ld-linux` would trace almost nothing and `all` would trace memlens's own code.
pub fn discover(pc: u64, base: u64) {
    let host = pc.wrapping_add(base);
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return };
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), _, Some(off), _, _) = (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('-').and_then(|(a, b)| Some((hex(a)?, hex(b)?)))
        else {
            continue;
        };
        if host < lo || host >= hi {
            continue;
        }
        let path = f.collect::<Vec<_>>().join(" ");
        let bias = if path.starts_with('/') {
            hex(off).and_then(|off| bias_of(&path, off + (host - lo), pc))
        } else {
            None
        };
        match bias {
            Some(b) => add_lib(&path, b),
            None => {
                let mut g = STATE.lock().unwrap();
                if let Some(st) = g.as_mut() {
                    st.anon.push((lo.wrapping_sub(base), hi.wrapping_sub(base)));
                }
            }
        }
        return;
    }
}

/// The load bias of ELF file `path` whose file offset `fo` holds the code at guest
/// address `pc` (a file page may be in two segments: the executable one).
fn bias_of(path: &str, fo: u64, pc: u64) -> Option<u64> {
    let data = std::fs::read(path).ok()?;
    let hdr = object::elf::FileHeader64::<object::Endianness>::parse(&*data).ok()?;
    let endian = hdr.endian().ok()?;
    let ph = hdr.program_headers(endian, &*data).ok()?;
    let seg = ph.iter().find(|p| {
        let o = p.p_offset(endian);
        p.p_type(endian) == object::elf::PT_LOAD
            && p.p_flags(endian) & object::elf::PF_X != 0
            && fo >= o
            && fo < o + p.p_filesz(endian)
    })?;
    let vaddr = seg.p_vaddr(endian).wrapping_add(fo).wrapping_sub(seg.p_offset(endian));
    Some(pc.wrapping_sub(vaddr))
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
        if st.modules.iter().any(|m| m.path.ends_with(PRELOAD) && m.contains(pc)) {
            return false;
        }
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
