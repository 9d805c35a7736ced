//! Tracing calls of listed functions with their arguments and return values
//! (`MEMLENS_TRACE_CALLS`, set by `memlens record --trace-calls FILE`).
//!
//! `memlens cc` compiles every function with `-fpatchable-function-entry=5`: a
//! 5-byte NOP pad at the entry (after `endbr64`). Unlisted functions keep their
//! NOPs and cost nothing. At start-up the runtime turns the pad of each listed
//! function into `call fentry` (the page is made writable, patched and made
//! executable again, never both at once). `fentry` saves the argument registers,
//! records `Call { args: rdi, rsi, rdx }` and swaps the caller's return address for
//! `fret`, keeping the original on a per-thread stack; `fret` records
//! `Return { value: rax }` and jumps to the original return address. This is what
//! DynTG's dynamic probes do, with the compiler reserving the room instead of a
//! binary rewriter.
//!
//! The CLI resolves the names (ELF symbol table) and checks the pads; the
//! environment variable holds lines `<function vaddr hex> <pad vaddr hex> <name>` in
//! the executable's file addresses. The same text is kept as the trace option
//! `trace_calls`, from which `dump --format amt` names the functions.
//!
//! Lines after `@<path>` are functions of that shared library (built with `memlens
//! cc -shared`): its pads call a `jmp fentry` stub mapped within 2 GiB of it. A
//! library not mapped at start-up is patched by the `dlopen` interposer that maps
//! it, before `dlopen` returns (no thread can have called into it yet).
//!
//! Limits: a library's `dlopen` called from another shared library reaches libc
//! through the executable's interposer, so `$ORIGIN` and the run path used for
//! that call are the executable's; a C++ exception unwinding through a
//! traced call finds no unwind information for `fret` and terminates the program;
//! frames left by `longjmp` are dropped (no return event) when the stack moves
//! past them; allocation stacks and `FuncEnter` call sites of traced functions see
//! the original return address, but the frame-pointer walk of deeper frames shows
//! `fret`; a signal handler calling a traced function while the thread is inside
//! `fentry`/`fret` may corrupt the per-thread stack.

use crate::record;
use crate::state::ts;
use crate::sys;
use core::sync::atomic::{
    AtomicPtr, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};
use memlens_format::{Addr, Event, Pc};

/// One patched function: the address after its pad (what `fentry` sees as its
/// return address) and its entry address (what the events carry).
#[derive(Clone, Copy)]
struct Target {
    pad_end: u64,
    func: u64,
}

/// The patched functions, sorted by `pad_end`: a leaked vector, replaced (never
/// freed: `fentry` may be reading the old one) when a `dlopen`ed library adds some.
static TARGETS: AtomicPtr<Vec<Target>> = AtomicPtr::new(core::ptr::null_mut());
/// `@<path>` sections of libraries not loaded at start-up: (path, lines), patched
/// when `dlopen` maps them.
static PENDING: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());
/// Address of `fret` once patching is on (0: off), for [`real_return`].
static FRET: AtomicUsize = AtomicUsize::new(0);

/// One open traced call.
#[derive(Clone, Copy)]
pub(crate) struct Frame {
    /// Stack pointer at the entry (the address of the return-address slot).
    sp: u64,
    /// The original return address (`fret` for a tail call from a traced function
    /// whose frame is below this one).
    ret: u64,
    func: u64,
    recorded: bool,
}

/// Open traced calls per thread.
pub(crate) const CALLS_CAP: usize = 4096;

