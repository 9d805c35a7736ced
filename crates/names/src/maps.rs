//! `/proc/self/maps` as recorded in the trace.

use memlens_format::Addr;

/// One mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Permissions, e.g. `rw-p`.
    pub perms: String,
    /// Path or pseudo-name (`[heap]`, `[stack]`), empty for anonymous memory.
    pub name: String,
}

impl Mapping {
    /// How reports name an address in this mapping.
    pub fn label(&self) -> String {
        if self.name.is_empty() {
            "[anonymous mmap]".into()
        } else if self.name == "[stack]" {
            // the kernel's [stack] is the main thread's; argv and the environment
            // sit in it above the top pthread reports, in the same or the next page
            // as ASLR falls: one name for both, so two runs of a program agree
            "[stack of T0]".into()
        } else if self.name.starts_with('[') {
            self.name.clone()
        } else {
            format!("[{}]", self.name.rsplit('/').next().unwrap_or(&self.name))
        }
    }
}

/// A parsed memory map.
#[derive(Clone, Debug, Default)]
pub struct Maps {
    maps: Vec<Mapping>,
}

impl Maps {
    /// Parses `/proc/<pid>/maps` text; malformed lines are skipped.
    pub fn parse(text: &str) -> Maps {
        let mut maps: Vec<Mapping> = text
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let range = f.next()?;
                let perms = f.next()?.to_string();
                let (a, b) = range.split_once('-')?;
                let start = u64::from_str_radix(a, 16).ok()?;
                let end = u64::from_str_radix(b, 16).ok()?;
                let name = f.nth(3).map(str::to_string).unwrap_or_default();
                Some(Mapping { start, end, perms, name })
            })
            .collect();
        maps.sort_by_key(|m| m.start);
        Maps { maps }
    }

    /// The mapping holding `addr`.
    pub fn find(&self, addr: Addr) -> Option<&Mapping> {
        let i = self.maps.partition_point(|m| m.start <= addr.0);
        let m = self.maps.get(i.checked_sub(1)?)?;
        (addr.0 < m.end).then_some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_finds() {
        let m = Maps::parse(
            "55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]\n\
             7f0000000000-7f0000001000 rw-p 00000000 00:00 0 \n\
             7f1000000000-7f1000100000 r-xp 00000000 08:01 42 /usr/lib/libc.so.6\n",
        );
        assert_eq!(m.find(Addr(0x55d0c0000010)).unwrap().label(), "[heap]");
        assert_eq!(m.find(Addr(0x7f0000000008)).unwrap().label(), "[anonymous mmap]");
        assert_eq!(m.find(Addr(0x7f1000000008)).unwrap().label(), "[libc.so.6]");
        assert!(m.find(Addr(0x10)).is_none());
    }
}
