//! The process around the recording: start-up, normal exit, `_exit`, fatal signals,
//! `fork`, `exec`, and threads (`pthread_create`/`pthread_exit`/`pthread_setname_np`).

use crate::options;
use crate::real::{self, R};
use crate::record;
use crate::session::{session, Session};
use crate::state::{
    self, guard_off, guard_on, kick_all, ts, Guard, ThreadState, ACTIVE, BUSY, ENDING, FILTER_ON,
    INACTIVE, INITING, KEY, ROI_MODE, STATE, UNINIT, VALUES,
};
use crate::sys;
use core::sync::atomic::{AtomicBool, Ordering::*};
use libc::{c_char, c_int, c_void};
use memlens_format::{EndStatus, Event, MetaRecord};

/// Runs [`ensure_init`] before `main` (with the other constructors of the program).
/// Referenced from the runtime's cold paths so the linker always keeps it.
#[cfg(not(test))]
#[used]
#[unsafe(link_section = ".init_array")]
pub(crate) static INIT_ARRAY: extern "C" fn() = ctor;
#[cfg(test)]
pub(crate) static INIT_ARRAY: extern "C" fn() = ctor;

extern "C" fn ctor() {
    ensure_init();
}

/// Signals whose default action ends the process: the trace is written out first.
const FATAL: [c_int; 17] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGPIPE,
    libc::SIGALRM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGVTALRM,
    libc::SIGPROF,
];

static FINISHING: AtomicBool = AtomicBool::new(false);
static CRASHING: AtomicBool = AtomicBool::new(false);
static CRASH_DONE: AtomicBool = AtomicBool::new(false);

/// Starts the runtime once: from the constructor, `__tsan_init`, or the first event.
pub(crate) fn ensure_init() {
    match STATE.compare_exchange(UNINIT, INITING, SeqCst, SeqCst) {
        Ok(_) => init(),
        Err(INITING) => {
            // Another thread is starting the runtime (or this one is, further up).
            if ts().guard.get() == 0 {
                while STATE.load(SeqCst) == INITING {
                    // SAFETY: no preconditions.
                    unsafe { libc::sched_yield() };
                }
            }
        }
        Err(_) => {}
    }
}

fn init() {
    let st = ts();
    guard_on(st);
    real::resolve_all();
    REAL_DLOPEN.store(real::get(R::dlopen), SeqCst);
    let opts = options::get();
    let ok = match opts.rec.output.as_deref() {
        Some(base) => start_recording(opts, base, claim_ownership()),
        None => false,
    };
    if ok {
        install_handlers();
    }
    STATE.store(if ok { ACTIVE } else { INACTIVE }, SeqCst);
    if std::env::var_os("MEMLENS_CONTROL").is_some() {
        let bias = crate::modules::scan().first().map_or(0, |m| m.bias);
        crate::liveprobe::start(bias);
    }
    guard_off(st);
    if ok {
        state::thread_start(st, None, false);
    }
}

/// The first process of a recording owns the plain output path; it marks the
/// environment so exec'd or spawned instrumented programs write `<output>.<pid>`.
fn claim_ownership() -> bool {
    if std::env::var_os("MEMLENS_OWNER_PID").is_some() {
        return false;
    }
    let mut b = [0u8; 20];
    let pid = sys::fmt_u64(u64::from(sys::getpid()), &mut b);
    if let Ok(v) = std::ffi::CString::new(pid) {
        // SAFETY: NUL-terminated strings; done while starting up.
        unsafe { libc::setenv(c"MEMLENS_OWNER_PID".as_ptr(), v.as_ptr(), 1) };
    }
    true
}

