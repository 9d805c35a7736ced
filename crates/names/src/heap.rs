//! Every heap block of a trace, for naming heap addresses.

use crate::FastMap;
use memlens_analysis::heap::AllocFns;
use memlens_format::{Addr, Pc, ThreadId};

/// One allocated block.
#[derive(Clone, Debug)]
pub struct Block {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Allocation call site.
    pub site: Pc,
    /// Callers of the allocation, innermost first.
    pub stack: Vec<Pc>,
    /// Thread that allocated it.
    pub thread: ThreadId,
    /// Event index of the allocation in that thread.
    pub born: u64,
    /// Event index of the free in that thread, if freed by it.
    pub died: Option<u64>,
}

/// Blocks by start address. Without a global order between threads, an address
/// that several blocks covered over time is given to the block that was live at
/// that point of the accessing thread's own stream when there is one, else to the
/// most recent block at that address.
#[derive(Default)]
pub struct HeapIndex {
    blocks: Vec<Block>,
    /// While building: the newest block starting at an address, and for each block
    /// the previous one at its start (`u32::MAX`: none).
    newest: FastMap<u64, u32>,
    prev: Vec<u32>,
    live: FastMap<(ThreadId, u64), usize>,
    widest: u64,
    /// After [`HeapIndex::finish`]: distinct starts, ascending; the blocks of start
    /// `starts[j]` are `members[groups[j]..groups[j + 1]]` in allocation order;
    /// `max_end[j]` is the largest end of the blocks of starts `0..=j`, so a search
    /// going down stops as soon as nothing lower can cover the address.
    starts: Vec<u64>,
    groups: Vec<u32>,
    members: Vec<u32>,
    /// After `finish`: each member's `born`, beside it (the binary search of a
    /// start reused thousands of times read it from each block: a cache miss a
    /// step, three quarters of naming an allocation churn). A separate array, not
    /// one of (born, died, end): the search touches half the cache lines.
    member_born: Vec<u64>,
    /// After `finish`: each member's death (`u64::MAX`: never freed) and end.
    member_died: Vec<u64>,
    member_end: Vec<u64>,
    /// After `finish`: per block, overlapped by no other block.
    exclusive: Vec<bool>,
    /// After `finish`: per block, no live block of its thread starts inside it while
    /// it is live, and the search always reaches it (see [`HeapIndex::live_exclusive`]).
    live_exclusive: Vec<bool>,
    /// After `finish`: per start, the thread of all its blocks when their lifetimes
    /// follow one another (`u32::MAX`: not so), so that the block live at an event
    /// is found by a binary search (an allocator reuses a start thousands of times).
    solo: Vec<u32>,
    /// After `finish`: per start, the largest end of its blocks.
    group_end: Vec<u64>,
    max_end: Vec<u64>,
    /// Allocation wrappers: a block allocated in one is its caller's.
    alloc_fns: AllocFns,
}

/// A search's answer: the block and offset, and the event range it holds over.
type Found = (Option<(usize, u64)>, std::ops::Range<u64>);

/// How many distinct block starts below an address are looked at.
const WINDOW: usize = 64;
/// How many distinct starts below an address the binary-search path steps through
/// (most of them stepped over as never reaching the address) before it leaves the
/// lookup to the full search.
const SOLO_STEPS: usize = 4096;

impl HeapIndex {
    /// An empty index whose blocks allocated inside `alloc_fns` (`--alloc-fn`)
    /// belong to the first caller outside them.
    pub fn with_alloc_fns(alloc_fns: AllocFns) -> HeapIndex {
        HeapIndex { alloc_fns, ..HeapIndex::default() }
    }

    /// Records an allocation (first pass).
    pub fn add_block(
        &mut self,
        thread: ThreadId,
        index: u64,
        addr: Addr,
        size: u64,
        site: Pc,
        stack: Vec<Pc>,
    ) {
        if addr.0 == 0 {
            return;
        }
        let (site, stack) = if self.alloc_fns.is_empty() {
            (site, stack)
        } else {
            let (s, rest) = self.alloc_fns.site(site, &stack);
            (s, rest.to_vec())
        };
        let i = self.blocks.len();
        self.blocks.push(Block {
            start: addr.0,
            end: addr.0.saturating_add(size.max(1)),
            site,
            stack,
            thread,
            born: index,
            died: None,
        });
        let prev = self.newest.insert(addr.0, i as u32).unwrap_or(u32::MAX);
        self.prev.push(prev);
        self.live.insert((thread, addr.0), i);
        self.widest = self.widest.max(size.max(1));
    }

    /// Records a free (first pass).
    pub fn free(&mut self, thread: ThreadId, index: u64, addr: Addr) {
        if let Some(i) = self.live.remove(&(thread, addr.0)) {
            self.blocks[i].died = Some(index);
        } else if let Some(&newest) = self.newest.get(&addr.0) {
            // freed by another thread: close the newest open block there
            let mut j = newest;
            while j != u32::MAX {
                let b = &mut self.blocks[j as usize];
                if b.died.is_none() {
                    b.died = Some(u64::MAX - 1);
                    // its own entry in `live`, unless a newer block took the key
                    let key = (b.thread, b.start);
                    if self.live.get(&key) == Some(&(j as usize)) {
                        self.live.remove(&key);
                    }
                    break;
                }
                j = self.prev[j as usize];
            }
        }
    }

