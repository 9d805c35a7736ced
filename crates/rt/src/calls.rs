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
//! Lines `? <name>` name functions the CLI found neither in the executable nor in
//! its start-up libraries: they may live in a library the program opens with
//! `dlopen`. The runtime looks them up in every other module mapped at start-up and
//! in every library a later `dlopen` maps, in the library's own ELF file (`.symtab`,
//! else `.dynsym`: `elfsyms.rs`), by raw name or by the qualified name of a plainly
//! mangled one, and patches each defined function that has a NOP pad, every time
//! (plugins may share names); a library closed and opened again is patched again.
//! The trace gets the library's module record and a new `trace_calls` option with
//! `@<path>` sections for what was found; at exit a warning names each `?` function
//! found nowhere. The patched functions (`TARGETS`) are an immutable sorted vector
//! behind an atomic pointer: adding some publishes a new vector and leaks the old
//! one, so `fentry` on another thread never takes a lock nor reads freed memory.
//!
//! Limits: while a library may need patching (an `@<path>` section not mapped at
//! start-up, or `?` lines) a `dlopen` called from a shared library reaches libc
//! through the executable's interposer, so `$ORIGIN` and the run path used for
//! that call are the executable's; calls made by a `dlopen`ed library's
//! constructors (inside `dlopen`, before the patching; threads they start must not
//! run the library's code until `dlopen` returns) and libraries mapped by `dlmopen`
//! are not traced; a library closed and opened again at another address keeps the
//! names of its first mapping in `dump` (calls of the second show addresses); in a `dlopen`ed library a C++ function is found by its
//! mangled name or, unless it is a template, operator or constructor, by its
//! qualified name without parameters; a C++ exception unwinding through a
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
use memlens_format::{Addr, Event, MetaRecord, Module, Pc};

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
    /// A timing live probe's slot (1-based; 0: none) and the entry time.
    probe: u16,
    t0: u64,
}

/// Open traced calls per thread.
pub(crate) const CALLS_CAP: usize = 4096;

/// Parses `MEMLENS_TRACE_CALLS` and patches the listed functions. Lines before any
/// `@<path>` line are in the executable's file addresses (load bias `bias`); lines
/// after `@<path>` in those of the shared library at that (canonical) path, found
/// in `modules` (every mapped module). `? <name>` lines name functions the CLI
/// found nowhere: they are looked up in every other library mapped now (one
/// preloaded, say) and in every library `dlopen` maps later. Called once at
/// start-up, before `main`. Returns how many were patched.
pub(crate) fn install(spec: &str, bias: u64, modules: &[Module]) -> usize {
    let Ok(mut late) = LATE.lock() else { return 0 };
    late.spec = spec.to_string();
    // (section path, lines); the executable's first
    let mut sections: Vec<(Option<&str>, String)> = vec![(None, String::new())];
    for line in spec.lines() {
        if let Some(path) = line.strip_prefix('@') {
            sections.push((Some(path), String::new()));
        } else if let Some(name) = line.strip_prefix("? ") {
            late.names.push(Wanted { name: name.trim().to_string(), traced: 0, unpadded: None });
        } else if let Some(s) = sections.last_mut() {
            s.1.push_str(line);
            s.1.push('\n');
        }
    }
    let mut targets = Vec::new();
    let mut pads = Vec::new();
    patch_lines(&sections[0].1, bias, &mut targets, &mut pads);
    for (path, lines) in sections.drain(1..) {
        let path = path.unwrap_or_default().to_string();
        late.libs.push(Lib { path, lines, mapped: false });
    }
    let exe = modules.first().map(|m| m.path.clone()).unwrap_or_default();
    let mut known = vec![Known { path: exe, bias, pads }];
    // The executable (the first module) was searched by the CLI; every other
    // module gets its `@` section and the `?` names.
    for m in modules.iter().skip(1) {
        known.push(late.patch_module(m, &mut targets));
    }
    late.known = known;
    // Start-up libraries are never unmapped: only libraries still to come need the
    // `dlopen` hook.
    late.libs.retain(|l| !l.mapped);
    if late.hooked() {
        crate::process::DLOPEN_HOOK.store(1, Relaxed);
    }
    drop(late);
    let n = targets.len();
    add_targets(targets);
    n
}