fn start_recording(opts: &options::Options, base: &str, owner: bool) -> bool {
    VALUES.store(opts.rec.values, SeqCst);
    ROI_MODE.store(opts.rec.roi, SeqCst);
    state::REGISTERED_ONLY.store(opts.registered_only, SeqCst);
    let modules = crate::modules::scan();
    if let Some(path) = &opts.filter {
        let ranges = match std::fs::read_to_string(path) {
            Ok(text) => {
                let (r, skipped) = crate::filter::parse(&text, &modules);
                if skipped > 0 {
                    sys::warn(&["filter ", path, ": lines naming no loaded module were skipped"]);
                }
                r
            }
            Err(e) => {
                sys::warn(&[
                    "cannot read filter ",
                    path,
                    ": ",
                    &e.to_string(),
                    "; nothing is recorded",
                ]);
                Vec::new()
            }
        };
        crate::filter::install(ranges);
        FILTER_ON.store(true, SeqCst);
    }
    let exe_bias = modules.first().map_or(0, |m| m.bias);
    let mapped = if opts.trace_calls.is_some() { modules.clone() } else { Vec::new() };
    match Session::start(opts, base, owner, modules) {
        Ok(_) => {
            if let Some(spec) = &opts.trace_calls {
                crate::calls::install(spec, exe_bias, &mapped);
            }
            crate::order::configure(
                opts.order,
                opts.order_locks,
                opts.order_line,
                opts.cas_as_write,
            );
            true
        }
        Err(e) => {
            sys::warn(&[&e.to_string(), "; not recording"]);
            false
        }
    }
}

extern "C" {
    fn on_exit(f: extern "C" fn(c_int, *mut c_void), arg: *mut c_void) -> c_int;
}

/// The exit, fork and fatal-signal handlers are in.
static HANDLERS: AtomicBool = AtomicBool::new(false);

pub(crate) fn install_handlers() {
    if HANDLERS.swap(true, SeqCst) {
        return;
    }
    // SAFETY: registering handlers with valid function pointers.
    unsafe {
        on_exit(at_exit, core::ptr::null_mut());
        libc::pthread_atfork(None, None, Some(atfork_child));
        let mut key: libc::pthread_key_t = 0;
        if libc::pthread_key_create(&mut key, Some(key_dtor)) == 0 {
            KEY.store(key + 1, SeqCst);
        }
        for sig in FATAL {
            let mut old: libc::sigaction = core::mem::zeroed();
            // Only take signals the program leaves at their default; an ignored
            // SIGINT must stay ignored.
            if libc::sigaction(sig, core::ptr::null(), &mut old) != 0
                || old.sa_sigaction != libc::SIG_DFL
            {
                continue;
            }
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, core::ptr::null_mut());
        }
    }
}

extern "C" fn at_exit(status: c_int, _: *mut c_void) {
    crate::calls::warn_untraced();
    finish(EndStatus::Exited(status), Mode::Exit);
}

extern "C" fn key_dtor(_: *mut c_void) {
    state::finish_thread(ts());
}

/// Why the trace is being finished.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Exit,
    Exec,
    Crash,
}

/// Writes out every buffer, the final metadata and the header. For `Exec` the
/// recording can resume if the exec fails. False when there was nothing to do
/// (not recording, or another thread is finishing).
pub(crate) fn finish(end: EndStatus, mode: Mode) -> bool {
    let Some(sess) = session() else { return false };
    // A vfork child shares our memory: leave the parent's recording alone.
    if sess.pid != sys::getpid() {
        return false;
    }
    let crash = mode == Mode::Crash;
    if !crash && (STATE.load(SeqCst) != ACTIVE || FINISHING.swap(true, SeqCst)) {
        return false;
    }
    let st = ts();
    guard_on(st);
    if !crash && st.recording() && !st.stale() {
        record::flush_pending(st);
        // After a successful exec no frame returns; after a failed one the real
        // exits find the shadow stack empty and are not recorded, so it balances.
        record::close_frames(st);
        // the end of this thread's time (other threads' buffers are taken as they are)
        record::stamp_time(st);
        if mode == Mode::Exit {
            record::emit_control(st, &Event::ThreadExit);
        }
        state::swap_buffer(st, true);
        if mode == Mode::Exit {
            st.tstate.store(state::T_OFF, Relaxed);
        }
    }
    STATE.store(ENDING, SeqCst);
    kick_all();
    let deadline = sys::monotonic_ns() + if crash { 2_000_000_000 } else { 5_000_000_000 };
    state::steal_all(sess, deadline, crash);
    let timeout = crash.then_some(500_000_000);
    let mut recs = Vec::new();
    if crash {
        sess.drain_here(deadline);
    } else {
        sess.drain(None);
        if let Ok(mut known) = sess.modules.lock() {
            if crate::modules::merge(&mut known, crate::modules::scan()) {
                recs.extend(known.iter().cloned().map(MetaRecord::Module));
            }
        }
    }
    if let Ok(maps) = std::fs::read_to_string("/proc/self/maps") {
        recs.push(MetaRecord::Maps(maps));
    }
    recs.extend(crate::order::end_record());
    recs.extend(sess.end_records(end));
    sess.write_meta(&recs, crash, true, timeout);
    drop(recs);
    sess.write_header(end, timeout);
    guard_off(st);
    true
}

