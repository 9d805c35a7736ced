//! The label cache in front of the one [`Resolver`]: the parallel pass's workers
//! and the serial [`Attributor`](crate::Attributor) both name through it.
//!
//! A small direct-mapped cache maps (pc, address) to a label while the answer
//! provably stays the same (globals always; stack names until a frame of the
//! thread changes; heap names over the event range where the block lookup cannot
//! change), so repeated accesses cost one probe. By whole variables a heap address
//! where every block ever there has one name (`heap::Regions`) is named without a
//! block search, and the answer is kept for the rest of its page.

use crate::label::{OpenFrame, ThreadState};
use crate::resolve::{Access, Resolver, Shared, ALWAYS, FRAME, THREAD};
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
    /// With [`OWNED`]: the owning frame's number.
    depth: u16,
    epoch: u64,
    /// Event indices over which the answer holds; with [`OWNED`], the owning
    /// frame's entry pc and frame pointer.
    from: u64,
    to: u64,
    /// With [`OWNED`]: the next inner frame's call site (`u64::MAX`: none).
    next: u64,
}

const EMPTY: Entry = Entry {
    pc: u64::MAX,
    addr: u64::MAX,
    label: u32::MAX,
    dep: 0,
    depth: 0,
    epoch: 0,
    from: 0,
    to: 0,
    next: 0,
};

/// A stack address's answer: it holds while the thread epoch does, the frame
/// that owned the address is still open at the same depth with the same entry pc
/// and frame pointer, the next inner frame (if any) has the same call site, and
/// no frame inside them has come to own the address: exactly what the resolver's
/// stack name depends on. A function called over and over from one place lays
/// its frame at the same addresses each time: its accesses are answered here,
/// where the frame epoch (any entry or exit) made them miss every call (zstd -9:
/// 65 M misses of 70 M; sqlite 45 M of 49 M).
const OWNED: u8 = 3;

/// The next inner frame's call site after frame `i`, as [`Entry::next`] holds it.
#[inline(always)]
fn next_site(frames: &[OpenFrame], i: usize) -> u64 {
    frames.get(i + 1).map_or(u64::MAX, |f| f.call_site.0)
}

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
    /// The numbers of the page's heap ranges (`CoarseHeap::meeting`): an access
    /// to another range of the page is named by a search among them alone,
    /// without resolving (small blocks of one name, a tree's nodes, are each a
    /// range of their own between the allocator's headers).
    r0: u32,
    r1: u32,
}

/// 4096 pages (160 KiB): a column walk over a matrix touches a new page every
/// access (matmul 700: 957 pages a matrix); at 256 every access missed and was
/// resolved in full, two thirds of naming it.
const PAGE_BITS: u32 = 12;

