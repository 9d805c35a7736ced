//! Per-guest-thread state: the encoder and buffer of the thread's stream, filled by
//! the callbacks that run in that (host = guest) thread.

use crate::decode::MERGE;
use crate::writer::{send, Msg};
use libc::{c_uint, c_void};
use memlens_format::codec::{access_tag, Encoder, MAX_ACCESS_LEN};
use memlens_format::{
    count, AccessKind, Addr, AllocKind, ChunkCounts, Event, FreeKind, Pc, RmwOp, ThreadId,
};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering::*};
use std::sync::Mutex;

/// Raw bytes per chunk.
const CHUNK: usize = 1 << 20;
const PC_MASK: u64 = (1 << 56) - 1;

pub struct Ts {
    stream: u32,
    vcpu: c_uint,
    raw: Vec<u8>,
    counts: ChunkCounts,
    enc: Encoder,
    /// A pending 8-byte half of a possibly 16-byte access: pc (0: none), address, store.
    pend_pc: u64,
    pend_addr: u64,
    pend_write: bool,
    done: bool,
    /// The block running now is traced.
    in_traced: bool,
}

struct Ptr(*mut Ts);
// SAFETY: only dereferenced by the owner thread, or at exit once QEMU has stopped
// the vCPUs' callbacks.
unsafe impl Send for Ptr {}

static NEXT_STREAM: AtomicU32 = AtomicU32::new(0);
static REGISTRY: Mutex<Vec<Ptr>> = Mutex::new(Vec::new());
static PARENTS: Mutex<Option<HashMap<c_uint, u32>>> = Mutex::new(None);

thread_local! {
    static TS: Cell<*mut Ts> = const { Cell::new(std::ptr::null_mut()) };
    static DTOR: Dtor = const { Dtor };
}

struct Dtor;
impl Drop for Dtor {
    fn drop(&mut self) {
        let p = TS.try_with(|c| c.get()).unwrap_or(std::ptr::null_mut());
        if !p.is_null() {
            // SAFETY: this thread's own state.
            unsafe { (*p).end(true) };
        }
    }
}

fn comm() -> String {
    std::fs::read_to_string("/proc/thread-self/comm")
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

#[inline(always)]
fn ts(vcpu: c_uint) -> &'static mut Ts {
    let p = TS.with(|c| c.get());
    if p.is_null() {
        return init(vcpu);
    }
    // SAFETY: owned by this thread, never freed.
    unsafe { &mut *p }
}

#[cold]
fn init(vcpu: c_uint) -> &'static mut Ts {
    let stream = NEXT_STREAM.fetch_add(1, Relaxed);
    let parent = PARENTS.lock().unwrap().as_mut().and_then(|m| m.remove(&vcpu));
    let t = Box::leak(Box::new(Ts {
        stream,
        vcpu,
        raw: Vec::with_capacity(CHUNK + 4096),
        counts: ChunkCounts::default(),
        enc: Encoder::new(),
        pend_pc: 0,
        pend_addr: 0,
        pend_write: false,
        done: false,
        in_traced: false,
    }));
    TS.with(|c| c.set(t));
    DTOR.with(|_| {});
    REGISTRY.lock().unwrap().push(Ptr(t));
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    t.event(&Event::ThreadStart {
        os_tid: tid,
        parent: parent.map(ThreadId),
        name: comm(),
        stack_lo: Addr(0),
        stack_hi: Addr(0),
        tls: Addr(0),
    });
    t
}

impl Ts {
    fn flush(&mut self, last: bool) {
        if self.raw.is_empty() && !last {
            return;
        }
        let raw = std::mem::replace(
            &mut self.raw,
            if last { Vec::new() } else { Vec::with_capacity(CHUNK + 4096) },
        );
        let counts = std::mem::take(&mut self.counts);
        self.enc.reset();
        if crate::PID.load(Relaxed) == std::process::id() as u64 {
            send(Msg::Chunk { stream: self.stream, raw, counts, last });
        }
    }

    #[inline(always)]
    fn room(&mut self) {
        if self.raw.len() >= CHUNK {
            self.flush(false);
        }
    }

    fn event(&mut self, ev: &Event) {
        if self.done {
            return;
        }
        self.flush_pending();
        self.enc.push(&mut self.raw, ev);
        count(&mut self.counts, ev);
        self.room();
    }

    #[inline(always)]
    fn access(&mut self, pc: u64, addr: u64, shift: u8, write: bool) {
        if self.done {
            return;
        }
        let kind = if write { AccessKind::Write } else { AccessKind::Read };
        self.raw.reserve(MAX_ACCESS_LEN);
        // SAFETY: MAX_ACCESS_LEN bytes reserved past len.
        unsafe {
            let base = self.raw.as_mut_ptr();
            let p = base.add(self.raw.len());
            let e = self.enc.access(p, access_tag(kind, false, shift), pc, addr);
            self.raw.set_len(e.offset_from(base) as usize);
        }
        self.counts.events += 1;
        if write {
            self.counts.stores += 1;
        } else {
            self.counts.loads += 1;
        }
        self.room();
    }

