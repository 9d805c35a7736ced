//! The kernels by name: one table that `memlens analyze`, `analyze --follow` and
//! anything else that runs a kernel chosen at run time go through (issue 23: one
//! answer per question). An entry says what the kernel is, which options it reads,
//! how to build it and which drivers may feed it; [`KernelInfo::run`] and
//! [`KernelInfo::follow`] pick the driver the same way for every caller.
//!
//! Kernels are erased behind [`DynKernel`] (output: a boxed [`Report`], rendered
//! through [`Render`] to text or JSON). The filter and the ROI gate are wrapped
//! around the typed kernel before erasing it, so the per-event work stays static;
//! the erased call happens once per batch.

use crate::cachesim::{CacheConfig, CacheReport, CacheSim};
use crate::counts::Counts;
use crate::false_sharing::{FalseSharing, FalseSharingConfig, FalseSharingReport};
use crate::heap::{Heap, HeapConfig, HeapReport};
use crate::layout::{Layout, LayoutConfig, LayoutReport};
use crate::reuse::{Reuse, ReuseConfig, ReuseReport};
use crate::sharing::{Sharing, SharingReport};
use crate::working_set::{WorkingSet, WorkingSetConfig, WorkingSetReport};
use crate::{
    drive_chunks, drive_counts, drive_merged, drive_parallel, ChunkKernel, CurrentVariable, Error,
    Filter, Kernel, Live, Named, Namer, Render, ShardKernel,
};
use memlens_format::{Event, ThreadId, TraceReader};
use std::any::Any;
use std::collections::HashMap;
use std::path::Path;

/// How a kernel can be fed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    /// One thread, every event in the global merged order ([`drive_merged`]).
    Serial,
    /// Chunks in any order on every core ([`drive_chunks`]): order-free kernels.
    Chunks,
    /// One shard per thread stream, merged ([`drive_parallel`]).
    Shards,
    /// A trace still being written ([`Live`]).
    Follow,
}

/// An option a kernel reads from [`KernelOptions`] (callers compute the expensive
/// ones, e.g. a cache config read from a file, only for the kernels that read them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelOption {
    /// [`KernelOptions::line`].
    Line,
    /// [`KernelOptions::interval`].
    Interval,
    /// [`KernelOptions::cache`].
    Cache,
    /// [`KernelOptions::alloc_fns`].
    AllocFn,
}

/// The options any registered kernel reads.
#[derive(Clone, Debug)]
pub struct KernelOptions {
    /// Cache line size (false-sharing, reuse, working-set).
    pub line: u64,
    /// Accesses per working-set interval.
    pub interval: u64,
    /// The simulated cache hierarchy.
    pub cache: CacheConfig,
    /// Allocation wrappers whose callers are the allocation sites (heap, layout).
    pub alloc_fns: crate::heap::AllocFns,
}

impl Default for KernelOptions {
    fn default() -> Self {
        KernelOptions {
            line: 64,
            interval: 100_000,
            cache: CacheConfig::default(),
            alloc_fns: Default::default(),
        }
    }
}

/// What runs around the kernel: the filter outside, the ROI gate inside.
#[derive(Clone, Debug, Default)]
pub struct Pipeline {
    /// Thread, code, data and window filter.
    pub filter: Filter,
    /// Only accesses between `memlens_roi_begin` and `memlens_roi_end`.
    pub roi: bool,
}

impl Pipeline {
    /// Whether the result may depend on event order (ROI, event window).
    fn ordered(&self) -> bool {
        self.roi || self.filter.window.is_some()
    }
}

/// A kernel's result: renders to a [`crate::Table`] (text or JSON).
pub trait Report: Render + Any + Send {
    /// Names the variable ids an access namer gave (kernels that count by
    /// variable; others ignore it).
    fn set_variables(&mut self, _names: Vec<String>) {}
    /// For callers that need the typed report (e.g. a cache annotation to write).
    fn as_any(&self) -> &dyn Any;
}

macro_rules! report {
    ($($t:ty),*) => {$(
        impl Report for $t {
            fn as_any(&self) -> &dyn Any {
                self
            }
        }
    )*};
}
report!(Counts, FalseSharingReport, ReuseReport, WorkingSetReport, HeapReport, LayoutReport);

