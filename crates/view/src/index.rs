//! Building the index: one merged pass over the trace.

use crate::emit::{Close, Level, Snap, Win, Writer};
use crate::flame::Calls;
use crate::fx::{FxMap, Gate};
use crate::linestate::{LineIds, LineStat, ThreadOps, Touch, TouchSet};
use crate::sparse::BlockWriter;
use crate::{Error, SPAN_BYTES};
use memlens_analysis::cachesim::Annotation;
use memlens_analysis::calltree::CallTree;
use memlens_analysis::false_sharing::FalseSharing;
use memlens_analysis::heap::{AllocFns, Heap, HeapConfig};
use memlens_analysis::prefetch_line as prefetch;
use memlens_analysis::sharing::Sharing;
use memlens_analysis::{CurrentVariable, Kernel, Named, Namer, Piped, Render, RenderOpts};
use memlens_format::{AccessKind, Event, Pc, ThreadId, TraceReader};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::File;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use std::path::Path;

/// How the index is built.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// Working-set age: a line leaves the map after this many new lines entered
    /// since it was last touched (ExpertMemer's scheme; 512 lines = 32 KiB of L1).
    pub max_age: u32,
    /// Most time buckets at the finest level; the finest bucket is
    /// `ceil(memory operations / max_buckets)` operations wide (1 for small traces).
    pub max_buckets: u64,
    /// Cache line size in bytes (a power of two, at most 64).
    pub line: u64,
    /// Rows kept per table.
    pub top: usize,
    /// Largest index in bytes (the finest levels are left out to fit; the coarsest
    /// level always stays). `None`: the trace's size + 16 MiB.
    pub max_bytes: Option<u64>,
    /// Allocation wrappers whose callers are the heap's sites (`--alloc-fn`).
    pub alloc_fns: AllocFns,
    /// The globs that named them, as given (kept in `meta.json`: an index built
    /// with other ones is not current).
    pub alloc_fn_globs: Vec<String>,
}

/// What an index may take beyond the trace's own size.
pub const DEFAULT_SLACK: u64 = 16 << 20;

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            max_age: 256,
            max_buckets: 1 << 16,
            line: 64,
            top: 100,
            max_bytes: None,
            alloc_fns: AllocFns::default(),
            alloc_fn_globs: Vec::new(),
        }
    }
}

/// Most events in a run's body the builder takes at once (the decoder folds at
/// most 64).
const MAX_BODY: usize = 64;

/// Iterations ahead whose lines' records a run fetches into the cache.
const AHEAD: u64 = 8;
/// Nice steps the bucket writer's thread runs below the builder's.
const WRITER_NICE: i32 = 10;

/// One access of a run's body, its code address as an id.
struct RunAccess {
    pc: u32,
    addr: u64,
    delta: u64,
    len: u64,
    loads: u32,
    stores: u32,
    var: Option<u32>,
}

/// Zoom factor between levels.
pub(crate) const LEVEL_FACTOR: u64 = 4;

/// Closes handed to the writer at once: at least 16 holding at least 8,192 line
/// touches and code-address sums, or 1,024 (a trace of few events has thousands of
/// near-empty buckets, and sends of 16 woke the writer 3,000 times for hotspots.c),
/// and hand-overs not yet written at most (the builder waits beyond).
const CLOSES_PER_SEND: usize = 16;
const ITEMS_PER_SEND: usize = 8192;
const MAX_CLOSES_PER_SEND: usize = 1024;
const SENDS_IN_FLIGHT: usize = 4;

/// Slots of the builder's pc and line caches (powers of two).
const PC_CACHE: usize = 256;

#[derive(Default, Clone)]
struct PcStat {
    loads: u64,
    stores: u64,
    bytes: u64,
    shared: u64,
    misses: u64,
    mem: u64,
    threads: u64,
}

/// The index-building kernel.
struct Builder<'n> {
    namer: &'n (dyn Namer + Sync),
    opts: BuildOptions,
    shift: u32,
    op: u64,
    /// First operation of the next finest bucket: buckets are closed only there.
    next_close: u64,
    ins: u64,
    /// Lines in the working set (the writer keeps the set itself).
    ws: usize,
    /// Each line whose stamp was set in the last `max_age` insertions, with the
    /// stamp, oldest first: a new line's insertion checks those that come of age
    /// (a line touched since has a newer entry and stays).
    ring: VecDeque<(u32, u64)>,
    max_rows: usize,
    /// The finest level's bucket size and current bucket (the writer keeps the
    /// levels).
    bsize0: u64,
    bucket0: u64,
    /// What the next close hands the writer, filled as the accesses go.
    close: Close,
    /// Closes not yet handed over: they go [`CLOSES_PER_SEND`] at a time (a
    /// hand-over may wake the writer: a system call).
    ready: Vec<Close>,
    /// Line touches and code-address sums in `ready`.
    ready_items: usize,
    to_writer: Option<SyncSender<Vec<Close>>>,
    /// Hand-overs the writer is done with, and their closes, for reuse.
    spare: Option<Receiver<Vec<Close>>>,
    free: Vec<Close>,
    pcs: FxMap<Pc, u32>,
    /// Recent pc → pc id, direct-mapped: a loop's few pcs skip the map.
    pc_cache: Vec<(Pc, u32)>,
    pc_list: Vec<Pc>,
    pc_stats: Vec<PcStat>,
    pc_win0: Vec<Win>,
    win0_list: Vec<u32>,
    lines: LineIds,
    line_stats: Vec<LineStat>,
    touched0: Vec<u32>,
    funcs: HashMap<String, u32>,
    func_list: Vec<String>,
    /// Per function: the source file of its entry (the page's library filter).
    func_files: Vec<String>,
    func_of_pc: HashMap<Pc, u32>,
    calls: Calls,
    annotation: Option<Annotation>,
    access_index: FxMap<ThreadId, u64>,
    threads: ThreadOps,
    lanes: crate::lanes::LaneBuilder,
    /// Per variable, when the namer names each access.
    vars: crate::vars::VarCounts,
}

