//! QEMU user-mode plugin behind `memlens record --dbi`: traces an unmodified x86-64
//! program into the same trace format as the compiled path.
//!
//! - Every guest instruction in the traced code (see `filter`) gets a memory
//!   callback; each access is encoded with the format's `Encoder` into a buffer of
//!   the calling host thread, which in linux-user is the guest thread (one vCPU per
//!   guest thread). Full buffers (about 1 MiB) go to a writer thread that compresses
//!   them with `ChunkEncoder` and appends them to the trace.
//! - QEMU 7.2 splits 16-byte SSE accesses into two 8-byte ones; two adjacent halves
//!   from one SSE/VEX instruction are merged back. An atomic read-modify-write
//!   arrives once, flagged read+write, and becomes an RMW event whose operation is
//!   decoded from the instruction bytes.
//! - Function entry = the first instruction of a function symbol, exit = the `ret`
//!   that loads the return address of an entered frame (or one above it: a tail
//!   call returns through the frame it replaced), seen by its memory callback; the
//!   exit's pc is the left function's first instruction + 1.
//! - Allocations and the shared-library map come from the guest preload library
//!   (`memlens-dbi-preload`) through a magic system call seen by the syscall callback.
//!
//! - Allocation call stacks come from a shadow call stack per thread: every `call`
//!   in traced code pushes (return address, stack slot) from its memory callback,
//!   every `ret` (traced or not) pops what lies at or below the slot it loads from,
//!   and an allocation keeps the frames above the allocator's stack pointer whose
//!   slot still holds their return address (so longjmp and exceptions cannot leave
//!   stale frames). Unlike a frame-pointer walk it needs no frame pointers.
//! - `--values`: QEMU 7.2 runs memory callbacks after the access and offers no
//!   register reads, so the value is read back from guest memory: exact for a
//!   thread's own accesses, for racing stores it may already be another thread's.
//!   An atomic RMW has no old value (it is overwritten by then).
//! - Static executables (no preload library can load): `malloc`, `calloc`, `realloc`
//!   and `free` are hooked by symbol. QEMU 7.2's plugin API has no register reads,
//!   but block-start callbacks are called from translated code that keeps the CPU
//!   state in `rbp`, with every guest register stored there at a block start; a
//!   naked trampoline passes it on (checked once against the shadow call stack; see
//!   `thread::Regs`). Arguments are read at the allocator's first block, the result
//!   at the block its return lands on.
//! - A forked child (seen by the syscall-return callback of `fork`/`clone` without
//!   `CLONE_VM`) writes its own trace `<trace>.<pid>`, as in the compiled path.
//! - `--order=atomic`: see `order`.
//!
//! Configured by the environment of the QEMU process (`memlens record --dbi` sets it
//! and removes it from the guest's): `MEMLENS_OUTPUT`, `MEMLENS_ZSTD_LEVEL`,
//! `MEMLENS_DBI_FILTER`, `MEMLENS_DBI_SKIP` (QEMU arguments before the program),
//! `MEMLENS_VALUES`, `MEMLENS_ROI`, `MEMLENS_STACK_DEPTH`, `MEMLENS_ORDER` (parsed
//! and written as `option` records as the compiled path does: `memlens-contract`).
//!
//! ```text
//! MEMLENS_OUTPUT=t.trace qemu-x86_64 -plugin libmemlens_dbi.so ./prog
//! ```

mod decode;
mod ffi;
mod modules;
mod order;
mod thread;
mod writer;

use ffi::*;
use libc::{c_char, c_int, c_uint, c_void};
use memlens_contract::filter::Filter;
use memlens_contract::options::{Order, Recording};
use std::sync::atomic::{AtomicU64, Ordering::*};

/// Plugin API version this plugin was written against.
#[unsafe(no_mangle)]
pub static qemu_plugin_version: c_int = 1;

/// Magic system call number of the preload library.
const MAGIC: i64 = 0x4d4c;

/// guest address + GUEST_BASE = host address (learned from the first instruction).
static GUEST_BASE: AtomicU64 = AtomicU64::new(u64::MAX);
static PID: AtomicU64 = AtomicU64::new(0);

fn say(msg: &str) {
    if let Ok(s) = std::ffi::CString::new(format!("memlens: {msg}\n")) {
        // SAFETY: a valid C string.
        unsafe { qemu_plugin_outs(s.as_ptr()) };
    }
}

