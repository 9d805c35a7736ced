//! QEMU user-mode plugin behind `memlens record --dbi`: traces an unmodified x86-64
//! program into the same trace format as the compiled path.
//!
//! - Every guest instruction in the traced code (see [`filter`]) gets a memory
//!   callback; each access is encoded with the format's [`Encoder`] into a buffer of
//!   the calling host thread, which in linux-user is the guest thread (one vCPU per
//!   guest thread). Full buffers (about 1 MiB) go to a writer thread that compresses
//!   them with [`ChunkEncoder`] and appends them to the trace.
//! - QEMU 7.2 splits 16-byte SSE accesses into two 8-byte ones; two adjacent halves
//!   from one SSE/VEX instruction are merged back. An atomic read-modify-write
//!   arrives once, flagged read+write, and becomes an RMW event whose operation is
//!   decoded from the instruction bytes.
//! - Function entry = the first instruction of a function symbol, exit = a `ret`.
//! - Allocations and the shared-library map come from the guest preload library
//!   (`memlens-dbi-preload`) through a magic system call seen by the syscall callback.
//!
//! Configured by the environment of the QEMU process (`memlens record --dbi` sets it
//! and removes it from the guest's): `MEMLENS_OUTPUT`, `MEMLENS_ZSTD_LEVEL`,
//! `MEMLENS_DBI_FILTER`, `MEMLENS_DBI_SKIP` (QEMU arguments before the program).

mod decode;
mod ffi;
mod filter;
mod modules;
mod thread;
mod writer;

use ffi::*;
use libc::{c_char, c_int, c_uint, c_void};
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
    let level = std::env::var("MEMLENS_ZSTD_LEVEL").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let spec = std::env::var("MEMLENS_DBI_FILTER").unwrap_or_else(|_| "exe".into());
    let f = match filter::Filter::parse(&spec) {
        Ok(f) => f,
        Err(e) => {
            say(&e);
            return -1;
        }
    };
    *CONFIG.lock().unwrap() = Some(Config { out: out.into(), level, spec, filter: f });
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_vcpu_init_cb(id, thread::vcpu_init);
    qemu_plugin_register_vcpu_exit_cb(id, thread::vcpu_exit);
    qemu_plugin_register_vcpu_syscall_cb(id, syscall_cb);
    qemu_plugin_register_atexit_cb(id, at_exit, std::ptr::null_mut());
    0
}

struct Config {
    out: std::path::PathBuf,
    level: i32,
    spec: String,
    filter: filter::Filter,
}

static CONFIG: std::sync::Mutex<Option<Config>> = std::sync::Mutex::new(None);
static STARTED: std::sync::Once = std::sync::Once::new();

/// Deferred set-up: QEMU has not loaded the program yet when it installs the plugin.
unsafe fn start() {
    let Some(c) = CONFIG.lock().unwrap().take() else { return };
    let exe_ptr = qemu_plugin_path_to_binary();
    let exe = if exe_ptr.is_null() {
        String::new()
    } else {
        std::ffi::CStr::from_ptr(exe_ptr).to_string_lossy().into_owned()
    };
    let exe = std::fs::canonicalize(&exe).map(|p| p.to_string_lossy().into_owned()).unwrap_or(exe);
    if let Err(e) = modules::init_exe(&exe, qemu_plugin_start_code(), c.filter) {
        say(&format!("cannot read {exe}: {e}"));
        std::process::exit(125);
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
    if let Err(e) = writer::start(&c.out, c.level, exe, argv, c.spec) {
        say(&format!("cannot write the trace: {e}"));
        std::process::exit(125);
    }
}

unsafe extern "C" fn tb_trans(_id: Id, tb: *mut Tb) {
    STARTED.call_once(|| start());
    let n = qemu_plugin_tb_n_insns(tb);
    let view = modules::view();
    let mut any = false;
    for i in 0..n {
        let insn = qemu_plugin_tb_get_insn(tb, i);
        let pc = qemu_plugin_insn_vaddr(insn);
        if GUEST_BASE.load(Relaxed) == u64::MAX {
            let h = qemu_plugin_insn_haddr(insn) as u64;
            GUEST_BASE.store(h.wrapping_sub(pc), Relaxed);
        }
        if !view.traced(pc) {
            continue;
        }
        any = true;
        let len = qemu_plugin_insn_size(insn);
        let data = qemu_plugin_insn_data(insn) as *const u8;
        let bytes = if data.is_null() { &[][..] } else { std::slice::from_raw_parts(data, len) };
        let d = decode::decode(bytes);
        // The format's pcs are "return addresses" (symbolisers look up pc - 1): the
        // instruction address + 1 names the instruction itself.
        let rpc = pc + 1;
        if view.is_func_start(pc) {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, thread::enter_cb, CB_NO_REGS, rpc as _);
        }
        if d.ret {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, thread::exit_cb, CB_NO_REGS, rpc as _);
        }
        let udata = rpc | (u64::from(d.flags) << 56);
        qemu_plugin_register_vcpu_mem_cb(insn, thread::mem_cb, CB_NO_REGS, MEM_RW, udata as _);
    }
    // QEMU 7.2 can run the memory callbacks of the last instrumented instruction
    // again from helpers of later, uninstrumented blocks (xsave in the lazy-binding
    // resolver, for one): every block says whether it is traced.
    qemu_plugin_register_vcpu_tb_exec_cb(tb, thread::tb_cb, CB_NO_REGS, usize::from(any) as _);
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
    _: u64,
    _: u64,
    _: u64,
) {
    if num != MAGIC {
        return;
    }
    if op == 48 {
        if c == 0 || c > 4096 {
            return;
        }
        let path = String::from_utf8_lossy(&guest_bytes(b, c as usize)).into_owned();
        modules::add_lib(&path, a);
        return;
    }
    thread::alloc_event(vcpu, op, a, b, pc, c);
}

unsafe extern "C" fn at_exit(_id: Id, _: *mut c_void) {
    if PID.load(Relaxed) != std::process::id() as u64 {
        return; // a forked child: its writer thread did not survive the fork
    }
    thread::finish_all();
    writer::finish(modules::all());
}