    /// Ends the first pass.
    pub fn finish(&mut self) {
        self.live = FastMap::default();
        let mut starts: Vec<u64> = self.newest.keys().copied().collect();
        starts.sort_unstable();
        let mut groups = Vec::with_capacity(starts.len() + 1);
        let mut members = Vec::with_capacity(self.blocks.len());
        let mut max_end = Vec::with_capacity(starts.len());
        let mut top = 0u64;
        for &s in &starts {
            groups.push(members.len() as u32);
            let from = members.len();
            let mut j = self.newest[&s];
            while j != u32::MAX {
                members.push(j);
                top = top.max(self.blocks[j as usize].end);
                j = self.prev[j as usize];
            }
            members[from..].reverse();
            max_end.push(top);
        }
        groups.push(members.len() as u32);
        // A block no other block ever overlaps is the only candidate for every
        // address in it, whatever the thread and event: lookups can skip the search.
        self.exclusive = vec![false; self.blocks.len()];
        for j in 0..starts.len() {
            let g = &members[groups[j] as usize..groups[j + 1] as usize];
            if let [i] = *g {
                let b = &self.blocks[i as usize];
                let before = j == 0 || max_end[j - 1] <= b.start;
                let after = starts.get(j + 1).is_none_or(|&s| s >= b.end);
                self.exclusive[i as usize] = before && after;
            }
        }
        self.solo = (0..starts.len())
            .map(|j| {
                let g = &members[groups[j] as usize..groups[j + 1] as usize];
                let t = self.blocks[g[0] as usize].thread;
                let one_after_another = g.windows(2).all(|w| {
                    let (a, b) = (&self.blocks[w[0] as usize], &self.blocks[w[1] as usize]);
                    b.thread == t && a.died.is_some_and(|d| d <= b.born)
                });
                if one_after_another {
                    t.0
                } else {
                    u32::MAX
                }
            })
            .collect();
        self.live_exclusive = self.live_exclusive_blocks(&starts, &groups, &members, &self.solo);
        self.group_end = (0..starts.len())
            .map(|j| {
                let g = &members[groups[j] as usize..groups[j + 1] as usize];
                g.iter().map(|&i| self.blocks[i as usize].end).max().unwrap_or(0)
            })
            .collect();
        let member = |f: fn(&Block) -> u64| -> Vec<u64> {
            members.iter().map(|&i| f(&self.blocks[i as usize])).collect()
        };
        self.member_born = member(|b| b.born);
        self.member_died = member(|b| b.died.unwrap_or(u64::MAX));
        self.member_end = member(|b| b.end);
        self.starts = starts;
        self.groups = groups;
        self.members = members;
        self.max_end = max_end;
        self.newest = FastMap::default();
        self.prev = Vec::new();
    }

    /// Whether block `i` is overlapped by no other block (then it is what
    /// [`HeapIndex::find`] answers for every address in it, at any event).
    pub fn exclusive(&self, i: usize) -> bool {
        self.exclusive.get(i).copied().unwrap_or(false)
    }

    /// Whether no other block of block `i`'s thread starts inside it while both are
    /// live, and the search always reaches its start (see `live_exclusive_blocks`):
    /// then it is what
    /// [`HeapIndex::find`] answers for every address in it, for an access by its
    /// thread while it is live (the live block of the accessing thread with the
    /// newest start wins). An allocator's blocks are so; an arena with live pool
    /// blocks inside is not.
    pub fn live_exclusive(&self, i: usize) -> bool {
        self.live_exclusive.get(i).copied().unwrap_or(false)
    }