/// Patches the functions of `lines` (`<func> <pad> <name>`, file addresses of a
/// module with load bias `bias`), adding them to `targets` and (pad, function) to
/// `pads`.
fn patch_lines(lines: &str, bias: u64, targets: &mut Vec<Target>, pads: &mut Vec<(u64, u64)>) {
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
            pads.push((pad, func));
        } else {
            let name = f.collect::<Vec<_>>().join(" ");
            sys::warn(&["trace-calls: cannot patch ", &name, " (no 5-byte NOP pad at its entry)"]);
        }
    }
}

/// Publishes `more` patched functions (a new sorted vector; the old one is leaked,
/// as `fentry` on another thread may still be searching it). A pad patched again
/// (its library was closed and opened again) replaces its old entry.
fn add_targets(mut more: Vec<Target>) {
    if more.is_empty() {
        return;
    }
    static ADD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = ADD.lock();
    more.sort_by_key(|t| t.pad_end);
    let mut all: Vec<Target> = current_targets()
        .iter()
        .filter(|t| more.binary_search_by_key(&t.pad_end, |m| m.pad_end).is_err())
        .copied()
        .collect();
    all.extend(more);
    all.sort_by_key(|t| t.pad_end);
    all.dedup_by_key(|t| t.pad_end);
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

/// An `@<path>` section of the list for a library not mapped at start-up.
struct Lib {
    path: String,
    lines: String,
    /// Mapped at least once.
    mapped: bool,
}

/// A `? <name>` line: a function the CLI found in neither the executable nor its
/// start-up libraries.
struct Wanted {
    name: String,
    /// How many functions of this name were patched.
    traced: usize,
    /// A library defining it without a NOP pad (not built with `memlens cc`).
    unpadded: Option<String>,
}

/// A module mapped at the last scan and the (pad, function) addresses patched in it.
struct Known {
    path: String,
    bias: u64,
    pads: Vec<(u64, u64)>,
}

/// What patching after start-up needs. Only `install` and the `dlopen` hook take
/// the lock, never `fentry`/`fret`.
struct Late {
    /// `MEMLENS_TRACE_CALLS` as given.
    spec: String,
    libs: Vec<Lib>,
    names: Vec<Wanted>,
    known: Vec<Known>,
    /// Per library path, the `<func> <pad> <name>` lines of the functions found by
    /// the `? <name>` lines (file addresses: the same for every mapping), added to
    /// the trace's `trace_calls` option as `@<path>` sections.
    resolved: Vec<(String, String)>,
}

static LATE: std::sync::Mutex<Late> = std::sync::Mutex::new(Late {
    spec: String::new(),
    libs: Vec::new(),
    names: Vec::new(),
    known: Vec::new(),
    resolved: Vec::new(),
});

impl Late {
    /// Whether libraries opened later may need patching.
    fn hooked(&self) -> bool {
        !self.libs.is_empty() || !self.names.is_empty()
    }

    /// Patches the functions of a newly mapped module `m`: those of its `@`
    /// section, and the `?` names its symbol table defines with a NOP pad.
    fn patch_module(&mut self, m: &Module, targets: &mut Vec<Target>) -> Known {
        let mut pads = Vec::new();
        for lib in self.libs.iter_mut().filter(|l| same_file(&l.path, &m.path)) {
            lib.mapped = true;
            patch_lines(&lib.lines, m.bias, targets, &mut pads);
        }
        if !self.names.is_empty() && !m.path.is_empty() {
            let names: Vec<&str> = self.names.iter().map(|w| w.name.as_str()).collect();
            let found = crate::elfsyms::find_functions(&m.path, &names).unwrap_or_default();
            for (i, value) in found {
                let func = value.wrapping_add(m.bias);
                if !in_text(m, value, 9) {
                    continue;
                }
                // SAFETY: `in_text` checked that the 9 bytes lie in a mapped
                // executable segment of the module.
                let entry = unsafe { (func as *const [u8; 9]).read_unaligned() };
                let skip = if entry[..4] == [0xf3, 0x0f, 0x1e, 0xfa] { 4 } else { 0 };
                let pad = func + skip;
                if pads.iter().any(|p| p.0 == pad) {
                    continue; // an alias, or listed in the module's `@` section too
                }
                let w = &mut self.names[i];
                if !is_pad(entry[skip as usize..][..5].try_into().unwrap_or(&[0; 5])) {
                    w.unpadded.get_or_insert_with(|| m.path.clone());
                    continue;
                }
                // SAFETY: a NOP pad in the module's text; the module is still inside
                // `dlopen` (or this is start-up), so no thread runs it.
                if !unsafe { patch(pad) } {
                    sys::warn(&["trace-calls: cannot patch ", &w.name, " in ", &m.path]);
                    continue;
                }
                w.traced += 1;
                targets.push(Target { pad_end: pad + 5, func });
                pads.push((pad, func));
                let line = format!("{value:x} {:x} {}\n", value + skip, w.name);
                let k = match self.resolved.iter().position(|r| r.0 == m.path) {
                    Some(k) => k,
                    None => {
                        self.resolved.push((m.path.clone(), String::new()));
                        self.resolved.len() - 1
                    }
                };
                if !self.resolved[k].1.lines().any(|l| l == line.trim_end()) {
                    self.resolved[k].1.push_str(&line);
                }
            }
        }
        Known { path: m.path.clone(), bias: m.bias, pads }
    }
}

/// Whether `len` bytes at file address `vaddr` lie in an executable segment of `m`.
fn in_text(m: &Module, vaddr: u64, len: u64) -> bool {
    const PF_X: u32 = 1;
    m.segments.iter().any(|s| {
        s.flags & PF_X != 0
            && s.vaddr <= vaddr
            && vaddr.saturating_add(len) <= s.vaddr.saturating_add(s.memsz)
    })
}

/// After a `dlopen` returned (before the program sees its result): patches the
/// listed functions of the libraries mapped since the last scan, and pads found
/// unpatched again in known ones (a library closed and opened again at the same
/// address). The trace gets the new modules and, when `? <name>` lines found
/// functions, an updated `trace_calls` option naming them.
pub(crate) fn after_dlopen() {
    let Ok(mut late) = LATE.lock() else { return };
    if !late.hooked() {
        return;
    }
    let modules = crate::modules::scan();
    let size = |late: &Late| late.resolved.iter().map(|r| r.1.len()).sum::<usize>();
    let resolved = size(&late);
    let (mut targets, mut known, mut fresh) = (Vec::new(), Vec::new(), Vec::new());
    let old = core::mem::take(&mut late.known);
    for m in &modules {
        match old.iter().position(|k| k.bias == m.bias && k.path == m.path) {
            Some(i) => {
                let k = &old[i];
                for &(pad, func) in &k.pads {
                    // SAFETY: the module is mapped (this scan) and the pad was
                    // patched before: bytes of its text. A NOP pad again means a
                    // fresh mapping inside this `dlopen`, which no thread runs yet.
                    if is_pad(unsafe { &(pad as *const [u8; 5]).read() }) && unsafe { patch(pad) } {
                        targets.push(Target { pad_end: pad + 5, func });
                    }
                }
                known.push(Known { path: k.path.clone(), bias: k.bias, pads: k.pads.clone() });
            }
            None => {
                known.push(late.patch_module(m, &mut targets));
                fresh.push(m.clone());
            }
        }
    }
    late.known = known;
    let option = (size(&late) != resolved).then(|| {
        let mut s = late.spec.clone();
        for (path, lines) in &late.resolved {
            s.push_str(&format!("@{path}\n{lines}"));
        }
        s
    });
    drop(late);
    add_targets(targets);
    if let Some(sess) = crate::session::session() {
        let mut recs = Vec::new();
        if let Ok(mut all) = sess.modules.lock() {
            let n = all.len();
            if crate::modules::merge(&mut all, fresh) {
                recs.extend(all[n..].iter().cloned().map(MetaRecord::Module));
            }
        }
        if let Some(spec) = option {
            recs.push(MetaRecord::Option("trace_calls".into(), spec));
        }
        if !recs.is_empty() {
            sess.write_meta(&recs, false, false, None);
        }
    }
}

/// At the end of the run: warns about listed functions that were never traced (a
/// named library never loaded, a `? <name>` found in no library).
pub(crate) fn warn_untraced() {
    let Ok(late) = LATE.lock() else { return };
    for lib in late.libs.iter().filter(|l| !l.mapped) {
        sys::warn(&[
            "trace-calls: ",
            &lib.path,
            " was never loaded; its functions were not traced",
        ]);
    }
    for w in late.names.iter().filter(|w| w.traced == 0) {
        match &w.unpadded {
            Some(lib) => sys::warn(&[
                "trace-calls: function ",
                &w.name,
                " in ",
                lib,
                " has no patchable entry (build it with `memlens cc -shared`); it was not traced",
            ]),
            None => sys::warn(&[
                "trace-calls: function ",
                &w.name,
                " was in no library the program loaded; it was not traced",
            ]),
        }
    }
}

/// Whether the paths name the same file (the CLI writes canonical paths; the
/// loader's may go through symbolic links or `..`).
fn same_file(a: &str, b: &str) -> bool {
    a == b || {
        let canon = |p: &str| std::fs::canonicalize(p).ok();
        matches!((canon(a), canon(b)), (Some(x), Some(y)) if x == y)
    }
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
pub(crate) fn is_pad(b: &[u8; 5]) -> bool {
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
    match call_bytes(pad) {
        Some(code) => write_text(pad as usize, &code),
        None => false,
    }
}

/// The 5 bytes of `call fentry` at `pad`. The runtime lives in the executable; a
/// shared library is usually more than 2 GiB away, so its pads call a `jmp fentry`
/// stub mapped near it instead.
pub(crate) fn call_bytes(pad: u64) -> Option<[u8; 5]> {
    let near = |to: u64| i32::try_from((to as i64).wrapping_sub(pad as i64 + 5)).ok();
    let rel = near(fentry as *const () as usize as u64)
        .or_else(|| trampoline_near(pad).and_then(near))?;
    let mut code = [0xe8u8; 5];
    code[1..].copy_from_slice(&rel.to_le_bytes());
    Some(code)
}

/// Live probes are on: `fentry` calls may come before any `--trace-calls` target.
pub(crate) fn live_on() {
    FRET.store(fret as *const () as usize, Relaxed);
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

/// The asm of a naked hook that calls into Rust with registers kept: a 16-byte
/// aligned frame of `$frame` bytes, each listed register spilled at its offset,
/// the `$call` lines, the registers reloaded from the same offsets, the frame
/// left. One list gives both the spill and the reload, so they cannot disagree;
/// it is all made at compile time (the same instructions as written out).
macro_rules! spilled_call {
    (frame $frame:literal;
     gp [$($g:ident @ $go:literal),*];
     xmm [$($x:ident @ $xo:literal),*];
     call [$($call:literal),*]) => {
        concat!(
            "push rbp\n",
            "mov rbp, rsp\n",
            "and rsp, -16\n",
            "sub rsp, ", $frame, "\n",
            $("mov [rsp + ", $go, "], ", stringify!($g), "\n",)*
            $("movdqu [rsp + ", $xo, "], ", stringify!($x), "\n",)*
            $($call, "\n",)*
            $("mov ", stringify!($g), ", [rsp + ", $go, "]\n",)*
            $("movdqu ", stringify!($x), ", [rsp + ", $xo, "]\n",)*
            "mov rsp, rbp\n",
            "pop rbp",
        )
    };
}

/// `fentry`: the traced function's pad called it. Saves every argument register
/// (and rax for varargs, r10 for the static chain, r11), calls [`on_call`] with
/// the pad's end, the function's return-address slot and the saved registers, and
/// returns into the function with its registers intact.
#[unsafe(naked)]
unsafe extern "C" fn fentry() {
    core::arch::naked_asm!(
        spilled_call!(
            frame 208;
            gp [rdi @ 0, rsi @ 8, rdx @ 16, rcx @ 24, r8 @ 32, r9 @ 40,
                rax @ 48, r10 @ 56, r11 @ 64];
            xmm [xmm0 @ 80, xmm1 @ 96, xmm2 @ 112, xmm3 @ 128,
                 xmm4 @ 144, xmm5 @ 160, xmm6 @ 176, xmm7 @ 192];
            call ["mov rdi, [rbp + 8]", "lea rsi, [rbp + 16]", "mov rdx, rsp", "call {on_call}"]
        ),
        "ret",
        on_call = sym on_call,
    )
}

/// `fret`: a traced function returned here. Saves the return registers (rax, rdx,
/// xmm0, xmm1), asks [`on_return`] for the original return address and jumps there
/// (through r11, which no return value uses).
#[unsafe(naked)]
unsafe extern "C" fn fret() {
    core::arch::naked_asm!(
        spilled_call!(
            frame 48;
            gp [rax @ 0, rdx @ 8];
            xmm [xmm0 @ 16, xmm1 @ 32];
            call ["lea rdi, [rbp + 8]", "mov rsi, rax", "call {on_return}", "mov r11, rax"]
        ),
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
    let probe = crate::liveprobe::hit(pad_end);
    let traced = target(pad_end);
    let Some(func) = traced.or((probe != 0).then_some(pad_end)) else { return };
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
        left(st, &*p.add(n));
    }
    if n >= CALLS_CAP {
        st.ncalls.set(n);
        return;
    }
    let recorded = traced.is_some() && record::enter(st, true);
    if recorded {
        let args = [*regs, *regs.add(1), *regs.add(2)];
        record::emit_control(st, &Event::Call { func: Pc(func), sp: Addr(sp), args });
        crate::state::guard_off(st);
    }
    let timed = probe != 0 && probe & crate::liveprobe::TRACE_BIT == 0;
    let t0 = if timed { sys::monotonic_ns() } else { 0 };
    *p.add(n) = Frame { sp, ret: *slot, func, recorded, probe, t0 };
    st.ncalls.set(n + 1);
    *slot = fret;
    if probe & crate::liveprobe::TRACE_BIT != 0 {
        crate::livetrace::enter(st);
    }
}

/// A frame of a trace probe's function was left without returning (`longjmp`).
fn left(st: &crate::state::ThreadState, f: &Frame) {
    if f.probe & crate::liveprobe::TRACE_BIT != 0 {
        crate::livetrace::leave(st);
    }
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
        left(st, &*p.add(n));
    }
    loop {
        if p.is_null() || n == 0 || (*p.add(n - 1)).sp != sp {
            sys::warn(&["trace-calls: a traced function returned without its call; aborting"]);
            libc::abort();
        }
        let f = *p.add(n - 1);
        n -= 1;
        if f.probe & crate::liveprobe::TRACE_BIT != 0 {
            crate::livetrace::leave(st);
        } else if f.probe != 0 {
            crate::liveprobe::timed(f.probe, sys::monotonic_ns().saturating_sub(f.t0));
        }
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
