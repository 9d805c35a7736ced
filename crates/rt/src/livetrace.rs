//! The live `trace` probe: a full memlens trace of a program that runs without one
//! (`memlens live -- PROG`, or `MEMLENS_CONTROL=1`), started on demand. On `add ID
//! trace PAD|now PATH` the runtime creates PATH (a new file, never through a link),
//! starts a recording session (the writer threads, the exit and signal handlers)
//! and switches from inactive to recording:
//!
//! - `now`: every thread records from now until the probe is removed;
//! - a pad (`trace:FUNC`): the function's NOP pad becomes `call fentry`, as a timer
//!   probe's does, and a thread records only while inside the function's dynamic
//!   extent: [`enter`] at its entry, [`leave`] at its return (the return address is
//!   swapped for `fret`, `calls.rs`), a per-thread depth counter
//!   (`ThreadState::extent`) so nested and recursive calls pair up.
//!
//! `rm ID` (or the collector's connection closing) writes the trace out as at
//! exit (every thread's buffer, the final metadata and header), closes it, and
//! the runtime is inactive again; a program that exits first finishes the trace
//! itself. The trace ends with the end status "unknown" (the program ran on), and
//! `memlens info` finds it complete when no event was dropped. One trace probe at
//! a time; a later one starts a new session: `state::EPOCH` moves on, and each
//! thread of the ended session starts afresh (new stream, `ThreadStart`) at its
//! next event (`state::restart`), never writing into the new file what belonged
//! to the old one.
//!
//! Cost while no trace probe is in: none on the event fast paths (they were
//! inactive before); the general path of a thread's first event keeps it `T_NEW`
//! (one relaxed load more) so it can start recording later.

use crate::state::{self, ThreadState, EXTENT_MODE, INACTIVE, STATE};
use core::sync::atomic::{AtomicBool, Ordering::*};

/// A live trace is recording.
static ON: AtomicBool = AtomicBool::new(false);
/// A live trace was started in this process before.
static USED: AtomicBool = AtomicBool::new(false);

/// Whether a live trace is recording.
#[inline]
pub(crate) fn on() -> bool {
    ON.load(Relaxed)
}

/// Creates `path` and starts recording every thread (`extent`: only inside the
/// probed function, see the module docs).
pub(crate) fn start(path: &str, extent: bool) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err("the trace path must be absolute".into());
    }
    let _g = state::Guard::new();
    if STATE.load(SeqCst) != INACTIVE || crate::session::session().is_some() && !USED.load(SeqCst) {
        return Err(
            "the program is recorded already (memlens record): its trace has every event".into()
        );
    }
    let fd = crate::session::create_new(path).map_err(|e| e.to_string())?;
    if USED.swap(true, SeqCst) {
        // a session ran before: its threads start afresh at their next event
        crate::process::rearm();
        state::EPOCH.fetch_add(1, SeqCst);
    }
    let mut opts = crate::options::get().clone();
    opts.rec.output = Some(path.to_string());
    opts.trace_calls = None;
    opts.filter = None;
    opts.rec.roi = false;
    if opts.order == crate::order::ATOMIC {
        // stripes held across accesses need every thread recording from the start
        opts.order = crate::order::SYNC;
        opts.rec.order = memlens_contract::options::Order::Sync;
    }
    state::VALUES.store(opts.rec.values, SeqCst);
    state::REGISTERED_ONLY.store(opts.registered_only, SeqCst);
    crate::session::Session::start_on(&opts, fd, path.to_string(), crate::modules::scan());
    crate::order::configure(opts.order, opts.order_locks, opts.order_line, opts.cas_as_write);
    crate::process::install_handlers();
    EXTENT_MODE.store(extent, SeqCst);
    ON.store(true, SeqCst);
    STATE.store(state::ACTIVE, SeqCst);
    state::kick_all();
    Ok(())
}

/// Ends the live trace (the probe was removed): the file is complete when this
/// returns.
pub(crate) fn stop() {
    if !ON.load(SeqCst) {
        return;
    }
    crate::process::finish_live();
    ON.store(false, SeqCst);
    EXTENT_MODE.store(false, SeqCst);
    state::kick_all();
}

/// In a forked child: the trace is the parent's.
pub(crate) fn forget_in_child() {
    ON.store(false, SeqCst);
    EXTENT_MODE.store(false, SeqCst);
}

/// Events and bytes written to the trace so far, events dropped.
pub(crate) fn totals() -> [u64; 3] {
    crate::session::session().map_or([0; 3], |s| s.written())
}

/// The probed function was entered on this thread.
pub(crate) fn enter(st: &ThreadState) {
    let d = st.extent.get();
    st.extent.set(d + 1);
    if d == 0 {
        state::refresh_limit(st);
    }
}

/// The probed function returned (or its frame was left by `longjmp`).
pub(crate) fn leave(st: &ThreadState) {
    let d = st.extent.get().saturating_sub(1);
    st.extent.set(d);
    if d == 0 {
        state::refresh_limit(st);
    }
}
