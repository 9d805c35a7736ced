//! In-process live probes (`memlens live` on a memlens-built program): count the
//! calls of a function, or time them, by turning its NOP pad (see `calls.rs`) into
//! `call fentry` while the program runs, and back into the original NOPs when the
//! probe is removed. No privileges and no kernel round trip per hit, unlike a
//! uprobe.
//!
//! The collector talks to the program over a control socket the runtime opens
//! when `MEMLENS_CONTROL` is set: a path (the collector made its 0700 directory),
//! or `1` for `/tmp/memlens-<uid>/rt-<pid>.sock` (a directory this user owns,
//! 0700). The socket is 0600 and a peer of another uid is hung up on. The protocol
//! is one text line per request and per answer:
//!
//! - `hello` → `ok memlens-rt 2 pid=<pid> bias=<hex>` (the executable's load bias;
//!   `2` is [`PROTOCOL`], raised whenever an answer changes shape)
//! - `add <id> count|timer <pad file address hex>` → `ok` or `err <reason>`
//! - `add <id> heap` → `ok`, or `err` when a heap probe is active already
//!   (`liveheap.rs`: bytes in use per allocation site from now on)
//! - `add <id> watch <file address hex> <size>` → `ok`, or `err` when a watch probe
//!   is active already (`livewatch.rs`: loads and stores of those bytes)
//! - `add <id> trace <pad file address hex>|now <path>` → `ok`, or `err` when a
//!   trace probe is active already or the file cannot be created
//!   (`livetrace.rs`: a full trace into the new file `<path>`, absolute, the rest
//!   of the line, of the function's dynamic extent on every thread, or of
//!   everything from now until removal)
//! - `rm <id>` → `ok` (the pad's original bytes are back; a trace is complete on
//!   disk) or `err <reason>`
//! - `read` → `ok` then ` <id> <count> <sum_ns> <min_ns> <max_ns>` per probe; for
//!   the heap probe ` <id> <bytes> <blocks> <peak_bytes> <dropped>`, for the watch
//!   probe ` <id> <loads> <stores> <dropped> <value>` (the bytes now, when ≤ 8),
//!   for the trace probe ` <id> <events> <bytes> <dropped> 0` (written to the file
//!   so far: a thread's buffer goes out when full, and all of them at removal)
//! - `hist <id>` → `ok` then ` <bucket>:<calls>` per non-empty log2 bucket of a
//!   timer's durations (bucket `b` from `2^(b-1)` ns; none for other probes)
//! - `heap` → `ok` then ` <site pc hex> <bytes> <blocks> <peak_bytes> <allocs>
//!   <frees>` per allocation site (run-time return addresses; `1`: the catch-all
//!   row; allocs and frees: the calls charged to the site, blocks = allocs - frees)
//! - `watch` → `ok <last store's tid> <its pc hex>` (`0 0`: none yet), then
//!   ` <tid> <pc hex> <loads> <stores>` per (thread, code address)
//! - at `exit` the runtime sends `exit ok <id> <count> ...` unasked (the last values),
//!   then `exit heap ...` (the `heap` answer) when a heap probe is active, and
//!   `exit watch ...` likewise
//! - `go` → `ok`: with `MEMLENS_CONTROL_HOLD` set the runtime waits (at most 10 s)
//!   for it before `main`, so probes inserted first see every call
//!
//! A connection's probes are removed when it closes. Hits are counted with relaxed atomics in a fixed table ([`MAX`] probes). A
//! pad is rewritten with one 16-byte `lock cmpxchg16b` on the page made
//! read-write-execute for the moment (never non-executable: other threads run
//! it), so a thread fetching the pad sees either the NOPs or the call.

use crate::sys;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering::*};
use memlens_contract::control::{self, PROTOCOL};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::{UnixListener, UnixStream};

/// Probes at once.
pub(crate) const MAX: usize = 256;

const FREE: u8 = 0;
const COUNT: u8 = 1;
const TIMER: u8 = 2;
const HEAP: u8 = 3;
const WATCH: u8 = 4;
const TRACE: u8 = 5;

/// In a slot number from [`hit`]: the slot is a trace probe's (its function's
/// extent is entered; `calls.rs` calls `livetrace::leave` at the return).
pub(crate) const TRACE_BIT: u16 = 0x8000;