/// Entry point called by QEMU when it loads the plugin.
///
/// # Safety
/// Called by QEMU with its own arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_install(
    id: Id,
    _info: *const c_void,
    _argc: c_int,
    _argv: *mut *mut c_char,
) -> c_int {
    PID.store(std::process::id() as u64, Relaxed);
    let Some(out) = std::env::var_os("MEMLENS_OUTPUT") else {
        say("MEMLENS_OUTPUT is not set; run through `memlens record --dbi`");
        return -1;
    };
    // The options the compiled path takes too, parsed and recorded the same way.
    let rec = Recording::from_env();
    let spec = std::env::var("MEMLENS_DBI_FILTER").unwrap_or_else(|_| "exe".into());
    let f = match Filter::parse(&spec) {
        Ok(f) => f,
        Err(e) => {
            say(&e);
            return -1;
        }
    };
    thread::VALUES.store(rec.values, Relaxed);
    thread::ROI_MODE.store(rec.roi, Relaxed);
    thread::STACK_DEPTH.store(rec.stack_depth, Relaxed);
    match rec.order {
        Order::Atomic => order::enable(),
        Order::None => order::disable_sync(),
        Order::Sync => {}
    }
    thread::init_flags();
    *CONFIG.lock().unwrap() = Some(Config { out: out.into(), rec, spec, filter: f });
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_vcpu_init_cb(id, thread::vcpu_init);
    qemu_plugin_register_vcpu_exit_cb(id, thread::vcpu_exit);
    qemu_plugin_register_vcpu_syscall_cb(id, syscall_cb);
    qemu_plugin_register_vcpu_syscall_ret_cb(id, syscall_ret_cb);
    qemu_plugin_register_atexit_cb(id, at_exit, std::ptr::null_mut());
    0
}

struct Config {
    out: std::path::PathBuf,
    rec: Recording,
    spec: String,
    filter: Filter,
}

static CONFIG: std::sync::Mutex<Option<Config>> = std::sync::Mutex::new(None);
/// The trace path (children write `<path>.<pid>`).
static OUTPUT: std::sync::Mutex<Option<std::path::PathBuf>> = std::sync::Mutex::new(None);
/// What `start` gave the writer (executable, argv, filter, options), for a forked
/// child's trace.
type Process = (String, Vec<String>, String, Recording);
static PROCESS: std::sync::Mutex<Option<Process>> = std::sync::Mutex::new(None);
static STARTED: std::sync::Once = std::sync::Once::new();

/// Deferred set-up: QEMU has not loaded the program yet when it installs the plugin.
unsafe fn start() {
    let Some(c) = CONFIG.lock().unwrap().take() else { return };
    OUTPUT.lock().unwrap().clone_from(&Some(c.out.clone()));
    let exe_ptr = qemu_plugin_path_to_binary();
    let exe = if exe_ptr.is_null() {
        String::new()
    } else {
        std::ffi::CStr::from_ptr(exe_ptr).to_string_lossy().into_owned()
    };
    // the name the program was run by, as the kernel's `comm`
    thread::set_guest_comm(&exe);
    let exe = std::fs::canonicalize(&exe).map(|p| p.to_string_lossy().into_owned()).unwrap_or(exe);
    match modules::init_exe(&exe, qemu_plugin_start_code(), c.filter) {
        Ok(is_static) => thread::STATIC.store(is_static, Relaxed),
        Err(e) => {
            say(&format!("cannot read {exe}: {e}"));
            std::process::exit(125);
        }
    }
    let skip: usize =
        std::env::var("MEMLENS_DBI_SKIP").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let argv: Vec<String> = std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .skip(skip)
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default();
    *PROCESS.lock().unwrap() = Some((exe.clone(), argv.clone(), c.spec.clone(), c.rec.clone()));
    if let Err(e) = writer::start(&c.out, &c.rec, exe, argv, c.spec) {
        say(&format!("cannot write the trace: {e}"));
        std::process::exit(125);
    }
}

