//! `MEMLENS_FILTER`: only code in listed ranges has its accesses and calls recorded.
//!
//! The file has one range per line, `<module path>\t<start hex>\t<end hex>`, in the
//! module's file addresses (as a symbol table shows them); `#` starts a comment.
//! Ranges are turned into runtime addresses with the module biases at init, so
//! libraries loaded later by `dlopen` cannot be named. A verdict per code address is
//! cached in a small direct-mapped table shared by all threads.

use core::sync::atomic::{AtomicU64, Ordering::*};
use memlens_format::Module;
use std::sync::OnceLock;

/// Sorted, non-overlapping runtime address ranges `[start, end)`.
static RANGES: OnceLock<Vec<(u64, u64)>> = OnceLock::new();

const CACHE_BITS: u32 = 12;
/// Entry: `pc << 2 | 2 (valid) | verdict`.
static CACHE: [AtomicU64; 1 << CACHE_BITS] = [const { AtomicU64::new(0) }; 1 << CACHE_BITS];

/// Installs the ranges (once per process).
pub(crate) fn install(ranges: Vec<(u64, u64)>) {
    let _ = RANGES.set(ranges);
}

/// Whether an event at `pc` is recorded (always true without a filter).
#[inline]
pub(crate) fn allowed(pc: u64) -> bool {
    if !crate::state::FILTER_ON.load(Relaxed) {
        return true;
    }
    let slot = &CACHE[(pc.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - CACHE_BITS)) as usize];
    let e = slot.load(Relaxed);
    if e & 2 != 0 && e >> 2 == pc {
        return e & 1 != 0;
    }
    let v = lookup(pc);
    slot.store(pc << 2 | 2 | u64::from(v), Relaxed);
    v
}

fn lookup(pc: u64) -> bool {
    let Some(r) = RANGES.get() else { return false };
    let i = r.partition_point(|&(s, _)| s <= pc);
    i > 0 && pc < r[i - 1].1
}

/// Parses a filter file against the module map. Lines naming no loaded module are
/// skipped; returns the ranges and how many lines were skipped.
pub(crate) fn parse(text: &str, modules: &[Module]) -> (Vec<(u64, u64)>, usize) {
    let hex = |s: &str| u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok();
    let base = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
    let mut out = Vec::new();
    let mut skipped = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let mut f = line.split('\t');
        let (Some(path), Some(s), Some(e)) = (f.next(), f.next(), f.next()) else {
            skipped += 1;
            continue;
        };
        let (Some(s), Some(e)) = (hex(s), hex(e)) else {
            skipped += 1;
            continue;
        };
        let m = modules
            .iter()
            .find(|m| m.path == path)
            .or_else(|| modules.iter().find(|m| base(&m.path) == base(path)));
        match m {
            Some(m) if e > s => out.push((s.wrapping_add(m.bias), e.wrapping_add(m.bias))),
            _ => skipped += 1,
        }
    }
    out.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(out.len());
    for (s, e) in out {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    (merged, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_resolves_and_merges() {
        let m = |id, path: &str, bias| Module {
            id,
            path: path.into(),
            build_id: vec![],
            bias,
            segments: vec![],
        };
        let mods = [m(0, "/bin/prog", 0x5555_0000_0000), m(1, "/lib/libfoo.so", 0x7f00_0000_0000)];
        let text = "# comment\n/bin/prog\t1000\t1100\n/bin/prog\t0x10f0\t1200\n\
                    libfoo.so\t20\t30\n/nope\t1\t2\nbad line\n";
        let (r, skipped) = parse(text, &mods);
        assert_eq!(skipped, 2);
        assert_eq!(
            r,
            vec![(0x5555_0000_1000, 0x5555_0000_1200), (0x7f00_0000_0020, 0x7f00_0000_0030)]
        );
        install(r);
        assert!(lookup(0x5555_0000_1000) && lookup(0x5555_0000_11ff));
        assert!(!lookup(0x5555_0000_1200) && !lookup(0x7f00_0000_001f));
    }
}