/// Before another live `trace` session: the last one's end is done with.
pub(crate) fn rearm() {
    FINISHING.store(false, SeqCst);
}

/// A live `trace` probe was removed: writes its trace out as at exit (every
/// thread's buffer, the final metadata, the header; the end status "unknown":
/// the program runs on), closes it, and the runtime goes back to inactive. False
/// when the program is finishing the trace itself (exiting).
pub(crate) fn finish_live() -> bool {
    if !finish(EndStatus::Unknown, Mode::Exit) {
        return false;
    }
    if let Some(s) = session() {
        s.close();
    }
    STATE.store(INACTIVE, SeqCst);
    kick_all();
    true
}

/// The exec failed: keep recording into the same trace (a later end record wins).
fn resume_after_exec() {
    if STATE.compare_exchange(ENDING, ACTIVE, SeqCst, SeqCst).is_ok() {
        FINISHING.store(false, SeqCst);
        kick_all();
        state::refresh_limit(ts());
    }
}

/// Fatal signal: record it, write everything out synchronously, then die of the
/// same signal with the default action so the exit status is unchanged.
pub(crate) extern "C" fn on_signal(sig: c_int, _info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    let st = ts();
    if !CRASHING.swap(true, SeqCst) {
        if STATE.load(SeqCst) == ACTIVE && session().is_some() {
            // From here on the runtime's allocations come from the arena: the signal
            // may have interrupted malloc itself.
            let in_runtime = st.guard.get() != 0;
            st.crash.set(true);
            guard_on(st);
            crash_flush_self(st, sig, in_runtime);
            finish(EndStatus::Signaled(sig), Mode::Crash);
        }
        CRASH_DONE.store(true, SeqCst);
    } else {
        // Another thread is writing the trace out; let it finish.
        let deadline = sys::monotonic_ns() + 3_000_000_000;
        while !CRASH_DONE.load(SeqCst) && sys::monotonic_ns() < deadline {
            sys::sleep_ns(1_000_000);
        }
    }
    // SAFETY: restoring the default action and re-raising: the signal is blocked in
    // this handler, so it is delivered (and kills us) as soon as we return.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Writes the crashing thread's own buffer plus a `Signal` event, without the
/// general path (the signal may have interrupted an event halfway).
fn crash_flush_self(st: &ThreadState, sig: c_int, in_runtime: bool) {
    let Some(sess) = session() else { return };
    let buf = st.buf.get();
    if !st.recording() || st.stale() || st.own.load(SeqCst) != 0 {
        return;
    }
    if buf == 0 || st.stolen.load(SeqCst) {
        // The buffer went to the writers (a parked thread's, taken by another):
        // the signal gets a chunk of its own.
        signal_chunk(sess, st, sig, buf);
        return;
    }
    let raw = st.pos.load(SeqCst);
    let mut pos = raw & !BUSY;
    if pos < buf || pos > st.buf_end.get() {
        return;
    }
    let mut v = memlens_format::codec::Streams::new();
    // SAFETY: control events do not use the encoder's prediction state, so this is
    // valid even if the interrupted event left it half-updated.
    unsafe { st.enc().push(&mut v, &Event::Signal(sig)) };
    let v = v.ops;
    if pos + v.len() <= st.buf_end.get() {
        // SAFETY: room checked; this thread owns the buffer.
        unsafe { crate::strings::real_memcpy(pos as *mut u8, v.as_ptr(), v.len()) };
        pos += v.len();
        st.bump(state::class::OTHER);
    }
    // Close the open frames, unless the signal interrupted an event (then the
    // encoder's state may be ahead of the buffer) or they do not fit.
    let frames = st.depth.get().min(state::SHADOW_CAP);
    if raw & BUSY == 0 && !in_runtime && pos + 32 + 12 * frames <= st.buf_end.get() {
        st.pos.store(pos, SeqCst);
        record::close_frames(st);
        pos = st.pos.load(SeqCst) & !BUSY;
    }
    // an interrupted event may have written side bytes past the last committed
    // one's: a reader ignores them
    let job = st.buffer_job(buf, pos - buf, true, false);
    st.stolen.store(true, SeqCst);
    st.tstate.store(state::T_OFF, SeqCst);
    sess.run_job(job, None, &mut Vec::new(), Some(500_000_000));
}

/// [`crash_flush_self`] for a thread without a buffer of its own: one chunk holding
/// the `Signal` event, next in the thread's stream.
fn signal_chunk(sess: &crate::session::Session, st: &ThreadState, sig: c_int, buf: usize) {
    let mut v = memlens_format::codec::Streams::new();
    // SAFETY: control events do not use the encoder's prediction state.
    unsafe { st.enc().push(&mut v, &Event::Signal(sig)) };
    let Some((b, cap)) = sess.acquire(true) else { return };
    if v.ops.len() > cap {
        return;
    }
    // SAFETY: a fresh buffer of `cap` bytes.
    unsafe { crate::strings::real_memcpy(b as *mut u8, v.ops.as_ptr(), v.ops.len()) };
    let seq = if buf == 0 && !st.stolen.load(SeqCst) { st.seq.get() } else { st.seq.get() + 1 };
    st.seq.set(seq);
    let job = st.one_event_job(b, v.ops.len(), cap, seq, true, false);
    st.stolen.store(true, SeqCst);
    st.tstate.store(state::T_OFF, SeqCst);
    sess.run_job(job, None, &mut Vec::new(), Some(500_000_000));
}

/// In the child of `fork`: a new trace `<output>.<pid>` whose stream 0 is this
/// thread; the parent's buffers and threads are forgotten.
extern "C" fn atfork_child() {
    if crate::livetrace::on() {
        // A live trace is the process's the collector asked for: the child runs
        // unrecorded (its copy of the buffers is forgotten).
        crate::livetrace::forget_in_child();
        STATE.store(INACTIVE, SeqCst);
        return;
    }
    if STATE.load(SeqCst) != ACTIVE {
        if STATE.load(SeqCst) == ENDING {
            STATE.store(INACTIVE, SeqCst);
        }
        return;
    }
    let st = ts();
    guard_on(st);
    FINISHING.store(false, SeqCst);
    crate::order::after_fork_in_child(st);
    state::reset_after_fork(st);
    let opts = options::get();
    let modules = session()
        .and_then(|s| s.modules.try_lock().ok().map(|m| m.clone()))
        .unwrap_or_else(crate::modules::scan);
    let base = opts.rec.output.as_deref().unwrap_or("memlens.trace");
    let parents = session().map_or(-1, |s| s.fd());
    match Session::start(opts, base, false, modules) {
        // the parent's trace descriptor is of no use here
        Ok(_) => crate::fds::close_raw(parents),
        Err(e) => {
            sys::warn(&[&e.to_string(), "; the child is not recorded"]);
            STATE.store(INACTIVE, SeqCst);
            st.tstate.store(state::T_OFF, SeqCst);
        }
    }
    guard_off(st);
    if STATE.load(SeqCst) == ACTIVE {
        state::thread_start(st, None, false);
    }
}

/// Address of libc's `dlopen` (0 until the runtime starts), for the jump below.
static REAL_DLOPEN: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
/// Nonzero when `--trace-calls` may have functions to patch in a library that
/// `dlopen` maps (an `@<path>` section not mapped at start-up, `? <name>` lines).
pub(crate) static DLOPEN_HOOK: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);

