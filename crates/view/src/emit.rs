//! The index's writer: every level's buckets, on a thread of their own. The map
//! builder (`index::Builder`) follows the working set access by access; when a
//! finest bucket closes it hands over what changed ([`Close`]: the bucket's
//! touches and code-address sums, the state of the lines it touched, the lines
//! that left the working set and the lines seen first), and the [`Writer`] keeps
//! its own copy of the working set from them, names the touched elements, and
//! writes the cells and window sums of every level that closes there: what the
//! builder did itself before, byte for byte, while it goes on with the next
//! accesses on the other core.

use crate::fx::FxMap;
use crate::linestate::{Touch, TouchSet};
use crate::sparse::{encode_bucket, BlockWriter, TouchRec};
use crate::WINDOW_BYTES;
use memlens_analysis::Namer;
use memlens_format::Addr;
use std::sync::Arc;

/// Distinct data addresses named one by one; beyond, a cache line's first name stands
/// for all its bytes (keeps build memory and the name table bounded).
const MAX_NAMED_ADDRS: usize = 1 << 22;
/// Distinct names in the index.
const MAX_VARS: usize = 100_000;

/// Elements remembered per line when naming a bucket's touches.
const MEMO_WAYS: usize = 8;

/// A key frame at least every this many touched lines (and the working set's size).
pub(crate) const KEY_MIN: u64 = 1 << 15;
/// Window sums are compressed in blocks of about this many bytes.
const WINDOW_BLOCK: usize = 1 << 20;

/// What one code address did within the current bucket of one level.
#[derive(Clone, Copy, Default)]
pub(crate) struct Win {
    pub(crate) loads: u32,
    pub(crate) stores: u32,
    pub(crate) shared: u32,
    pub(crate) misses: u32,
    pub(crate) mem: u32,
    pub(crate) bytes: u64,
}

impl Win {
    fn fold(&mut self, o: &Win) {
        self.loads = self.loads.saturating_add(o.loads);
        self.stores = self.stores.saturating_add(o.stores);
        self.shared = self.shared.saturating_add(o.shared);
        self.misses = self.misses.saturating_add(o.misses);
        self.mem = self.mem.saturating_add(o.mem);
        self.bytes = self.bytes.saturating_add(o.bytes);
    }

    fn record(&self, pc: u32) -> [u8; WINDOW_BYTES] {
        let mut r = [0u8; WINDOW_BYTES];
        for (k, v) in [pc, self.loads, self.stores, self.shared, self.misses, self.mem]
            .into_iter()
            .enumerate()
        {
            r[k * 4..k * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        r[24..32].copy_from_slice(&self.bytes.to_le_bytes());
        r
    }
}

/// A level's window records beyond this are not kept (the level has no window file).
const MAX_WINDOW_RECORDS: u64 = 8 << 20;

pub(crate) struct Level {
    pub(crate) bsize: u64,
    pub(crate) bucket: u64,
    /// Touches and code-address sums of the current bucket, by line id and pc id; the
    /// finest level's come with each [`Close`] (the builder keeps them in `LineStat::t0`
    /// and `Builder::pc_win0`: no hashing per access).
    pub(crate) touched: TouchSet,
    pub(crate) win: FxMap<u32, Win>,
    pub(crate) offsets: Vec<u64>,
    pub(crate) cells: u64,
    pub(crate) out: BlockWriter,
    /// Touched lines written since the last key frame.
    pub(crate) since_key: u64,
    /// Over the size budget: no longer written, left out at the end.
    pub(crate) dead: bool,
    pub(crate) woffsets: Vec<u64>,
    pub(crate) wrecords: u64,
    /// `None` once the level has more than [`MAX_WINDOW_RECORDS`].
    pub(crate) wout: Option<BlockWriter>,
}

/// Data names: per distinct address while the tables stay small.
pub(crate) struct Names<'n> {
    pub(crate) namer: &'n (dyn Namer + Sync),
    /// (element, variable) → id; the strings shared with `var_list`, the
    /// variable's with every element of it (`variables`): a hash table's million
    /// lines hold a million element names of one variable.
    pub(crate) vars: FxMap<(Arc<str>, Arc<str>), u32>,
    pub(crate) var_list: Vec<(Arc<str>, Arc<str>)>,
    pub(crate) variables: FxMap<Arc<str>, ()>,
    pub(crate) addr_vars: FxMap<u64, u32>,
}

impl Names<'_> {
    /// The name of the element at `addr`, once per distinct address while the
    /// tables stay small (then the line's name stands for it).
    fn elem_var(&mut self, addr: u64, line_var: u32) -> u32 {
        if let Some(&v) = self.addr_vars.get(&addr) {
            return v;
        }
        if self.addr_vars.len() >= MAX_NAMED_ADDRS || self.var_list.len() >= MAX_VARS {
            return line_var;
        }
        let v = self.var_id(addr);
        self.addr_vars.insert(addr, v);
        v
    }

