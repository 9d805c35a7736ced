//! The defined functions of an ELF64 file by name, for `--trace-calls` in libraries
//! opened with `dlopen` (`calls.rs`): a small reader of the section headers and of
//! one symbol table (`.symtab`, else `.dynsym`). Not the record path.

const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const STT_FUNC: u8 = 2;
const SHN_LORESERVE: u16 = 0xff00;
const SYM_SIZE: usize = 24;

/// The defined functions (`STT_FUNC`, nonzero size) of the ELF file at `path`
/// whose names match one of `names` (see [`matches`]): (index in `names`, file
/// address), one per symbol. `None` when the file cannot be read as ELF64.
pub(crate) fn find_functions(path: &str, names: &[&str]) -> Option<Vec<(usize, u64)>> {
    let c = std::ffi::CString::new(path).ok()?;
    // SAFETY: plain system calls; the mapping is read-only, private, and unmapped
    // before returning (nothing refers to it afterwards).
    unsafe {
        let fd = libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let mut st: libc::stat = core::mem::zeroed();
        let size = if libc::fstat(fd, &mut st) == 0 { st.st_size as usize } else { 0 };
        let m = if size >= 64 {
            libc::mmap(core::ptr::null_mut(), size, libc::PROT_READ, libc::MAP_PRIVATE, fd, 0)
        } else {
            libc::MAP_FAILED
        };
        libc::close(fd);
        if m == libc::MAP_FAILED {
            return None;
        }
        let out = functions_in(core::slice::from_raw_parts(m.cast::<u8>(), size), names);
        libc::munmap(m, size);
        out
    }
}

fn u16_at(d: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(d.get(off..off.checked_add(2)?)?.try_into().ok()?))
}