/// Whether [`OWNED`] entry `e` for stack address `addr` still holds in `st`.
#[inline(always)]
fn owner_holds(st: &ThreadState, e: &Entry, addr: u64) -> bool {
    let frames = st.frames.frames();
    let i = e.depth as usize;
    frames.get(i).is_some_and(|f| f.pc.0 == e.from && f.rbp == e.to)
        && next_site(frames, i) == e.next
        && st.owner(addr) == Some(i)
}

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
                PageEntry { page: u64::MAX, lo: 0, hi: 0, epoch: 0, label: 0, r0: 0, r1: 0 };
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
        match self.probe(a.pc.0, a.addr.0, a.index, ep, || a.st) {
            Ok(id) => id,
            Err(h) => self.miss(res, sh, a, ep, h, threads),
        }
    }

    /// The cached label of an access by code `pc` to `addr` as event `index`,
    /// or the cache slot to give [`LabelCache::miss`].
    #[inline(always)]
    pub(crate) fn probe<'s>(
        &self,
        pc: u64,
        addr: u64,
        index: u64,
        ep: Epochs,
        st: impl FnOnce() -> &'s ThreadState,
    ) -> Result<u32, usize> {
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
        if e.pc == pc && e.addr == addr && e.label != u32::MAX {
            if e.dep == OWNED {
                if e.epoch == ep.thread && owner_holds(st(), e, addr) {
                    return Ok(e.label);
                }
            } else if index >= e.from && index < e.to && e.epoch == ep.of(e.dep) {
                return Ok(e.label);
            }
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
        // another heap range of a page noted before: what resolve looks at before
        // the coarse heap was found absent from the whole page (`note_page`)
        let page = a.addr.0 >> 12;
        let slot = (page as usize) & ((1 << PAGE_BITS) - 1);
        let p = self.pages[slot];
        if let (Some(ch), true) = (sh.coarse, p.page == page && p.epoch == ep.thread) {
            let rs = (p.r0 as usize, p.r1 as usize);
            if let Some((lo, hi, id)) =
                ch.find_in(a.addr.0, rs, &mut res.region_ids, &mut res.labels)
            {
                let e = &mut self.pages[slot];
                (e.lo, e.hi, e.label) = (lo.max(page << 12), hi.min((page + 1) << 12), id);
                return id;
            }
        }
        let r = res.resolve(sh, a, threads);
        if let (Some((lo, hi)), THREAD) = (r.region, r.dep) {
            self.note_page(sh, a, ep, lo, hi, r.id);
        }
        let (label, dep, span) = (r.id, r.dep, r.span);
        let frames = a.st.frames.frames();
        self.cache[h] = match (dep, r.owner) {
            (FRAME, Some(i)) if i <= u16::MAX as usize => Entry {
                pc: a.pc.0,
                addr: a.addr.0,
                label,
                dep: OWNED,
                depth: i as u16,
                epoch: ep.thread,
                from: frames[i].pc.0,
                to: frames[i].rbp,
                next: next_site(frames, i),
            },
            _ => Entry {
                pc: a.pc.0,
                addr: a.addr.0,
                label,
                dep,
                depth: 0,
                epoch: ep.of(dep),
                from: span.start,
                to: span.end,
                next: 0,
            },
        };
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
        let (r0, r1) = sh.coarse.map_or((0, 0), |c| c.meeting(first, last + 1));
        let (r0, r1) = match (u32::try_from(r0), u32::try_from(r1)) {
            (Ok(r0), Ok(r1)) => (r0, r1),
            _ => (0, 0),
        };
        self.pages[(page as usize) & ((1 << PAGE_BITS) - 1)] = PageEntry {
            page,
            lo: lo.max(first),
            hi: hi.min(last + 1),
            epoch: ep.thread,
            label: id,
            r0,
            r1,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlens_format::Pc;

    fn frame(pc: u64, rbp: u64, call_site: u64) -> OpenFrame {
        OpenFrame { pc: Pc(pc), rbp, func: pc, call_site: Pc(call_site) }
    }

    fn state(frames: &[OpenFrame]) -> ThreadState {
        let mut st = ThreadState { framed: true, ..ThreadState::default() };
        st.frames.extend(frames.iter().copied());
        st
    }

    /// A stack answer holds exactly while what the resolver's stack name depends
    /// on stays: the owning frame (entry pc, frame pointer) at its depth, the next
    /// inner frame's call site, and no inner frame owning the address.
    #[test]
    fn a_stack_answer_holds_while_its_frame_does() {
        // frame 0 owns 0x6ff0: its CFA (0x7010) lies above it, frame 1's (0x6010) not
        let (f0, f1) = (frame(0x100, 0x7000, 0), frame(0x200, 0x6000, 0x150));
        let addr = 0x6ff0;
        let e = Entry {
            pc: 0x210,
            addr,
            label: 7,
            dep: OWNED,
            depth: 0,
            epoch: 1,
            from: 0x100,
            to: 0x7000,
            next: 0x150,
        };
        assert!(owner_holds(&state(&[f0, f1]), &e, addr));
        // a deeper frame without a frame pointer owns nothing
        assert!(owner_holds(&state(&[f0, f1, frame(0x300, 0, 0x220)]), &e, addr));
        // a deeper frame whose CFA lies above the address owns it now
        assert!(!owner_holds(&state(&[f0, f1, frame(0x300, 0x6fe8, 0x220)]), &e, addr));
        // called out from elsewhere: another scope may be live there
        assert!(!owner_holds(&state(&[f0, frame(0x200, 0x6000, 0x160)]), &e, addr));
        // no inner frame any more, or another function at that depth
        assert!(!owner_holds(&state(&[f0]), &e, addr));
        assert!(!owner_holds(&state(&[frame(0x180, 0x7000, 0), f1]), &e, addr));
        assert!(!owner_holds(&state(&[frame(0x100, 0x7100, 0), f1]), &e, addr));
        assert!(!owner_holds(&state(&[]), &e, addr));
    }
}
