//! What the process is: its module map (from `dl_iterate_phdr`), executable and
//! command line.

use libc::{c_int, c_void, dl_phdr_info};
use memlens_format::{Module, Segment};

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
const NT_GNU_BUILD_ID: u32 = 3;

/// The modules mapped now, numbered from 0 in loader order.
pub(crate) fn scan() -> Vec<Module> {
    let mut out: Vec<Module> = Vec::new();
    // SAFETY: the callback only reads the loader-provided headers it is handed.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut out as *mut Vec<Module>).cast()) };
    let exe = exe_path();
    for (i, m) in out.iter_mut().enumerate() {
        m.id = i as u32;
        if m.path.is_empty() {
            m.path = exe.clone();
        }
    }
    out
}

unsafe extern "C" fn visit(info: *mut dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
    let out = &mut *(data as *mut Vec<Module>);
    let info = &*info;
    let path = if info.dlpi_name.is_null() {
        String::new()
    } else {
        std::ffi::CStr::from_ptr(info.dlpi_name).to_string_lossy().into_owned()
    };
    let bias = info.dlpi_addr;
    let mut segments = Vec::new();
    let mut build_id = Vec::new();
    for i in 0..info.dlpi_phnum as usize {
        let ph = &*info.dlpi_phdr.add(i);
        match ph.p_type {
            PT_LOAD => {
                segments.push(Segment { vaddr: ph.p_vaddr, memsz: ph.p_memsz, flags: ph.p_flags })
            }
            PT_NOTE if build_id.is_empty() => {
                let start = bias.wrapping_add(ph.p_vaddr) as *const u8;
                build_id = find_build_id(start, ph.p_memsz as usize);
            }
            _ => {}
        }
    }
    out.push(Module { id: 0, path, build_id, bias, segments });
    0
}

/// Walks an in-memory note segment looking for `NT_GNU_BUILD_ID`.
unsafe fn find_build_id(start: *const u8, len: usize) -> Vec<u8> {
    let rd = |off: usize| u32::from_ne_bytes(*(start.add(off) as *const [u8; 4]));
    let align4 = |v: usize| (v + 3) & !3;
    let mut off = 0usize;
    while off + 12 <= len {
        let (namesz, descsz, ty) = (rd(off) as usize, rd(off + 4) as usize, rd(off + 8));
        let name = off + 12;
        let desc = name + align4(namesz);
        let next = desc + align4(descsz);
        if next > len {
            break;
        }
        let is_gnu = namesz == 4 && core::slice::from_raw_parts(start.add(name), 4) == b"GNU\0";
        if is_gnu && ty == NT_GNU_BUILD_ID {
            return core::slice::from_raw_parts(start.add(desc), descsz).to_vec();
        }
        off = next;
    }
    Vec::new()
}

/// Updates `known` with a fresh scan: modules already known (same path and bias)
/// keep their ids, new ones get the next free ids. Returns whether anything changed.
pub(crate) fn merge(known: &mut Vec<Module>, fresh: Vec<Module>) -> bool {
    let mut changed = false;
    for mut m in fresh {
        if !known.iter().any(|k| k.path == m.path && k.bias == m.bias) {
            m.id = known.len() as u32;
            known.push(m);
            changed = true;
        }
    }
    changed
}

/// The executable's absolute path (the target of `/proc/self/exe`).
pub(crate) fn exe_path() -> String {
    std::fs::read_link("/proc/self/exe")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The command line from `/proc/self/cmdline`.
pub(crate) fn cmdline() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_finds_the_test_binary_with_a_build_id() {
        let mods = scan();
        let exe = exe_path();
        let me = mods.iter().find(|m| m.path == exe).expect("executable in module map");
        assert!(me.segments.iter().any(|s| s.flags & 1 != 0), "an executable segment");
        assert!(me.contains(scan as *const () as u64));
        assert!(mods.iter().any(|m| m.path.contains("libc.so")));
        let mut known = mods.clone();
        assert!(!merge(&mut known, mods));
    }
}