// `dlopen` jumps straight to libc's unless `DLOPEN_HOOK` is set: glibc takes
// the caller's search path and `$ORIGIN` from the return address, which a jump
// keeps (a call from here would make every `dlopen` look like the executable's).
#[cfg(all(not(test), target_arch = "x86_64"))]
core::arch::global_asm!(
    ".globl dlopen",
    ".type dlopen,@function",
    "dlopen:",
    "cmp byte ptr [rip + {hook}], 0",
    "jne {hooked}",
    "mov rax, qword ptr [rip + {real}]",
    "test rax, rax",
    "jz {hooked}",
    "jmp rax",
    ".size dlopen, . - dlopen",
    hook = sym DLOPEN_HOOK,
    real = sym REAL_DLOPEN,
    hooked = sym dlopen_hooked,
);

/// `dlopen` while `--trace-calls` may have functions in libraries still to come:
/// they are patched before `dlopen` returns, so before the program can call into
/// them (the library's constructors have run, unpatched, inside libc's `dlopen`).
#[cfg_attr(test, allow(dead_code))]
unsafe extern "C" fn dlopen_hooked(file: *const c_char, mode: c_int) -> *mut c_void {
    let f = real::get(R::dlopen);
    if f == 0 {
        return core::ptr::null_mut();
    }
    let h = core::mem::transmute::<usize, unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void>(
        f,
    )(file, mode);
    if !h.is_null() && STATE.load(SeqCst) == ACTIVE {
        let _g = Guard::new();
        crate::calls::after_dlopen();
    }
    h
}

