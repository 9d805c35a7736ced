//! Loops recorded as runs. memlens's LLVM pass (crates/pass) compiles a simple
//! innermost loop — no calls, a body every iteration but the last runs whole,
//! every address affine in the iteration — twice: as TSan instruments it, and
//! bare. The bare copy runs unless [`__memlens_runs_off`] is set; at each exit it
//! calls [`__memlens_loop_run`] with the iterations done, the accesses the last
//! one made, and each access's first address and stride, and the runtime writes
//! the events the instrumented copy would have:
//! two iterations, then one `repeat` of the second (the format's `codec/fold.rs`)
//! for the rest. A loop of a million iterations costs a few hundred bytes and no
//! call per access.
//!
//! The trace holds the same events, event for event, as the instrumented copy's;
//! but a run is written at the loop's exit, so a crash inside the loop loses it,
//! and its events' times are known only to lie between the stamp before them and
//! the one written after a long run (readers interpolate). Modes that
//! need each access as it happens (values, `MEMLENS_ORDER=atomic`, a live watch
//! probe) set [`__memlens_runs_off`], which sends the program into the
//! instrumented copy; `MEMLENS_LOOP_RUNS=0` does too.
//!
//! The code address of each access comes from `__memlens_loop_pc`, which the
//! pass calls once per loop and access, the first time, at a call carrying the
//! access's debug location: its return address names the same file, line,
//! column and inlined frames as the access itself.

use crate::record;
use crate::state::{self, class, guard_off, ts, BUSY};
use core::mem::MaybeUninit;
use core::sync::atomic::{compiler_fence, AtomicBool, AtomicU64, AtomicU8, Ordering::*};
use memlens_format::codec::{self, access_tag, MAX_ACCESS_LEN, MAX_REPEAT_LEN};
use memlens_format::AccessKind;

/// Set while loops must run instrumented (read by the pass's code at each loop).
#[cfg_attr(not(test), unsafe(no_mangle))]
#[allow(non_upper_case_globals)]
pub static __memlens_runs_off: AtomicU8 = AtomicU8::new(0);

/// `MEMLENS_LOOP_RUNS=0`: every loop runs instrumented.
static DISABLED: AtomicBool = AtomicBool::new(false);

/// The pass's largest body.
const MAX_EVENTS: usize = 64;
/// Events a chunk may stand for through repeats: readers decode a chunk's columns
/// whole, so a long loop is split over chunks as its raw events would be.
const CHUNK_EVENTS: u32 = 1 << 22;

/// `info` bits of an access: written, recorded as a range; the length above.
const INFO_WRITE: u64 = 1;
const INFO_RANGE: u64 = 2;

/// A loop's descriptor, a private global of the pass: `n`, `ready`, then `n`
/// infos (`len << 2 | INFO_RANGE? | INFO_WRITE?`) and `n` code addresses.
#[repr(C)]
pub struct LoopDesc {
    n: u64,
    ready: AtomicU64,
}

impl LoopDesc {
    fn words(&self) -> *const u64 {
        (self as *const LoopDesc).cast::<u64>()
    }
    /// # Safety: `j < n` and the descriptor laid out by the pass.
    unsafe fn info(&self, j: usize) -> u64 {
        *self.words().add(2 + j)
    }
    /// # Safety: as [`LoopDesc::info`].
    unsafe fn pc(&self, j: usize) -> &AtomicU64 {
        &*self.words().add(2 + self.n as usize + j).cast::<AtomicU64>()
    }
}

/// Recomputes [`__memlens_runs_off`] (at configuration, and when a watch probe
/// starts or stops).
pub(crate) fn refresh() {
    static READ: std::sync::Once = std::sync::Once::new();
    READ.call_once(|| {
        let v = std::env::var("MEMLENS_LOOP_RUNS").ok();
        let on = memlens_contract::options::flag("MEMLENS_LOOP_RUNS", v.as_deref(), true);
        DISABLED.store(!on, SeqCst);
    });
    let off = DISABLED.load(Relaxed)
        || state::VALUES.load(Relaxed)
        || crate::order::mode() == crate::order::ATOMIC
        || crate::livewatch::on();
    __memlens_runs_off.store(u8::from(off), SeqCst);
}