    fn var_id(&mut self, addr: u64) -> u32 {
        let (name, variable) = match self.namer.data(Addr(addr)) {
            Some(d) => (d.name, d.variable),
            None => (String::new(), String::new()),
        };
        let variable: Arc<str> = match self.variables.get_key_value(variable.as_str()) {
            Some((v, ())) => v.clone(),
            None => {
                let v: Arc<str> = variable.into();
                self.variables.insert(v.clone(), ());
                v
            }
        };
        let key = (Arc::from(name), variable);
        if let Some(&i) = self.vars.get(&key) {
            return i;
        }
        let i = self.var_list.len() as u32;
        self.vars.insert(key.clone(), i);
        self.var_list.push(key);
        i
    }
}

/// A line's state as the builder saw it at a close: in the working set, bytes
/// used since it entered, last thread, insertion counter when last touched.
#[derive(Clone, Copy)]
pub(crate) struct Snap {
    pub(crate) live: bool,
    pub(crate) used: u8,
    pub(crate) thread: u8,
    pub(crate) stamp: u64,
}

impl Default for Snap {
    fn default() -> Snap {
        Snap { live: false, used: 0, thread: 255, stamp: 0 }
    }
}

/// What the builder hands the writer when finest buckets close at operation
/// `op` (every level's buckets that end at or before it close then).
#[derive(Default)]
pub(crate) struct Close {
    pub(crate) op: u64,
    /// The insertion counter and the working set's size at the close.
    pub(crate) ins: u64,
    pub(crate) ws: usize,
    /// The finest bucket's touches, in the order the lines were first touched in
    /// it, with each line's state at the close.
    pub(crate) touched: Vec<(u32, Touch, Snap)>,
    /// Its sums per code address, in the order of their first access.
    pub(crate) wins: Vec<(u32, Win)>,
    /// Lines that left the working set since the last close (they may have come
    /// back since: `touched` says).
    pub(crate) evicted: Vec<u32>,
    /// Lines seen first since the last close, by id: the line's address and the
    /// address its name is taken from.
    pub(crate) new_lines: Vec<(u64, u64)>,
}

impl Close {
    fn clear(&mut self) {
        self.touched.clear();
        self.wins.clear();
        self.evicted.clear();
        self.new_lines.clear();
    }
}

/// Writes every level's buckets from the builder's [`Close`]s (see the module doc).
pub(crate) struct Writer<'n> {
    pub(crate) names: Names<'n>,
    pub(crate) levels: Vec<Level>,
    /// Per line id: its address, the name of its first byte, the elements named
    /// in it (`(off + 1) << 32 | var`, 0: none; [`MEMO_WAYS`] by `off / 8`, so
    /// that an element is looked up once, not in every bucket that touches it),
    /// its loads and stores (only when the variables table is made from them:
    /// `count_lines`).
    pub(crate) line_addrs: Vec<u64>,
    pub(crate) line_vars: Vec<u32>,
    elem_memo: Vec<u64>,
    pub(crate) line_totals: Vec<(u64, u64)>,
    count_lines: bool,
    /// The index's size budget in bytes.
    budget: u64,
    pub(crate) error: Option<std::io::Error>,
    /// Each line's state as of its last close, and the working set (in no
    /// order; `pos`: each member's place in it).
    shadow: Vec<Snap>,
    pos: Vec<u32>,
    ws_list: Vec<u32>,
    ins: u64,
    ws: usize,
    /// The close being written: the finest bucket's touches and sums.
    touched0: Vec<(u32, Touch)>,
    wins0: Vec<(u32, Win)>,
    /// Scratch of `emit`, kept across buckets.
    recs: Vec<TouchRec>,
    rest: Vec<(u64, u8, u8, u32)>,
    all: Vec<(u64, u32)>,
    wbuf: Vec<u8>,
}