/// `fork`: the parent records `Fork` and names the child's trace in its metadata.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    let f = real::get(R::fork);
    if f == 0 {
        *libc::__errno_location() = libc::ENOSYS;
        return -1;
    }
    // glibc's fork holds every malloc arena lock around the system call; a signal
    // handler recording there could wait for a buffer from a writer that waits for
    // one of those locks. Asynchronous signals wait until fork has returned.
    let old = crate::sys::block_async_signals();
    let pid = core::mem::transmute::<usize, unsafe extern "C" fn() -> libc::pid_t>(f)();
    crate::sys::set_signal_mask(&old);
    if pid > 0 && STATE.load(SeqCst) == ACTIVE && !crate::livetrace::on() {
        if let Some(s) = session() {
            if s.pid == sys::getpid() {
                record::control(Event::Fork { child_pid: pid as u32 });
                let _g = Guard::new();
                let base = options::get().rec.output.clone().unwrap_or_default();
                let path = format!("{base}.{pid}");
                s.write_meta(&[MetaRecord::Child { pid: pid as u32, path }], false, false, None);
            }
        }
    }
    pid
}

/// Before an exec: record it and finish the trace. Returns a replacement
/// environment when `envp` would lose the ownership mark.
unsafe fn before_exec(envp: Option<*const *const c_char>) -> Option<(Vec<*const c_char>, Vec<u8>)> {
    if STATE.load(SeqCst) != ACTIVE || session().is_none_or(|s| s.pid != sys::getpid()) {
        return None;
    }
    record::control(Event::Exec);
    finish(EndStatus::Exec, Mode::Exec);
    let envp = envp.filter(|e| !e.is_null())?;
    let _g = Guard::new();
    let mut vars = Vec::new();
    let (mut has_output, mut has_owner) = (false, false);
    let mut i = 0;
    loop {
        let p = *envp.add(i);
        if p.is_null() {
            break;
        }
        let s = std::ffi::CStr::from_ptr(p).to_bytes();
        has_output |= s.starts_with(b"MEMLENS_OUTPUT=");
        has_owner |= s.starts_with(b"MEMLENS_OWNER_PID=");
        vars.push(p);
        i += 1;
    }
    if !has_output || has_owner {
        return None;
    }
    let owner = std::env::var("MEMLENS_OWNER_PID").unwrap_or_else(|_| sys::getpid().to_string());
    let mut mark = format!("MEMLENS_OWNER_PID={owner}").into_bytes();
    mark.push(0);
    vars.push(mark.as_ptr().cast());
    vars.push(core::ptr::null());
    Some((vars, mark))
}

fn after_failed_exec() {
    resume_after_exec();
}

type ExecE =
    unsafe extern "C" fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
type Exec = unsafe extern "C" fn(*const c_char, *const *const c_char) -> c_int;

unsafe fn exec_e(
    r: R,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    let env = before_exec(Some(envp));
    let envp = env.as_ref().map_or(envp, |(v, _)| v.as_ptr());
    let f = real::get(r);
    let rc = if f == 0 { -1 } else { core::mem::transmute::<usize, ExecE>(f)(path, argv, envp) };
    {
        let _g = Guard::new();
        drop(env);
    }
    after_failed_exec();
    rc
}

unsafe fn exec_plain(r: R, path: *const c_char, argv: *const *const c_char) -> c_int {
    before_exec(None);
    let f = real::get(r);
    let rc = if f == 0 { -1 } else { core::mem::transmute::<usize, Exec>(f)(path, argv) };
    after_failed_exec();
    rc
}

/// `execve`: finishes the trace first (resumes if the exec fails).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn execve(
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    exec_e(R::execve, path, argv, envp)
}

