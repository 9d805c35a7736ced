//! The part of QEMU's plugin API (version 1, as in QEMU 7.2) this plugin uses,
//! declared by hand: the symbols are exported by `qemu-x86_64` itself and resolved
//! when QEMU loads the plugin.

use libc::{c_char, c_int, c_uint, c_void};

/// Plugin handle.
pub type Id = u64;
/// Packed description of one memory access: the size shift in the low bits and the
/// access direction (1 read, 2 write, 3 both: an atomic read-modify-write) in bits 16-17.
pub type MemInfo = u32;

/// Opaque translation block.
#[repr(C)]
pub struct Tb {
    _p: [u8; 0],
}

/// Opaque guest instruction.
#[repr(C)]
pub struct Insn {
    _p: [u8; 0],
}

/// Callbacks that do not read guest registers.
pub const CB_NO_REGS: c_int = 0;
// Loads only (1) is not used: QEMU 7.2 never calls such a callback (a `ret` armed
// with it was never seen).
/// Memory callbacks for stores only.
pub const MEM_W: c_int = 2;
/// Memory callbacks for loads and stores.
pub const MEM_RW: c_int = 3;

pub type TbTransCb = unsafe extern "C" fn(Id, *mut Tb);
pub type MemCb = unsafe extern "C" fn(c_uint, MemInfo, u64, *mut c_void);
pub type UdataCb = unsafe extern "C" fn(c_uint, *mut c_void);
pub type VcpuCb = unsafe extern "C" fn(Id, c_uint);
pub type AtexitCb = unsafe extern "C" fn(Id, *mut c_void);
pub type SyscallCb = unsafe extern "C" fn(Id, c_uint, i64, u64, u64, u64, u64, u64, u64, u64, u64);
pub type SyscallRetCb = unsafe extern "C" fn(Id, c_uint, i64, i64);

extern "C" {
    pub fn qemu_plugin_register_vcpu_tb_trans_cb(id: Id, cb: TbTransCb);
    pub fn qemu_plugin_register_vcpu_init_cb(id: Id, cb: VcpuCb);
    pub fn qemu_plugin_register_vcpu_exit_cb(id: Id, cb: VcpuCb);
    pub fn qemu_plugin_register_vcpu_syscall_cb(id: Id, cb: SyscallCb);
    pub fn qemu_plugin_register_vcpu_syscall_ret_cb(id: Id, cb: SyscallRetCb);
    pub fn qemu_plugin_register_atexit_cb(id: Id, cb: AtexitCb, udata: *mut c_void);
    pub fn qemu_plugin_tb_n_insns(tb: *const Tb) -> usize;
    pub fn qemu_plugin_tb_get_insn(tb: *const Tb, idx: usize) -> *mut Insn;
    pub fn qemu_plugin_insn_data(insn: *const Insn) -> *const c_void;
    pub fn qemu_plugin_insn_size(insn: *const Insn) -> usize;
    pub fn qemu_plugin_insn_vaddr(insn: *const Insn) -> u64;
    pub fn qemu_plugin_insn_haddr(insn: *const Insn) -> *mut c_void;
    pub fn qemu_plugin_register_vcpu_mem_cb(
        insn: *mut Insn,
        cb: MemCb,
        flags: c_int,
        rw: c_int,
        udata: *mut c_void,
    );
    pub fn qemu_plugin_register_vcpu_insn_exec_cb(
        insn: *mut Insn,
        cb: UdataCb,
        flags: c_int,
        udata: *mut c_void,
    );
    pub fn qemu_plugin_register_vcpu_tb_exec_cb(
        tb: *mut Tb,
        cb: UdataCb,
        flags: c_int,
        udata: *mut c_void,
    );
    pub fn qemu_plugin_mem_size_shift(info: MemInfo) -> c_uint;
    pub fn qemu_plugin_path_to_binary() -> *const c_char;
    pub fn qemu_plugin_start_code() -> u64;
    pub fn qemu_plugin_outs(s: *const c_char);
}
