//! Event filters shared by every kernel: a [`Filter`] wrapped around any kernel by
//! [`Filtered`].
//!
//! - Thread set and event-index window apply to every event.
//! - Code and data address ranges apply to memory accesses only; allocations, frees,
//!   function and thread events always pass, so kernels that track heap blocks or call
//!   stacks keep a consistent state. A range access (`memcpy`) that straddles a data
//!   range is clipped to the part inside it.
//!
//! The window counts events either per thread (position in the thread's own stream,
//! the default: the same whichever order a driver feeds streams in, and shardable) or
//! in delivery order (the order the driver calls `process`, meaningful once streams are
//! merged in time order).

use crate::{Kernel, ShardKernel};
use memlens_format::{Addr, Event, Pc, ThreadId};
use std::collections::BTreeSet;
use std::ops::Range;

/// What the event-index window counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WindowBasis {
    /// The index of the event in its thread's stream (0-based).
    #[default]
    PerThread,
    /// The index of the event in the order the driver delivers events.
    Delivered,
}

/// Which events a kernel sees. The default passes everything.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only these threads (`None`: all).
    pub threads: Option<BTreeSet<ThreadId>>,
    /// Only accesses whose code address is in one of these ranges (empty: all).
    pub pcs: Vec<Range<Pc>>,
    /// Only accesses that touch one of these data ranges (empty: all).
    pub addrs: Vec<Range<Addr>>,
    /// Only events whose index is in this range.
    pub window: Option<Range<u64>>,
    /// What the window counts.
    pub window_basis: WindowBasis,
}

impl Filter {
    /// A filter that passes everything.
    pub fn new() -> Filter {
        Filter::default()
    }

    /// Restricts to these threads.
    pub fn threads(mut self, t: impl IntoIterator<Item = ThreadId>) -> Filter {
        self.threads = Some(t.into_iter().collect());
        self
    }

    /// Adds a code address range.
    pub fn pc_range(mut self, r: Range<Pc>) -> Filter {
        self.pcs.push(r);
        self
    }

    /// Adds a data address range.
    pub fn addr_range(mut self, r: Range<Addr>) -> Filter {
        self.addrs.push(r);
        self
    }

    /// Sets the event-index window.
    pub fn window(mut self, r: Range<u64>, basis: WindowBasis) -> Filter {
        self.window = Some(r);
        self.window_basis = basis;
        self
    }

    /// Whether the filter passes everything.
    pub fn is_empty(&self) -> bool {
        self.threads.is_none()
            && self.pcs.is_empty()
            && self.addrs.is_empty()
            && self.window.is_none()
    }

    /// Wraps a kernel.
    pub fn apply<K: Kernel>(self, inner: K) -> Filtered<K> {
        Filtered { filter: self, inner, per_thread: Vec::new(), delivered: 0 }
    }

    fn pc_ok(&self, pc: Pc) -> bool {
        self.pcs.is_empty() || self.pcs.iter().any(|r| r.contains(&pc))
    }
}

/// A kernel seeing only the events a [`Filter`] passes.
#[derive(Clone, Debug)]
pub struct Filtered<K> {
    filter: Filter,
    inner: K,
    per_thread: Vec<u64>,
    delivered: u64,
}

impl<K> Filtered<K> {
    /// The wrapped kernel.
    pub fn inner(&self) -> &K {
        &self.inner
    }

    /// The filter.
    pub fn filter(&self) -> &Filter {
        &self.filter
    }

    fn index(&mut self, t: ThreadId) -> u64 {
        match self.filter.window_basis {
            WindowBasis::Delivered => {
                self.delivered += 1;
                self.delivered - 1
            }
            WindowBasis::PerThread => {
                let i = t.0 as usize;
                if i >= self.per_thread.len() {
                    self.per_thread.resize(i + 1, 0);
                }
                self.per_thread[i] += 1;
                self.per_thread[i] - 1
            }
        }
    }
}

impl<K: Kernel> Kernel for Filtered<K> {
    type Output = K::Output;

