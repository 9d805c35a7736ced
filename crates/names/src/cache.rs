//! The label cache in front of the one [`Resolver`]: the parallel pass's workers
//! and the serial [`Attributor`](crate::Attributor) both name through it.
//!
//! A small direct-mapped cache maps (pc, address) to a label while the answer
//! provably stays the same (globals always; stack names until a frame of the
//! thread changes; heap names over the event range where the block lookup cannot
//! change), so repeated accesses cost one probe. By whole variables a heap address
//! where every block ever there has one name (`heap::Regions`) is named without a
//! block search, and the answer is kept for the rest of its page.

use crate::resolve::{Access, Resolver, Shared, ALWAYS, THREAD};
use memlens_format::{Addr, ThreadId};

/// What the thread's answers depend on, as numbers that change whenever it does:
/// `thread` when its stack, thread pointer or existence (or, for mapping names,
/// any thread's) may have changed, `frame` when in addition a frame was entered
/// or left. Every change takes a number never used before by the cache's owner,
/// so entries made for another thread or an older state never match.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Epochs {
    pub(crate) thread: u64,
    pub(crate) frame: u64,
}

impl Epochs {
    /// The epoch an answer with dependency `dep` holds for (0: always).
    #[inline(always)]
    fn of(self, dep: u8) -> u64 {
        match dep {
            ALWAYS => 0,
            THREAD => self.thread,
            _ => self.frame,
        }
    }
}

#[derive(Clone, Copy)]
struct Entry {
    pc: u64,
    addr: u64,
    label: u32,
    dep: u8,
    epoch: u64,
    /// Event indices over which the answer holds.
    from: u64,
    to: u64,
}

const EMPTY: Entry =
    Entry { pc: u64::MAX, addr: u64::MAX, label: u32::MAX, dep: 0, epoch: 0, from: 0, to: 0 };

/// 4096 entries (192 KiB): the cache stays in L2; at 16384 a third of naming sqlite
/// was the miss on the probe.
const CACHE_BITS: u32 = 12;

/// A heap range of one page (see `heap::Regions`) whose accesses all get `label`
/// while the thread epoch is `epoch`: a strided loop over a large block costs
/// one miss per page instead of one per address.
#[derive(Clone, Copy)]
struct PageEntry {
    page: u64,
    lo: u64,
    hi: u64,
    epoch: u64,
    label: u32,
}

/// 4096 pages (160 KiB): a column walk over a matrix touches a new page every
/// access (matmul 700: 957 pages a matrix); at 256 every access missed and was
/// resolved in full, two thirds of naming it.
const PAGE_BITS: u32 = 12;

/// The cache (see the module docs). The resolver it fronts must compute spans
/// (`Resolver::new(.., true)`).
pub(crate) struct LabelCache {
    cache: Vec<Entry>,
    pages: Vec<PageEntry>,
}

impl LabelCache {
    pub(crate) fn new() -> LabelCache {
        LabelCache {
            cache: vec![EMPTY; 1 << CACHE_BITS],
            pages: vec![
                PageEntry { page: u64::MAX, lo: 0, hi: 0, epoch: 0, label: 0 };
                1 << PAGE_BITS
            ],
        }
    }

    /// The label of access `a` in state `ep`: one probe when cached and still
    /// valid, else `res.resolve` (`threads` as it takes them).
    #[inline(always)]
    pub(crate) fn label<I: IntoIterator<Item = (ThreadId, Option<(u64, u64)>)>>(
        &mut self,
        res: &mut Resolver,
        sh: &Shared<'_>,
        a: &Access<'_>,
        ep: Epochs,
        threads: impl FnOnce() -> I,
    ) -> u32 {
        match self.probe(a.pc.0, a.addr.0, a.index, ep) {
            Ok(id) => id,
            Err(h) => self.miss(res, sh, a, ep, h, threads),
        }
    }

    /// The cached label of an access by code `pc` to `addr` as event `index`,
    /// or the cache slot to give [`LabelCache::miss`].
    #[inline(always)]
    pub(crate) fn probe(&self, pc: u64, addr: u64, index: u64, ep: Epochs) -> Result<u32, usize> {
        // the page table first: a walk over a large block (a sort's array) misses
        // the (pc, address) cache every time, and stays on one entry here
        let page = addr >> 12;
        let p = &self.pages[(page as usize) & ((1 << PAGE_BITS) - 1)];
        if p.page == page && addr >= p.lo && addr < p.hi && p.epoch == ep.thread {
            return Ok(p.label);
        }
        let h = ((pc.rotate_left(29) ^ addr).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            >> (64 - CACHE_BITS)) as usize;
        let e = &self.cache[h];
        if e.pc == pc
            && e.addr == addr
            && e.label != u32::MAX
            && index >= e.from
            && index < e.to
            && e.epoch == ep.of(e.dep)
        {
            return Ok(e.label);
        }
        Err(h)
    }

    /// Resolves access `a` in full and keeps the answer in slot `h` (from
    /// [`LabelCache::probe`]) and, for a heap region, its page.
    #[inline(never)]
    pub(crate) fn miss<I: IntoIterator<Item = (ThreadId, Option<(u64, u64)>)>>(
        &mut self,
        res: &mut Resolver,
        sh: &Shared<'_>,
        a: &Access<'_>,
        ep: Epochs,
        h: usize,
        threads: impl FnOnce() -> I,
    ) -> u32 {
        let r = res.resolve(sh, a, threads);
        if let (Some((lo, hi)), THREAD) = (r.region, r.dep) {
            self.note_page(sh, a, ep, lo, hi, r.id);
        }
        let (label, dep, span) = (r.id, r.dep, r.span);
        let epoch = ep.of(dep);
        self.cache[h] =
            Entry { pc: a.pc.0, addr: a.addr.0, label, dep, epoch, from: span.start, to: span.end };
        label
    }

    /// Remembers that the part of the access's page in heap range `[lo, hi)` is
    /// named `id`, if nothing resolve looks at before the heap can differ within
    /// it: no module, nor the thread's stack or static TLS, touches the page.
    fn note_page(
        &mut self,
        sh: &Shared<'_>,
        a: &Access<'_>,
        ep: Epochs,
        lo: u64,
        hi: u64,
        id: u32,
    ) {
        let page = a.addr.0 >> 12;
        let (first, last) = (page << 12, (page << 12) | 0xfff);
        let st = a.st;
        if st.stack.is_some_and(|(s, e)| s <= last && e > first)
            || (st.tls != 0 && st.tls.saturating_sub(sh.tls_reach) <= last && st.tls > first)
            || sh.sym.module_of(Addr(first)).is_some()
            || sh.sym.module_of(Addr(last)).is_some()
        {
            return;
        }
        self.pages[(page as usize) & ((1 << PAGE_BITS) - 1)] = PageEntry {
            page,
            lo: lo.max(first),
            hi: hi.min(last + 1),
            epoch: ep.thread,
            label: id,
        };
    }
}
