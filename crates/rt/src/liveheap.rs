//! The live `heap` probe: bytes and blocks in use per allocation site (the caller
//! of malloc, new, ...), their peaks, and the allocation and free calls charged to
//! each site, while a collector asks for them
//! (`add <id> heap` on the control socket, see `liveprobe.rs`).
//!
//! Everything lives in fixed tables in static memory, updated with atomics only:
//! no lock and no allocation, so an allocator called from a signal handler, or
//! from inside the runtime, can account as well. A block→(site, size) table with
//! open addressing (tombstones on free, reused by later inserts; bounded probing)
//! lets a free be charged to the site that allocated the block. A block the table
//! has no room for, or a site beyond the site table, is counted in `dropped` (its
//! bytes in the catch-all site 1), never lost silently. Blocks allocated before the
//! probe was added are not in the table: their frees are ignored.
//!
//! Without a heap probe the allocation paths pay one relaxed load ([`on`]).

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};

/// Blocks tracked at once.
const BLOCKS: usize = 1 << 20;
/// Allocation sites tracked at once (then the catch-all row).
const SITES: usize = 4096;
/// Longest probe sequence in the block table.
const PROBE: usize = 128;

const EMPTY: u64 = 0;
const TOMB: u64 = 1;
/// The site key of the catch-all row (no code address is 1).
pub(crate) const OTHER: u64 = 1;

struct Block {
    addr: AtomicU64,
    /// Site index << 40 | size.
    val: AtomicU64,
}

// Blocks in use are `allocs - frees`: counting the calls costs no more atomics
// than counting the blocks did.
struct Site {
    pc: AtomicU64,
    bytes: AtomicU64,
    /// Allocations charged to the site (a realloc's new block included).
    allocs: AtomicU64,
    /// Frees of its blocks (a realloc moving one of them away included).
    frees: AtomicU64,
    peak: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const NO_BLOCK: Block = Block { addr: AtomicU64::new(EMPTY), val: AtomicU64::new(0) };
#[allow(clippy::declare_interior_mutable_const)]
const NO_SITE: Site = Site {
    pc: AtomicU64::new(0),
    bytes: AtomicU64::new(0),
    allocs: AtomicU64::new(0),
    frees: AtomicU64::new(0),
    peak: AtomicU64::new(0),
};

static TABLE: [Block; BLOCKS] = [NO_BLOCK; BLOCKS];
static SITE: [Site; SITES] = [NO_SITE; SITES];
/// A heap probe is active: the only thing the allocation paths read without one.
static ON: AtomicBool = AtomicBool::new(false);
/// The table was used since it was last cleared (a new probe clears it first).
static DIRTY: AtomicBool = AtomicBool::new(false);
static BYTES: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);

const SIZE_BITS: u32 = 40;
const SIZE_MASK: u64 = (1 << SIZE_BITS) - 1;

/// Whether allocations are to be accounted: one relaxed load.
#[inline(always)]
pub(crate) fn on() -> bool {
    ON.load(Relaxed)
}

fn home(key: u64, len: usize) -> usize {
    // Fibonacci hashing; blocks are 16-aligned, so the low bits say little.
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize % len
}

/// The site row of `pc`, created on first use; the catch-all row 0 when the table
/// is full.
fn site(pc: u64) -> usize {
    let h = home(pc, SITES - 1) + 1;
    for i in 0..SITES - 1 {
        let j = (h - 1 + i) % (SITES - 1) + 1;
        let s = &SITE[j];
        let cur = s.pc.load(Acquire);
        if cur == pc {
            return j;
        }
        if cur == 0 {
            match s.pc.compare_exchange(0, pc, AcqRel, Acquire) {
                Ok(_) => return j,
                Err(now) if now == pc => return j,
                Err(_) => {}
            }
        }
    }
    DROPPED.fetch_add(1, Relaxed);
    0
}