    fn process(&mut self, thread: ThreadId, ev: &Event) {
        if self.filter.window.is_some() {
            let i = self.index(thread);
            if !self.filter.window.as_ref().is_some_and(|w| w.contains(&i)) {
                return;
            }
        }
        let f = &self.filter;
        if let Some(ts) = &f.threads {
            if !ts.contains(&thread) {
                return;
            }
        }
        if f.pcs.is_empty() && f.addrs.is_empty() {
            return self.inner.process(thread, ev);
        }
        let (pc, addr, len) = match *ev {
            Event::Access { pc, addr, size, .. } | Event::Rmw { pc, addr, size, .. } => {
                (pc, addr, u64::from(size.max(1)))
            }
            Event::Range { pc, addr, len, .. } => (pc, addr, len),
            _ => return self.inner.process(thread, ev),
        };
        if !f.pc_ok(pc) {
            return;
        }
        if f.addrs.is_empty() {
            return self.inner.process(thread, ev);
        }
        let end = addr.0.saturating_add(len);
        if let Event::Range { kind, .. } = *ev {
            // clip to every data range the access overlaps
            let pieces: Vec<(u64, u64)> = f
                .addrs
                .iter()
                .filter_map(|r| {
                    let (s, e) = (addr.0.max(r.start.0), end.min(r.end.0));
                    (s < e).then_some((s, e))
                })
                .collect();
            for (s, e) in pieces {
                let clipped = Event::Range { pc, addr: Addr(s), len: e - s, kind };
                self.inner.process(thread, &clipped);
            }
        } else if f.addrs.iter().any(|r| addr.0 < r.end.0 && end > r.start.0) {
            self.inner.process(thread, ev);
        }
    }

    fn finish(self) -> K::Output {
        self.inner.finish()
    }
}

/// Thread, code and data filters keep an order-free kernel order-free. A window
/// filter does not (it counts events in delivery order): drive a windowed kernel
/// with [`crate::drive_merged`] or [`crate::drive_serial`], never by chunks.
impl<K: crate::ChunkKernel> crate::ChunkKernel for Filtered<K> {}

impl<K: ShardKernel> ShardKernel for Filtered<K> {
    fn fork(&self) -> Self {
        Filtered {
            filter: self.filter.clone(),
            inner: self.inner.fork(),
            per_thread: Vec::new(),
            delivered: 0,
        }
    }

    fn merge(&mut self, other: Self) {
        self.inner.merge(other.inner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counts::Counts;
    use crate::testutil::*;

    #[test]
    fn filters_threads_pcs_addrs_and_window() {
        let t0 = vec![
            rd(0x10, 0x1000, 8),
            wr(0x20, 0x2000, 8),
            rd(0x10, 0x1008, 8),
            range_rd(0x30, 0x0ff0, 0x40),
        ];
        let t1 = vec![rd(0x10, 0x1000, 8), wr(0x10, 0x1000, 8)];
        let r = trace(&[(0, t0), (1, t1)]);

        let c = crate::drive_serial(
            &r,
            Filter::new().threads([ThreadId(1)]).apply(Counts::default()),
            |_| {},
        )
        .unwrap();
        assert_eq!(c.by_pc[&Pc(0x10)].loads, 1);
        assert_eq!(c.by_pc[&Pc(0x10)].stores, 1);

        let c = crate::drive_serial(
            &r,
            Filter::new().pc_range(Pc(0x10)..Pc(0x11)).apply(Counts::default()),
            |_| {},
        )
        .unwrap();
        assert_eq!(c.by_pc.len(), 1);
        assert_eq!(c.by_pc[&Pc(0x10)].loads, 3);

        // the range 0x0ff0..0x1030 is clipped to 0x1000..0x1010
        let f = Filter::new().addr_range(Addr(0x1000)..Addr(0x1010));
        let c = crate::drive_serial(&r, f.apply(Counts::default()), |_| {}).unwrap();
        assert_eq!(c.by_pc[&Pc(0x10)].loads, 3);
        assert_eq!(c.by_pc[&Pc(0x30)].bytes_read, 0x10);
        assert!(!c.by_pc.contains_key(&Pc(0x20)));

        // events 1..3 of each thread: t0's store and second load, t1's store
        let f = Filter::new().window(1..3, WindowBasis::PerThread);
        let c = crate::drive_serial(&r, f.apply(Counts::default()), |_| {}).unwrap();
        assert_eq!(c.by_pc[&Pc(0x10)].loads, 1);
        assert_eq!(c.by_pc[&Pc(0x10)].stores, 1);
        assert_eq!(c.by_pc[&Pc(0x20)].stores, 1);
        // delivered order: thread 0's four events, then thread 1's
        let f = Filter::new().window(3..5, WindowBasis::Delivered);
        let c = crate::drive_serial(&r, f.apply(Counts::default()), |_| {}).unwrap();
        assert_eq!(c.by_pc[&Pc(0x30)].loads, 1);
        assert_eq!(c.by_pc[&Pc(0x10)].loads, 1);
    }
}