struct Slot {
    kind: AtomicU8,
    id: AtomicU32,
    /// Run-time address just after the pad (what `fentry` sees).
    pad_end: AtomicU64,
    /// The pad's bytes before we patched it; 0 when it was patched already
    /// (`--trace-calls`) and must stay so.
    orig: AtomicU64,
    count: AtomicU64,
    sum: AtomicU64,
    min: AtomicU64,
    max: AtomicU64,
    /// A timer's calls per log2 bucket of their duration (bucket `b`: from
    /// `2^(b-1)` ns, 0 for 0 ns), as the uprobe timer keeps them.
    hist: [AtomicU64; 65],
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    kind: AtomicU8::new(FREE),
    id: AtomicU32::new(0),
    pad_end: AtomicU64::new(0),
    orig: AtomicU64::new(0),
    count: AtomicU64::new(0),
    sum: AtomicU64::new(0),
    min: AtomicU64::new(u64::MAX),
    max: AtomicU64::new(0),
    hist: [const { AtomicU64::new(0) }; 65],
};

static SLOTS: [Slot; MAX] = [EMPTY; MAX];
/// Any probe inserted (the hot path looks no further when not).
static ON: AtomicBool = AtomicBool::new(false);
/// Slots ever taken (the hot path looks at no more).
static USED: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
/// The executable's load bias.
static BIAS: AtomicU64 = AtomicU64::new(0);

/// At a pad's call: counts the hit; returns the slot (1-based) when the call is to
/// be timed, 0 otherwise.
#[inline]
pub(crate) fn hit(pad_end: u64) -> u16 {
    if !ON.load(Relaxed) {
        return 0;
    }
    let used = USED.load(Relaxed).min(MAX);
    for (i, s) in SLOTS[..used].iter().enumerate() {
        if s.pad_end.load(Relaxed) == pad_end {
            match s.kind.load(Relaxed) {
                COUNT => {
                    s.count.fetch_add(1, Relaxed);
                }
                TIMER => return i as u16 + 1,
                TRACE => return (i as u16 + 1) | TRACE_BIT,
                _ => {}
            }
        }
    }
    0
}

/// A timed call of slot `slot` (1-based, from [`hit`]) returned after `ns`.
pub(crate) fn timed(slot: u16, ns: u64) {
    let Some(s) = SLOTS.get(usize::from(slot).wrapping_sub(1)) else { return };
    if s.kind.load(Relaxed) != TIMER {
        return;
    }
    s.count.fetch_add(1, Relaxed);
    s.sum.fetch_add(ns, Relaxed);
    s.min.fetch_min(ns, Relaxed);
    s.max.fetch_max(ns, Relaxed);
    s.hist[(64 - ns.leading_zeros()) as usize].fetch_add(1, Relaxed);
}

