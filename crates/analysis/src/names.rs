//! Naming raw addresses in results: the [`Namer`] the caller supplies.
//!
//! Kernels keep raw [`Pc`]s and [`Addr`]s. Rendering asks a `Namer` once per distinct
//! address that survives ranking, so a symboliser (DWARF, ELF symbols, heap blocks)
//! can sit behind this trait without the kernels knowing about it. [`NoNames`] prints
//! hexadecimal addresses.

use crate::Kernel;
use memlens_format::{Addr, Event, Pc, ThreadId};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// Where a code address comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CodeName {
    /// Function name (the address in hex when unknown).
    pub function: String,
    /// Source file (empty when unknown).
    pub file: String,
    /// 1-based source line (0 when unknown).
    pub line: u32,
}

impl CodeName {
    /// `file:line`, or the function when the line is unknown.
    pub fn location(&self) -> String {
        if self.file.is_empty() || self.line == 0 {
            self.function.clone()
        } else {
            format!("{}:{}", self.file, self.line)
        }
    }
}

/// What a data address holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DataName {
    /// The full name of the accessed element: `stats.v[3]`, `cfg.limits.max`.
    pub name: String,
    /// The variable it belongs to (the roll-up key): `stats`, `cfg`; for heap data
    /// the allocation site.
    pub variable: String,
}

/// Names code and data addresses for rendering.
pub trait Namer {
    /// Names a code address.
    fn code(&self, pc: Pc) -> CodeName;
    /// Names the function a call entered at `pc` (a function entry's code
    /// address): the out-of-line function, not a helper inlined at its first
    /// instructions, which [`Namer::code`] names. Call trees, flame charts and
    /// their exports name their frames by it.
    fn function(&self, pc: Pc) -> CodeName {
        self.code(pc)
    }
    /// Names a data address, if anything is known about it.
    fn data(&self, addr: Addr) -> Option<DataName>;
    /// A namer of each access where and when it happens, if this namer can make
    /// one: tables by variable then count per access, not per address.
    fn access_namer(&self) -> Option<Box<dyn AccessNamer + '_>> {
        None
    }
    /// Start of the function holding code address `pc`, if known: how function
    /// exits are matched to entries ([`memlens_format::CallStack`]).
    fn function_start(&self, _pc: Pc) -> Option<Pc> {
        None
    }
}

/// A [`Namer`] that knows nothing: code addresses print as hex function names, data
/// addresses stay unnamed (renderers then print them in hex).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoNames;

impl Namer for NoNames {
    fn code(&self, pc: Pc) -> CodeName {
        CodeName { function: format!("{pc}"), file: String::new(), line: 0 }
    }

    fn data(&self, _addr: Addr) -> Option<DataName> {
        None
    }
}

impl<N: Namer + ?Sized> Namer for &N {
    fn code(&self, pc: Pc) -> CodeName {
        (**self).code(pc)
    }

    fn function(&self, pc: Pc) -> CodeName {
        (**self).function(pc)
    }

    fn data(&self, addr: Addr) -> Option<DataName> {
        (**self).data(addr)
    }

    fn access_namer(&self) -> Option<Box<dyn AccessNamer + '_>> {
        (**self).access_namer()
    }

    fn function_start(&self, pc: Pc) -> Option<Pc> {
        (**self).function_start(pc)
    }
}

/// The variable name of an address: the namer's roll-up key, or the hex address.
pub(crate) fn variable_of(namer: &dyn Namer, addr: Addr) -> String {
    namer.data(addr).map_or_else(|| format!("{addr}"), |d| d.variable)
}

/// The element name of an address: the namer's full name, or the hex address.
pub(crate) fn name_of(namer: &dyn Namer, addr: Addr) -> String {
    namer.data(addr).map_or_else(|| format!("{addr}"), |d| d.name)
}

/// Names each access where and when it happens: its address, its thread and its
/// point in the thread's stream (a freed block keeps its name, each thread's
/// stack frames are its own). `report --by variable` counts with the same namer,
/// so every command that names data per access agrees with it.
pub trait AccessNamer {
    /// Follows every event of `thread`, in the thread's stream order; for an
    /// access returns the id of its variable.
    fn observe(&mut self, thread: ThreadId, ev: &Event) -> Option<u32>;
    /// Follows a loop's folded replays ([`Kernel::process_run`]) at once when
    /// every access of each body event has one variable: pushes each body event's
    /// id onto `ids` and returns true. False (nothing followed, `ids` as it was):
    /// the caller observes each event of the run instead.
    fn observe_run(
        &mut self,
        thread: ThreadId,
        body: &[Event],
        deltas: &[u64],
        reps: u64,
        ids: &mut Vec<u32>,
    ) -> bool {
        let _ = (thread, body, deltas, reps, ids);
        false
    }
    /// A hint that an access to `addr` comes soon: a namer may start loading
    /// what naming it reads (the default does nothing).
    fn prefetch(&self, addr: Addr) {
        let _ = addr;
    }
    /// The variable behind each id, by id.
    fn variables(&self) -> Vec<String>;
}