impl Report for SharingReport {
    fn set_variables(&mut self, names: Vec<String>) {
        SharingReport::set_variables(self, names)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Report for CacheReport {
    fn set_variables(&mut self, names: Vec<String>) {
        CacheReport::set_variables(self, names)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Keeps only accesses between `memlens_roi_begin` and `memlens_roi_end` of
/// their thread; other events pass.
#[derive(Clone)]
pub struct Roi<K> {
    inner: K,
    inside: HashMap<ThreadId, bool>,
}

impl<K: Kernel> Roi<K> {
    /// `inner` behind the gate.
    pub fn new(inner: K) -> Roi<K> {
        Roi { inner, inside: HashMap::new() }
    }
}

impl<K: Kernel> Kernel for Roi<K> {
    type Output = K::Output;

    fn process(&mut self, t: ThreadId, ev: &Event) {
        if let Event::Roi(b) = ev {
            self.inside.insert(t, *b);
        }
        if ev.is_access() && !self.inside.get(&t).copied().unwrap_or(false) {
            return;
        }
        self.inner.process(t, ev);
    }

    fn finish(self) -> K::Output {
        self.inner.finish()
    }
}

/// The object-safe face of a typed kernel pipeline.
trait Erased: Send {
    fn process(&mut self, t: ThreadId, ev: &Event);
    fn process_batch(&mut self, t: ThreadId, evs: &[Event]);
    fn finish(self: Box<Self>) -> Box<dyn Report>;
    fn clone_box(&self) -> Box<dyn Erased>;
    /// A fresh shard (`None`: the kernel cannot run in shards).
    fn fork(&self) -> Option<Box<dyn Erased>>;
    /// Folds a shard made by `fork` into this one.
    fn merge(&mut self, other: Box<dyn Erased>);
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

/// A kernel that only runs in one piece.
#[derive(Clone)]
struct Whole<K>(K);

/// A kernel that can run in shards.
#[derive(Clone)]
struct Sharded<K>(K);

macro_rules! erased_common {
    () => {
        fn process(&mut self, t: ThreadId, ev: &Event) {
            self.0.process(t, ev)
        }
        fn process_batch(&mut self, t: ThreadId, evs: &[Event]) {
            self.0.process_batch(t, evs)
        }
        fn finish(self: Box<Self>) -> Box<dyn Report> {
            Box::new(self.0.finish())
        }
        fn clone_box(&self) -> Box<dyn Erased> {
            Box::new(self.clone())
        }
        fn into_any(self: Box<Self>) -> Box<dyn Any> {
            self
        }
    };
}

impl<K> Erased for Whole<K>
where
    K: Kernel + Clone + Send + 'static,
    K::Output: Report,
{
    erased_common!();
    fn fork(&self) -> Option<Box<dyn Erased>> {
        None
    }
    fn merge(&mut self, _: Box<dyn Erased>) {
        unreachable!("a whole kernel never forks")
    }
}

impl<K> Erased for Sharded<K>
where
    K: ShardKernel + Clone + 'static,
    K::Output: Report,
{
    erased_common!();
    fn fork(&self) -> Option<Box<dyn Erased>> {
        Some(Box::new(Sharded(self.0.fork())))
    }
    fn merge(&mut self, other: Box<dyn Erased>) {
        let other = other.into_any().downcast::<Self>().expect("shards of one kernel");
        self.0.merge(other.0);
    }
}

/// A registered kernel with its filter and ROI gate, type-erased.
pub struct DynKernel(Box<dyn Erased>);

impl Clone for DynKernel {
    fn clone(&self) -> Self {
        DynKernel(self.0.clone_box())
    }
}

/// The kernel over a boxed [`Erased`] (one virtual call per batch).
macro_rules! erased_kernel {
    ($($t:ty),*) => {$(
        impl Kernel for $t {
            type Output = Box<dyn Report>;

            fn process(&mut self, t: ThreadId, ev: &Event) {
                self.0.process(t, ev)
            }

            fn process_batch(&mut self, t: ThreadId, evs: &[Event]) {
                self.0.process_batch(t, evs)
            }

            fn finish(self) -> Box<dyn Report> {
                self.0.finish()
            }
        }
    )*};
}
erased_kernel!(DynKernel, Shards);

/// A [`DynKernel`] known to fork: built only for entries that declare
/// [`Driver::Chunks`] or [`Driver::Shards`], without ROI gate.
struct Shards(Box<dyn Erased>);

impl Shards {
    fn new(k: DynKernel) -> Shards {
        Shards(k.0)
    }
}

impl ShardKernel for Shards {
    fn fork(&self) -> Self {
        Shards(self.0.fork().expect("built from a sharded entry"))
    }

    fn merge(&mut self, other: Self) {
        self.0.merge(other.0)
    }
}

// Only built for entries that declare `Driver::Chunks` (checked in `KernelInfo::run`).
impl ChunkKernel for Shards {}

/// `k` inside the pipeline, erased; the ROI gate makes it a whole kernel.
fn whole<K>(k: K, p: Pipeline) -> DynKernel
where
    K: Kernel + Clone + Send + 'static,
    K::Output: Report,
{
    if p.roi {
        DynKernel(Box::new(Whole(p.filter.apply(Roi::new(k)))))
    } else {
        DynKernel(Box::new(Whole(p.filter.apply(k))))
    }
}

/// Like [`whole`], keeping the shard operations when there is no ROI gate.
fn sharded<K>(k: K, p: Pipeline) -> DynKernel
where
    K: ShardKernel + Clone + 'static,
    K::Output: Report,
{
    if p.roi {
        whole(k, p)
    } else {
        DynKernel(Box::new(Sharded(p.filter.apply(k))))
    }
}

type Build = fn(&KernelOptions, Option<CurrentVariable>, Pipeline) -> Result<DynKernel, Error>;
/// A whole-trace pass on `threads` workers.
type Scan = fn(&TraceReader, usize) -> Result<Box<dyn Report>, Error>;

/// One registered kernel.
pub struct KernelInfo {
    /// The name `memlens analyze` takes.
    pub name: &'static str,
    /// One line about what it reports.
    pub about: &'static str,
    /// The drivers that may feed it.
    pub drivers: &'static [Driver],
    /// The options it reads.
    pub options: &'static [KernelOption],
    /// Counts by the variable of each access: offline runs feed an access namer in
    /// front of it (live runs name data by address).
    pub names_accesses: bool,
    /// A followed run's final result is the offline run on the finished trace (its
    /// access namer needs the whole trace's heap index).
    pub final_offline: bool,
    build: Build,
    /// A faster equivalent of the chunk driver when nothing is filtered.
    scan: Option<Scan>,
}

/// Every driver: order-free kernels that can also run in shards.
const ANY_ORDER: &[Driver] = &[Driver::Serial, Driver::Chunks, Driver::Shards, Driver::Follow];

/// An entry for a kernel that runs in the merged order, offline or followed.
const fn merged(
    name: &'static str,
    about: &'static str,
    options: &'static [KernelOption],
    build: Build,
) -> KernelInfo {
    KernelInfo {
        name,
        about,
        drivers: &[Driver::Serial, Driver::Follow],
        options,
        names_accesses: false,
        final_offline: false,
        build,
        scan: None,
    }
}

/// Every kernel, in the order `memlens analyze --help` lists them.
pub static KERNELS: &[KernelInfo] = &[
    KernelInfo {
        drivers: ANY_ORDER,
        // the address-free scan: several times faster than decoding events
        scan: Some(|r, threads| Ok(Box::new(drive_counts(r, threads, |_| {})?))),
        ..merged(
            "counts",
            "loads, stores and bytes per source line and thread, allocations per site",
            &[],
            |_, _, p| Ok(sharded(Counts::default(), p)),
        )
    },
    KernelInfo {
        drivers: ANY_ORDER,
        names_accesses: true,
        final_offline: true,
        ..merged(
            "sharing",
            "data touched by several threads, per variable and address",
            &[],
            |_, cur, p| Ok(sharded(cur.map_or_else(Sharing::default, Sharing::with_variables), p)),
        )
    },
    merged(
        "false-sharing",
        "cache lines written by one thread and accessed by another at disjoint bytes",
        &[KernelOption::Line],
        |o, _, p| {
            let cfg = FalseSharingConfig { line: o.line, ..Default::default() };
            Ok(whole(FalseSharing::new(cfg)?, p))
        },
    ),
    KernelInfo {
        names_accesses: true,
        ..merged(
            "cachesim",
            "cache hierarchy simulation: hits and misses per level, line and variable",
            &[KernelOption::Cache],
            |o, cur, p| {
                let sim = CacheSim::new(o.cache.clone())?;
                Ok(whole(if let Some(c) = cur { sim.with_variables(c) } else { sim }, p))
            },
        )
    },
    merged(
        "reuse",
        "reuse distance and reuse time histograms",
        &[KernelOption::Line],
        |o, _, p| {
            let cfg = ReuseConfig { line: o.line, ..Default::default() };
            Ok(whole(Reuse::new(cfg)?, p))
        },
    ),
    merged(
        "working-set",
        "distinct cache lines and pages touched per interval",
        &[KernelOption::Line, KernelOption::Interval],
        |o, _, p| {
            let cfg = WorkingSetConfig { interval: o.interval, line: o.line, ..Default::default() };
            Ok(whole(WorkingSet::new(cfg)?, p))
        },
    ),
    merged(
        "heap",
        "allocation-site profile: bytes, lifetimes, reads and writes (like DHAT)",
        &[KernelOption::AllocFn],
        |o, _, p| {
            let cfg = HeapConfig { alloc_fns: o.alloc_fns.clone(), ..HeapConfig::default() };
            Ok(whole(Heap::new(cfg), p))
        },
    ),
    merged(
        "layout",
        "field hotness and co-access per allocation site, with layout advice",
        &[KernelOption::AllocFn],
        |o, _, p| {
            let cfg = LayoutConfig { alloc_fns: o.alloc_fns.clone(), ..LayoutConfig::default() };
            Ok(whole(Layout::new(cfg), p))
        },
    ),
];

/// The registered kernel called `name`; the error lists them all.
pub fn kernel(name: &str) -> Result<&'static KernelInfo, Error> {
    KERNELS.iter().find(|k| k.name == name).ok_or_else(|| {
        Error::Config(format!("unknown kernel `{name}`; choose one of: {}", names().join(", ")))
    })
}

/// The registered kernel names.
pub fn names() -> Vec<&'static str> {
    KERNELS.iter().map(|k| k.name).collect()
}

impl KernelInfo {
    /// Whether `d` may feed this kernel.
    pub fn supports(&self, d: Driver) -> bool {
        self.drivers.contains(&d)
    }

    /// Whether it reads option `o`.
    pub fn reads(&self, o: KernelOption) -> bool {
        self.options.contains(&o)
    }

    /// The kernel inside `p`, erased (`current`: the variable an access namer
    /// publishes, for kernels that name accesses).
    pub fn build(
        &self,
        opts: &KernelOptions,
        current: Option<CurrentVariable>,
        p: Pipeline,
    ) -> Result<DynKernel, Error> {
        (self.build)(opts, current, p)
    }

    /// Which driver [`KernelInfo::run`] uses: chunks on every core for order-free
    /// kernels without ROI or event window (and without an access namer), the merged
    /// order otherwise.
    pub fn offline_driver(&self, p: &Pipeline) -> Driver {
        if self.supports(Driver::Chunks) && !self.names_accesses && !p.ordered() {
            Driver::Chunks
        } else {
            Driver::Serial
        }
    }

    /// Runs the kernel over the trace on disk. `namer` names each access for kernels
    /// that count by variable; `threads` bounds the chunk driver; `progress` gets the
    /// events processed so far.
    pub fn run(
        &self,
        r: &TraceReader,
        opts: &KernelOptions,
        p: Pipeline,
        namer: &dyn Namer,
        threads: usize,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Box<dyn Report>, Error> {
        if let Some(scan) = self.scan.filter(|_| !p.roi && p.filter.is_empty()) {
            return scan(r, threads);
        }
        if self.offline_driver(&p) == Driver::Chunks {
            let k = Shards::new(self.build(opts, None, p)?);
            return drive_chunks(r, k, threads, progress);
        }
        if self.names_accesses {
            let cur = CurrentVariable::default();
            let k = self.build(opts, Some(cur.clone()), p)?;
            return match namer.access_namer() {
                Some(n) => {
                    let (mut rep, names) = drive_merged(r, Named::new(n, cur, k), progress)?;
                    rep.set_variables(names);
                    Ok(rep)
                }
                None => drive_merged(r, k, progress),
            };
        }
        drive_merged(r, self.build(opts, None, p)?, progress)
    }

    /// Runs the kernel with `driver` alone (no access namer, no fast scan): for
    /// checking that the drivers an entry declares agree.
    pub fn run_with(
        &self,
        driver: Driver,
        path: &Path,
        opts: &KernelOptions,
        p: Pipeline,
        threads: usize,
    ) -> Result<Box<dyn Report>, Error> {
        let r = &TraceReader::open(path)?;
        let unsupported =
            |what: &str| Error::Config(format!("kernel {} cannot run {what}", self.name));
        if !self.supports(driver) {
            return Err(unsupported(&format!("with driver {driver:?}")));
        }
        let k = self.build(opts, None, p.clone())?;
        match driver {
            Driver::Serial => drive_merged(r, k, |_| {}),
            Driver::Chunks | Driver::Shards if p.roi => Err(unsupported("in shards with --roi")),
            Driver::Chunks => drive_chunks(r, Shards::new(k), threads, |_| {}),
            Driver::Shards => drive_parallel(r, Shards::new(k), threads),
            Driver::Follow => {
                // one poll reads a finished trace to its end
                let mut live = self.follow(path, opts, p)?;
                if live.poll()? != crate::TailState::Complete {
                    let what = format!("{}: the trace is not finished", path.display());
                    return Err(Error::Config(what));
                }
                Ok(live.finish())
            }
        }
    }

    /// The kernel over the trace at `path`, which a recording may still be writing:
    /// chunks as they land for order-free kernels (as [`KernelInfo::run`] would),
    /// the merged order otherwise. Live runs name data by address (no access namer).
    pub fn follow(
        &self,
        path: &Path,
        opts: &KernelOptions,
        p: Pipeline,
    ) -> Result<Live<DynKernel>, Error> {
        let chunks = self.offline_driver(&p) == Driver::Chunks;
        let k = self.build(opts, None, p)?;
        // chunk order only for entries that declare `Driver::Chunks` (offline_driver)
        Ok(if chunks { Live::chunks_unchecked(path, k) } else { Live::merged(path, k) })
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