    /// Sweeps each thread's births and deaths in event order over its blocks live
    /// at each point (a bit per start), marking those shadowed: a live block of
    /// the same thread starts inside them. Marking too many only costs lookups; a
    /// thread whose live blocks nest deeply (an arena) is given up on whole.
    fn live_exclusive_blocks(
        &self,
        starts: &[u64],
        groups: &[u32],
        members: &[u32],
        solo: &[u32],
    ) -> Vec<bool> {
        /// Live blocks below a new start looked at, through the shadowed ones
        /// (they may reach over it), and words of the live set scanned for them,
        /// before the thread is given up on (all its blocks marked).
        const WALK: usize = 64;
        const SCAN: usize = 256;
        let n = self.blocks.len();
        let mut start_of = vec![0u32; n];
        for j in 0..starts.len() {
            for &m in &members[groups[j] as usize..groups[j + 1] as usize] {
                start_of[m as usize] = j as u32;
            }
        }
        // Events (thread, event, 0 death / 1 birth, block) in order: a realloc's old
        // block dies where the new one is born. A thread's births come in block
        // order (its stream is read in order), so only the deaths are sorted; a
        // block no other overlaps at all neither shadows nor is shadowed.
        let mut births: Vec<(u32, u32)> = Vec::with_capacity(n);
        let mut deaths: Vec<(u32, u64, u32)> = Vec::with_capacity(n);
        for (i, b) in self.blocks.iter().enumerate().filter(|&(i, _)| !self.exclusive[i]) {
            births.push((b.thread.0, i as u32));
            if let Some(d) = b.died {
                deaths.push((b.thread.0, d, i as u32));
            }
        }
        births.sort_by_key(|&(t, _)| t); // stable: one run a thread when grouped
        deaths.sort_unstable();
        let mut evs: Vec<(u32, u64, u8, u32)> = Vec::with_capacity(births.len() + deaths.len());
        let (mut x, mut y) = (0, 0);
        while x < births.len() || y < deaths.len() {
            let birth = births.get(x).map(|&(t, i)| (t, self.blocks[i as usize].born, 1, i));
            let death = deaths.get(y).map(|&(t, d, i)| (t, d, 0, i));
            match (birth, death) {
                (Some(b), Some(d)) if d < b => (evs.push(d), y += 1),
                (Some(b), _) => (evs.push(b), x += 1),
                (None, Some(d)) => (evs.push(d), y += 1),
                (None, None) => unreachable!(),
            };
        }
        if !evs.is_sorted() {
            // births out of block order (a reader that adds them so): sort them all
            evs.sort_unstable();
        }
        // `same[j]`: the end of the run of starts from `j` with `solo[j]`'s value.
        let mut same = vec![0u32; starts.len()];
        for j in (0..starts.len()).rev() {
            let run = j + 1 < starts.len() && solo[j + 1] == solo[j];
            same[j] = if run { same[j + 1] } else { j as u32 + 1 };
        }
        // The swept thread's live blocks: a bit per start, the newest block there,
        // and the older ones live at a start that has several (shadowed by it).
        let mut live = vec![0u64; starts.len().div_ceil(64)];
        let mut at = vec![u32::MAX; starts.len()];
        let mut older: FastMap<usize, Vec<u32>> = FastMap::default();
        let mut shadowed = vec![false; n];
        let mut ok = vec![true; n];
        let mut given_up: Vec<u32> = Vec::new();
        let mut thread = None;
        let mut skip = false;
        for &(t, _, kind, i) in &evs {
            if thread != Some(t) {
                (thread, skip) = (Some(t), false);
                live.fill(0);
                older.clear();
            }
            let (i, j) = (i as usize, start_of[i as usize] as usize);
            if skip {
                continue;
            }
            if kind == 0 {
                if at[j] as usize == i {
                    match older.get_mut(&j).and_then(Vec::pop) {
                        Some(o) => at[j] = o,
                        None => {
                            live[j / 64] &= !(1 << (j % 64));
                            at[j] = u32::MAX;
                        }
                    }
                } else if let Some(v) = older.get_mut(&j) {
                    v.retain(|&o| o as usize != i);
                }
                continue;
            }
            let b = &self.blocks[i];
            if live[j / 64] >> (j % 64) & 1 != 0 {
                // the same start allocated later wins there
                shadowed[at[j] as usize] = true;
                older.entry(j).or_default().push(at[j]);
            }
            let end = starts.partition_point(|&s| s < b.end);
            // A lookup must answer as the search does. The full search looks at the
            // nearest WINDOW starts; the one-thread search at up to SOLO_STEPS, all
            // of its thread alone (`solo`): a block with more starts inside than
            // WINDOW is found wherever in it only when those are the latter's.
            let inside = end - j - 1;
            ok[i] =
                inside < WINDOW || inside < SOLO_STEPS && solo[j] == t && same[j] as usize >= end;
            // shadowed where a live block of its thread starts inside it
            if (j + 1..end).step_by(64).any(|k| {
                let w = live[k / 64] >> (k % 64);
                let span = (end - k).min(64 - k % 64);
                w & (u64::MAX >> (64 - span)) != 0
            }) {
                shadowed[i] = true;
            }
            // and it shadows the live blocks below that reach over its start; an
            // unshadowed one below is reached over by none (a lower one reaching
            // over this start would reach over its start too): the walk stops there
            let (mut k, mut steps, mut words) = (j, 0, 0);
            let lo = starts.partition_point(|&s| s < b.start.saturating_sub(self.widest));
            while k > lo {
                let w = live[(k - 1) / 64] & (u64::MAX >> (63 - (k - 1) % 64));
                if w == 0 {
                    k = (k - 1) / 64 * 64;
                    words += 1;
                    if words > SCAN {
                        break;
                    }
                    continue;
                }
                let p = (k - 1) / 64 * 64 + 63 - w.leading_zeros() as usize;
                let mut clear = false;
                let more = older.get(&p).map_or(&[][..], Vec::as_slice);
                for &c in std::iter::once(&at[p]).chain(more) {
                    let c = c as usize;
                    clear |= !shadowed[c];
                    if self.blocks[c].end > b.start {
                        shadowed[c] = true;
                    }
                }
                steps += 1;
                if clear || steps > WALK {
                    break;
                }
                k = p;
            }
            if steps > WALK || words > SCAN {
                (skip, _) = (true, given_up.push(t));
                continue;
            }
            live[j / 64] |= 1 << (j % 64);
            at[j] = i as u32;
        }
        given_up.sort_unstable();
        for (i, b) in self.blocks.iter().enumerate() {
            let kept = given_up.binary_search(&b.thread.0).is_err();
            ok[i] = self.exclusive[i] || ok[i] && !shadowed[i] && kept;
        }
        ok
    }

    /// Every block.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// The block holding `addr` for an access by `thread` at its event `index`, and
    /// the offset in it.
    pub fn find(&self, addr: Addr, thread: ThreadId, index: u64) -> Option<(usize, u64)> {
        self.search(addr, thread, index, false).0
    }

    /// Like [`HeapIndex::find`], with the range of `thread`'s event indices around
    /// `index` over which the answer for `addr` stays the same (it changes only where
    /// a block of `thread` covering `addr` is allocated or freed).
    pub fn find_with_span(
        &self,
        addr: Addr,
        thread: ThreadId,
        index: u64,
    ) -> (Option<(usize, u64)>, std::ops::Range<u64>) {
        self.search(addr, thread, index, true)
    }

    /// Candidates are the blocks covering `addr` among the [`WINDOW`] nearest distinct
    /// starts at or below it; the first (newest start, then newest block) live block of
    /// the accessing thread wins, else the first block of another thread, else the
    /// first of the accessing thread.
    fn search(&self, addr: Addr, thread: ThreadId, index: u64, span: bool) -> Found {
        let mut k = usize::MAX;
        self.search_near(addr, thread, index, span, &mut k, &mut [])
    }