/// Starts the control thread when `MEMLENS_CONTROL` asks for it. `bias`: the
/// executable's load bias.
pub(crate) fn start(bias: u64) {
    let Some(v) = std::env::var_os("MEMLENS_CONTROL") else { return };
    BIAS.store(bias, Relaxed);
    // a `trace` probe may start the recorder later
    crate::state::MAY_START.store(crate::state::STATE.load(SeqCst) != crate::state::ACTIVE, SeqCst);
    let v = v.to_string_lossy().into_owned();
    let hold = memlens_contract::options::flag(
        "MEMLENS_CONTROL_HOLD",
        std::env::var("MEMLENS_CONTROL_HOLD").ok().as_deref(),
        false,
    );
    if v != "1" {
        // A path is this process's alone: a program it execs must not take it over.
        // SAFETY: NUL-terminated names; start-up, before the program's threads.
        unsafe {
            libc::unsetenv(c"MEMLENS_CONTROL".as_ptr());
            libc::unsetenv(c"MEMLENS_CONTROL_HOLD".as_ptr());
        }
    }
    let path = if v == "1" {
        // SAFETY: no preconditions.
        let uid = unsafe { libc::geteuid() };
        // where `memlens live` looks
        let dir = control::socket_dir(uid);
        let private = {
            let _g = crate::state::Guard::new();
            control::private_dir(&dir, uid).is_ok()
        };
        if !private {
            sys::warn(&[
                "live: ",
                &dir.to_string_lossy(),
                " is not a private directory of this user; no control socket",
            ]);
            return;
        }
        control::runtime_socket(&dir, sys::getpid()).to_string_lossy().into_owned()
    } else {
        v
    };
    let _ = std::fs::remove_file(&path);
    let listener = match UnixListener::bind(&path) {
        Ok(l) => l,
        Err(e) => {
            sys::warn(&["live: cannot open the control socket ", &path, ": ", &e.to_string()]);
            return;
        }
    };
    // SAFETY: NUL-terminated path; 0600 before anyone can have connected but us.
    if let Ok(c) = std::ffi::CString::new(path.clone()) {
        unsafe { libc::chmod(c.as_ptr(), 0o600) };
    }
    // keep the descriptor out of the program's way
    let fd = crate::fds::move_high(listener.as_raw_fd());
    let listener = if fd != listener.as_raw_fd() {
        std::mem::forget(listener);
        // SAFETY: `move_high` returned a new descriptor that we own.
        unsafe { UnixListener::from_raw_fd(fd) }
    } else {
        listener
    };
    register_membarrier();
    // SAFETY: registering a function with no preconditions.
    unsafe { libc::atexit(at_exit) };
    let old = sys::block_async_signals();
    let _g = crate::state::Guard::new();
    let spawned = std::thread::Builder::new().name("memlens-control".into()).spawn(move || {
        crate::state::mark_runtime_thread();
        serve(listener);
    });
    drop(_g);
    sys::set_signal_mask(&old);
    if spawned.is_err() {
        sys::warn(&["live: cannot start the control thread"]);
        return;
    }
    if hold {
        // `memlens live -- PROG`: the collector inserts the `--probe`s, then says
        // `go`; main has not run yet.
        let end = sys::monotonic_ns() + 10_000_000_000;
        while !GO.load(Acquire) && sys::monotonic_ns() < end {
            sys::sleep_ns(1_000_000);
        }
    }
}

/// `go` came (see `MEMLENS_CONTROL_HOLD`).
static GO: AtomicBool = AtomicBool::new(false);

fn serve(listener: UnixListener) {
    // SAFETY: no preconditions.
    let me = unsafe { libc::getuid() };
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        if control::peer_uid(conn.as_raw_fd()).ok() != Some(me) {
            continue;
        }
        let _ = session(conn);
    }
}

/// One collector's connection. When it ends (the collector exited, or was killed),
/// the probes it inserted are removed, as the kernel removes a dead collector's
/// uprobes: the program runs on exactly as before.
fn session(conn: UnixStream) -> std::io::Result<()> {
    let mut out = conn.try_clone()?;
    SESSION_PID.store(sys::getpid(), Release);
    SESSION_FD.store(conn.as_raw_fd(), Release);
    let mut mine: Vec<u32> = Vec::new();
    let r = (|| {
        for line in BufReader::new(conn).lines() {
            let line = line?;
            let answer = request(line.trim());
            let w: Vec<&str> = line.split_whitespace().collect();
            if answer == "ok" {
                match w.as_slice() {
                    ["add", id, ..] => mine.extend(id.parse::<u32>().ok()),
                    ["rm", id] => mine.retain(|m| Some(*m) != id.parse().ok()),
                    _ => {}
                }
            }
            out.write_all(answer.as_bytes())?;
            out.write_all(b"\n")?;
        }
        Ok(())
    })();
    SESSION_FD.store(-1, Release);
    for id in mine {
        let _ = remove(id);
    }
    r
}

/// The collector's connection (-1: none), for the values at exit.
static SESSION_FD: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(-1);
/// The process that holds the connection: a forked child inherits the descriptor
/// (and its patched pads, counting in its own copy) but must not speak on it.
static SESSION_PID: AtomicU32 = AtomicU32::new(0);