unsafe extern "C" fn imp_loop_pc(desc: *const LoopDesc, j: u64, pc: usize) {
    let d = &*desc;
    if j >= d.n {
        return;
    }
    d.pc(j as usize).store(pc as u64, Relaxed);
    if j + 1 == d.n {
        d.ready.store(1, Release);
    }
}

entry!("C" fn __memlens_loop_pc = "__memlens_loop_pc"; (desc: *const LoopDesc, j: u64);
    ["mov rdx, qword ptr [rsp]"] => imp_loop_pc);

/// One access of the body.
#[derive(Clone, Copy)]
struct Item {
    pc: u64,
    addr: u64,
    stride: u64,
    /// 0 for a load/store; else the range's length.
    len: u64,
    write: bool,
    tag: u8,
}

impl Item {
    fn at(&self, i: u64) -> u64 {
        self.addr.wrapping_add(self.stride.wrapping_mul(i))
    }
}

/// The bare copy of a loop ran `done` whole iterations and left the next after
/// its first `prefix` accesses (`n`: it left at the latch, whole); `arr` holds
/// each access's first address and stride. Writes their events.
///
/// # Safety
/// `desc` and `arr` as the pass lays them out.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn __memlens_loop_run(
    desc: *const LoopDesc,
    arr: *const u64,
    done: u64,
    prefix: u64,
) {
    let d = &*desc;
    let n = d.n as usize;
    if n == 0 || n > MAX_EVENTS || d.ready.load(Acquire) == 0 {
        return;
    }
    // The last iteration left at an exit after `prefix` accesses (all: the latch).
    let (trip, prefix) = if prefix >= n as u64 { (done + 1, 0) } else { (done, prefix as usize) };
    if trip == 0 && prefix == 0 {
        return;
    }
    // Uninitialised, not zeroed: a zeroing of this size is a call to `memset`,
    // which the runtime's own interposer would record.
    let mut items = [const { MaybeUninit::<Item>::uninit() }; MAX_EVENTS];
    let mut body = [const { MaybeUninit::<(u64, u64)>::uninit() }; MAX_EVENTS];
    for j in 0..n {
        let info = d.info(j);
        let len = info >> 2;
        let write = info & INFO_WRITE != 0;
        let kind = if write { AccessKind::Write } else { AccessKind::Read };
        let it = items[j].write(Item {
            pc: d.pc(j).load(Relaxed),
            addr: *arr.add(2 * j),
            stride: *arr.add(2 * j + 1),
            len: if info & INFO_RANGE != 0 { len } else { 0 },
            write,
            tag: access_tag(kind, false, len.trailing_zeros() as u8),
        });
        body[j].write((it.pc, it.stride));
    }
    // SAFETY: the first `n` of each were written just above.
    let (items, body) = unsafe {
        (
            std::slice::from_raw_parts(items.as_ptr().cast::<Item>(), n),
            std::slice::from_raw_parts(body.as_ptr().cast::<(u64, u64)>(), n),
        )
    };
    // (else every iteration is written out: two pcs that share a prediction slot
    // and move apart encode differently each time)
    let foldable = codec::repeats_alike(body);
    let mut i = 0;
    while i < trip {
        if foldable && trip - i >= 3 {
            if let Some(done) = fold(items, i, trip - i) {
                i += done;
                continue;
            }
        }
        for it in items {
            one(it, it.at(i));
        }
        i += 1;
    }
    for it in &items[..prefix] {
        one(it, it.at(trip));
    }
}