/// `execvpe`: as [`execve`].
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn execvpe(
    file: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
) -> c_int {
    exec_e(R::execvpe, file, argv, envp)
}

/// `execv`: as [`execve`].
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    exec_plain(R::execv, path, argv)
}

/// `execvp`: as [`execve`].
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    exec_plain(R::execvp, file, argv)
}

unsafe fn exit_now(r: R, status: c_int) -> ! {
    finish(EndStatus::Exited(status), Mode::Exit);
    let f = real::get(r);
    if f != 0 {
        core::mem::transmute::<usize, unsafe extern "C" fn(c_int) -> !>(f)(status);
    }
    libc::syscall(libc::SYS_exit_group, status);
    libc::abort()
}

/// `_exit`: finishes the trace, then exits.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    exit_now(R::_exit, status)
}

/// `_Exit`: as [`_exit`].
#[cfg_attr(not(test), unsafe(no_mangle))]
#[allow(non_snake_case)]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    exit_now(R::_Exit, status)
}

type Start = unsafe extern "C-unwind" fn(*mut c_void) -> *mut c_void;

struct Wrapped {
    start: Start,
    arg: *mut c_void,
    parent: Option<u32>,
    clock: u64,
}

/// A new thread's first frame: starts its stream (parent known), runs the user's
/// routine, ends the stream.
unsafe extern "C-unwind" fn thread_main(w: *mut c_void) -> *mut c_void {
    let Wrapped { start, arg, parent, clock } = (w as *mut Wrapped).read();
    real::__libc_free(w);
    let st = ts();
    state::thread_start(st, parent, true);
    crate::order::inherit(clock);
    let r = start(arg);
    crate::order::release(libc::pthread_self());
    state::finish_thread(st);
    r
}

type Create = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    Start,
    *mut c_void,
) -> c_int;

/// `pthread_create`: wraps the start routine (see [`thread_main`]).
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn pthread_create(
    t: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: Start,
    arg: *mut c_void,
) -> c_int {
    let f = real::get(R::pthread_create);
    if f == 0 {
        return libc::EAGAIN;
    }
    let create = core::mem::transmute::<usize, Create>(f);
    let st = ts();
    let s = STATE.load(SeqCst);
    if st.guard.get() != 0 || s == INACTIVE || s == ENDING {
        return create(t, attr, start, arg);
    }
    let w = real::__libc_malloc(core::mem::size_of::<Wrapped>()) as *mut Wrapped;
    if w.is_null() {
        return create(t, attr, start, arg);
    }
    // the new thread may overwrite what this one just stored
    record::settle();
    let parent = st.recording().then(|| st.stream.get());
    let clock = crate::order::fork_clock();
    w.write(Wrapped { start, arg, parent, clock });
    let rc = create(t, attr, thread_main, w.cast());
    if rc != 0 {
        real::__libc_free(w.cast());
    }
    rc
}

/// `pthread_exit`: ends the stream first.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C-unwind" fn pthread_exit(ret: *mut c_void) -> ! {
    crate::order::release(libc::pthread_self());
    state::finish_thread(ts());
    let f = real::get(R::pthread_exit);
    if f != 0 {
        core::mem::transmute::<usize, unsafe extern "C-unwind" fn(*mut c_void) -> !>(f)(ret);
    }
    libc::abort()
}

/// `pthread_setname_np`: records `ThreadName` in the named thread's stream.
#[cfg_attr(not(test), unsafe(no_mangle))]
pub unsafe extern "C" fn pthread_setname_np(t: libc::pthread_t, name: *const c_char) -> c_int {
    let f = real::get(R::pthread_setname_np);
    if f == 0 {
        return libc::ENOSYS;
    }
    type SetName = unsafe extern "C" fn(libc::pthread_t, *const c_char) -> c_int;
    let rc = core::mem::transmute::<usize, SetName>(f)(t, name);
    if rc == 0 && !name.is_null() && STATE.load(SeqCst) == ACTIVE && ts().guard.get() == 0 {
        // Reading the name calls strlen: do it as the runtime.
        let g = Guard::new();
        let bytes = std::ffi::CStr::from_ptr(name).to_bytes();
        if t == libc::pthread_self() {
            let n = String::from_utf8_lossy(bytes).into_owned();
            drop(g);
            record::control(Event::ThreadName(n));
        } else {
            state::name_other(t as usize, bytes);
        }
    }
    rc
}