/// At `exit`: the collector gets every probe's final values unasked (a line
/// `exit <read answer>`), since it cannot ask a process that is gone.
extern "C" fn at_exit() {
    let fd = SESSION_FD.load(Acquire);
    if fd < 0 || !ON.load(Relaxed) || SESSION_PID.load(Acquire) != sys::getpid() {
        return;
    }
    let _g = crate::state::Guard::new();
    let mut line = format!("exit {}\n", request("read"));
    if crate::liveheap::on() {
        let sites = request("heap");
        line.push_str(&format!("exit heap{}\n", sites.strip_prefix("ok").unwrap_or("")));
    }
    if crate::livewatch::on() {
        let rows = request("watch");
        line.push_str(&format!("exit watch{}\n", rows.strip_prefix("ok").unwrap_or("")));
    }
    // SAFETY: writing a buffer we own to the session's socket.
    unsafe { libc::send(fd, line.as_ptr().cast(), line.len(), libc::MSG_NOSIGNAL) };
}

fn request(line: &str) -> String {
    let w: Vec<&str> = line.split_whitespace().collect();
    match w.as_slice() {
        ["hello"] => {
            format!("ok memlens-rt {PROTOCOL} pid={} bias={:#x}", sys::getpid(), BIAS.load(Relaxed))
        }
        ["add", id, "heap"] => match id.parse::<u32>().map_err(|_| "bad id").and_then(add_heap) {
            Ok(()) => "ok".into(),
            Err(e) => format!("err {e}"),
        },
        ["add", id, "watch", at, size] => {
            let (Ok(id), Some(at), Ok(size)) = (id.parse::<u32>(), hex(at), size.parse::<u64>())
            else {
                return "err usage: add ID watch ADDR_HEX SIZE".into();
            };
            match add_watch(id, at.wrapping_add(BIAS.load(Relaxed)), size) {
                Ok(()) => "ok".into(),
                Err(e) => format!("err {e}"),
            }
        }
        ["add", id, "trace", at, ..] => {
            // the path is the rest of the line (it may hold spaces)
            let path = line.splitn(5, ' ').nth(4).unwrap_or("").trim();
            let at = if *at == "now" { Some(None) } else { hex(at).map(Some) };
            let (Ok(id), Some(at), false) = (id.parse::<u32>(), at, path.is_empty()) else {
                return "err usage: add ID trace PAD_HEX|now PATH".into();
            };
            let pad = at.map(|a| a.wrapping_add(BIAS.load(Relaxed)));
            match add_trace(id, pad, path) {
                Ok(()) => "ok".into(),
                Err(e) => format!("err {e}"),
            }
        }
        ["watch"] => {
            let mut s = String::from("ok");
            crate::livewatch::rows(&mut s);
            s
        }
        ["heap"] => {
            let mut s = String::from("ok");
            crate::liveheap::sites(&mut s);
            s
        }
        ["add", id, kind, pad] => {
            let kind = match *kind {
                "count" => COUNT,
                "timer" => TIMER,
                k => return format!("err unknown probe kind {k} (count or timer)"),
            };
            let (Ok(id), Some(pad)) = (id.parse::<u32>(), hex(pad)) else {
                return "err usage: add ID count|timer PAD_HEX".into();
            };
            match add(id, kind, pad.wrapping_add(BIAS.load(Relaxed))) {
                Ok(()) => "ok".into(),
                Err(e) => format!("err {e}"),
            }
        }
        ["go"] => {
            GO.store(true, Release);
            "ok".into()
        }
        ["rm", id] => match id.parse::<u32>().map_err(|_| "bad id").and_then(remove) {
            Ok(()) => "ok".into(),
            Err(e) => format!("err {e}"),
        },
        ["hist", id] => {
            let id = id.parse::<u32>().unwrap_or(0);
            let mut s = String::from("ok");
            let timer = |x: &&Slot| x.kind.load(Acquire) == TIMER && x.id.load(Relaxed) == id;
            if let Some(slot) = SLOTS.iter().find(timer) {
                for (b, n) in slot.hist.iter().enumerate() {
                    let n = n.load(Relaxed);
                    if n > 0 {
                        s.push_str(&format!(" {b}:{n}"));
                    }
                }
            }
            s
        }
        ["read"] => {
            let mut s = String::from("ok");
            for slot in SLOTS.iter().filter(|s| s.kind.load(Acquire) != FREE) {
                if slot.kind.load(Relaxed) == HEAP {
                    let [b, n, peak, dropped] = crate::liveheap::totals();
                    s.push_str(&format!(" {} {b} {n} {peak} {dropped}", slot.id.load(Relaxed)));
                    continue;
                }
                if slot.kind.load(Relaxed) == TRACE {
                    let [ev, bytes, dropped] = crate::livetrace::totals();
                    s.push_str(&format!(" {} {ev} {bytes} {dropped} 0", slot.id.load(Relaxed)));
                    continue;
                }
                if slot.kind.load(Relaxed) == WATCH {
                    let [l, st, dropped, v] = crate::livewatch::totals();
                    s.push_str(&format!(" {} {l} {st} {dropped} {v}", slot.id.load(Relaxed)));
                    continue;
                }
                let min = slot.min.load(Relaxed);
                s.push_str(&format!(
                    " {} {} {} {} {}",
                    slot.id.load(Relaxed),
                    slot.count.load(Relaxed),
                    slot.sum.load(Relaxed),
                    if min == u64::MAX { 0 } else { min },
                    slot.max.load(Relaxed)
                ));
            }
            s
        }
        _ => format!("err unknown request `{line}` (hello, add, rm, read, heap, watch, go)"),
    }
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

/// `pad..pad+5` lies in an executable segment of the executable.
fn in_code(pad: u64) -> bool {
    let mods = crate::modules::scan();
    let Some(m) = mods.first() else { return false };
    let Some(rel) = pad.checked_sub(m.bias) else { return false };
    m.segments.iter().any(|s| s.flags & 1 != 0 && s.vaddr <= rel && rel + 5 <= s.vaddr + s.memsz)
}

fn add(id: u32, kind: u8, pad: u64) -> Result<(), &'static str> {
    if SLOTS.iter().any(|s| s.kind.load(Acquire) != FREE && s.id.load(Relaxed) == id) {
        return Err("a probe with this id exists");
    }
    if kind != TRACE && trace_at(pad + 5) {
        return Err("a trace probe is on this function: remove it first");
    }
    if !in_code(pad) {
        return Err("the address is not in the program's code");
    }
    // SAFETY: inside a mapped executable segment (checked above).
    let cur = unsafe { (pad as *const [u8; 5]).read_volatile() };
    let call = crate::calls::call_bytes(pad).ok_or("no call to the runtime fits here")?;
    let orig = if crate::calls::is_pad(&cur) {
        let mut o = [0u8; 8];
        o[..5].copy_from_slice(&cur);
        u64::from_le_bytes(o)
    } else if cur == call {
        0 // patched by --trace-calls, or by another probe here: keep it
    } else {
        return Err("no 5-byte NOP pad there (was the program built with memlens cc?)");
    };
    let slot = take_slot(id)?;
    slot.orig.store(orig, Relaxed);
    slot.count.store(0, Relaxed);
    slot.sum.store(0, Relaxed);
    slot.min.store(u64::MAX, Relaxed);
    slot.max.store(0, Relaxed);
    for b in &slot.hist {
        b.store(0, Relaxed);
    }
    slot.pad_end.store(pad + 5, Relaxed);
    slot.kind.store(kind, Release);
    ON.store(true, Relaxed);
    crate::calls::live_on();
    // SAFETY: the pad is ours to rewrite (checked above).
    if orig != 0 && !unsafe { swap5(pad, &cur, &call) } {
        slot.pad_end.store(0, Relaxed);
        slot.kind.store(FREE, Release);
        return Err("the code could not be rewritten");
    }
    Ok(())
}