    /// [`HeapIndex::search`] with `k`, the number of starts at or below the address
    /// of the previous search: kept when it holds for this one too (the next access
    /// is mostly in the same block), found again otherwise.
    fn search_near(
        &self,
        addr: Addr,
        thread: ThreadId,
        index: u64,
        span: bool,
        k: &mut usize,
        hints: &mut [(u32, u32)],
    ) -> Found {
        let a = addr.0;
        let holds = *k <= self.starts.len()
            && (*k == 0 || self.starts[*k - 1] <= a)
            && self.starts.get(*k).is_none_or(|&s| s > a);
        if !holds {
            *k = self.below(a);
        }
        match self.search_solo_at(addr, thread, index, *k, hints) {
            Some(r) => r,
            None => self.search_full_at(addr, thread, index, span, *k),
        }
    }

    /// The number of distinct starts at or below `a`.
    fn below(&self, a: u64) -> usize {
        self.starts.partition_point(|&s| s <= a)
    }

    /// `search_full_at` finding `k` itself.
    #[cfg(test)]
    fn search_full(&self, addr: Addr, thread: ThreadId, index: u64, span: bool) -> Found {
        self.search_full_at(addr, thread, index, span, self.below(addr.0))
    }

    fn search_full_at(
        &self,
        addr: Addr,
        thread: ThreadId,
        index: u64,
        span: bool,
        k: usize,
    ) -> Found {
        let a = addr.0;
        let lo = a.saturating_sub(self.widest.saturating_sub(1));
        let mut best: Option<(usize, u8)> = None;
        let mut found: Option<usize> = None;
        let (mut from, mut to) = (0u64, u64::MAX);
        for j in (k.saturating_sub(WINDOW)..k).rev() {
            if self.starts[j] < lo || self.max_end[j] <= a {
                break;
            }
            let g = &self.members[self.groups[j] as usize..self.groups[j + 1] as usize];
            for &i in g.iter().rev() {
                let i = i as usize;
                let b = &self.blocks[i];
                if a >= b.end {
                    continue;
                }
                let rank = if b.thread == thread {
                    let died = b.died.unwrap_or(u64::MAX);
                    if span {
                        // the rank of this block is constant between these indices
                        if index < b.born {
                            to = to.min(b.born);
                        } else if index >= died {
                            from = from.max(died);
                        } else {
                            from = from.max(b.born);
                            to = to.min(died);
                        }
                    }
                    if index >= b.born && index < died {
                        3
                    } else {
                        1
                    }
                } else {
                    2
                };
                if found.is_none() {
                    if best.is_none_or(|(_, r)| rank > r) {
                        best = Some((i, rank));
                    }
                    if rank == 3 {
                        found = Some(i);
                        if !span {
                            break;
                        }
                    }
                }
            }
            if found.is_some() && !span {
                break;
            }
        }
        let i = found.or(best.map(|(i, _)| i));
        (i.map(|i| (i, a - self.blocks[i].start)), from..to)
    }
}

impl HeapIndex {
    /// `search_solo_at` finding `k` itself.
    #[cfg(test)]
    fn search_solo(&self, addr: Addr, thread: ThreadId, index: u64) -> Option<Found> {
        self.search_solo_at(addr, thread, index, self.below(addr.0), &mut [])
    }

    /// [`HeapIndex::search`] when every start it looks at has blocks of the accessing
    /// thread only, one after another: the block live at `index` that covers `addr`,
    /// found by binary search per start, else the first block that covers it. The range is
    /// narrower than the full search's where blocks that do not cover `addr` end or
    /// begin (it only has to keep the answer the same). `None`: search in full. `k`:
    /// the number of starts at or below `addr`.
    fn search_solo_at(
        &self,
        addr: Addr,
        thread: ThreadId,
        index: u64,
        k: usize,
        hints: &mut [(u32, u32)],
    ) -> Option<Found> {
        let a = addr.0;
        let lo = a.saturating_sub(self.widest.saturating_sub(1));
        let (mut from, mut to) = (0u64, u64::MAX);
        // All the thread's own starts up to `SOLO_STEPS` below are looked at, not the
        // full search's `WINDOW`: a big live block with many old starts inside is
        // found (the first start that reaches `addr` is the nearest, so where no
        // live block covers it the answer is the full search's). `SOLO_STEPS` bounds
        // the stepping (an address no block covers, below a huge block).
        let mut floor = 0;
        for j in (0..k).rev() {
            if self.starts[j] < lo || self.max_end[j] <= a {
                floor = j + 1;
                break;
            }
            if k - j > SOLO_STEPS {
                return None;
            }
            if self.group_end[j] <= a {
                continue;
            }
            if self.solo[j] != thread.0 {
                return None;
            }
            // the members' fields side by side: no block is read unless found
            let at = self.groups[j] as usize..self.groups[j + 1] as usize;
            let born = &self.member_born[at.clone()];
            let p = match hints.get_mut(j & (HINTS - 1)) {
                Some(h) if h.0 == j as u32 + 1 => births_upto(born, index, &mut h.1),
                Some(h) => {
                    let p = born.partition_point(|&b| b <= index);
                    *h = (j as u32 + 1, p as u32);
                    p
                }
                None => born.partition_point(|&b| b <= index),
            };
            if let Some(&next) = born.get(p) {
                to = to.min(next);
            }
            if p > 0 {
                let m = at.start + p - 1;
                let died = self.member_died[m];
                if index < died {
                    from = from.max(born[p - 1]);
                    to = to.min(died);
                    if a < self.member_end[m] {
                        // every block of the group starts at its start
                        return Some((
                            Some((self.members[m] as usize, a - self.starts[j])),
                            from..to,
                        ));
                    }
                } else {
                    from = from.max(died);
                }
            }
        }
        // No block of the window is live and covers `addr` anywhere in `from..to`: the
        // full search answers with the first block covering it, newest start first,
        // newest block first (all of this thread, so none ranks above another).
        for j in (floor..k).rev() {
            if self.group_end[j] <= a {
                continue;
            }
            let g = &self.members[self.groups[j] as usize..self.groups[j + 1] as usize];
            if let Some(&i) = g.iter().rev().find(|&&i| a < self.blocks[i as usize].end) {
                let i = i as usize;
                return Some((Some((i, a - self.blocks[i].start)), from..to));
            }
        }
        Some((None, from..to))
    }
}