unsafe extern "C" fn tb_trans(_id: Id, tb: *mut Tb) {
    STARTED.call_once(|| start());
    // Translation can wait for the other vCPUs (tb_flush): never with the lock held.
    thread::unhold_current();
    let atomic = order::on();
    let values = thread::VALUES.load(Relaxed);
    let n = qemu_plugin_tb_n_insns(tb);
    if n > 0 {
        let insn = qemu_plugin_tb_get_insn(tb, 0);
        let pc = qemu_plugin_insn_vaddr(insn);
        if modules::unknown(pc) {
            let h = qemu_plugin_insn_haddr(insn) as u64;
            modules::discover(pc, h.wrapping_sub(pc));
        }
    }
    let view = modules::view();
    let is_static = thread::STATIC.load(Relaxed);
    let mut first_pc = None;
    for i in 0..n {
        let insn = qemu_plugin_tb_get_insn(tb, i);
        let pc = qemu_plugin_insn_vaddr(insn);
        first_pc.get_or_insert(pc);
        if GUEST_BASE.load(Relaxed) == u64::MAX {
            let h = qemu_plugin_insn_haddr(insn) as u64;
            GUEST_BASE.store(h.wrapping_sub(pc), Relaxed);
        }
        let len = qemu_plugin_insn_size(insn);
        let data = qemu_plugin_insn_data(insn) as *const u8;
        let bytes = if data.is_null() { &[][..] } else { std::slice::from_raw_parts(data, len) };
        let d = decode::decode(bytes);
        let null = std::ptr::null_mut();
        if !view.traced(pc) {
            // Keeps the shadow call stack right across untraced returns, and tells
            // function entries from untraced callers.
            if d.ret {
                qemu_plugin_register_vcpu_mem_cb(insn, thread::ret_cb, CB_NO_REGS, MEM_RW, null);
            } else if d.flags & decode::CALL != 0 {
                let cb = thread::untraced_call_cb;
                qemu_plugin_register_vcpu_mem_cb(insn, cb, CB_NO_REGS, MEM_W, null);
            } else if d.helper {
                // QEMU 7.2 does not disarm an instruction's memory callbacks when
                // its block is left (a `jmp` through the PLT, say): a helper doing
                // the accesses of this one would report them to the last traced
                // instruction. Arming an empty callback here catches them.
                qemu_plugin_register_vcpu_mem_cb(insn, thread::sink_cb, CB_NO_REGS, MEM_RW, null);
            }
            continue;
        }
        // The format's pcs are "return addresses" (symbolisers look up pc - 1): the
        // instruction address + 1 names the instruction itself.
        let rpc = pc + 1;
        if view.is_func_start(pc) {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, thread::enter_cb, CB_NO_REGS, rpc as _);
        }
        // No memory callback where there can be no access: it costs a call per
        // execution.
        if !d.mem {
            continue;
        }
        let stamped = atomic || (d.flags & decode::ATOMIC != 0 && order::sync());
        if stamped {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, thread::order_cb, CB_NO_REGS, rpc as _);
        }
        let udata = rpc | (u64::from(d.flags) << 56);
        if stamped || values || d.flags & (decode::CALL | decode::RET) != 0 {
            let udata = udata | ((len as u64 & 0xff) << 48);
            let cb = thread::slow_cb;
            qemu_plugin_register_vcpu_mem_cb(insn, cb, CB_NO_REGS, MEM_RW, udata as _);
        } else {
            qemu_plugin_register_vcpu_mem_cb(insn, thread::mem_cb, CB_NO_REGS, MEM_RW, udata as _);
        }
    }
    let Some(start) = first_pc else { return };
    if atomic {
        // An instruction that made no access left the order lock held.
        qemu_plugin_register_vcpu_tb_exec_cb(tb, thread::tb_cb, CB_NO_REGS, std::ptr::null_mut());
    }
    if !is_static {
        return;
    }
    // Static executables: allocators are hooked at their entry, and every block
    // start may be an allocator's return (see `thread::alloc_entry`).
    if let Some(kind) = view.alloc_hook(start) {
        let cb = thread::alloc_entry_cb;
        qemu_plugin_register_vcpu_tb_exec_cb(tb, cb, CB_NO_REGS, usize::from(kind) as _);
    }
    qemu_plugin_register_vcpu_tb_exec_cb(tb, thread::tb_static_cb, CB_NO_REGS, start as _);
}

/// Reads the `1 << shift` byte value (shift 0..=3) at guest address `addr`.
///
/// # Safety
/// The guest bytes must be mapped.
#[inline(always)]
unsafe fn read_guest(addr: u64, shift: u8) -> u64 {
    let base = GUEST_BASE.load(Relaxed);
    let p = addr.wrapping_add(if base == u64::MAX { 0 } else { base }) as *const u8;
    match shift {
        0 => u64::from(p.read()),
        1 => u64::from((p as *const u16).read_unaligned()),
        2 => u64::from((p as *const u32).read_unaligned()),
        _ => (p as *const u64).read_unaligned(),
    }
}