impl<N: AccessNamer + ?Sized> AccessNamer for Box<N> {
    fn observe(&mut self, thread: ThreadId, ev: &Event) -> Option<u32> {
        (**self).observe(thread, ev)
    }

    fn observe_run(
        &mut self,
        thread: ThreadId,
        body: &[Event],
        deltas: &[u64],
        reps: u64,
        ids: &mut Vec<u32>,
    ) -> bool {
        (**self).observe_run(thread, body, deltas, reps, ids)
    }

    fn prefetch(&self, addr: Addr) {
        (**self).prefetch(addr)
    }

    fn variables(&self) -> Vec<String> {
        (**self).variables()
    }
}

/// The variable of the access a kernel is processing, set by [`Named`] before
/// the kernel sees the event (`NONE` for events that are not accesses); for a
/// folded run ([`Kernel::process_run`]), the variable of each body event.
#[derive(Clone, Debug)]
pub struct CurrentVariable(Arc<(AtomicU32, Mutex<Vec<u32>>)>);

impl Default for CurrentVariable {
    fn default() -> Self {
        CurrentVariable(Arc::new((AtomicU32::new(CurrentVariable::NONE), Mutex::new(Vec::new()))))
    }
}

impl CurrentVariable {
    /// No variable: the event is not an access.
    pub const NONE: u32 = u32::MAX;

    /// The variable id of the access being processed.
    #[inline]
    pub fn get(&self) -> u32 {
        self.0 .0.load(Ordering::Relaxed)
    }

    /// The variable ids of the run being processed, one per body event (empty
    /// outside a run, or when the run's events are not named).
    pub fn run(&self) -> std::sync::MutexGuard<'_, Vec<u32>> {
        self.0 .1.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the run's variable ids (see [`CurrentVariable::run`]).
    pub fn set_run(&self, ids: &[u32]) {
        let mut r = self.run();
        r.clear();
        r.extend_from_slice(ids);
    }

    #[inline]
    fn set(&self, id: Option<u32>) {
        self.set_id(id.unwrap_or(Self::NONE));
    }

    /// Sets the variable id ([`CurrentVariable::NONE`]: no variable), for a
    /// kernel fed on another thread ([`crate::piped::Piped`]).
    #[inline]
    pub fn set_id(&self, id: u32) {
        self.0 .0.store(id, Ordering::Relaxed);
    }
}

/// Events ahead that [`Named`] announces ([`Kernel::prefetch`]).
const AHEAD: usize = 16;

/// Feeds an [`AccessNamer`] every event before the kernel `inner` (which may sit
/// behind a filter: the namer still follows every frame and allocation), and
/// publishes each access's variable through a [`CurrentVariable`] the kernel holds.
/// Finishes with the kernel's output and the variable names by id.
pub struct Named<N, K> {
    namer: N,
    current: CurrentVariable,
    inner: K,
    /// Scratch: a run's variable ids.
    ids: Vec<u32>,
}

impl<N: AccessNamer, K: Kernel> Named<N, K> {
    /// `inner` reads the variable of each access from a clone of `current`.
    pub fn new(namer: N, current: CurrentVariable, inner: K) -> Self {
        Named { namer, current, inner, ids: Vec::new() }
    }
}

impl<N: AccessNamer, K: Kernel> Kernel for Named<N, K> {
    type Output = (K::Output, Vec<String>);

    #[inline]
    fn process(&mut self, thread: ThreadId, ev: &Event) {
        let id = self.namer.observe(thread, ev);
        self.current.set(id);
        self.inner.process(thread, ev);
    }

    /// Each event in turn, told of the event a few on (a scattered access's
    /// table entries are then on their way when it is named).
    fn process_batch(&mut self, thread: ThreadId, evs: &[Event]) {
        for (i, ev) in evs.iter().enumerate() {
            if let Some(next) = evs.get(i + AHEAD) {
                self.prefetch(thread, next);
            }
            self.process(thread, ev);
        }
    }

    #[inline]
    fn prefetch(&self, thread: ThreadId, ev: &Event) {
        if let Event::Access { addr, .. } | Event::Rmw { addr, .. } = ev {
            self.namer.prefetch(*addr);
        }
        self.inner.prefetch(thread, ev);
    }

    fn wants_runs(&self) -> bool {
        self.inner.wants_runs()
    }

    fn process_run(&mut self, thread: ThreadId, body: &[Event], deltas: &[u64], reps: u64) {
        let mut ids = std::mem::take(&mut self.ids);
        ids.clear();
        if self.inner.named_runs() && self.namer.observe_run(thread, body, deltas, reps, &mut ids) {
            self.current.set_run(&ids);
            self.current.set(None);
            self.inner.process_run(thread, body, deltas, reps);
            self.current.set_run(&[]);
        } else {
            crate::expand_run(body, deltas, reps, |evs| {
                for ev in evs {
                    self.process(thread, ev);
                }
            });
        }
        self.ids = ids;
    }

    fn finish(self) -> Self::Output {
        (self.inner.finish(), self.namer.variables())
    }
}
