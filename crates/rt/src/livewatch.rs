//! The live `watch` probe: loads and stores that touch one variable's bytes
//! (`add <id> watch <file address hex> <size>` on the control socket, see
//! `liveprobe.rs`), counted per thread and per code address, and which thread and
//! line stored last. The variable's current contents (the value the last store
//! left) are read when the collector asks.
//!
//! Counted in a fixed table in static memory with atomics only (no lock, no
//! allocation): a row per (thread, code address). A row is claimed with a CAS; a
//! lookup skips a row being claimed rather than wait for it (a signal handler may
//! have interrupted the claim), which may leave two rows for one key, which the
//! collector sums. Hits beyond the table are counted in `dropped`.
//!
//! Without a watch probe the access callbacks pay one relaxed load ([`on`]).

use core::cell::Cell;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering::*};
use memlens_format::codec::tag;

/// (thread, code address) rows.
const ROWS: usize = 1024;

const EMPTY: u8 = 0;
const CLAIMING: u8 = 1;
const READY: u8 = 2;

struct Row {
    state: AtomicU8,
    tid: AtomicU32,
    pc: AtomicU64,
    loads: AtomicU64,
    stores: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const NO_ROW: Row = Row {
    state: AtomicU8::new(EMPTY),
    tid: AtomicU32::new(0),
    pc: AtomicU64::new(0),
    loads: AtomicU64::new(0),
    stores: AtomicU64::new(0),
};

static TABLE: [Row; ROWS] = [NO_ROW; ROWS];
static ON: AtomicBool = AtomicBool::new(false);
/// The watched bytes: `LO..HI` (run-time addresses).
static LO: AtomicU64 = AtomicU64::new(0);
static HI: AtomicU64 = AtomicU64::new(0);
/// The row of the last store, plus one (0: none yet).
static LAST: AtomicU64 = AtomicU64::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's kernel id, fetched on its first watched access.
    static TID: Cell<u32> = const { Cell::new(0) };
}

/// Whether accesses are to be checked: one relaxed load.
#[inline(always)]
pub(crate) fn on() -> bool {
    ON.load(Relaxed)
}

/// An access of `1 << (tag & 7)` bytes at `addr` by the code returning to `pc`.
#[inline]
pub(crate) fn access(tag: u8, addr: usize, pc: usize) {
    range(tag & tag::ACCESS_WRITE != 0, addr, 1 << (tag & 7), pc);
}

/// `len` bytes at `addr` read or written (`write`) by the code returning to `pc`.
#[inline]
pub(crate) fn range(write: bool, addr: usize, len: usize, pc: usize) {
    let (a, n) = (addr as u64, len as u64);
    if a < HI.load(Relaxed) && a.wrapping_add(n) > LO.load(Relaxed) && n != 0 {
        hit(write, pc as u64);
    }
}

fn tid() -> u32 {
    TID.try_with(|t| {
        if t.get() == 0 {
            t.set(crate::sys::gettid());
        }
        t.get()
    })
    .unwrap_or_else(|_| crate::sys::gettid())
}

#[cold]
#[inline(never)]
fn hit(write: bool, pc: u64) {
    let tid = tid();
    let key = pc ^ u64::from(tid).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let h = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize % ROWS;
    for k in 0..ROWS {
        let i = (h + k) % ROWS;
        let r = &TABLE[i];
        let mut st = r.state.load(Acquire);
        if st == EMPTY && r.state.compare_exchange(EMPTY, CLAIMING, Acquire, Acquire).is_ok() {
            r.tid.store(tid, Relaxed);
            r.pc.store(pc, Relaxed);
            r.state.store(READY, Release);
            st = READY;
        } else if st == EMPTY {
            st = r.state.load(Acquire);
        }
        if st == READY && r.pc.load(Relaxed) == pc && r.tid.load(Relaxed) == tid {
            if write {
                r.stores.fetch_add(1, Relaxed);
                LAST.store(i as u64 + 1, Relaxed);
            } else {
                r.loads.fetch_add(1, Relaxed);
            }
            return;
        }
    }
    DROPPED.fetch_add(1, Relaxed);
}

