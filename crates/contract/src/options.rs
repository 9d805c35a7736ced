//! The `MEMLENS_*` options both recorders read, with one syntax.
//!
//! Flags are `1`/`yes`/`true`/`on` or `0`/`no`/`false`/`off` (surrounding blanks
//! ignored); numbers are clamped to their range. Anything else gives one warning
//! line on stderr and the default. `memlens record` sets these variables for both
//! paths; they are documented for running a program without it.

/// Largest accepted `MEMLENS_STACK_DEPTH`.
pub const MAX_STACK_DEPTH: usize = 64;

fn warn(name: &str, value: &str, expected: &str, default: &dyn core::fmt::Display) {
    eprintln!("memlens: {name}={value:?} is not {expected}; using {default}");
}

/// The value of a flag: `None` when `v` is not one of the accepted spellings.
pub fn parse_flag(v: &str) -> Option<bool> {
    match v.trim() {
        "1" | "yes" | "true" | "on" => Some(true),
        "0" | "no" | "false" | "off" => Some(false),
        _ => None,
    }
}

/// Flag `name` with value `value` (unset: `default`).
pub fn flag(name: &str, value: Option<&str>, default: bool) -> bool {
    let Some(v) = value else { return default };
    parse_flag(v).unwrap_or_else(|| {
        warn(name, v, "1/yes/true/on or 0/no/false/off", &u8::from(default));
        default
    })
}

/// Number `name` with value `value`, clamped to `lo..=hi` (unset: `default`).
pub fn number(name: &str, value: Option<&str>, default: i64, lo: i64, hi: i64) -> i64 {
    let Some(v) = value else { return default };
    match v.trim().parse::<i64>() {
        Ok(n) => n.clamp(lo, hi),
        Err(_) => {
            warn(name, v, "a number", &default);
            default
        }
    }
}

/// `MEMLENS_ORDER`: which events carry Lamport clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Synchronisation and atomic operations (the default).
    #[default]
    Sync,
    /// Every access.
    Atomic,
    /// No clocks.
    None,
}

impl Order {
    /// `sync` (also empty, `default`, `1`), `atomic` (`2`) or `none` (`off`, `0`).
    pub fn parse(s: &str) -> Option<Order> {
        match s.trim() {
            "" | "sync" | "default" | "1" => Some(Order::Sync),
            "atomic" | "2" => Some(Order::Atomic),
            "none" | "off" | "0" => Some(Order::None),
            _ => None,
        }
    }

    /// The name written in the trace's `order` option.
    pub fn name(self) -> &'static str {
        match self {
            Order::Sync => "sync",
            Order::Atomic => "atomic",
            Order::None => "none",
        }
    }
}

/// The options both recorders take, written by both as the same `option` records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recording {
    /// `MEMLENS_OUTPUT`: trace path; unset or empty: nothing is recorded.
    pub output: Option<String>,
    /// `MEMLENS_VALUES`: record the value of every load and store.
    pub values: bool,
    /// `MEMLENS_STACK_DEPTH` (default 8, at most [`MAX_STACK_DEPTH`]): callers kept
    /// per allocation.
    pub stack_depth: usize,
    /// `MEMLENS_ZSTD_LEVEL` (default 1, 0..=19; 0 stores chunks uncompressed).
    pub zstd_level: i32,
    /// `MEMLENS_ROI`: record accesses only inside `memlens_roi_begin/end`.
    pub roi: bool,
    /// `MEMLENS_ORDER`.
    pub order: Order,
}

impl Recording {
    /// Parses the options from a lookup function (the environment in production).
    pub fn parse(var: impl Fn(&str) -> Option<String>) -> Recording {
        let num =
            |k: &str, default: i64, lo: i64, hi: i64| number(k, var(k).as_deref(), default, lo, hi);
        let flag = |k: &str| flag(k, var(k).as_deref(), false);
        let order = var("MEMLENS_ORDER").map_or(Order::Sync, |v| {
            Order::parse(&v).unwrap_or_else(|| {
                warn("MEMLENS_ORDER", &v, "sync, atomic or none", &"sync");
                Order::Sync
            })
        });
        Recording {
            output: var("MEMLENS_OUTPUT").filter(|s| !s.is_empty()),
            values: flag("MEMLENS_VALUES"),
            stack_depth: num("MEMLENS_STACK_DEPTH", 8, 0, MAX_STACK_DEPTH as i64) as usize,
            zstd_level: num("MEMLENS_ZSTD_LEVEL", 1, 0, 19) as i32,
            roi: flag("MEMLENS_ROI"),
            order,
        }
    }

    /// From the process environment.
    pub fn from_env() -> Recording {
        Recording::parse(|k| std::env::var(k).ok())
    }

    /// The `option` metadata records (name, value) of these options.
    pub fn records(&self) -> Vec<(&'static str, String)> {
        let b = |v: bool| if v { "1" } else { "0" }.to_string();
        vec![
            ("output", self.output.clone().unwrap_or_default()),
            ("values", b(self.values)),
            ("stack_depth", self.stack_depth.to_string()),
            ("zstd_level", self.zstd_level.to_string()),
            ("roi", b(self.roi)),
            ("order", self.order.name().into()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_flag_syntax() {
        for v in ["1", "yes", "true", "on", " on "] {
            assert!(flag("X", Some(v), false), "{v}");
        }
        for v in ["0", "no", "false", "off"] {
            assert!(!flag("X", Some(v), true), "{v}");
        }
        assert!(flag("X", Some("maybe"), true) && !flag("X", Some("2"), false));
        assert!(flag("X", None, true));
    }

    #[test]
    fn recording_options_and_records() {
        let r = Recording::parse(|k| match k {
            "MEMLENS_STACK_DEPTH" => Some("1000".into()),
            "MEMLENS_ZSTD_LEVEL" => Some("junk".into()),
            "MEMLENS_VALUES" => Some("yes".into()),
            "MEMLENS_ORDER" => Some("atomic".into()),
            _ => None,
        });
        assert_eq!((r.stack_depth, r.zstd_level, r.values, r.roi), (64, 1, true, false));
        assert_eq!(r.order, Order::Atomic);
        assert!(r.output.is_none());
        let recs = r.records();
        assert!(
            recs.contains(&("order", "atomic".into())) && recs.contains(&("values", "1".into()))
        );
        assert_eq!(
            Recording::parse(|k| (k == "MEMLENS_ORDER").then(|| "x".into())).order,
            Order::Sync
        );
    }
}
