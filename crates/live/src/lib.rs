//! Live probes on a running process, with nothing injected into it: uprobes and
//! uretprobes created through `perf_event_open` (the kernel's `uprobe` PMU), placed
//! through the binary's DWARF (crates/symbols), and grouped software/hardware
//! counters.
//!
//! - [`ProbeModule`] is the extension point: a module answers a query (name,
//!   description, requirements), checks them in `init`, names its actions and data
//!   columns, and creates [`Probe`]s that aggregate their own values. Built in:
//!   `count`, `timer`, `perf` and, for memlens-built targets, `heap`, `watch` and
//!   `trace`
//!   ([`builtin_modules`]). On a memlens-built target
//!   started with a control socket, `count` and `timer` on functions use the
//!   function's NOP pad instead of a uprobe ([`inproc`]).
//! - [`Target`] is the process (attached by PID, or launched and held before its first
//!   instruction with [`launch_held`]); [`Binary`] resolves locations.
//! - [`Collector`] holds the probes of one target, answers the control socket
//!   ([`sock`]: mode 0600 in a 0700 directory, peer uid checked) and writes JSON
//!   snapshots; [`client`] is the CLI's side.

#![deny(missing_docs)]

pub mod client;
mod collector;
mod count;
mod dylib;
mod error;
mod heap;
mod heapseries;
pub mod inproc;
mod locate;
mod module;
mod perf;
mod perfmod;
mod regex;
mod sampler;
pub mod sock;
mod target;
mod timer;
mod trace;
mod watch;

pub use collector::{Collector, Handle, Options};
pub use dylib::{load_module, ABI_VERSION};
pub use error::{Error, Result};
pub use locate::{Binary, Point, Variable};
pub use module::{
    builtin_modules, Action, Column, ColumnKind, ModuleInfo, Modules, Probe, ProbeModule, Table,
    TableRow,
};
pub use perf::{hardware_pmu, privilege, uprobe_type};

/// Kernel probes can be placed here (uprobe PMU, root or CAP_PERFMON); the error
/// says what is missing. A target without a memlens runtime needs them.
pub fn require_uprobes() -> Result<()> {
    module::uprobe_requirements().map_err(Error::Unavailable)
}
pub use target::{find_program, launch_held, Held, State, Target};