impl<'n> Writer<'n> {
    pub(crate) fn new(
        namer: &'n (dyn Namer + Sync),
        levels: Vec<Level>,
        count_lines: bool,
        budget: u64,
    ) -> Writer<'n> {
        Writer {
            names: Names {
                namer,
                vars: FxMap::default(),
                var_list: Vec::new(),
                variables: FxMap::default(),
                addr_vars: FxMap::default(),
            },
            levels,
            line_addrs: Vec::new(),
            line_vars: Vec::new(),
            elem_memo: Vec::new(),
            line_totals: Vec::new(),
            count_lines,
            budget,
            error: None,
            shadow: Vec::new(),
            pos: Vec::new(),
            ws_list: Vec::new(),
            ins: 0,
            ws: 0,
            touched0: Vec::new(),
            wins0: Vec::new(),
            recs: Vec::new(),
            rest: Vec::new(),
            all: Vec::new(),
            wbuf: Vec::new(),
        }
    }

    /// Takes in a close (its vectors emptied for reuse) and writes every
    /// level's buckets that end at or before its operation.
    pub(crate) fn close(&mut self, c: &mut Close) {
        for &(addr, lo) in &c.new_lines {
            self.line_addrs.push(addr);
            let var = self.names.var_id(lo);
            self.line_vars.push(var);
            self.elem_memo.extend([0; MEMO_WAYS]);
            self.line_totals.push((0, 0));
            self.shadow.push(Snap::default());
            self.pos.push(0);
        }
        // the lines that left, then the state of those touched (some came back)
        for &id in &c.evicted {
            self.set_live(id, false);
        }
        self.touched0.clear();
        for &(id, t, snap) in &c.touched {
            self.set_live(id, snap.live);
            self.shadow[id as usize] = snap;
            self.touched0.push((id, t));
        }
        debug_assert_eq!(self.ws_list.len(), c.ws);
        self.wins0.clear();
        self.wins0.extend_from_slice(&c.wins);
        (self.ins, self.ws) = (c.ins, c.ws);
        for li in 0..self.levels.len() {
            while (self.levels[li].bucket + 1) * self.levels[li].bsize <= c.op {
                self.emit(li);
            }
        }
        c.clear();
    }

    /// After the last close: the last bucket of every level that holds
    /// operations before `end` and did not close.
    pub(crate) fn finish(&mut self, end: u64) {
        for li in 0..self.levels.len() {
            if self.levels[li].bucket * self.levels[li].bsize < end {
                self.emit(li);
            }
        }
    }

    fn set_live(&mut self, id: u32, live: bool) {
        let s = &mut self.shadow[id as usize];
        if s.live == live {
            return;
        }
        s.live = live;
        if live {
            self.pos[id as usize] = self.ws_list.len() as u32;
            self.ws_list.push(id);
        } else {
            let p = self.pos[id as usize] as usize;
            self.ws_list.swap_remove(p);
            if let Some(&moved) = self.ws_list.get(p) {
                self.pos[moved as usize] = p as u32;
            }
        }
    }

    /// Writes the current bucket of level `li`: the lines of the working set touched
    /// in it, with what the bucket did to them, in address order (plus, at the start
    /// of a block, every other line of the working set: see `sparse`); and the
    /// bucket's per-code-address sums. Then hands both to the next coarser level (its
    /// buckets are 4 finer ones).
    fn emit(&mut self, li: usize) {
        let Writer {
            levels,
            ws,
            ws_list,
            shadow,
            line_addrs,
            line_vars,
            elem_memo,
            line_totals,
            count_lines,
            names,
            ins,
            error,
            touched0,
            wins0,
            budget,
            recs,
            rest,
            all,
            wbuf,
            ..
        } = self;
        let (lower, upper) = levels.split_at_mut(li + 1);
        let lv = &mut lower[li];
        let mut next = upper.first_mut();
        lv.offsets.push(lv.cells);
        // The touched lines still in the working set, in address order (their rows').
        recs.clear();
        let mut add = |id: u32, t: &Touch| {
            let ls = &shadow[id as usize];
            if ls.live {
                recs.push(TouchRec {
                    addr: line_addrs[id as usize],
                    pc: t.pc,
                    var: id,
                    loads: t.loads.min(u16::MAX as u32) as u16,
                    stores: t.stores.min(u16::MAX as u32) as u16,
                    used: ls.used,
                    thread: ls.thread,
                    off: t.off,
                    dist: (*ins - ls.stamp) as u32,
                });
            }
        };
        if li == 0 {
            for (id, t) in touched0.iter() {
                add(*id, t);
            }
        } else {
            for (id, t) in lv.touched.list.iter() {
                add(*id, t);
            }
        }
        recs.sort_unstable_by_key(|r| r.addr);
        // Touched: the element the last access named (named in row order, as the ids
        // are handed out in that order). A line's last element is remembered: naming
        // the same address again changes nothing (the name tables only grow).
        for r in recs.iter_mut() {
            let id = r.var as usize;
            let key = (r.off as u64 + 1) << 32;
            let memo = &mut elem_memo[id * MEMO_WAYS + (r.off as usize >> 3) % MEMO_WAYS];
            r.var = if *memo >> 32 == key >> 32 {
                *memo as u32
            } else {
                let v = names.elem_var(r.addr + r.off as u64, line_vars[id]);
                *memo = key | v as u64;
                v
            };
        }
        // A finer level already over the size budget will be left out: stop writing it
        // (the coarsest is always kept).
        if next.is_some() && lv.out.bytes() > *budget {
            lv.dead = true;
        }
        // A key frame when the touches since the last one outgrow the working set:
        // replaying a block then costs at most about twice the working set.
        let key = !lv.dead && (lv.bucket == 0 || lv.since_key >= (*ws as u64).max(KEY_MIN));
        if key {
            if let Err(e) = lv.out.cut() {
                error.get_or_insert(e);
            }
            lv.since_key = 0;
        }
        lv.since_key += recs.len() as u64;
        rest.clear();
        if key {
            all.clear();
            all.extend(ws_list.iter().map(|&id| (line_addrs[id as usize], id)));
            all.sort_unstable();
            let mut k = 0;
            for &(addr, id) in all.iter() {
                if recs.get(k).is_some_and(|r| r.addr == addr) {
                    k += 1;
                    continue;
                }
                let ls = &shadow[id as usize];
                rest.push((addr, ls.used, ls.thread, (*ins - ls.stamp) as u32));
            }
        }
        if !lv.dead {
            encode_bucket(&mut lv.out, *ins, recs, rest);
            lv.out.end_bucket();
        }
        lv.cells += *ws as u64;
        // This bucket's sums per code address.
        lv.woffsets.push(lv.wrecords);
        wbuf.clear();
        let mut wins = |pc: u32, w: &Win, next: &mut Option<&mut Level>| {
            wbuf.extend_from_slice(&w.record(pc));
            if let Some(n) = next {
                n.win.entry(pc).or_default().fold(w);
            }
        };
        if li == 0 {
            for (pc, w) in wins0.drain(..) {
                wins(pc, &w, &mut next);
            }
            for (id, t) in touched0.drain(..) {
                if *count_lines {
                    let tot = &mut line_totals[id as usize];
                    tot.0 += t.loads as u64;
                    tot.1 += t.stores as u64;
                }
                if let Some(n) = next.as_mut() {
                    n.touched.fold(id, &t);
                }
            }
        } else {
            for (pc, w) in lv.win.drain() {
                wins(pc, &w, &mut next);
            }
            if let Some(n) = next.as_mut() {
                for (id, t) in lv.touched.list.iter() {
                    n.touched.fold(*id, t);
                }
            }
            lv.touched.list.clear();
        }
        lv.wrecords += (wbuf.len() / WINDOW_BYTES) as u64;
        if lv.wrecords > MAX_WINDOW_RECORDS || lv.dead {
            lv.wout = None;
        }
        if let Some(w) = &mut lv.wout {
            w.push(wbuf);
            w.end_bucket();
            if w.raw_len() >= WINDOW_BLOCK {
                if let Err(e) = w.cut() {
                    error.get_or_insert(e);
                }
            }
        }
        lv.bucket += 1;
    }
}