/// `born.partition_point(|&b| b <= index)` (`born` ascending) starting from
/// `*hint`, the answer for the same start last time, which it then holds. A worker
/// names a chunk's events in order, so the answer is mostly the hint or just past
/// it: a step or two on one cache line instead of a binary search's misses over a
/// start an allocator reused thousands of times.
#[inline]
fn births_upto(born: &[u64], index: u64, hint: &mut u32) -> usize {
    let h = (*hint as usize).min(born.len());
    let p = if h == 0 || born[h - 1] <= index {
        // every birth before `lo` is at or before `index`: gallop forward
        let (mut lo, mut step) = (h, 1);
        while lo + step <= born.len() && born[lo + step - 1] <= index {
            lo += step;
            step *= 2;
        }
        let hi = (lo + step).min(born.len());
        lo + born[lo..hi].partition_point(|&b| b <= index)
    } else {
        born[..h].partition_point(|&b| b <= index)
    };
    *hint = p as u32;
    p
}

/// The last block a lookup found that no other block overlaps, or none of its
/// thread while it is live: a lookup inside it (then) needs no search (see
/// [`HeapIndex::exclusive`], [`HeapIndex::live_exclusive`]). One per attributor.
#[derive(Clone, Debug, Default)]
pub(crate) struct LastBlock {
    start: u64,
    end: u64,
    index: usize,
    /// For a block only live-exclusive: its thread and life; else any thread and
    /// event (`born` 0, `died` `u64::MAX`, `thread` `None`).
    thread: Option<ThreadId>,
    born: u64,
    died: u64,
    /// The previous search's number of starts at or below its address.
    below: usize,
    /// Where the previous search of a start's births ended (see [`births_upto`]):
    /// (start's number + 1, answer), direct-mapped by the start's number ([`HINTS`]
    /// slots, made on the first search).
    hints: Vec<(u32, u32)>,
}

/// Slots of [`LastBlock::hints`] (a power of two): 512 KiB a worker.
const HINTS: usize = 1 << 16;

impl LastBlock {
    /// [`HeapIndex::find_with_span`] (`span`: with the event range, else
    /// [`HeapIndex::find`]'s answer and the whole range).
    #[inline]
    pub(crate) fn find(
        &mut self,
        heap: &HeapIndex,
        addr: Addr,
        thread: ThreadId,
        index: u64,
        span: bool,
    ) -> Found {
        if addr.0 >= self.start
            && addr.0 < self.end
            && self.thread.is_none_or(|t| t == thread)
            && index >= self.born
            && index < self.died
        {
            return (Some((self.index, addr.0 - self.start)), self.born..self.died);
        }
        if self.hints.is_empty() {
            self.hints = vec![(0, 0); HINTS];
        }
        let r = heap.search_near(addr, thread, index, span, &mut self.below, &mut self.hints);
        if let Some((bi, _)) = r.0 {
            let b = &heap.blocks[bi];
            if heap.exclusive(bi) {
                (self.start, self.end, self.index) = (b.start, b.end, bi);
                (self.thread, self.born, self.died) = (None, 0, u64::MAX);
            } else if b.thread == thread && heap.live_exclusive(bi) {
                let died = b.died.unwrap_or(u64::MAX);
                if index >= b.born && index < died {
                    (self.start, self.end, self.index) = (b.start, b.end, bi);
                    (self.thread, self.born, self.died) = (Some(thread), b.born, died);
                }
            }
        }
        r
    }
}

/// Address ranges where every block that ever covered them has the same key
/// (for [`Granularity::Variable`](crate::Granularity::Variable): the same
/// whole-block name). There the name of an access needs no search through the
/// blocks, which overlap over time wherever memory is reused: any block a search
/// could find has that name. Ranges with blocks of different keys, or of a block
/// without a key, are left out.
#[derive(Default)]
pub(crate) struct Regions {
    lo: Vec<u64>,
    hi: Vec<u64>,
    key: Vec<u32>,
}

/// The key of a block whose bytes are named apart.
const MIXED: u32 = u32::MAX;

impl Regions {
    /// `key(i)`: block `i`'s key, `None` when its bytes have names of their own.
    pub(crate) fn new(heap: &HeapIndex, mut key: impl FnMut(usize) -> Option<u32>) -> Regions {
        // (address, +1 start / -1 end, key); at one address ends go first
        let mut bounds: Vec<(u64, i8, u32)> = Vec::with_capacity(heap.blocks.len() * 2);
        for (i, b) in heap.blocks.iter().enumerate() {
            let k = key(i).unwrap_or(MIXED);
            bounds.push((b.start, 1, k));
            bounds.push((b.end, -1, k));
        }
        bounds.sort_unstable_by_key(|&(a, d, _)| (a, d));
        let mut r = Regions::default();
        let mut live: FastMap<u32, u32> = FastMap::default();
        let mut j = 0;
        while j < bounds.len() {
            let at = bounds[j].0;
            while j < bounds.len() && bounds[j].0 == at {
                let (_, d, k) = bounds[j];
                if d > 0 {
                    *live.entry(k).or_default() += 1;
                } else if let Some(n) = live.get_mut(&k) {
                    *n -= 1;
                    if *n == 0 {
                        live.remove(&k);
                    }
                }
                j += 1;
            }
            let Some(&(next, _, _)) = bounds.get(j) else { break };
            if live.len() != 1 {
                continue;
            }
            let k = *live.keys().next().expect("one key");
            if k == MIXED {
                continue;
            }
            if r.hi.last() == Some(&at) && r.key.last() == Some(&k) {
                *r.hi.last_mut().expect("a range") = next;
            } else {
                r.lo.push(at);
                r.hi.push(next);
                r.key.push(k);
            }
        }
        r
    }

