//! Recording options, read once from `MEMLENS_*` environment variables at init.

use memlens_contract::options::{self, Order, Recording};
use memlens_format::MetaRecord;
use std::sync::OnceLock;

/// Options in force for the whole process (a forked child keeps its parent's).
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// The options both recorders take (`MEMLENS_OUTPUT`, `_VALUES`, `_STACK_DEPTH`,
    /// `_ZSTD_LEVEL`, `_ROI`, `_ORDER`), parsed by `memlens-contract`.
    pub rec: Recording,
    /// `MEMLENS_ORDER` as `order.rs`'s mode.
    pub order: u8,
    /// `MEMLENS_ZSTD_ADAPT` (default on): writers that fall behind switch to
    /// zstd's fast (negative) levels until they catch up.
    pub zstd_adapt: bool,
    /// `MEMLENS_FOLD` (default on; `0` off): writers fold repeated loop
    /// iterations into `repeat`s before compressing (see the format's `fold.rs`).
    pub fold: bool,
    /// `MEMLENS_BUFFER_KB` (default 1024): per-thread buffer, i.e. raw chunk size.
    pub buffer_bytes: usize,
    /// `MEMLENS_FILTER`: file of code ranges whose accesses and calls are recorded.
    pub filter: Option<String>,
    /// `MEMLENS_WRITERS` (default 1, at most 8): background compression threads.
    pub writers: usize,
    /// `MEMLENS_ORDER_LOCKS` (default 4096): striped clock locks.
    pub order_locks: usize,
    /// `MEMLENS_ORDER_LINE` (default 64): bytes per lock stripe.
    pub order_line: usize,
    /// `MEMLENS_CAS_AS_WRITE`: a failed compare-exchange is recorded as a write too.
    pub cas_as_write: bool,
    /// `MEMLENS_REGISTERED_ONLY`: only registered threads record accesses.
    pub registered_only: bool,
    /// `MEMLENS_TRACE_CALLS`: functions whose calls are traced (see `calls.rs`).
    pub trace_calls: Option<String>,
}

/// Largest accepted stack depth.
pub(crate) const MAX_STACK_DEPTH: usize = memlens_contract::options::MAX_STACK_DEPTH;

static OPTIONS: OnceLock<Options> = OnceLock::new();

/// The options, parsed on first use.
pub(crate) fn get() -> &'static Options {
    OPTIONS.get_or_init(|| Options::parse(|k| std::env::var(k).ok()))
}

impl Options {
    /// Parses options from a lookup function (the environment in production).
    pub(crate) fn parse(var: impl Fn(&str) -> Option<String>) -> Options {
        let num = |k: &str, default: i64, lo: i64, hi: i64| -> i64 {
            options::number(k, var(k).as_deref(), default, lo, hi)
        };
        let flag = |k: &str, default: bool| options::flag(k, var(k).as_deref(), default);
        let rec = Recording::parse(&var);
        Options {
            order: match rec.order {
                Order::Sync => crate::order::SYNC,
                Order::Atomic => crate::order::ATOMIC,
                Order::None => crate::order::NONE,
            },
            rec,
            zstd_adapt: flag("MEMLENS_ZSTD_ADAPT", true),
            fold: flag("MEMLENS_FOLD", true),
            buffer_bytes: num("MEMLENS_BUFFER_KB", 1024, 64, 32 * 1024) as usize * 1024,
            filter: var("MEMLENS_FILTER").filter(|s| !s.is_empty()),
            writers: num("MEMLENS_WRITERS", 1, 1, 8) as usize,
            order_locks: num("MEMLENS_ORDER_LOCKS", 4096, 1, 1 << 16) as usize,
            order_line: num("MEMLENS_ORDER_LINE", 64, 1, 1 << 20) as usize,
            cas_as_write: flag("MEMLENS_CAS_AS_WRITE", false),
            registered_only: flag("MEMLENS_REGISTERED_ONLY", false),
            trace_calls: var("MEMLENS_TRACE_CALLS").filter(|s| !s.trim().is_empty()),
        }
    }

    /// The options as metadata records: the shared ones first, as `--dbi` writes them.
    pub(crate) fn records(&self) -> Vec<MetaRecord> {
        let o = |k: &str, v: String| MetaRecord::Option(k.into(), v);
        let b = |v: bool| if v { "1" } else { "0" }.to_string();
        let mut recs: Vec<MetaRecord> =
            self.rec.records().into_iter().map(|(k, v)| o(k, v)).collect();
        recs.extend([
            o("zstd_adapt", b(self.zstd_adapt)),
            o("fold", b(self.fold)),
            o("buffer_kb", (self.buffer_bytes / 1024).to_string()),
            o("filter", self.filter.clone().unwrap_or_default()),
            o("writers", self.writers.to_string()),
            o("order_locks", self.order_locks.to_string()),
            o("order_line", self.order_line.to_string()),
            o("cas_as_write", b(self.cas_as_write)),
            o("registered_only", b(self.registered_only)),
            o("trace_calls", self.trace_calls.clone().unwrap_or_default()),
            // `Time` events are CLOCK_MONOTONIC; this turns them into Unix time
            o("clock_offset", clock_offset().to_string()),
        ]);
        recs
    }
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC in ns, read back to back.
pub(crate) fn clock_offset() -> i64 {
    let m = crate::sys::monotonic_ns();
    crate::sys::realtime_ns() as i64 - m as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_clamping() {
        let o = Options::parse(|_| None);
        assert!(o.rec.output.is_none());
        assert_eq!(
            (o.rec.stack_depth, o.rec.zstd_level, o.buffer_bytes, o.writers),
            (8, 1, 1 << 20, 1)
        );
        let o = Options::parse(|k| match k {
            "MEMLENS_OUTPUT" => Some("/tmp/x".into()),
            "MEMLENS_STACK_DEPTH" => Some("1000".into()),
            "MEMLENS_BUFFER_KB" => Some("1".into()),
            "MEMLENS_VALUES" => Some("1".into()),
            "MEMLENS_ZSTD_LEVEL" => Some("junk".into()),
            _ => None,
        });
        assert_eq!(o.rec.output.as_deref(), Some("/tmp/x"));
        assert_eq!((o.rec.stack_depth, o.buffer_bytes, o.rec.zstd_level), (64, 64 * 1024, 1));
        assert!(o.rec.values && !o.rec.roi);
        assert_eq!(o.records().len(), 17);
        assert!(o.zstd_adapt);
        assert!(!Options::parse(|k| (k == "MEMLENS_ZSTD_ADAPT").then(|| "0".into())).zstd_adapt);
    }
}