impl<'n> Builder<'n> {
    fn pc_id(&mut self, pc: Pc) -> u32 {
        let slot = (pc.0 ^ (pc.0 >> 8)) as usize & (PC_CACHE - 1);
        if self.pc_cache[slot].0 == pc {
            return self.pc_cache[slot].1;
        }
        let i = match self.pcs.get(&pc) {
            Some(&i) => i,
            None => {
                let i = self.pc_list.len() as u32;
                self.pcs.insert(pc, i);
                self.pc_list.push(pc);
                self.pc_stats.push(PcStat::default());
                self.pc_win0.push(Win::default());
                i
            }
        };
        self.pc_cache[slot] = (pc, i);
        i
    }

    /// The id of cache line `line`; `lo` names it when it is new.
    #[inline]
    fn line_id(&mut self, line: u64, lo: u64) -> u32 {
        let slot = self.lines.slot(line);
        if *slot != 0 {
            return *slot - 1;
        }
        let i = self.line_stats.len() as u32;
        *slot = i + 1;
        self.close.new_lines.push((line << self.shift, lo));
        self.line_stats.push(LineStat { thread: 255, ..LineStat::default() });
        i
    }

    fn func_id(&mut self, pc: Pc) -> u32 {
        if let Some(&i) = self.func_of_pc.get(&pc) {
            return i;
        }
        let code = self.namer.function(pc);
        let name = code.function;
        let i = match self.funcs.get(&name) {
            Some(&i) => i,
            None => {
                let i = self.func_list.len() as u32;
                self.funcs.insert(name.clone(), i);
                self.func_list.push(name);
                self.func_files.push(code.file);
                i
            }
        };
        self.func_of_pc.insert(pc, i);
        i
    }

    /// Closes every level's buckets that end at or before operation `op`: hands
    /// the writer the finest bucket's touches and sums, with the state of each
    /// line touched (see [`Close`]).
    fn close_buckets(&mut self, op: u64) {
        let next = self.free.pop().unwrap_or_default();
        let mut c = std::mem::replace(&mut self.close, next);
        (c.op, c.ins, c.ws) = (op, self.ins, self.ws);
        for id in self.touched0.drain(..) {
            let ls = &mut self.line_stats[id as usize];
            ls.t0_live = false;
            let snap = Snap {
                live: ls.live,
                used: ls.mask.count_ones() as u8,
                thread: ls.thread,
                stamp: ls.stamp,
            };
            c.touched.push((id, ls.t0, snap));
        }
        for pc in self.win0_list.drain(..) {
            c.wins.push((pc, std::mem::take(&mut self.pc_win0[pc as usize])));
        }
        self.ready_items += c.touched.len() + c.wins.len();
        self.ready.push(c);
        let n = self.ready.len();
        if (n >= CLOSES_PER_SEND && self.ready_items >= ITEMS_PER_SEND) || n >= MAX_CLOSES_PER_SEND
        {
            self.hand_over();
        }
        while (self.bucket0 + 1) * self.bsize0 <= op {
            self.bucket0 += 1;
        }
        self.next_close = (self.bucket0 + 1) * self.bsize0;
    }

    /// Hands the closes ready to the writer.
    fn hand_over(&mut self) {
        let mut next = Vec::new();
        if let Some(mut back) = self.spare.as_ref().and_then(|r| r.try_recv().ok()) {
            self.free.append(&mut back);
            next = back;
        }
        let batch = std::mem::replace(&mut self.ready, next);
        self.ready_items = 0;
        if let Some(tx) = &self.to_writer {
            // a send fails only when the writer is gone (it panicked): the build
            // reports that when it joins it
            let _ = tx.send(batch);
        }
    }

    /// One memory operation touching `[addr, addr+len)`, of the current variable.
    fn access(&mut self, t: ThreadId, pc: Pc, addr: u64, len: u64, loads: u32, stores: u32) {
        let var = self.vars.begin(1u64 << (t.0 % 64), loads, stores);
        self.access_of(t, pc, addr, len, loads, stores, var);
    }