/// Takes a free slot for probe `id` (its kind still reserved, `u8::MAX`).
fn take_slot(id: u32) -> Result<&'static Slot, &'static str> {
    if SLOTS.iter().any(|s| s.kind.load(Acquire) != FREE && s.id.load(Relaxed) == id) {
        return Err("a probe with this id exists");
    }
    let (i, slot) = SLOTS
        .iter()
        .enumerate()
        .find(|(_, s)| s.kind.compare_exchange(FREE, u8::MAX, Acquire, Relaxed).is_ok())
        .ok_or("too many probes")?;
    USED.fetch_max(i + 1, Relaxed);
    slot.id.store(id, Relaxed);
    slot.pad_end.store(0, Relaxed);
    Ok(slot)
}

/// A trace probe sits at the pad ending at `pad_end`.
fn trace_at(pad_end: u64) -> bool {
    SLOTS.iter().any(|s| s.kind.load(Acquire) == TRACE && s.pad_end.load(Relaxed) == pad_end)
}

/// A trace probe: of `pad`'s function's extent, or (`None`) of everything.
fn add_trace(id: u32, pad: Option<u64>, path: &str) -> Result<(), String> {
    if SLOTS.iter().any(|s| s.kind.load(Acquire) == TRACE) {
        return Err("a trace probe is active already (one at a time)".into());
    }
    if let Some(pad) = pad {
        // the pad is checked before anything starts
        if !in_code(pad) {
            return Err("the address is not in the program's code".into());
        }
        if SLOTS.iter().any(|s| {
            matches!(s.kind.load(Acquire), COUNT | TIMER) && s.pad_end.load(Relaxed) == pad + 5
        }) {
            return Err(
                "a count or timer probe is on this function: remove it first (one pad probe per function with a trace)"
                    .into(),
            );
        }
    }
    crate::livetrace::start(path, pad.is_some())?;
    let r = match pad {
        Some(pad) => add(id, TRACE, pad),
        None => take_slot(id).map(|slot| {
            slot.kind.store(TRACE, Release);
            ON.store(true, Relaxed);
        }),
    };
    if let Err(e) = r {
        // nothing was traced: the new file goes again
        crate::livetrace::stop();
        let _g = crate::state::Guard::new();
        let _ = std::fs::remove_file(path);
        return Err(e.into());
    }
    Ok(())
}