/// Parses `MEMLENS_TRACE_CALLS` and patches the listed functions. Lines before any
/// `@<path>` line are in the executable's file addresses (load bias `bias`); lines
/// after `@<path>` in those of the shared library at that (canonical) path, whose
/// bias `modules` gives (`(path, bias)` of every mapped module). Called once at
/// start-up, before `main`. Returns how many were patched.
pub(crate) fn install(spec: &str, bias: u64, modules: &[(String, u64)]) -> usize {
    // (module bias or None when not loaded, section path, lines)
    let mut sections: Vec<(Option<u64>, Option<&str>, String)> =
        vec![(Some(bias), None, String::new())];
    for line in spec.lines() {
        if let Some(path) = line.strip_prefix('@') {
            sections.push((module_bias(path, modules), Some(path), String::new()));
        } else if let Some(s) = sections.last_mut() {
            s.2.push_str(line);
            s.2.push('\n');
        }
    }
    let mut targets = Vec::new();
    for (bias, path, lines) in sections {
        match (bias, path) {
            (Some(bias), _) => patch_lines(&lines, bias, &mut targets),
            (None, Some(path)) => {
                if let Ok(mut p) = PENDING.lock() {
                    p.push((path.to_string(), lines));
                    crate::process::DLOPEN_HOOK.store(1, Relaxed);
                }
            }
            (None, None) => {}
        }
    }
    let n = targets.len();
    add_targets(targets);
    n
}

/// Patches the functions of `lines` (`<func> <pad> <name>`, file addresses of a
/// module with load bias `bias`), adding them to `targets`.
fn patch_lines(lines: &str, bias: u64, targets: &mut Vec<Target>) {
    for line in lines.lines() {
        let mut f = line.split_whitespace();
        let (Some(func), Some(pad)) = (f.next(), f.next()) else { continue };
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
        let (Some(func), Some(pad)) = (hex(func), hex(pad)) else {
            sys::warn(&["trace-calls: bad line `", line, "`"]);
            continue;
        };
        let (func, pad) = (func.wrapping_add(bias), pad.wrapping_add(bias));
        // SAFETY: the CLI found this pad inside the module's text; no thread runs
        // it yet (start-up, or the library is still inside `dlopen`).
        if unsafe { patch(pad) } {
            targets.push(Target { pad_end: pad + 5, func });
        } else {
            let name = f.collect::<Vec<_>>().join(" ");
            sys::warn(&["trace-calls: cannot patch ", &name, " (no 5-byte NOP pad at its entry)"]);
        }
    }
}

/// Publishes `more` patched functions (a new sorted vector; the old one is leaked,
/// as `fentry` on another thread may still be searching it).
fn add_targets(more: Vec<Target>) {
    if more.is_empty() {
        return;
    }
    static ADD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = ADD.lock();
    let mut all = current_targets().to_vec();
    all.extend(more);
    all.sort_by_key(|t| t.pad_end);
    TARGETS.store(Box::into_raw(Box::new(all)), Release);
    FRET.store(fret as *const () as usize, Relaxed);
}

fn current_targets() -> &'static [Target] {
    let p = TARGETS.load(Acquire);
    // SAFETY: set only by `add_targets` to a leaked, never-mutated vector.
    if p.is_null() {
        &[]
    } else {
        unsafe { &*p }
    }
}

/// After a `dlopen`: patches the pending libraries that are now mapped.
pub(crate) fn after_dlopen() {
    let Ok(mut pending) = PENDING.lock() else { return };
    if pending.is_empty() {
        return;
    }
    let modules: Vec<(String, u64)> =
        crate::modules::scan().into_iter().map(|m| (m.path, m.bias)).collect();
    let mut targets = Vec::new();
    pending.retain(|(path, lines)| match module_bias(path, &modules) {
        Some(bias) => {
            patch_lines(lines, bias, &mut targets);
            false
        }
        None => true,
    });
    if pending.is_empty() {
        crate::process::DLOPEN_HOOK.store(0, Relaxed);
    }
    drop(pending);
    add_targets(targets);
}

/// Warns about traced libraries that were never loaded (at the end of the run).
pub(crate) fn warn_unloaded() {
    let Ok(pending) = PENDING.lock() else { return };
    for (path, _) in pending.iter() {
        sys::warn(&["trace-calls: ", path, " was never loaded; its functions were not traced"]);
    }
}

/// The bias of the mapped module whose path is `path` (the CLI writes canonical
/// paths; the loader's may go through symbolic links or `..`).
fn module_bias(path: &str, modules: &[(String, u64)]) -> Option<u64> {
    let canon = |p: &str| std::fs::canonicalize(p).ok();
    let want = canon(path);
    modules.iter().find(|(p, _)| p == path || (want.is_some() && canon(p) == want)).map(|m| m.1)
}