fn u32_at(d: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(off..off.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(d: &[u8], off: usize) -> Option<usize> {
    usize::try_from(u64::from_le_bytes(d.get(off..off.checked_add(8)?)?.try_into().ok()?)).ok()
}

/// [`find_functions`] on the file's bytes.
fn functions_in(d: &[u8], names: &[&str]) -> Option<Vec<(usize, u64)>> {
    // ELF64, little-endian
    if d.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let shoff = u64_at(d, 0x28)?;
    let shentsize = usize::from(u16_at(d, 0x3a)?);
    let mut shnum = usize::from(u16_at(d, 0x3c)?);
    if shoff == 0 || shentsize < 64 {
        return None;
    }
    if shnum == 0 {
        // more than 0xff00 sections: the count is the first header's sh_size
        shnum = u64_at(d, shoff.checked_add(32)?)?;
    }
    shnum = shnum.min(d.len().saturating_sub(shoff) / shentsize);
    // (type, offset, size, link, entsize) of section `i`
    let section = |i: usize| -> Option<(u32, usize, usize, usize, usize)> {
        let h = shoff.checked_add(i.checked_mul(shentsize)?)?;
        let at = |k: usize| h.checked_add(k);
        Some((
            u32_at(d, at(4)?)?,
            u64_at(d, at(24)?)?,
            u64_at(d, at(32)?)?,
            u32_at(d, at(40)?)? as usize,
            u64_at(d, at(56)?)?,
        ))
    };
    let find = |ty: u32| (0..shnum).filter_map(section).find(|s| s.0 == ty);
    let (_, off, size, link, entsize) = find(SHT_SYMTAB).or_else(|| find(SHT_DYNSYM))?;
    let (_, str_off, str_size, _, _) = section(link)?;
    let strtab = d.get(str_off..str_off.checked_add(str_size)?)?;
    let syms = d.get(off..off.checked_add(size)?)?;
    let entsize = if entsize >= SYM_SIZE { entsize } else { SYM_SIZE };
    let mut out = Vec::new();
    for sym in syms.chunks_exact(entsize) {
        let (info, shndx) = (sym[4], u16_at(sym, 6)?);
        let size = u64_at(sym, 16)?;
        if info & 0xf != STT_FUNC || shndx == 0 || shndx >= SHN_LORESERVE || size == 0 {
            continue;
        }
        let Some(name) = strtab.get(u32_at(sym, 0)? as usize..) else { continue };
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        if let Some(i) = names.iter().position(|n| matches(name, n)) {
            out.push((i, u64_at(sym, 8)? as u64));
        }
    }
    Some(out)
}

/// Whether the symbol `raw` is the function `want`: the same raw name, or a
/// mangled name whose qualified name is `want` (see [`qualified_name`]).
pub(crate) fn matches(raw: &[u8], want: &str) -> bool {
    raw == want.as_bytes()
        || (raw.starts_with(b"_Z") && qualified_name(raw).is_some_and(|q| q == want))
}

/// The qualified name of a plainly mangled function: the Itanium C++ `_Z3fooi`
/// (`foo`), `_ZN2ns3fooEv` and `_ZL3barv` (`ns::foo`, `bar`), and Rust's legacy
/// `_ZN5crate3fun17h0123456789abcdefE` (`crate::fun`). Templates, operators,
/// constructors and substitutions give `None` (such functions are listed by their
/// mangled names).
pub(crate) fn qualified_name(raw: &[u8]) -> Option<String> {
    let mut s = raw.strip_prefix(b"_Z")?;
    s = s.strip_prefix(b"L").unwrap_or(s);
    let mut parts: Vec<&[u8]> = Vec::new();
    if let Some(mut rest) = s.strip_prefix(b"N") {
        while let [b'r' | b'V' | b'K' | b'R' | b'O', tail @ ..] = rest {
            rest = tail;
        }
        while !rest.starts_with(b"E") {
            parts.push(source_name(&mut rest)?);
        }
        // Rust's legacy hash component
        if let [.., last] = parts[..] {
            let hash = last.len() == 17
                && last[0] == b'h'
                && last[1..].iter().all(|b| b.is_ascii_hexdigit());
            if hash && parts.len() > 1 {
                parts.pop();
            }
        }
    } else {
        parts.push(source_name(&mut s)?);
    }
    if parts.is_empty() {
        return None;
    }
    let parts: Vec<&str> =
        parts.iter().map(|p| core::str::from_utf8(p).ok()).collect::<Option<_>>()?;
    Some(parts.join("::"))
}

/// `<digits><that many bytes>` at the start of `s`, which moves past it.
fn source_name<'a>(s: &mut &'a [u8]) -> Option<&'a [u8]> {
    let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    let n: usize = core::str::from_utf8(&s[..digits]).ok()?.parse().ok()?;
    let name = s.get(digits..digits.checked_add(n)?)?;
    *s = &s[digits + n..];
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[unsafe(no_mangle)]
    #[inline(never)]
    extern "C" fn memlens_elfsyms_probe(x: u64) -> u64 {
        x.wrapping_mul(3)
    }

    #[test]
    fn finds_a_defined_function_of_this_test_binary() {
        assert_eq!(memlens_elfsyms_probe(2), 6);
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let names = ["no_such_function_here", "memlens_elfsyms_probe"];
        let got = find_functions(exe.to_str().unwrap(), &names).unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, 1);
        // the file address plus the executable's load bias is the function
        let bias = crate::modules::scan()[0].bias;
        assert_eq!(got[0].1 + bias, memlens_elfsyms_probe as *const () as usize as u64);
    }

    #[test]
    fn rejects_what_is_not_elf64() {
        assert!(functions_in(b"#!/bin/sh\n", &["f"]).is_none());
        assert!(functions_in(&[0u8; 100], &["f"]).is_none());
        assert!(find_functions("/nonexistent/lib.so", &["f"]).is_none());
        let mut head = b"\x7fELF\x02\x01".to_vec();
        head.resize(64, 0xff);
        assert!(functions_in(&head, &["f"]).is_none(), "section headers out of the file");
    }

    #[test]
    fn qualified_names_of_plain_mangled_functions() {
        let q = |s: &str| qualified_name(s.as_bytes());
        assert_eq!(q("_Z3fooi").as_deref(), Some("foo"));
        assert_eq!(q("_ZN2ns3fooEv").as_deref(), Some("ns::foo"));
        assert_eq!(q("_ZNK2ns1S3getEv").as_deref(), Some("ns::S::get"));
        assert_eq!(q("_ZL3barv").as_deref(), Some("bar"));
        assert_eq!(q("_ZN7rscalls3add17h0123456789abcdefE").as_deref(), Some("rscalls::add"));
        assert_eq!(q("_ZN2ns3fooIiEEvT_"), None, "template");
        assert_eq!(q("_ZN1SC2Ev"), None, "constructor");
        assert_eq!(q("_Z99x"), None, "length past the end");
        assert_eq!(q("foo"), None);
        assert!(matches(b"lib_sum", "lib_sum"));
        assert!(matches(b"_ZN2ns3fooEi", "ns::foo"));
        assert!(!matches(b"lib_sum2", "lib_sum"));
    }
}
