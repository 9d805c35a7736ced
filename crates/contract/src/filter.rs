//! Which code is traced: `exe` (default), `all`, `lib:NAME` (modules whose file name
//! contains NAME), `0xA-0xB` guest address ranges and `exe:0xA-0xB` ranges of the
//! executable's link-time addresses (what `--functions`/`--files` resolve to; the
//! plugin adds the load bias of a PIE), comma-separated, combined with "or".
//!
//! One representation for both ends: `memlens record --dbi` checks `--dbi-filter`
//! and writes the `--functions`/`--files` ranges with it (`Display`), the plugin
//! parses what it gets in `MEMLENS_DBI_FILTER` with it.

/// One filter item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// The main executable.
    Exe,
    /// Everything.
    All,
    /// Shared libraries whose file name contains this.
    Lib(String),
    /// A guest code address range `[lo, hi)`.
    Range(u64, u64),
    /// A range of the executable's link-time addresses.
    ExeRange(u64, u64),
}

/// A parsed `--dbi-filter`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter(pub Vec<Item>);

impl Filter {
    /// Parses `exe|all|lib:NAME|0xA-0xB|exe:0xA-0xB[,...]`.
    pub fn parse(spec: &str) -> Result<Filter, String> {
        let mut items = Vec::new();
        for s in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            items.push(match s {
                "exe" => Item::Exe,
                "all" => Item::All,
                _ if s.starts_with("lib:") && s.len() > 4 => Item::Lib(s[4..].to_string()),
                _ => {
                    let bad = || {
                        format!(
                            "bad --dbi-filter item {s:?}: use exe, all, lib:NAME or 0xSTART-0xEND"
                        )
                    };
                    let (exe, r) = match s.strip_prefix("exe:") {
                        Some(r) => (true, r),
                        None => (false, s),
                    };
                    let (a, b) = r.split_once('-').ok_or_else(bad)?;
                    let hex = |x: &str| {
                        u64::from_str_radix(x.trim_start_matches("0x"), 16).map_err(|_| bad())
                    };
                    let (lo, hi) = (hex(a)?, hex(b)?);
                    if lo >= hi {
                        return Err(bad());
                    }
                    if exe {
                        Item::ExeRange(lo, hi)
                    } else {
                        Item::Range(lo, hi)
                    }
                }
            });
        }
        if items.is_empty() {
            items.push(Item::Exe);
        }
        Ok(Filter(items))
    }

    /// The executable's link-time ranges `[lo, hi)` (what `--functions`/`--files`
    /// select).
    pub fn exe_ranges(ranges: impl IntoIterator<Item = (u64, u64)>) -> Filter {
        Filter(ranges.into_iter().map(|(lo, hi)| Item::ExeRange(lo, hi)).collect())
    }

    /// Whether function symbols of a shared library with this path are needed.
    pub fn wants_lib(&self, path: &str) -> bool {
        let name = path.rsplit('/').next().unwrap_or(path);
        self.0.iter().any(|i| match i {
            Item::All => true,
            Item::Lib(n) => name.contains(n.as_str()),
            _ => false,
        })
    }
}

impl core::fmt::Display for Filter {
    /// The text [`Filter::parse`] reads back.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, item) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match item {
                Item::Exe => f.write_str("exe")?,
                Item::All => f.write_str("all")?,
                Item::Lib(n) => write!(f, "lib:{n}")?,
                Item::Range(lo, hi) => write!(f, "{lo:#x}-{hi:#x}")?,
                Item::ExeRange(lo, hi) => write!(f, "exe:{lo:#x}-{hi:#x}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(Filter::parse("").unwrap().0, vec![Item::Exe]);
        assert_eq!(
            Filter::parse("exe,lib:libm,0x10-0x20").unwrap().0,
            vec![Item::Exe, Item::Lib("libm".into()), Item::Range(0x10, 0x20)]
        );
        assert!(Filter::parse("0x20-0x10").is_err());
        assert!(Filter::parse("bogus").is_err());
        assert_eq!(Filter::parse("exe:0x10-0x20").unwrap().0, vec![Item::ExeRange(0x10, 0x20)]);
        assert!(Filter::parse("exe:0x20-0x10").is_err());
        assert!(Filter::parse("lib:libm").unwrap().wants_lib("/lib/x86_64-linux-gnu/libm.so.6"));
        let f = Filter::parse("exe,all,lib:m,0x10-0x20,exe:0x30-0x40").unwrap();
        assert_eq!(Filter::parse(&f.to_string()).unwrap(), f);
        assert_eq!(Filter::exe_ranges([(0x1, 0x2)]).to_string(), "exe:0x1-0x2");
    }
}