    /// The numbers of the ranges that meet `[lo, hi)`: `r0..r1`.
    pub(crate) fn meeting(&self, lo: u64, hi: u64) -> (usize, usize) {
        (self.hi.partition_point(|&h| h <= lo), self.lo.partition_point(|&l| l < hi))
    }

    /// [`Regions::find`] among ranges `r0..r1` (from [`Regions::meeting`] of an
    /// interval holding `addr`: the answer is the same).
    #[inline]
    pub(crate) fn find_in(&self, addr: u64, r0: usize, r1: usize) -> Option<(u64, u64, u32)> {
        let j = r0 + self.lo[r0..r1].partition_point(|&l| l <= addr).checked_sub(1)?;
        (addr < self.hi[j]).then(|| (self.lo[j], self.hi[j], self.key[j]))
    }

    /// The range holding `addr` and its key.
    #[inline]
    pub(crate) fn find(&self, addr: u64) -> Option<(u64, u64, u32)> {
        self.find_in(addr, 0, self.lo.len())
    }
}

impl std::fmt::Debug for HeapIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeapIndex").field("blocks", &self.blocks().len()).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded sequence (xorshift64), the same on every machine.
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// Among the ranges meeting any interval that holds an address, the search
    /// finds what the search of all ranges does.
    #[test]
    fn ranges_meeting_an_interval_answer_as_all() {
        let mut rnd = xorshift(0x9e37_79b9_7f4a_7c15);
        for case in 0..300 {
            // blocks of two keys with gaps (an allocator's headers) and overlaps
            let mut evs = Vec::new();
            let mut at = 0x1000u64;
            for i in 0..(rnd() % 40) {
                at += rnd() % 3 * 16;
                let size = 16 + rnd() % 100;
                evs.push(Ev::Alloc(i, at, size, 0x400 + rnd() % 2));
                at += size - rnd() % 2 * 8;
            }
            let h = heap_of(&evs);
            let r = Regions::new(&h, |bi| Some(h.blocks[bi].site.0 as u32));
            for _ in 0..50 {
                let addr = 0x1000 + rnd() % (at - 0x1000 + 64);
                let (lo, hi) = (addr - rnd() % 300, addr + 1 + rnd() % 300);
                let (r0, r1) = r.meeting(lo, hi);
                assert_eq!(r.find_in(addr, r0, r1), r.find(addr), "case {case} at {addr:#x}");
            }
        }
    }

    /// The search of a start's births from a hint answers as a binary search does,
    /// whatever the hint and in whatever order the events come.
    #[test]
    fn births_from_a_hint_are_a_binary_search() {
        let mut rnd = xorshift(0x2545_f491_4f6c_dd1d);
        for case in 0..2000 {
            let n = (rnd() % 70) as usize;
            let mut born: Vec<u64> = (0..n).map(|_| rnd() % 200).collect();
            born.sort_unstable();
            let mut hint = (rnd() % 80) as u32;
            let mut index = rnd() % 220;
            for step in 0..30 {
                // mostly forward, now and then back (another chunk of the stream)
                index = if rnd().is_multiple_of(5) { rnd() % 220 } else { index + rnd() % 12 };
                let want = born.partition_point(|&b| b <= index);
                let got = births_upto(&born, index, &mut hint);
                assert_eq!(got, want, "case {case} step {step}: {born:?} at {index}");
                assert_eq!(hint as usize, want);
            }
        }
    }

    /// A finished index of thread 0's events, in order: `Alloc(index, address, size,
    /// site)` and `Free(index, address)`.
    fn heap_of(events: &[Ev]) -> HeapIndex {
        let mut h = HeapIndex::default();
        for e in events {
            match *e {
                Ev::Alloc(i, a, size, site) => {
                    h.add_block(ThreadId(0), i, Addr(a), size, Pc(site), vec![])
                }
                Ev::Free(i, a) => h.free(ThreadId(0), i, Addr(a)),
            }
        }
        h.finish();
        h
    }

    enum Ev {
        Alloc(u64, u64, u64, u64),
        Free(u64, u64),
    }

    #[test]
    fn reuse_is_resolved_by_lifetime_in_the_same_thread() {
        let h = heap_of(&[
            Ev::Alloc(1, 0x1000, 32, 0xa),
            Ev::Free(5, 0x1000),
            Ev::Alloc(6, 0x1000, 16, 0xb),
        ]);
        let t = ThreadId(0);
        assert_eq!(h.find(Addr(0x1008), t, 3), Some((0, 8)));
        assert_eq!(h.find(Addr(0x1008), t, 7), Some((1, 8)));
        assert_eq!(h.find(Addr(0x1018), t, 3), Some((0, 0x18)));
        assert_eq!(h.find(Addr(0x2000), t, 3), None);
        assert_eq!(h.find_with_span(Addr(0x1008), t, 3), (Some((0, 8)), 1..5));
        assert_eq!(h.find_with_span(Addr(0x1008), t, 9), (Some((1, 8)), 6..u64::MAX));
        // block 0 is the answer from its free (5) on; the binary search stops at the
        // birth of block 1 (6), which does not cover 0x1018: narrower, still right
        let s = h.find_with_span(Addr(0x1018), t, 9).1;
        assert!(s.start >= 5 && s.contains(&9) && s.end == u64::MAX, "{s:?}");
        // the reused start overlaps: neither block is exclusive
        assert!(!h.exclusive(0) && !h.exclusive(1));
    }

    #[test]
    fn binary_search_of_reused_starts_agrees_with_the_full_search() {
        // one thread; a few starts reused many times with varying sizes
        let mut h = HeapIndex::default();
        let t = ThreadId(0);
        let mut x = 12345u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut live: Vec<Option<u64>> = vec![None; 8];
        let mut index = 1;
        for _ in 0..2000 {
            let k = rnd(8) as usize;
            if let Some(a) = live[k].take() {
                h.free(t, index, Addr(a));
            } else {
                let a = 0x10000 + k as u64 * 0x100;
                h.add_block(t, index, Addr(a), 8 + rnd(0x180), Pc(0xa + rnd(2)), vec![]);
                live[k] = Some(a);
            }
            index += 1 + rnd(3);
        }
        h.finish();
        let (mut fast, mut all) = (0, 0);
        for _ in 0..20000 {
            let (a, i) = (Addr(0x10000 + rnd(0x900)), rnd(index + 10));
            let full = h.search_full(a, t, i, true);
            assert_eq!(h.search_full(a, t, i, false).0, full.0);
            all += 1;
            if let Some((found, span)) = h.search_solo(a, t, i) {
                fast += 1;
                assert_eq!(found, full.0, "{a:?} at {i}");
                assert!(span.contains(&i), "{span:?} holds {i}");
                // the answer holds over the whole range (the full search narrows
                // its range by blocks below the answer too; they do not change it)
                let end = span.end.min(index + 10);
                for j in [span.start, end - 1, span.start + rnd(end - span.start)] {
                    assert_eq!(h.search_full(a, t, j, false).0, found, "{a:?} at {j} in {span:?}");
                }
            }
            // another thread takes the fast way only where no block covers the address
            let other = h.search_full(a, ThreadId(1), i, true).0;
            if let Some((found, _)) = h.search_solo(a, ThreadId(1), i) {
                assert_eq!((found, other), (None, None), "{a:?} at {i}");
            }
        }
        assert_eq!(fast, all, "one thread's blocks: the fast way answers every lookup");
    }

    #[test]
    fn a_live_block_is_found_past_a_hundred_old_starts_inside_it() {
        // 100 small blocks live and die at 0x10000.., then one big block covers them all
        let mut h = HeapIndex::default();
        let t = ThreadId(0);
        let mut index = 1;
        for k in 0..100u64 {
            h.add_block(t, index, Addr(0x10000 + k * 0x20), 16, Pc(0xa), vec![]);
            h.free(t, index + 1, Addr(0x10000 + k * 0x20));
            index += 2;
        }
        h.add_block(t, index, Addr(0x10000), 0x1000, Pc(0xb), vec![]);
        h.finish();
        let big = h.blocks().len() - 1;
        // past the last small start, 100 starts above the big block's
        assert_eq!(h.find(Addr(0x10c80), t, index + 1), Some((big, 0xc80)));
        // inside an old small block, before the big one is born: that small block
        assert_eq!(h.find(Addr(0x10c68), t, index - 1), Some((99, 8)));
        // the full search alone looks at 64 starts and misses the big block
        assert_ne!(h.search_full(Addr(0x10c80), t, index + 1, false).0, Some((big, 0xc80)));
    }

    #[test]
    fn a_live_exclusive_block_answers_for_its_bytes_all_its_life() {
        // two threads allocating at 24 starts 64 bytes apart, sizes up to 256: blocks
        // overlap their neighbours, some while both are live; some leak, some are
        // freed by the other thread
        let mut h = HeapIndex::default();
        let mut rnd = xorshift(0x5eed);
        let mut live: [Vec<u64>; 2] = [vec![], vec![]];
        let mut index = [1u64; 2];
        for _ in 0..3000 {
            let t = (rnd() % 2) as usize;
            let r = rnd();
            if r.is_multiple_of(3) && !live[t].is_empty() {
                let a = live[t].swap_remove((r >> 8) as usize % live[t].len());
                // one free in eight by the other thread
                let by = if r % 8 == 3 { 1 - t } else { t };
                h.free(ThreadId(by as u32), index[by], Addr(a));
                index[by] += 1;
            } else {
                // mostly where the thread's live blocks leave room, as an allocator
                let a = 0x10000 + (r >> 16) % 24 * 0x40;
                let size = if r.is_multiple_of(5) {
                    0x40 + (r >> 32) % 0xc0
                } else {
                    8 + (r >> 32) % 0x38
                };
                h.add_block(ThreadId(t as u32), index[t], Addr(a), size, Pc(0xa), vec![]);
                live[t].push(a);
                index[t] += 1;
            }
            index[t] += rnd() % 3;
        }
        h.finish();
        let blocks = h.blocks().to_vec();
        let (mut checked, mut marked) = (0, 0);
        for (i, b) in blocks.iter().enumerate() {
            if !h.live_exclusive(i) {
                marked += 1;
                continue;
            }
            let end = b.died.unwrap_or(u64::MAX).min(index[b.thread.0 as usize] + 5);
            for _ in 0..8 {
                let a = b.start + rnd() % (b.end - b.start);
                let j = b.born + rnd() % (end - b.born);
                assert_eq!(h.find(Addr(a), b.thread, j), Some((i, a - b.start)), "{b:?} at {j}");
                checked += 1;
            }
        }
        assert!(checked > 2000 && marked > 100, "{checked} lookups, {marked} blocks marked");
        // the attributor's cache answers as the index does, lookup after lookup
        let mut last = LastBlock::default();
        for _ in 0..50_000 {
            let r = rnd();
            let t = ThreadId((r % 2) as u32);
            // runs of lookups in one block, as a program's accesses come
            let a = Addr(0x10000 + (r >> 8) % 0x640);
            let j = (r >> 24) % (index[t.0 as usize] + 5);
            for d in 0..4 {
                let a = Addr(a.0 + d * 8);
                let (found, span) = last.find(&h, a, t, j, true);
                assert_eq!(found, h.find(a, t, j), "{a:?} by {t:?} at {j}");
                assert!(span.contains(&j), "{span:?} holds {j}");
            }
        }
    }

    #[test]
    fn a_lookup_answers_as_the_search_past_its_window() {
        // 100 dead blocks that each reach over most of a big block born after them
        let heap = |small: ThreadId| {
            let mut h = HeapIndex::default();
            let mut index = 1;
            for k in 0..100u64 {
                h.add_block(small, index, Addr(0x10000 + k * 8), 0x1000, Pc(0xa), vec![]);
                h.free(small, index + 1, Addr(0x10000 + k * 8));
                index += 2;
            }
            h.add_block(ThreadId(0), index, Addr(0x10000), 0x1000, Pc(0xb), vec![]);
            h.finish();
            (h, index + 1)
        };
        let (t, far) = (ThreadId(0), Addr(0x10f00));
        // of the big block's thread: the one-thread search steps past them all
        let (h, i) = heap(t);
        let big = h.blocks().len() - 1;
        assert!(h.live_exclusive(big));
        assert_eq!(h.find(far, t, i), Some((big, 0xf00)));
        // of another thread: the full search's window of 64 starts misses it, and
        // the cache of the last block must answer as it does
        let (h, i) = heap(ThreadId(1));
        assert!(!h.live_exclusive(big), "99 starts of another thread inside it");
        let mut last = LastBlock::default();
        assert_eq!(last.find(&h, Addr(0x10004), t, i, false).0, Some((big, 4)));
        assert_ne!(h.find(far, t, i), Some((big, 0xf00)), "the search's window");
        assert_eq!(last.find(&h, far, t, i, false).0, h.find(far, t, i));
    }

    #[test]
    fn a_block_a_live_block_of_its_thread_starts_in_is_not_live_exclusive() {
        let h = heap_of(&[
            // an arena with a pool block inside it, both live
            Ev::Alloc(1, 0x1000, 0x100, 0xa),
            Ev::Alloc(2, 0x1040, 0x10, 0xb),
            // one after another at the same start: both
            Ev::Alloc(3, 0x2000, 0x20, 0xa),
            Ev::Free(4, 0x2000),
            Ev::Alloc(5, 0x2000, 0x40, 0xa),
            // a block reaching over a later neighbour's start, both live
            Ev::Alloc(6, 0x3000, 0x30, 0xa),
            Ev::Alloc(7, 0x3020, 0x20, 0xa),
        ]);
        let ok: Vec<bool> = (0..h.blocks().len()).map(|i| h.live_exclusive(i)).collect();
        // the arena and the block reaching over its neighbour are shadowed
        assert_eq!(ok, [false, true, true, true, false, true]);
    }

    #[test]
    fn regions_keep_ranges_whose_blocks_share_a_key() {
        let h = heap_of(&[
            // 0x1000: two blocks over time, same key; 0x2000: two keys; 0x3000: no key
            Ev::Alloc(1, 0x1000, 32, 0xa),
            Ev::Free(2, 0x1000),
            Ev::Alloc(3, 0x1010, 48, 0xa),
            Ev::Alloc(4, 0x2000, 32, 0xa),
            Ev::Alloc(5, 0x2010, 32, 0xb),
            Ev::Alloc(6, 0x3000, 8, 0xc),
        ]);
        let r = Regions::new(&h, |i| match h.blocks()[i].site.0 {
            0xa => Some(1),
            0xb => Some(2),
            _ => None,
        });
        assert_eq!(r.find(0x1000), Some((0x1000, 0x1040, 1)));
        assert_eq!(r.find(0x103f), Some((0x1000, 0x1040, 1)));
        assert_eq!(r.find(0x1040), None);
        assert_eq!(r.find(0xfff), None);
        assert_eq!(r.find(0x2008), Some((0x2000, 0x2010, 1)));
        assert_eq!(r.find(0x2010), None, "blocks of two keys");
        assert_eq!(r.find(0x2028), Some((0x2020, 0x2030, 2)));
        assert_eq!(r.find(0x3000), None, "a block without a key");
    }

    #[test]
    fn blocks_nobody_overlaps_are_exclusive() {
        let h = heap_of(&[
            Ev::Alloc(1, 0x1000, 32, 0xa),
            Ev::Alloc(2, 0x2000, 64, 0xa),
            // an mmap region with a block inside it
            Ev::Alloc(3, 0x10000, 0x1000, 0xb),
            Ev::Alloc(4, 0x10100, 16, 0xc),
        ]);
        assert!(h.exclusive(0) && h.exclusive(1));
        assert!(!h.exclusive(2) && !h.exclusive(3));
        for a in [0x1000, 0x101f] {
            assert_eq!(h.find(Addr(a), ThreadId(7), 99), Some((0, a - 0x1000)));
        }
    }
}