fn add_heap(id: u32) -> Result<(), &'static str> {
    if SLOTS.iter().any(|s| s.kind.load(Acquire) == HEAP) {
        return Err("a heap probe is active already (one per program)");
    }
    let slot = take_slot(id)?;
    crate::liveheap::start();
    slot.kind.store(HEAP, Release);
    ON.store(true, Relaxed);
    Ok(())
}

/// `addr..addr+size` lies in a segment of the executable (a global variable).
fn in_image(addr: u64, size: u64) -> bool {
    let mods = crate::modules::scan();
    let Some(m) = mods.first() else { return false };
    let Some(rel) = addr.checked_sub(m.bias) else { return false };
    m.segments.iter().any(|s| s.vaddr <= rel && rel + size <= s.vaddr + s.memsz)
}

fn add_watch(id: u32, addr: u64, size: u64) -> Result<(), &'static str> {
    if SLOTS.iter().any(|s| s.kind.load(Acquire) == WATCH) {
        return Err("a watch probe is active already (one per program)");
    }
    if size == 0 || !in_image(addr, size) {
        return Err("the address range is not in the program's data");
    }
    let slot = take_slot(id)?;
    crate::livewatch::start(addr, size);
    slot.kind.store(WATCH, Release);
    ON.store(true, Relaxed);
    Ok(())
}

fn remove(id: u32) -> Result<(), &'static str> {
    let slot = SLOTS
        .iter()
        .find(|s| {
            matches!(s.kind.load(Acquire), COUNT | TIMER | HEAP | WATCH | TRACE)
                && s.id.load(Relaxed) == id
        })
        .ok_or("no such probe")?;
    match slot.kind.load(Relaxed) {
        HEAP => crate::liveheap::stop(),
        WATCH => crate::livewatch::stop(),
        _ => {}
    }
    if matches!(slot.kind.load(Relaxed), HEAP | WATCH) {
        slot.kind.store(FREE, Release);
        return Ok(());
    }
    if slot.kind.load(Relaxed) == TRACE {
        // no new entries first (the pad's NOPs back), then the file is finished
        let r = if slot.pad_end.load(Relaxed) != 0 { unpatch(slot) } else { Ok(()) };
        crate::livetrace::stop();
        slot.kind.store(FREE, Release);
        slot.pad_end.store(0, Relaxed);
        return r;
    }
    unpatch(slot)?;
    slot.kind.store(FREE, Release);
    slot.pad_end.store(0, Relaxed);
    Ok(())
}