/// One event through the ordinary path (fast or general), as the instrumented
/// copy's callback would record it.
#[inline]
unsafe fn one(it: &Item, addr: u64) {
    if it.len != 0 {
        if crate::livewatch::on() {
            crate::livewatch::range(it.write, addr as usize, it.len as usize, it.pc as usize);
        }
        record::range(it.write, it.pc, addr, it.len, true);
    } else {
        if crate::livewatch::on() {
            crate::livewatch::access(it.tag, addr as usize, it.pc as usize);
        }
        record::access_tagged(it.tag, it.pc, addr);
    }
}

/// Iterations `i` and `i + 1` written out, then a `repeat` of the second for as
/// many of the `left - 2` others as this chunk may hold, all in one buffer: the
/// iterations written, or `None` when the thread is not in fast mode.
unsafe fn fold(items: &[Item], i: u64, left: u64) -> Option<u64> {
    let st = ts();
    if st.limit.load(Relaxed) == 0 || crate::livewatch::on() {
        return None;
    }
    if !record::enter(st, true) {
        return None;
    }
    let n = items.len();
    // two iterations, the repeat and a time stamp before and after it
    let need = (2 * n + 2) * MAX_ACCESS_LEN + MAX_REPEAT_LEN;
    // (`enter` wrote the time stamp if one was due; a new buffer starts with one)
    let room = |st: &state::ThreadState| {
        st.has_room(need) && st.counts().events as usize + 3 * n <= CHUNK_EVENTS as usize
    };
    if !(room(st) || state::swap_buffer(st, false) && room(st)) {
        guard_off(st);
        return None;
    }
    // Copies of the second iteration this chunk may still take after the two
    // written ones.
    let copies = |st: &state::ThreadState| {
        let spare = u64::from(CHUNK_EVENTS - st.counts().events) - 2 * n as u64;
        (left - 2).min(spare / n as u64).min(u64::from(u32::MAX) / n as u64)
    };
    let mut k = copies(st);
    // The stamp promise (one at least every 4,096 events, two op bytes an event):
    // a run of at most 4,096 events that would cross the next stamp's position
    // gets a stamp first (it ran for microseconds); a longer one gets one after.
    let events = (k + 2) * n as u64;
    if events <= 4096 && st.pos.load(Relaxed) + 2 * events as usize > st.stamp_at.get() {
        record::stamp_time(st);
        k = copies(st);
    }
    let p0 = st.pos.load(Relaxed);
    st.pos.store(p0 | BUSY, Relaxed);
    compiler_fence(SeqCst);
    let e = st.enc();
    let mut p = p0 as *mut u8;
    let write = |e: &mut memlens_format::codec::Encoder, mut p: *mut u8, i: u64| {
        for it in items {
            let a = it.at(i);
            p = if it.len != 0 {
                let kind = if it.write { AccessKind::Write } else { AccessKind::Read };
                e.range(p, kind, it.pc, a, it.len)
            } else {
                e.access(p, it.tag, it.pc, a)
            };
        }
        p
    };
    p = write(e, p, i);
    let (bo, bs) = (p as usize, e.side() as usize);
    p = write(e, p, i + 1);
    let (lo, ls) = (p as usize - bo, e.side() as usize - bs);
    if k > 0 {
        p = e.repeat(p, lo as u64, ls as u64, k, n as u64);
        for it in items {
            e.replay(it.pc, it.at(i + 1 + k));
        }
    }
    let copies = (2 + k) as u32;
    for it in items {
        st.bump_by(if it.write { class::WRITES } else { class::READS }, copies);
    }
    st.pos.store(p as usize, Release);
    // The copies take no op bytes: each of their events is charged the two it
    // would take, and a run that used up the budget gets its stamp now.
    let charge = usize::try_from(2 * k * n as u64).unwrap_or(usize::MAX);
    let at = st.stamp_at.get().saturating_sub(charge);
    if p as usize >= at {
        record::stamp_time(st);
    } else {
        st.stamp_at.set(at);
    }
    guard_off(st);
    Some(2 + k)
}