    /// [`Builder::access`] of variable `var` (counted by the caller).
    #[allow(clippy::too_many_arguments)]
    fn access_of(
        &mut self,
        t: ThreadId,
        pc: Pc,
        addr: u64,
        len: u64,
        loads: u32,
        stores: u32,
        var: Option<u32>,
    ) {
        let op = self.op;
        if op >= self.next_close {
            self.close_buckets(op);
        }
        let pcid = self.pc_id(pc);
        let tbit = 1u64 << (t.0 % 64);
        let shared = self.touch_lines(t, pcid, addr, len, loads, stores, var);
        let ps = &mut self.pc_stats[pcid as usize];
        ps.loads += loads as u64;
        ps.stores += stores as u64;
        ps.bytes += len;
        ps.threads |= tbit;
        let w = &mut self.pc_win0[pcid as usize];
        if w.loads == 0 && w.stores == 0 {
            self.win0_list.push(pcid);
        }
        w.loads = w.loads.saturating_add(loads);
        w.stores = w.stores.saturating_add(stores);
        w.bytes = w.bytes.saturating_add(len);
        if shared {
            ps.shared += 1;
            w.shared += 1;
        }
        if let Some(a) = &self.annotation {
            let k = self.access_index.entry(t).or_insert(0);
            if let Some(level) = a.thread(t).and_then(|s| s.get(*k)) {
                if level > 0 {
                    ps.misses += 1;
                    w.misses += 1;
                }
                if level as u32 >= a.levels {
                    ps.mem += 1;
                    w.mem += 1;
                }
            }
            *k += 1;
        }
        self.threads.add(t.0, 1);
        self.op += 1;
    }

    /// What an access by code address `pcid` of variable `var` does to the lines
    /// of `[addr, addr+len)` and the working set (not to the code address's sums);
    /// true when another thread touched one of them before (shared).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn touch_lines(
        &mut self,
        t: ThreadId,
        pcid: u32,
        addr: u64,
        len: u64,
        loads: u32,
        stores: u32,
        var: Option<u32>,
    ) -> bool {
        self.touch_lines_from(t, pcid, addr, len, loads, stores, var, &mut (u64::MAX, 0))
    }

    /// [`Builder::touch_lines`] given the last line this access's code touched
    /// and its id (`last`, updated; a run's access that stays in its line skips
    /// the id lookup).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn touch_lines_from(
        &mut self,
        t: ThreadId,
        pcid: u32,
        addr: u64,
        len: u64,
        loads: u32,
        stores: u32,
        var: Option<u32>,
        known: &mut (u64, u32),
    ) -> bool {
        let tb = (t.0.min(254)) as u8;
        let tbit = 1u64 << (t.0 % 64);
        let lsz = self.opts.line;
        let first = addr >> self.shift;
        let last = (addr + len.max(1) - 1) >> self.shift;
        // A huge memcpy/memset: the map shows its first 4096 lines.
        let last = last.min(first + 4095);
        let mut shared = false;
        for line in first..=last {
            let lo = (line << self.shift).max(addr);
            let hi = ((line + 1) << self.shift).min(addr + len.max(1));
            let off = (lo & (lsz - 1)) as u32;
            let nbytes = (hi - lo) as u32;
            let bits = if nbytes >= 64 { u64::MAX } else { ((1u64 << nbytes) - 1) << off };
            let id = if known.0 == line { known.1 } else { self.line_id(line, lo) };
            *known = (line, id);
            // The variable's set of lines: only when the line last held another one.
            let ls = &mut self.line_stats[id as usize];
            if let Some(v) = var {
                if ls.var_memo != v + 1 {
                    ls.var_memo = v + 1;
                    self.vars.line(v, line);
                }
            }
            if ls.threads & !tbit != 0 {
                shared = true;
            }
            ls.threads |= tbit;
            ls.thread = tb;
            if !ls.t0_live {
                ls.t0_live = true;
                ls.t0 = Touch::default();
                self.touched0.push(id);
            }
            ls.t0.fold(&Touch { loads, stores, pc: pcid, off: off as u8 });
            self.touch_ws(id, bits);
        }
        self.max_rows = self.max_rows.max(self.ws);
        shared
    }

    /// A loop's folded run (see [`Kernel::process_run`]): each access's lines one
    /// by one as [`Builder::access_of`] would, the code addresses' and variables'
    /// sums added once per body event (at every bucket close and at the end).
    fn run(&mut self, t: ThreadId, body: &[RunAccess], reps: u64) {
        let tbit = 1u64 << (t.0 % 64);
        let p = body.len();
        // accesses and shared ones per body event since the last flush, and the
        // body event the count started at (code addresses enter a bucket's list
        // in the order of their first access)
        let mut cnt = [0u64; MAX_BODY];
        let mut shared = [0u64; MAX_BODY];
        let mut from = 0;
        // each body access's last line and its id
        let mut known = [(u64::MAX, 0u32); MAX_BODY];
        for b in body {
            self.pc_stats[b.pc as usize].threads |= tbit;
        }
        for k in 1..=reps {
            // the lines a few iterations on: their records are on their way by then
            if k + AHEAD <= reps {
                for b in body {
                    let a = b.addr.wrapping_add(b.delta.wrapping_mul(k + AHEAD));
                    if let Some(id) = self.lines.cached(a >> self.shift) {
                        prefetch(&self.line_stats[id as usize]);
                    }
                }
            }
            for (j, b) in body.iter().enumerate() {
                if self.op >= self.next_close {
                    self.flush_run(body, from, &mut cnt, &mut shared);
                    from = j;
                    self.close_buckets(self.op);
                }
                let a = b.addr.wrapping_add(b.delta.wrapping_mul(k));
                let (l, s, v) = (b.loads, b.stores, b.var);
                let sh = self.touch_lines_from(t, b.pc, a, b.len, l, s, v, &mut known[j]);
                cnt[j] += 1;
                shared[j] += u64::from(sh);
                self.op += 1;
            }
        }
        self.flush_run(body, from, &mut cnt, &mut shared);
        self.threads.add(t.0, reps * p as u64);
    }

    /// Adds a run's counts since the last flush to its code addresses' sums.
    fn flush_run(&mut self, body: &[RunAccess], from: usize, cnt: &mut [u64], shared: &mut [u64]) {
        let p = body.len();
        for j in (from..p).chain(0..from) {
            let (n, sh) = (cnt[j], shared[j]);
            if n == 0 {
                continue;
            }
            let b = &body[j];
            let (l, s) = (n * u64::from(b.loads), n * u64::from(b.stores));
            let ps = &mut self.pc_stats[b.pc as usize];
            ps.loads += l;
            ps.stores += s;
            ps.bytes += n * b.len;
            ps.shared += sh;
            let w = &mut self.pc_win0[b.pc as usize];
            if w.loads == 0 && w.stores == 0 {
                self.win0_list.push(b.pc);
            }
            let sat = |x: u64| x.min(u64::from(u32::MAX)) as u32;
            w.loads = w.loads.saturating_add(sat(l));
            w.stores = w.stores.saturating_add(sat(s));
            w.bytes = w.bytes.saturating_add(n * b.len);
            w.shared = w.shared.wrapping_add(sh as u32);
            cnt[j] = 0;
            shared[j] = 0;
        }
    }

    /// ExpertMemer's working set: a touched line is refreshed; a new line enters in
    /// address order and every other line ages by one; lines whose age ran out leave.
    fn touch_ws(&mut self, id: u32, bits: u64) {
        let max_age = self.opts.max_age as u64;
        let ls = &mut self.line_stats[id as usize];
        if ls.live {
            ls.mask |= bits;
            if ls.stamp != self.ins {
                ls.stamp = self.ins;
                self.ring.push_back((id, self.ins));
            }
            return;
        }
        self.ins += 1;
        while let Some(&(o, stamp)) = self.ring.front() {
            if stamp + max_age > self.ins {
                break;
            }
            self.ring.pop_front();
            let s = &mut self.line_stats[o as usize];
            if s.live && s.stamp + max_age <= self.ins {
                s.live = false;
                self.ws -= 1;
                self.close.evicted.push(o);
            }
        }
        self.ring.push_back((id, self.ins));
        let ls = &mut self.line_stats[id as usize];
        ls.live = true;
        ls.stamp = self.ins;
        ls.mask = bits;
        self.ws += 1;
    }
}