/// Raises `peak` to `now`: a plain load first, since peaks rarely move once a
/// program runs steadily (a `fetch_max` is a locked loop every time).
#[inline]
fn raise(peak: &AtomicU64, now: u64) {
    if now > peak.load(Relaxed) {
        peak.fetch_max(now, Relaxed);
    }
}

// The block count of all sites is summed when read: one shared counter fewer on
// every allocation.
fn charge(i: usize, size: u64) {
    let s = &SITE[i];
    raise(&s.peak, s.bytes.fetch_add(size, Relaxed) + size);
    s.allocs.fetch_add(1, Relaxed);
    raise(&PEAK, BYTES.fetch_add(size, Relaxed) + size);
}

fn uncharge(i: usize, size: u64) {
    SITE[i].bytes.fetch_sub(size, Relaxed);
    SITE[i].frees.fetch_add(1, Relaxed);
    BYTES.fetch_sub(size, Relaxed);
}

/// Inserts `addr` in the block table as site row `i`'s; false when there is no room.
fn insert(addr: u64, i: usize, size: u64) -> bool {
    let h = home(addr, BLOCKS);
    for k in 0..PROBE {
        let b = &TABLE[(h + k) % BLOCKS];
        let cur = b.addr.load(Relaxed);
        if (cur == EMPTY || cur == TOMB)
            && b.addr.compare_exchange(cur, addr, Acquire, Relaxed).is_ok()
        {
            // The block is not the program's until malloc returns: no free can
            // look for it before this store.
            b.val.store((i as u64) << SIZE_BITS | size.min(SIZE_MASK), Release);
            return true;
        }
    }
    false
}

/// Removes `addr`; its (site row, size) when it was in the table.
fn take(addr: u64) -> Option<(usize, u64)> {
    let h = home(addr, BLOCKS);
    for k in 0..PROBE {
        let b = &TABLE[(h + k) % BLOCKS];
        match b.addr.load(Acquire) {
            EMPTY => return None,
            a if a == addr => {
                let v = b.val.load(Acquire);
                if b.addr.compare_exchange(addr, TOMB, AcqRel, Relaxed).is_ok() {
                    return Some(((v >> SIZE_BITS) as usize, v & SIZE_MASK));
                }
                return None;
            }
            _ => {}
        }
    }
    None
}

fn put(addr: u64, i: usize, size: u64) {
    let size = size.min(SIZE_MASK);
    if insert(addr, i, size) {
        charge(i, size);
    } else {
        DROPPED.fetch_add(1, Relaxed);
    }
}

/// `size` bytes at `addr` were allocated by the call at `pc`.
#[cold]
#[inline(never)]
pub(crate) fn alloc(pc: u64, addr: u64, size: u64) {
    if addr > TOMB {
        put(addr, site(pc), size);
    }
}

/// The block at `addr` is about to be freed (before the allocator may hand the
/// address out again).
#[cold]
#[inline(never)]
pub(crate) fn free(addr: u64) {
    if let Some((i, size)) = take(addr) {
        uncharge(i, size);
    }
}

/// Before `realloc(old, ..)`: takes `old` out; give the result to [`realloc_done`].
#[cold]
#[inline(never)]
pub(crate) fn realloc_start(old: u64) -> Option<(usize, u64)> {
    if old <= TOMB {
        return None;
    }
    let t = take(old);
    if let Some((i, size)) = t {
        uncharge(i, size);
    }
    t
}

/// After `realloc(old, size)` returned `new` (the new block belongs to the
/// realloc's call site): a failed realloc puts the old block back.
#[cold]
#[inline(never)]
pub(crate) fn realloc_done(pc: u64, had: Option<(usize, u64)>, old: u64, new: u64, size: u64) {
    if new != 0 {
        alloc(pc, new, size);
    } else if size != 0 {
        if let Some((i, s)) = had {
            // nothing was freed nor allocated: undo the free's count
            if insert(old, i, s) {
                let site = &SITE[i];
                raise(&site.peak, site.bytes.fetch_add(s, Relaxed) + s);
                site.frees.fetch_sub(1, Relaxed);
                raise(&PEAK, BYTES.fetch_add(s, Relaxed) + s);
            } else {
                DROPPED.fetch_add(1, Relaxed);
            }
        }
    }
}

