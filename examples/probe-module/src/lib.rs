//! `procstat`: an out-of-tree memlens probe module. Its probes sample the target's
//! page faults and CPU time from `/proc/PID/stat` at every collector poll.
//!
//! Build: `cargo build --release --manifest-path examples/probe-module/Cargo.toml`,
//! then `memlens live --module-path target/release/libmemlens_probe_module_example.so
//! --probe procstat:process -- ./prog`.
//!
//! The C ABI, version 1 (docs/live.md): the library exports
//! `memlens_probe_module()`, returning a static table whose first field is the ABI
//! version, then the module's query (name, description, requirements), its actions
//! and data columns as JSON, and the calls `init`, `create`, `poll`, `values`,
//! `location`, `destroy` — the same surface as the built-in modules' Rust trait.

use std::ffi::{c_char, c_int, c_void, CStr};

/// `struct memlens_probe_module`, version 1 (crates/live/src/dylib.rs reads it).
#[repr(C)]
pub struct Table {
    abi_version: u32,
    name: *const c_char,
    description: *const c_char,
    requirements: *const c_char,
    actions: *const c_char,
    columns: *const c_char,
    init: unsafe extern "C" fn(*mut c_char, usize) -> c_int,
    create:
        unsafe extern "C" fn(i32, *const c_char, *const c_char, *mut c_char, usize) -> *mut c_void,
    poll: unsafe extern "C" fn(*mut c_void),
    values: unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> usize,
    location: unsafe extern "C" fn(*mut c_void, *mut c_char, usize) -> usize,
    destroy: unsafe extern "C" fn(*mut c_void),
}

// SAFETY: immutable static data.
unsafe impl Sync for Table {}

static TABLE: Table = Table {
    abi_version: 1,
    name: c"procstat".as_ptr(),
    description: c"page faults and CPU time of the whole process, from /proc/PID/stat".as_ptr(),
    requirements: c"/proc mounted".as_ptr(),
    actions: cr#"[{"name":"procstat","label":"sample the process's faults and CPU time","spec":"procstat:process"}]"#.as_ptr(),
    columns: cr#"[{"name":"polls","unit":"samples"},{"name":"minflt","unit":"faults"},{"name":"cpu_ms","unit":"ms"}]"#.as_ptr(),
    init,
    create,
    poll,
    values,
    location,
    destroy,
};

/// The entry point memlens looks up.
#[no_mangle]
pub extern "C" fn memlens_probe_module() -> *const Table {
    &TABLE
}

/// Copies `s` into `buf` (at most `len` bytes with the NUL); returns its length, so
/// the caller retries with a larger buffer when it did not fit.
///
/// # Safety
/// `buf` holds `len` bytes.
unsafe fn put(s: &str, buf: *mut c_char, len: usize) -> usize {
    if len > 0 {
        let n = s.len().min(len - 1);
        // SAFETY: n + 1 <= len bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    s.len()
}

/// (minor faults, user + system CPU ticks) of `pid`.
fn stat(pid: i32) -> Option<(u64, u64)> {
    stat_file(&format!("/proc/{pid}/stat"))
}

/// (minor faults, CPU ticks) of each thread of `pid`, by thread id.
fn threads(pid: i32) -> Vec<(i32, (u64, u64))> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut out: Vec<_> = dir
        .filter_map(|e| {
            let tid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            Some((tid, stat_file(&format!("/proc/{pid}/task/{tid}/stat"))?))
        })
        .collect();
    out.sort_unstable();
    out
}

fn stat_file(path: &str) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(path).ok()?;
    // Fields after the parenthesised command name, starting with the state (field 3).
    let f: Vec<&str> = s.rsplit_once(')')?.1.split_whitespace().collect();
    let num = |i: usize| f.get(i - 3)?.parse::<u64>().ok();
    Some((num(10)?, num(14)? + num(15)?))
}

struct Probe {
    pid: i32,
    first: (u64, u64),
    last: (u64, u64),
    polls: u64,
}

unsafe extern "C" fn init(err: *mut c_char, len: usize) -> c_int {
    if stat(std::process::id() as i32).is_some() {
        return 0;
    }
    // SAFETY: the caller's buffer.
    unsafe { put("/proc/self/stat is unreadable: mount /proc", err, len) };
    1
}

unsafe extern "C" fn create(
    pid: i32,
    _exe: *const c_char,
    args: *const c_char,
    err: *mut c_char,
    len: usize,
) -> *mut c_void {
    // SAFETY: memlens passes a NUL-terminated string.
    let args = unsafe { CStr::from_ptr(args) }.to_string_lossy();
    if !(args.is_empty() || args == "process") {
        // SAFETY: the caller's buffer.
        unsafe { put("procstat samples the whole process: use procstat:process", err, len) };
        return std::ptr::null_mut();
    }
    let Some(first) = stat(pid) else {
        // SAFETY: the caller's buffer.
        unsafe { put("cannot read /proc/PID/stat of the target", err, len) };
        return std::ptr::null_mut();
    };
    Box::into_raw(Box::new(Probe { pid, first, last: first, polls: 0 })).cast()
}

unsafe extern "C" fn poll(p: *mut c_void) {
    // SAFETY: a probe from `create`, used by one thread at a time.
    let p = unsafe { &mut *p.cast::<Probe>() };
    if let Some(now) = stat(p.pid) {
        p.last = now;
        p.polls += 1;
    }
}

unsafe extern "C" fn values(p: *mut c_void, buf: *mut c_char, len: usize) -> usize {
    // SAFETY: a probe from `create`.
    let p = unsafe { &*p.cast::<Probe>() };
    // USER_HZ is 100 on Linux whatever the kernel's HZ.
    // a table per probe (a panel in the GUI): the target's threads
    let rows: Vec<String> = threads(p.pid)
        .iter()
        .map(|(tid, (flt, ticks))| format!(r#"{{"cells":[{tid},{flt},{}],"at":null}}"#, ticks * 10))
        .collect();
    let s = format!(
        r#"{{"polls":{},"minflt":{},"cpu_ms":{},"tables":[{{"title":"Threads","columns":[{{"name":"tid","unit":""}},{{"name":"minflt","unit":"faults"}},{{"name":"cpu_ms","unit":"ms"}}],"rows":[{}],"sort":2}}]}}"#,
        p.polls,
        p.last.0 - p.first.0,
        (p.last.1 - p.first.1) * 10,
        rows.join(",")
    );
    // SAFETY: the caller's buffer.
    unsafe { put(&s, buf, len) }
}

unsafe extern "C" fn location(p: *mut c_void, buf: *mut c_char, len: usize) -> usize {
    // SAFETY: a probe from `create`.
    let p = unsafe { &*p.cast::<Probe>() };
    // SAFETY: the caller's buffer.
    unsafe { put(&format!("process {}", p.pid), buf, len) }
}

unsafe extern "C" fn destroy(p: *mut c_void) {
    // SAFETY: a probe from `create`, destroyed once.
    drop(unsafe { Box::from_raw(p.cast::<Probe>()) });
}