/// Reads `len` bytes of guest memory.
///
/// # Safety
/// The guest range must be mapped.
unsafe fn guest_bytes(addr: u64, len: usize) -> Vec<u8> {
    let base = GUEST_BASE.load(Relaxed);
    let base = if base == u64::MAX { 0 } else { base };
    std::slice::from_raw_parts(addr.wrapping_add(base) as *const u8, len).to_vec()
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn syscall_cb(
    _id: Id,
    vcpu: c_uint,
    num: i64,
    op: u64,
    a: u64,
    b: u64,
    pc: u64,
    c: u64,
    sp: u64,
    _: u64,
    _: u64,
) {
    thread::unhold_current();
    if num != MAGIC {
        if num == SYS_CLONE {
            CLONE_FLAGS.with(|f| f.set(op));
        } else if num == SYS_CLONE3 && op != 0 {
            // struct clone_args: flags, pidfd, child_tid, parent_tid, exit_signal,
            // stack, stack_size, tls
            let flags = read_guest(op, 3);
            CLONE_FLAGS.with(|f| f.set(flags));
            if flags & libc::CLONE_VM as u64 != 0 {
                let at = |i: u64| read_guest(op + 8 * i, 3);
                thread::clone_args(at(5), at(6), at(7));
            }
        } else if num == SYS_CLONE3 {
            CLONE_FLAGS.with(|f| f.set(0));
        } else if num == SYS_PRCTL && op == PR_SET_NAME && a != 0 {
            // the kernel takes at most 15 bytes and a NUL
            let b = guest_bytes(a, 16);
            let end = b.iter().position(|&c| c == 0).unwrap_or(15).min(15);
            thread::renamed(vcpu, String::from_utf8_lossy(&b[..end]).into_owned());
        } else if num == SYS_EXIT_GROUP {
            EXIT_CODE.store(op as u8 as i64, Relaxed);
        }
        return;
    }
    match op {
        48 => {
            if c == 0 || c > 4096 {
                return;
            }
            let path = String::from_utf8_lossy(&guest_bytes(b, c as usize)).into_owned();
            modules::add_lib(&path, a);
        }
        65 => {
            let name = String::from_utf8_lossy(&guest_bytes(b, c.min(255) as usize)).into_owned();
            thread::thread_name(vcpu, name);
        }
        _ => thread::preload_event(vcpu, op, a, b, pc, c, sp),
    }
}

const SYS_CLONE: i64 = 56;
const SYS_FORK: i64 = 57;
const SYS_VFORK: i64 = 58;
const SYS_CLONE3: i64 = 435;
const SYS_EXIT_GROUP: i64 = 231;
const SYS_PRCTL: i64 = 157;
const PR_SET_NAME: u64 = 15;

/// The status the guest passed to `exit_group` (-1: none yet).
static EXIT_CODE: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(-1);

std::thread_local! {
    /// Flags of this thread's last clone/clone3.
    static CLONE_FLAGS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// After `fork` (or a `clone` without `CLONE_VM`): the parent records `Fork` and
/// names the child's trace; the child starts that trace.
unsafe extern "C" fn syscall_ret_cb(_id: Id, vcpu: c_uint, num: i64, ret: i64) {
    let new_process = match num {
        SYS_FORK => true,
        SYS_CLONE | SYS_CLONE3 => CLONE_FLAGS.with(|f| f.get()) & libc::CLONE_VM as u64 == 0,
        _ => false,
    };
    if !new_process || ret < 0 || num == SYS_VFORK {
        return;
    }
    let Some(out) = OUTPUT.lock().unwrap_or_else(|e| e.into_inner()).clone() else { return };
    let child = |pid: u64| {
        let mut s = out.clone().into_os_string();
        s.push(format!(".{pid}"));
        std::path::PathBuf::from(s)
    };
    if ret > 0 {
        thread::forked(vcpu, ret as u32);
        writer::send(writer::Msg::Meta(vec![memlens_format::MetaRecord::Child {
            pid: ret as u32,
            path: child(ret as u64).to_string_lossy().into_owned(),
        }]));
        return;
    }
    // The child: only this thread survived the fork, not the writer thread.
    let pid = std::process::id() as u64;
    PID.store(pid, Relaxed);
    thread::reset_after_fork(vcpu);
    let p = PROCESS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let Some((exe, argv, spec, rec)) = p else { return };
    writer::reset_after_fork();
    if let Err(e) = writer::start(&child(pid), &rec, exe, argv, spec) {
        say(&format!("cannot write the child's trace: {e}; the child is not recorded"));
    }
}

unsafe extern "C" fn at_exit(_id: Id, _: *mut c_void) {
    if PID.load(Relaxed) != std::process::id() as u64 {
        return; // a forked child: its writer thread did not survive the fork
    }
    thread::unhold_current();
    thread::finish_all();
    let gave_up = order::GAVE_UP.load(Relaxed);
    if gave_up > 0 {
        say(&format!("--order=atomic: {gave_up} accesses waited too long for the order lock and are stamped without it"));
    }
    // The process's end: the parent's is also patched in by `memlens record` (which
    // sees signals too); a forked child's only comes from here.
    let code = EXIT_CODE.load(Relaxed);
    let end = (code >= 0).then_some(memlens_format::EndStatus::Exited(code as i32));
    writer::finish(modules::all(), end);
}