impl Builder<'_> {
    /// The events [`Builder`]'s `process` reads (the others need not reach it).
    fn wants(ev: &Event) -> bool {
        matches!(
            ev,
            Event::Access { .. }
                | Event::Range { .. }
                | Event::Rmw { .. }
                | Event::FuncEnter { .. }
                | Event::FuncExit { .. }
                | Event::Time(_)
                | Event::ThreadStart { .. }
                | Event::ThreadName(_)
        )
    }
}

impl Kernel for Builder<'_> {
    type Output = ();

    fn process(&mut self, t: ThreadId, ev: &Event) {
        // the variants read here are `Builder::wants`' list: keep the two in step
        match ev {
            Event::Access { pc, addr, size, kind, .. } => {
                let (l, s) = if *kind == AccessKind::Read { (1, 0) } else { (0, 1) };
                self.access(t, *pc, addr.0, *size as u64, l, s);
            }
            Event::Range { pc, addr, len, kind } => {
                let (l, s) = if *kind == AccessKind::Read { (1, 0) } else { (0, 1) };
                self.access(t, *pc, addr.0, *len, l, s);
            }
            Event::Rmw { pc, addr, size, .. } => self.access(t, *pc, addr.0, *size as u64, 1, 1),
            Event::FuncEnter { pc, frame, .. } => {
                let f = self.func_id(*pc);
                self.calls.enter(self.namer, t, f, *pc, frame.0, self.op);
            }
            Event::FuncExit { pc } => self.calls.exit(self.namer, t, *pc, self.op),
            Event::Time(ns) => {
                let mine = self.threads.get(t.0);
                self.lanes.stamp(t, *ns, self.op, mine);
            }
            Event::ThreadStart { os_tid, name, .. } => self.lanes.start(t, *os_tid, name),
            Event::ThreadName(name) => self.lanes.rename(t, name),
            _ => {}
        }
    }

    /// Starts loading the record of the line an access a few events on touches.
    #[inline]
    fn prefetch(&self, _t: ThreadId, ev: &Event) {
        if let Event::Access { addr, .. } | Event::Rmw { addr, .. } = ev {
            if let Some(id) = self.lines.cached(addr.0 >> self.shift) {
                prefetch(&self.line_stats[id as usize]);
            }
        }
    }

    /// Each access of the run in turn, of its body event's variable.
    fn process_run(&mut self, t: ThreadId, body: &[Event], deltas: &[u64], reps: u64) {
        let ids = self.vars.run_ids();
        let tbit = 1u64 << (t.0 % 64);
        let mut accs = Vec::with_capacity(body.len());
        for (j, (ev, &delta)) in body.iter().zip(deltas).enumerate() {
            let (pc, addr, len, kind) = match *ev {
                Event::Access { pc, addr, size, kind, .. } => (pc, addr, u64::from(size), kind),
                Event::Range { pc, addr, len, kind } => (pc, addr, len, kind),
                _ => continue,
            };
            let (loads, stores) = if kind == AccessKind::Read { (1, 0) } else { (0, 1) };
            let id = ids.get(j).copied().unwrap_or(CurrentVariable::NONE);
            let var = self.vars.begin_as(id, tbit, reps * loads as u64, reps * stores as u64);
            let pc = self.pc_id(pc);
            accs.push(RunAccess { pc, addr: addr.0, delta, len, loads, stores, var });
        }
        if self.annotation.is_none() && accs.len() <= MAX_BODY {
            return self.run(t, &accs, reps);
        }
        // misses are read per access from the annotation
        for k in 1..=reps {
            for b in &accs {
                let a = b.addr.wrapping_add(b.delta.wrapping_mul(k));
                self.access_of(t, self.pc_list[b.pc as usize], a, b.len, b.loads, b.stores, b.var);
            }
        }
    }

    fn named_runs(&self) -> bool {
        true
    }

    fn wants_runs(&self) -> bool {
        true
    }

    fn finish(self) {}
}