    #[inline(always)]
    fn flush_pending(&mut self) {
        if self.pend_pc != 0 {
            let (pc, a, w) = (self.pend_pc, self.pend_addr, self.pend_write);
            self.pend_pc = 0;
            self.access(pc, a, 3, w);
        }
    }

    /// Ends the stream (`exit`: the thread ended normally).
    fn end(&mut self, exit: bool) {
        if self.done {
            return;
        }
        self.flush_pending();
        if exit {
            self.event(&Event::ThreadExit);
        }
        self.done = true;
        self.flush(true);
    }
}

/// Memory callback: `udata` is the instruction address plus decode flags in the top byte.
pub unsafe extern "C" fn mem_cb(vcpu: c_uint, info: u32, vaddr: u64, udata: *mut c_void) {
    let t = ts(vcpu);
    if !t.in_traced {
        return;
    }
    let u = udata as u64;
    let pc = u & PC_MASK;
    let flags = (u >> 56) as u8;
    let rw = (info >> 16) & 3;
    let shift = (crate::ffi::qemu_plugin_mem_size_shift(info) & 7) as u8;
    if rw == 3 {
        let op = RmwOp::from_u8(flags & 0x7f).unwrap_or(RmwOp::FetchAdd);
        t.event(&Event::Rmw { pc: Pc(pc), addr: Addr(vaddr), size: 1 << shift, op, value: None });
        return;
    }
    let write = rw & 2 != 0;
    if flags & MERGE != 0 && shift == 3 {
        if t.pend_pc == pc && t.pend_write == write && vaddr == t.pend_addr.wrapping_add(8) {
            t.pend_pc = 0;
            t.access(pc, t.pend_addr, 4, write);
            return;
        }
        t.flush_pending();
        t.pend_pc = pc;
        t.pend_addr = vaddr;
        t.pend_write = write;
        return;
    }
    t.flush_pending();
    t.access(pc, vaddr, shift, write);
}

/// A block starts: whether it is traced.
pub unsafe extern "C" fn tb_cb(vcpu: c_uint, udata: *mut c_void) {
    ts(vcpu).in_traced = !udata.is_null();
}

/// First instruction of a function.
pub unsafe extern "C" fn enter_cb(vcpu: c_uint, udata: *mut c_void) {
    let pc = Pc(udata as u64);
    ts(vcpu).event(&Event::FuncEnter { pc, call_site: Pc(0), frame: Addr(0) });
}

/// A `ret`.
pub unsafe extern "C" fn exit_cb(vcpu: c_uint, udata: *mut c_void) {
    ts(vcpu).event(&Event::FuncExit { pc: Pc(udata as u64) });
}

/// A vCPU (guest thread) is created; in linux-user this runs in the creating thread.
pub unsafe extern "C" fn vcpu_init(_id: u64, vcpu: c_uint) {
    let p = TS.with(|c| c.get());
    if !p.is_null() {
        let parent = (*p).stream;
        PARENTS.lock().unwrap().get_or_insert_with(HashMap::new).insert(vcpu, parent);
    }
}

/// A vCPU ends: the guest thread exits.
pub unsafe extern "C" fn vcpu_exit(_id: u64, vcpu: c_uint) {
    let p = TS.with(|c| c.get());
    if !p.is_null() && (*p).vcpu == vcpu {
        (*p).end(true);
    }
}

/// An event of the preload library (see `memlens-dbi-preload`).
pub fn alloc_event(vcpu: c_uint, op: u64, a: u64, b: u64, pc: u64, c: u64) {
    let ev = match op {
        0..=7 => Event::Alloc {
            pc: Pc(pc),
            addr: Addr(a),
            size: b,
            kind: AllocKind::from_u8(op as u8).unwrap_or(AllocKind::Malloc),
            stack: Vec::new(),
        },
        16..=20 => Event::Free {
            pc: Pc(pc),
            addr: Addr(a),
            kind: FreeKind::from_u8((op - 16) as u8).unwrap_or(FreeKind::Free),
        },
        32 => Event::Realloc { pc: Pc(pc), old: Addr(c), new: Addr(a), size: b, stack: Vec::new() },
        _ => return,
    };
    ts(vcpu).event(&ev);
}

/// At process exit: the calling thread exits normally, every other stream is cut.
pub fn finish_all() {
    let me = TS.with(|c| c.get());
    let all: Vec<*mut Ts> = REGISTRY.lock().unwrap().iter().map(|p| p.0).collect();
    for p in all {
        // SAFETY: QEMU has stopped the other vCPUs' instrumentation at exit.
        unsafe { (*p).end(p == me) };
    }
}