/// Starts watching `size` bytes at `addr` (a new probe: every count from zero).
pub(crate) fn start(addr: u64, size: u64) {
    for r in TABLE.iter() {
        r.state.store(EMPTY, Relaxed);
        r.loads.store(0, Relaxed);
        r.stores.store(0, Relaxed);
    }
    LAST.store(0, Relaxed);
    DROPPED.store(0, Relaxed);
    LO.store(addr, Relaxed);
    HI.store(addr + size, Relaxed);
    ON.store(true, Release);
    crate::loops::refresh();
}

/// Stops watching (the probe was removed).
pub(crate) fn stop() {
    ON.store(false, Relaxed);
    HI.store(0, Relaxed);
    crate::loops::refresh();
}

/// Totals: (loads, stores, dropped, the watched bytes now as a little-endian
/// integer when they are at most 8).
pub(crate) fn totals() -> [u64; 4] {
    let (mut loads, mut stores) = (0u64, 0u64);
    for r in TABLE.iter().filter(|r| r.state.load(Acquire) == READY) {
        loads += r.loads.load(Relaxed);
        stores += r.stores.load(Relaxed);
    }
    let (lo, hi) = (LO.load(Relaxed), HI.load(Relaxed));
    let mut value = 0u64;
    if hi > lo && hi - lo <= 8 {
        for i in (lo..hi).rev() {
            // SAFETY: the collector's address is a variable of the program's, mapped
            // for its whole run (the runtime checked it at `add`).
            value = value << 8 | u64::from(unsafe { (i as *const u8).read_volatile() });
        }
    }
    [loads, stores, DROPPED.load(Relaxed), value]
}

/// ` <last tid> <last pc hex>` (0 0: no store yet), then ` <tid> <pc hex> <loads>
/// <stores>` per row.
pub(crate) fn rows(out: &mut String) {
    use core::fmt::Write;
    let last = LAST.load(Relaxed);
    match last.checked_sub(1).map(|i| &TABLE[i as usize]) {
        Some(r) => {
            let _ = write!(out, " {} {:x}", r.tid.load(Relaxed), r.pc.load(Relaxed));
        }
        None => out.push_str(" 0 0"),
    }
    for r in TABLE.iter().filter(|r| r.state.load(Acquire) == READY) {
        let _ = write!(
            out,
            " {} {:x} {} {}",
            r.tid.load(Relaxed),
            r.pc.load(Relaxed),
            r.loads.load(Relaxed),
            r.stores.load(Relaxed)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlens_format::codec::access_tag;
    use memlens_format::AccessKind::{Read, Write};

    #[test]
    fn accesses_of_the_watched_bytes_are_counted_per_site() {
        #[repr(align(8))]
        struct V([u8; 16]);
        let v = V([0; 16]);
        let at = v.0.as_ptr() as usize;
        start(at as u64 + 4, 4);
        access(access_tag(Write, false, 2), at + 4, 0x100);
        access(access_tag(Write, false, 2), at + 4, 0x100);
        access(access_tag(Read, false, 3), at, 0x200); // 8 bytes from 0: overlaps
        access(access_tag(Read, false, 2), at, 0x200); // 0..4: does not
        access(access_tag(Write, false, 2), at + 8, 0x300); // 8..12: does not
        range(true, at + 6, 10, 0x400);
        let t = totals();
        assert_eq!(t[..3], [1, 3, 0]);
        let mut s = String::new();
        rows(&mut s);
        assert!(s.starts_with(&format!(" {} 400 ", tid())), "{s}");
        assert!(s.contains(" 100 0 2") && s.contains(" 200 1 0"), "{s}");
        stop();
        access(access_tag(Write, false, 2), at + 4, 0x100);
        assert_eq!(totals()[1], 3);
    }
}