/// Stubs `jmp [rip]; .quad fentry`, 16 bytes each, in pages mapped near the
/// shared libraries whose functions are traced (start-up only, one thread).
static STUBS: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

/// A stub jumping to `fentry` within ±2 GiB of `pad` (a `call rel32` reaches it).
fn trampoline_near(pad: u64) -> Option<u64> {
    let ok = |s: u64| (s as i64).wrapping_sub(pad as i64 + 5).unsigned_abs() < (1 << 31) - 4096;
    let mut stubs = STUBS.lock().ok()?;
    if let Some(&s) = stubs.iter().find(|&&s| ok(s)) {
        return Some(s);
    }
    const PAGE: u64 = 4096;
    // Libraries are mapped top-down, so the room below them is usually free; the
    // address is a hint, checked after the call.
    for k in 1..32u64 {
        let hint = (pad & !(PAGE - 1)).checked_sub(k * (32 << 20))?;
        // SAFETY: a fresh anonymous mapping; nothing else refers to it.
        let m = unsafe {
            libc::mmap(
                hint as *mut libc::c_void,
                PAGE as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if m == libc::MAP_FAILED {
            continue;
        }
        let at = m as u64;
        if !ok(at) {
            // SAFETY: the mapping made just above.
            unsafe { libc::munmap(m, PAGE as usize) };
            continue;
        }
        let mut code = [0u8; 16];
        code[..6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
        code[6..14].copy_from_slice(&(fentry as *const () as usize as u64).to_le_bytes());
        // SAFETY: the page is ours, writable, then made read-execute.
        unsafe {
            core::ptr::copy_nonoverlapping(code.as_ptr(), m.cast::<u8>(), code.len());
            if libc::mprotect(m, PAGE as usize, libc::PROT_READ | libc::PROT_EXEC) != 0 {
                libc::munmap(m, PAGE as usize);
                return None;
            }
        }
        stubs.push(at);
        return Some(at);
    }
    None
}

/// The NOP pads `-fpatchable-function-entry=5` leaves: gcc's five `nop`s, clang's
/// one 5-byte `nopl 0x..(%rax,%rax,1)`.
fn is_pad(b: &[u8; 5]) -> bool {
    *b == [0x90; 5] || b[..4] == [0x0f, 0x1f, 0x44, 0x00]
}

/// Writes `call fentry` over the pad at `pad`.
///
/// # Safety
/// `pad..pad+5` must be mapped code of this process that no thread runs now.
unsafe fn patch(pad: u64) -> bool {
    let cur = (pad as *const [u8; 5]).read();
    if !is_pad(&cur) {
        return false;
    }
    let near = |to: u64| i32::try_from((to as i64).wrapping_sub(pad as i64 + 5)).ok();
    // The runtime lives in the executable; a shared library is usually more than
    // 2 GiB away, so its pads call a `jmp fentry` stub mapped near it instead.
    let rel = match near(fentry as *const () as usize as u64) {
        Some(r) => r,
        None => match trampoline_near(pad).and_then(near) {
            Some(r) => r,
            None => return false,
        },
    };
    let mut code = [0xe8u8; 5];
    code[1..].copy_from_slice(&rel.to_le_bytes());
    write_text(pad as usize, &code)
}

/// Writes into the program's code: the pages become read-write, get the bytes and
/// become read-execute again. When the pages hold this function itself (it would
/// fault on its next instruction) the write goes through `/proc/self/mem`, which
/// ignores page protections, instead.
#[inline(never)]
unsafe fn write_text(at: usize, bytes: &[u8]) -> bool {
    const PAGE: usize = 4096;
    let lo = at & !(PAGE - 1);
    let hi = (at + bytes.len() + PAGE - 1) & !(PAGE - 1);
    let me = write_text as *const () as usize & !(PAGE - 1);
    // The function is far smaller than a page: it spans at most `me..me + 2 pages`.
    if lo < me + 2 * PAGE && me < hi {
        return write_proc_mem(at, bytes);
    }
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let rx = libc::PROT_READ | libc::PROT_EXEC;
    // Between the two calls nothing may run from the program's text: no PLT stub
    // (it may share the page), no `memcpy` (the runtime's own lives there).
    if mprotect(lo, hi - lo, rw) != 0 {
        return write_proc_mem(at, bytes);
    }
    for (i, &b) in bytes.iter().enumerate() {
        (at as *mut u8).add(i).write_volatile(b);
    }
    mprotect(lo, hi - lo, rx) == 0
}

/// The `mprotect` system call, inline (no PLT).
#[inline(always)]
unsafe fn mprotect(addr: usize, len: usize, prot: i32) -> isize {
    let ret: isize;
    core::arch::asm!(
        "syscall",
        inlateout("rax") libc::SYS_mprotect as isize => ret,
        in("rdi") addr,
        in("rsi") len,
        in("rdx") prot as isize,
        lateout("rcx") _,
        lateout("r11") _,
        options(nostack),
    );
    ret
}

unsafe fn write_proc_mem(at: usize, bytes: &[u8]) -> bool {
    let fd = libc::open(c"/proc/self/mem".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
    if fd < 0 {
        return false;
    }
    let ok = sys::pwrite_all(fd, bytes, at as u64).is_ok();
    libc::close(fd);
    ok
}

/// A `FuncEnter` call site that is `fret` (the traced function's return address was
/// swapped) becomes the original return address.
#[inline(always)]
pub(crate) fn real_return(call_site: u64) -> u64 {
    let f = FRET.load(Relaxed) as u64;
    if f == 0 || call_site != f {
        return call_site;
    }
    let st = ts();
    let (p, n) = (st.calls.get(), st.ncalls.get());
    if p.is_null() || n == 0 {
        return call_site;
    }
    // SAFETY: entries below `ncalls` were written by this thread. The newest frame
    // whose return address is not `fret` (tail calls chain on one slot).
    unsafe { (0..n).rev().map(|i| (*p.add(i)).ret).find(|&r| r != f).unwrap_or(call_site) }
}

/// `fentry`: the traced function's pad called it. Saves every argument register
/// (and rax for varargs, r10 for the static chain, r11), calls [`on_call`] with
/// the pad's end, the function's return-address slot and the saved registers, and
/// returns into the function with its registers intact.
#[unsafe(naked)]
unsafe extern "C" fn fentry() {
    core::arch::naked_asm!(
        "push rbp",
        "mov rbp, rsp",
        "and rsp, -16",
        "sub rsp, 208",
        "mov [rsp], rdi",
        "mov [rsp + 8], rsi",
        "mov [rsp + 16], rdx",
        "mov [rsp + 24], rcx",
        "mov [rsp + 32], r8",
        "mov [rsp + 40], r9",
        "mov [rsp + 48], rax",
        "mov [rsp + 56], r10",
        "mov [rsp + 64], r11",
        "movdqu [rsp + 80], xmm0",
        "movdqu [rsp + 96], xmm1",
        "movdqu [rsp + 112], xmm2",
        "movdqu [rsp + 128], xmm3",
        "movdqu [rsp + 144], xmm4",
        "movdqu [rsp + 160], xmm5",
        "movdqu [rsp + 176], xmm6",
        "movdqu [rsp + 192], xmm7",
        "mov rdi, [rbp + 8]",
        "lea rsi, [rbp + 16]",
        "mov rdx, rsp",
        "call {on_call}",
        "mov rdi, [rsp]",
        "mov rsi, [rsp + 8]",
        "mov rdx, [rsp + 16]",
        "mov rcx, [rsp + 24]",
        "mov r8, [rsp + 32]",
        "mov r9, [rsp + 40]",
        "mov rax, [rsp + 48]",
        "mov r10, [rsp + 56]",
        "mov r11, [rsp + 64]",
        "movdqu xmm0, [rsp + 80]",
        "movdqu xmm1, [rsp + 96]",
        "movdqu xmm2, [rsp + 112]",
        "movdqu xmm3, [rsp + 128]",
        "movdqu xmm4, [rsp + 144]",
        "movdqu xmm5, [rsp + 160]",
        "movdqu xmm6, [rsp + 176]",
        "movdqu xmm7, [rsp + 192]",
        "mov rsp, rbp",
        "pop rbp",
        "ret",
        on_call = sym on_call,
    )
}

/// `fret`: a traced function returned here. Saves the return registers (rax, rdx,
/// xmm0, xmm1), asks [`on_return`] for the original return address and jumps there.
#[unsafe(naked)]
unsafe extern "C" fn fret() {
    core::arch::naked_asm!(
        "push rbp",
        "mov rbp, rsp",
        "and rsp, -16",
        "sub rsp, 48",
        "mov [rsp], rax",
        "mov [rsp + 8], rdx",
        "movdqu [rsp + 16], xmm0",
        "movdqu [rsp + 32], xmm1",
        "lea rdi, [rbp + 8]",
        "mov rsi, rax",
        "call {on_return}",
        "mov r11, rax",
        "mov rax, [rsp]",
        "mov rdx, [rsp + 8]",
        "movdqu xmm0, [rsp + 16]",
        "movdqu xmm1, [rsp + 32]",
        "mov rsp, rbp",
        "pop rbp",
        "jmp r11",
        on_return = sym on_return,
    )
}

fn target(pad_end: u64) -> Option<u64> {
    let t = current_targets();
    let i = t.binary_search_by_key(&pad_end, |t| t.pad_end).ok()?;
    Some(t[i].func)
}

/// Records the call and swaps the return address. `slot` is the function's
/// stack pointer at entry; `regs` the saved rdi, rsi, rdx, ...
unsafe extern "C" fn on_call(pad_end: u64, slot: *mut u64, regs: *const u64) {
    let Some(func) = target(pad_end) else { return };
    let st = ts();
    let mut p = st.calls.get();
    if p.is_null() {
        p = sys::map(CALLS_CAP * core::mem::size_of::<Frame>()).cast();
        if p.is_null() {
            return;
        }
        st.calls.set(p);
    }
    let sp = slot as u64;
    let fret = fret as *const () as usize as u64;
    let chained = *slot == fret;
    // Frames below this one were left without returning (longjmp); one at the same
    // slot is still open only if this is a tail call from it.
    let mut n = st.ncalls.get();
    while n > 0 && ((*p.add(n - 1)).sp < sp || (!chained && (*p.add(n - 1)).sp == sp)) {
        n -= 1;
    }
    if n >= CALLS_CAP {
        st.ncalls.set(n);
        return;
    }
    let recorded = record::enter(st, true);
    if recorded {
        let args = [*regs, *regs.add(1), *regs.add(2)];
        record::emit_control(st, &Event::Call { func: Pc(func), sp: Addr(sp), args });
        crate::state::guard_off(st);
    }
    *p.add(n) = Frame { sp, ret: *slot, func, recorded };
    st.ncalls.set(n + 1);
    *slot = fret;
}

/// Records the return and gives `fret` the original return address. `after` is
/// the stack pointer after the `ret` (entry stack pointer + 8).
unsafe extern "C" fn on_return(after: u64, value: u64) -> u64 {
    let st = ts();
    let p = st.calls.get();
    let sp = after - 8;
    let fret = fret as *const () as usize as u64;
    let mut n = st.ncalls.get();
    while n > 0 && (*p.add(n - 1)).sp < sp {
        n -= 1;
    }
    loop {
        if p.is_null() || n == 0 || (*p.add(n - 1)).sp != sp {
            sys::warn(&["trace-calls: a traced function returned without its call; aborting"]);
            libc::abort();
        }
        let f = *p.add(n - 1);
        n -= 1;
        if f.recorded && record::enter(st, true) {
            let ev = Event::Return { func: Pc(f.func), sp: Addr(sp), value };
            record::emit_control(st, &ev);
            crate::state::guard_off(st);
        }
        if f.ret != fret {
            st.ncalls.set(n);
            return f.ret;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_gcc_and_clang_pads() {
        assert!(is_pad(&[0x90; 5]));
        assert!(is_pad(&[0x0f, 0x1f, 0x44, 0x00, 0x08]));
        assert!(!is_pad(&[0x55, 0x48, 0x89, 0xe5, 0x90]));
    }
}