/// Writes back the original bytes of `slot`'s pad unless another probe there
/// keeps it patched (that one inherits the NOPs).
fn unpatch(slot: &Slot) -> Result<(), &'static str> {
    let pad_end = slot.pad_end.load(Relaxed);
    let pad = pad_end - 5;
    let orig = slot.orig.load(Relaxed);
    // another probe on the same pad keeps it patched, and inherits the NOPs
    let other = SLOTS.iter().find(|s| {
        !core::ptr::eq(*s, slot)
            && matches!(s.kind.load(Acquire), COUNT | TIMER | TRACE)
            && s.pad_end.load(Relaxed) == pad_end
    });
    match other {
        Some(o) => {
            let _ = o.orig.compare_exchange(0, orig, Relaxed, Relaxed);
        }
        None if orig != 0 => {
            let call = crate::calls::call_bytes(pad).ok_or("no call")?;
            let b = orig.to_le_bytes();
            let nops = [b[0], b[1], b[2], b[3], b[4]];
            // SAFETY: we patched this pad; its bytes are our call.
            if !unsafe { swap5(pad, &call, &nops) } {
                return Err("the original code could not be restored");
            }
        }
        None => {}
    }
    Ok(())
}

/// Replaces the 5 bytes at `at` (which hold `old`) with `new` in one atomic
/// 16-byte compare-and-exchange of the aligned block(s) holding them, the pages
/// made writable without losing execute permission meanwhile.
///
/// # Safety
/// `at..at+5` is mapped code of this process.
unsafe fn swap5(at: u64, old: &[u8; 5], new: &[u8; 5]) -> bool {
    const PAGE: u64 = 4096;
    let block = at & !15;
    if at + 5 > block + 16 {
        // straddles two 16-byte blocks (a pad is 5 bytes after a 16-aligned
        // entry's `endbr64` or at the entry itself: not seen in practice)
        return false;
    }
    let lo = block & !(PAGE - 1);
    let rwx = libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC;
    if libc::mprotect(lo as *mut libc::c_void, PAGE as usize, rwx) != 0 {
        return false;
    }
    let p = block as *mut u128;
    let off = (at - block) as usize;
    let mut ok = false;
    for _ in 0..64 {
        let cur = core::ptr::read_volatile(p);
        let mut bytes = cur.to_le_bytes();
        if bytes[off..off + 5] != old[..] {
            break;
        }
        bytes[off..off + 5].copy_from_slice(new);
        if cas16(p, cur, u128::from_le_bytes(bytes)) {
            ok = true;
            break;
        }
    }
    libc::mprotect(lo as *mut libc::c_void, PAGE as usize, libc::PROT_READ | libc::PROT_EXEC);
    // Other cores may hold the old bytes decoded: make each one serialise (it
    // executes the new bytes from its next fetch on).
    libc::syscall(libc::SYS_membarrier, 1 << 5 /* PRIVATE_EXPEDITED_SYNC_CORE */, 0, 0);
    ok
}

/// `lock cmpxchg16b`: `*p = new` if `*p == old`.
unsafe fn cas16(p: *mut u128, old: u128, new: u128) -> bool {
    let ok: u8;
    core::arch::asm!(
        "xchg rbx, {nb}",
        "lock cmpxchg16b [{p}]",
        "sete {ok}",
        "xchg rbx, {nb}",
        p = in(reg) p,
        nb = inout(reg) new as u64 => _,
        ok = out(reg_byte) ok,
        in("rcx") (new >> 64) as u64,
        inout("rax") old as u64 => _,
        inout("rdx") (old >> 64) as u64 => _,
    );
    ok != 0
}

/// Registers the process for `membarrier(SYNC_CORE)` (once, before the first patch).
pub(crate) fn register_membarrier() {
    // SAFETY: plain syscall.
    unsafe {
        libc::syscall(libc::SYS_membarrier, 1 << 6 /* REGISTER_..._SYNC_CORE */, 0, 0)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cas16_swaps_only_the_expected_value() {
        #[repr(align(16))]
        struct A(u128);
        let mut a = A(5);
        // SAFETY: aligned, owned.
        unsafe {
            assert!(!cas16(&mut a.0, 4, 9));
            assert_eq!(a.0, 5);
            assert!(cas16(&mut a.0, 5, (7u128 << 64) | 9));
        }
        assert_eq!(a.0, (7u128 << 64) | 9);
    }

    #[test]
    fn requests_are_answered() {
        assert!(request("hello").starts_with("ok memlens-rt 2 pid="));
        assert!(request("add 1 nope 0").starts_with("err unknown probe kind"));
        assert!(request("rm 77").starts_with("err no such probe"));
        assert_eq!(request("read"), "ok");
        assert!(request("bogus").starts_with("err unknown request"));
    }
}