/// Starts accounting (a new probe: every count from zero).
pub(crate) fn start() {
    if DIRTY.swap(true, Relaxed) {
        for b in TABLE.iter() {
            b.addr.store(EMPTY, Relaxed);
        }
    }
    for s in SITE.iter() {
        s.pc.store(0, Relaxed);
        s.bytes.store(0, Relaxed);
        s.allocs.store(0, Relaxed);
        s.frees.store(0, Relaxed);
        s.peak.store(0, Relaxed);
    }
    SITE[0].pc.store(OTHER, Relaxed);
    for c in [&BYTES, &PEAK, &DROPPED] {
        c.store(0, Relaxed);
    }
    ON.store(true, Release);
}

/// Stops accounting (the probe was removed).
pub(crate) fn stop() {
    ON.store(false, Relaxed);
}

/// A site's (allocs, frees). The frees are read first: a block is freed after its
/// allocation was counted, so the difference (the blocks in use) is never negative.
fn calls(s: &Site) -> (u64, u64) {
    let frees = s.frees.load(Acquire);
    (s.allocs.load(Acquire).max(frees), frees)
}

/// Totals: (bytes, blocks, peak bytes, dropped).
pub(crate) fn totals() -> [u64; 4] {
    let blocks = SITE
        .iter()
        .map(|s| {
            let (a, f) = calls(s);
            a - f
        })
        .fold(0u64, u64::wrapping_add);
    [BYTES.load(Relaxed), blocks, PEAK.load(Relaxed), DROPPED.load(Relaxed)]
}

/// ` <pc hex> <bytes> <blocks> <peak> <allocs> <frees>` for every site seen (the
/// catch-all row only when used).
pub(crate) fn sites(out: &mut String) {
    use core::fmt::Write;
    for s in SITE.iter() {
        let pc = s.pc.load(Acquire);
        let (allocs, frees) = calls(s);
        if pc == 0 || (pc == OTHER && allocs == 0) {
            continue;
        }
        let (bytes, peak) = (s.bytes.load(Relaxed), s.peak.load(Relaxed));
        let _ = write!(out, " {pc:x} {bytes} {} {peak} {allocs} {frees}", allocs - frees);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_charged_to_their_site_and_freed_from_it() {
        start();
        alloc(0x1000, 0x10_0000, 100);
        alloc(0x1000, 0x10_0010, 50);
        alloc(0x2000, 0x10_0020, 7);
        free(0x10_0010);
        free(0x99_0000); // not in the table: ignored
        assert_eq!(totals(), [107, 2, 157, 0]);
        let had = realloc_start(0x10_0020);
        realloc_done(0x3000, had, 0x10_0020, 0x10_0040, 9);
        let mut s = String::new();
        sites(&mut s);
        assert_eq!(totals(), [109, 2, 157, 0]);
        assert!(s.contains(" 1000 100 1 150 2 1"), "{s}");
        assert!(s.contains(" 2000 0 0 7 1 1"), "{s}");
        assert!(s.contains(" 3000 9 1 9 1 0"), "{s}");
        // a failed realloc keeps the old block, and counts no call
        let had = realloc_start(0x10_0040);
        realloc_done(0x3000, had, 0x10_0040, 0, 1 << 50);
        assert_eq!(totals()[..2], [109, 2]);
        let mut s = String::new();
        sites(&mut s);
        assert!(s.contains(" 3000 9 1 9 1 0"), "{s}");
        free(0x10_0040);
        free(0x10_0000);
        assert_eq!(totals()[..2], [0, 0]);
        stop();
        assert!(!on());
    }
}