/// Lowers the calling thread's scheduling priority by `n` nice steps (Linux: nice is
/// per thread). Best effort: an error leaves it as it was.
fn lower_priority(n: i32) {
    #[cfg(target_os = "linux")]
    if n > 0 {
        // SAFETY: plain system calls on the calling thread's own id.
        unsafe {
            let tid = libc::gettid() as libc::id_t;
            let cur = libc::getpriority(libc::PRIO_PROCESS, tid);
            libc::setpriority(libc::PRIO_PROCESS, tid, (cur + n).min(19));
        }
    }
}

/// Level of a span in the flame files: durations in `[4^k, 4^(k+1))`, 0..4 in level 0.
pub(crate) fn span_level(dur: u64) -> usize {
    let mut k = 0;
    let mut lim = LEVEL_FACTOR;
    while dur >= lim {
        k += 1;
        lim = lim.saturating_mul(LEVEL_FACTOR);
    }
    k
}

/// Builds the index of `r` into `dir` (replacing an older index there).
/// `progress(done, total)` gets event counts. It is built in a fresh directory and
/// moved into place (`place::replace_dir`), so a link planted at `dir` or
/// inside it is never written through.
pub fn build(
    r: &TraceReader,
    trace: &Path,
    dir: &Path,
    namer: &(dyn Namer + Sync),
    opts: BuildOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Value, Error> {
    if !opts.line.is_power_of_two() || opts.line > 64 || opts.max_age == 0 {
        return Err(Error::Config("line must be a power of two ≤ 64 and max_age > 0".into()));
    }
    crate::place::replace_dir(dir, |dir| {
        let io = |what: &str, p: &Path, e: std::io::Error| {
            Error::Io(format!("cannot {what} {}: {e}", p.display()))
        };
        std::fs::create_dir_all(dir).map_err(|e| io("create", dir, e))?;
        let mut total_ops = 0u64;
        let mut total_events = 0u64;
        for s in r.streams() {
            total_ops += s.counts.loads as u64 + s.counts.stores as u64;
            total_events += s.counts.events as u64;
        }
        let budget = match opts.max_bytes {
            Some(n) => n,
            None => std::fs::metadata(trace).map_or(0, |m| m.len()) + DEFAULT_SLACK,
        };
        // The finest bucket: as many operations as needed to stay within max_buckets.
        let fine = total_ops.div_ceil(opts.max_buckets.max(1)).max(1);
        let mut levels = Vec::new();
        let mut bsize = fine;
        loop {
            let p = dir.join(format!("cells{}.bin", levels.len()));
            let f = File::create(&p).map_err(|e| io("create", &p, e))?;
            let wp = dir.join(format!("window{}.bin", levels.len()));
            let wf = File::create(&wp).map_err(|e| io("create", &wp, e))?;
            levels.push(Level {
                bsize,
                bucket: 0,
                touched: TouchSet::default(),
                win: FxMap::default(),
                offsets: Vec::new(),
                cells: 0,
                out: BlockWriter::new(f),
                since_key: 0,
                dead: false,
                woffsets: Vec::new(),
                wrecords: 0,
                wout: Some(BlockWriter::new(wf)),
            });
            if total_ops.div_ceil(bsize) <= 256 {
                break;
            }
            bsize *= LEVEL_FACTOR;
        }
        let annotation = {
            let p = annotation_path(trace);
            match File::open(&p) {
                Ok(f) => Some(Annotation::read_from(std::io::BufReader::new(f))?),
                Err(_) => None,
            }
        };
        let has_annotation = annotation.is_some();
        // the call tree counts misses from its own copy (the builder owns the other)
        let tree_annotation = annotation.clone();
        let mut tree = CallTree::new(namer).with_annotation(tree_annotation.as_ref());
        // The analysis kernels for the tables take a second pass on another core;
        // sharing and the variables go with the pass that names each access.
        let access = namer.access_namer();
        let bsize0 = levels[0].bsize;
        let mut w = Writer::new(namer, levels, access.is_none(), budget);
        let (to_writer, closes) = sync_channel::<Vec<Close>>(SENDS_IN_FLIGHT);
        let (back, spare) = sync_channel::<Vec<Close>>(SENDS_IN_FLIGHT + 1);
        let mut b = Builder {
            namer,
            shift: opts.line.trailing_zeros(),
            opts: opts.clone(),
            op: 0,
            next_close: 0,
            ins: 0,
            ws: 0,
            ring: VecDeque::new(),
            max_rows: 0,
            bsize0,
            bucket0: 0,
            close: Close::default(),
            ready: Vec::new(),
            ready_items: 0,
            to_writer: Some(to_writer),
            spare: Some(spare),
            free: Vec::new(),
            pcs: FxMap::default(),
            pc_cache: vec![(Pc(u64::MAX), 0); PC_CACHE],
            pc_list: Vec::new(),
            pc_stats: Vec::new(),
            pc_win0: Vec::new(),
            win0_list: Vec::new(),
            lines: LineIds::default(),
            line_stats: Vec::new(),
            touched0: Vec::new(),
            funcs: HashMap::new(),
            func_list: Vec::new(),
            func_files: Vec::new(),
            func_of_pc: HashMap::new(),
            calls: Calls::default(),
            annotation,
            access_index: FxMap::default(),
            threads: ThreadOps::default(),
            lanes: Default::default(),
            vars: crate::vars::VarCounts::default(),
        };
        let cur = CurrentVariable::default();
        let streams: std::collections::BTreeSet<ThreadId> =
            r.streams().iter().map(|s| s.thread).collect();
        let multi = streams.len() > 1;
        // the writer of every level's buckets on a thread of its own (see `emit`)
        let (tables, end) = std::thread::scope(|ws| {
            let writer = ws.spawn(move || {
                // The builder is the critical path: the writer takes what the
                // builder and the naming pass leave of the two cores (sharing
                // them evenly made big.c's index 71–75 s against 65–67 s).
                lower_priority(WRITER_NICE);
                for mut batch in closes {
                    for c in batch.iter_mut() {
                        w.close(c);
                    }
                    let _ = back.try_send(batch);
                }
                w
            });
            let tables = std::thread::scope(|sc| {
                let heap_config = HeapConfig {
                    timeline: Some(fine),
                    alloc_fns: opts.alloc_fns.clone(),
                    ..HeapConfig::default()
                };
                // With one thread the false-sharing table is empty and the heap
                // kernel goes with the naming pass (one decode of the trace less);
                // with more both take a pass of their own.
                let tables = multi.then(|| {
                    let k = (FalseSharing::default(), Heap::new(heap_config.clone()));
                    sc.spawn(|| memlens_analysis::drive_merged(r, k, |_| {}))
                });
                let heap_here = Gate { on: !multi, k: Heap::new(heap_config) };
                let tick = |n| progress(n, total_events);
                let mine = match access {
                    Some(n) => {
                        // the map builder on the other core: it reads each access's
                        // variable from its own copy, set as the access reaches it
                        let mine = CurrentVariable::default();
                        b.vars = crate::vars::VarCounts::new(Some(mine.clone()));
                        let sharing = Gate { on: multi, k: Sharing::with_variables(cur.clone()) };
                        let vars = Some((cur.clone(), mine));
                        let piped = Piped::spawn(sc, &mut b, vars, Builder::wants);
                        let k = (piped, sharing, (&mut tree, heap_here));
                        let k = Named::new(n, cur, k);
                        memlens_analysis::drive_merged(r, k, tick).map(
                            |(((), mut s, ((), h)), names)| {
                                s.set_variables(names.clone());
                                (s, Some(names), h)
                            },
                        )
                    }
                    None => {
                        let piped = Piped::spawn(sc, &mut b, None, Builder::wants);
                        let sharing = Gate { on: multi, k: Sharing::default() };
                        let k = (piped, sharing, (&mut tree, heap_here));
                        memlens_analysis::drive_merged(r, k, tick)
                            .map(|((), s, ((), h))| (s, None, h))
                    }
                };
                let tables = match tables {
                    Some(t) => {
                        Some(t.join().map_err(|_| Error::Config("table pass panicked".into()))??)
                    }
                    None => None,
                };
                let (sharing, var_names, heap) = mine?;
                let (false_sharing, heap) =
                    tables.unwrap_or_else(|| (FalseSharing::default().finish(), heap));
                Ok::<_, Error>((sharing, var_names, false_sharing, heap))
            });
            // Close the last buckets (the writer then writes every level's last).
            let end = b.op;
            b.close_buckets(end.div_ceil(bsize0) * bsize0);
            b.hand_over();
            b.to_writer = None;
            let w = writer.join().map_err(|_| Error::Config("index writer panicked".into()));
            Ok::<_, Error>((tables.and_then(|t| w.map(|w| (t, w))), end))
        })?;
        let ((sharing, var_names, false_sharing, heap), mut w) = tables?;
        w.finish(end);
        // the frames still open
        b.calls.finish(end);
        if let Some(e) = w.error.take() {
            return Err(Error::Io(format!("cannot write the index: {e}")));
        }
        // Every level's files; which of them stay is decided by the size budget below.
        let mut level_meta = Vec::new();
        let mut sizes = Vec::new();
        for (i, lv) in std::mem::take(&mut w.levels).into_iter().enumerate() {
            let mut offsets = lv.offsets;
            offsets.push(lv.cells);
            let nb = offsets.len() as u64 - 1;
            let dead = lv.dead;
            let (blocks, cbytes) = lv.out.finish().map_err(|e| io("write", dir, e))?;
            let p = dir.join(format!("offsets{i}.bin"));
            let bytes: Vec<u8> = offsets.iter().flat_map(|o| o.to_le_bytes()).collect();
            std::fs::write(&p, &bytes).map_err(|e| io("write", &p, e))?;
            let p = dir.join(format!("blocks{i}.bin"));
            std::fs::write(&p, &blocks).map_err(|e| io("write", &p, e))?;
            let cell_size =
                if dead { u64::MAX / 4 } else { cbytes + bytes.len() as u64 + blocks.len() as u64 };
            // Window metrics: kept unless the level grew too large (then the range
            // metrics come from a coarser level).
            let wp = dir.join(format!("window{i}.bin"));
            let mut windows = Value::Null;
            let mut win_size = 0;
            match lv.wout {
                Some(w) => {
                    let (wblocks, wbytes) = w.finish().map_err(|e| io("write", &wp, e))?;
                    let mut wo = lv.woffsets;
                    wo.push(lv.wrecords);
                    let p = dir.join(format!("woffsets{i}.bin"));
                    let bytes: Vec<u8> = wo.iter().flat_map(|o| o.to_le_bytes()).collect();
                    std::fs::write(&p, &bytes).map_err(|e| io("write", &p, e))?;
                    let p = dir.join(format!("wblocks{i}.bin"));
                    std::fs::write(&p, &wblocks).map_err(|e| io("write", &p, e))?;
                    windows = json!(lv.wrecords);
                    win_size = wbytes + bytes.len() as u64 + wblocks.len() as u64;
                }
                None => {
                    let _ = std::fs::remove_file(&wp);
                }
            }
            sizes.push((cell_size, win_size));
            level_meta.push(json!({"bucket": lv.bsize, "buckets": nb,
                "cells": lv.cells, "windows": windows, "bytes": cell_size}));
        }
        // Flame spans, one file per duration class, sorted by start.
        let mut by_level: Vec<Vec<&crate::flame::Span>> = Vec::new();
        for s in &b.calls.spans {
            let k = span_level(s.end - s.start);
            if by_level.len() <= k {
                by_level.resize_with(k + 1, Vec::new);
            }
            by_level[k].push(s);
        }
        let mut span_levels = Vec::new();
        for (k, spans) in by_level.iter_mut().enumerate() {
            spans.sort_by_key(|s| (s.start, s.thread, s.depth));
            let mut bytes = Vec::with_capacity(spans.len() * SPAN_BYTES);
            for s in spans.iter() {
                bytes.extend_from_slice(&s.start.to_le_bytes());
                bytes.extend_from_slice(&s.end.to_le_bytes());
                bytes.extend_from_slice(&s.func.to_le_bytes());
                bytes.extend_from_slice(&s.thread.to_le_bytes());
                bytes.extend_from_slice(&s.depth.to_le_bytes());
            }
            let p = dir.join(format!("spans{k}.bin"));
            std::fs::write(&p, bytes).map_err(|e| io("write", &p, e))?;
            span_levels.push(spans.len());
        }
        let max_depth = b.calls.spans.iter().map(|s| s.depth).max().unwrap_or(0);
        // Lines sorted by address, for the by-variable Y mode, with their variable bands.
        let mut order: Vec<u32> = (0..w.line_addrs.len() as u32).collect();
        order.sort_by_key(|&i| w.line_addrs[i as usize]);
        let mut bytes = Vec::with_capacity(order.len() * 8);
        let mut line_vars = Vec::with_capacity(order.len() * 4);
        let mut bands: Vec<Value> = Vec::new();
        let mut cur: Option<(u32, usize, u64)> = None;
        for (rank, &i) in order.iter().enumerate() {
            let addr = w.line_addrs[i as usize];
            bytes.extend_from_slice(&addr.to_le_bytes());
            let var = w.line_vars[i as usize];
            line_vars.extend_from_slice(&var.to_le_bytes());
            match cur {
                Some((v, r0, prev))
                    if w.names.var_list[v as usize].1 == w.names.var_list[var as usize].1
                        && !w.names.var_list[var as usize].1.is_empty()
                        && addr == prev + opts.line =>
                {
                    cur = Some((v, r0, addr))
                }
                _ => {
                    if let Some((v, r0, _)) = cur {
                        bands.push(json!([r0, rank, v]));
                    }
                    cur = Some((var, rank, addr));
                }
            }
        }
        if let Some((v, r0, _)) = cur {
            bands.push(json!([r0, order.len(), v]));
        }
        let p = dir.join("lines.bin");
        std::fs::write(&p, &bytes).map_err(|e| io("write", &p, e))?;
        let p = dir.join("linevars.bin");
        std::fs::write(&p, &line_vars).map_err(|e| io("write", &p, e))?;
        let offset = r.meta().options.iter().rev().find(|o| o.0 == "clock_offset");
        let offset = offset.and_then(|o| o.1.parse::<i64>().ok());
        let ops_of = |t: u32| b.threads.get(t);
        let (lanes, time, lane_bytes) =
            std::mem::take(&mut b.lanes).finish(dir, ops_of, end, offset)?;
        let mut fixed = (bytes.len() + line_vars.len()) as u64 + lane_bytes;
        fixed += crate::profile::write(dir, namer, &tree.finish(), &heap, fine)?;
        fixed += span_levels.iter().sum::<usize>() as u64 * SPAN_BYTES as u64;
        // Per source line: pcs named once.
        let mut pcs = Vec::new();
        let mut by_src: BTreeMap<(String, String, u32), PcStat> = BTreeMap::new();
        for (i, pc) in b.pc_list.iter().enumerate() {
            let c = namer.code(*pc);
            pcs.push(json!([c.function, c.file, c.line]));
            let st = &b.pc_stats[i];
            let e = by_src.entry((c.file, c.function, c.line)).or_default();
            memlens_analysis::add_fields!(e, st; loads, stores, bytes, shared, misses, mem);
            e.threads |= st.threads;
        }
        let source: Vec<Value> = by_src
            .into_iter()
            .map(|((file, function, line), s)| {
                json!({"file": file, "function": function, "line": line, "loads": s.loads,
                    "stores": s.stores, "bytes": s.bytes, "shared": s.shared, "misses": s.misses,
                    "mem_misses": s.mem, "threads": s.threads.count_ones()})
            })
            .collect();
        // Every variable: per access when named so, else from the per-line counters;
        // the table keeps the top rows, `variables.json` all (the diff of two traces).
        let all_vars =
            match &var_names {
                Some(names) => b.vars.top(names, usize::MAX),
                None => crate::vars::from_lines(
                    b.line_stats.iter().zip(&w.line_vars).zip(&w.line_totals).map(
                        |((ls, &v), t)| (&*w.names.var_list[v as usize].1, t.0, t.1, ls.threads),
                    ),
                ),
            };
        fixed += crate::vars::write_json(dir, crate::vars::VARIABLES_FILE, &all_vars)?;
        fixed += crate::vars::write_json(
            dir,
            crate::diff::HEAP_FILE,
            &crate::diff::heap_json(namer, &heap),
        )?;
        let top_vars: Vec<Value> = all_vars.into_iter().take(opts.top).collect();
        let ropts = RenderOpts::top(opts.top);
        let tables = json!({
            "variables": top_vars,
            "sharing": sharing.render(namer, &ropts).to_json(),
            "false_sharing": false_sharing.render(namer, &ropts).to_json(),
            "heap": heap.render(namer, &ropts).to_json(),
        });
        let mut meta = json!({
            "version": crate::INDEX_VERSION,
            "trace": trace.display().to_string(),
            "ops": end,
            "events": total_events,
            "line": opts.line,
            "max_age": opts.max_age,
            "max_rows": b.max_rows,
            "distinct_lines": w.line_addrs.len(),
            "levels": level_meta,
            "span_levels": span_levels,
            "level_factor": LEVEL_FACTOR,
            "max_depth": max_depth,
            "lanes": lanes,
            "time": time,
            "threads": b.threads.sorted().into_iter().map(|(t, n)| json!([t, n])).collect::<Vec<_>>(),
            "functions": b.func_list,
            "function_files": b.func_files,
            "pcs": pcs,
            "vars": w.names.var_list.iter().map(|(n, v)| json!([&**n, &**v])).collect::<Vec<_>>(),
            "bands": bands,
            "source": source,
            "cachesim": has_annotation,
            "alloc_fn": opts.alloc_fn_globs,
            "tables": tables,
        });
        // The size budget: the finest levels (then window sums) go first.
        fixed += serde_json::to_vec(&meta).map_or(0, |t| t.len() as u64);
        let mut level_meta = std::mem::take(&mut meta["levels"]);
        if let Some(lm) = level_meta.as_array_mut() {
            crate::sparse::fit(dir, lm, &sizes, budget.saturating_sub(fixed))
                .map_err(|e| io("write", dir, e))?;
        }
        meta["levels"] = level_meta;
        let p = dir.join("meta.json");
        let text = serde_json::to_vec(&meta).map_err(|e| Error::Io(e.to_string()))?;
        std::fs::write(&p, text).map_err(|e| io("write", &p, e))?;
        Ok(meta)
    })
}

/// Where a cachesim annotation for `trace` is looked for (`TRACE.cachesim`).
pub fn annotation_path(trace: &Path) -> std::path::PathBuf {
    let mut s = trace.as_os_str().to_owned();
    s.push(".cachesim");
    s.into()
}

#[cfg(test)]
#[path = "index_tests.rs"]
pub(crate) mod tests;
