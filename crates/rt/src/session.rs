//! One recording: the trace file, the buffer pool, the queue of full buffers and
//! the writer threads that compress and append them.
//!
//! Traced threads never compress or write: a full buffer becomes a [`Job`] on a
//! bounded lock-free queue and the thread takes an empty buffer from a pool. When
//! [`Session::cap`] jobs are waiting the thread sleeps until a writer catches up
//! (backpressure: nothing is dropped while the disk keeps up). Once a write fails the
//! session is `failed` for good: later chunks are counted as dropped, the program
//! keeps running, and the counts go into the final metadata and the header, which is
//! rewritten in place and so needs no new disk space.

use crate::options::Options;
use crate::state::{self, ACTIVE, STATE};
use crate::sys::{self, SpinLock};
use crate::{real, Error};
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicUsize, Ordering::*};
use crossbeam_queue::ArrayQueue;
use libc::{c_int, c_void};
use memlens_format::codec::{MAX_SIDE_LEN, SIDE_PER_OP};
use memlens_format::{
    stored_event_frame, Append, ChunkCounts, ChunkEncoder, ChunkHeader, ChunkSink, EndStatus,
    EventParts, FileCore, FileHeader, MetaRecord, Module, FLAG_LAST,
};
use std::sync::Mutex;

/// zstd levels a writer falls back to when a quarter / half of the queue waits.
const FAST_LEVELS: [i32; 2] = [-1, -4];

/// Buffer size handed to threads once many are alive.
pub(crate) const SMALL_BUF: usize = 64 << 10;

/// A full (or final) buffer of one stream, on its way to a writer.
pub(crate) struct Job {
    /// Buffer start.
    pub buf: usize,
    /// Bytes of the op stream in it (from `buf`).
    pub len: usize,
    /// Bytes of the side stream (from `buf + cap`).
    pub side_len: usize,
    /// Buffer size (selects the pool it returns to).
    pub cap: usize,
    /// Stream (thread) id.
    pub stream: u32,
    /// Chunk sequence number in the stream.
    pub seq: u32,
    /// Last chunk of the stream.
    pub last: bool,
    /// Event counters of the chunk.
    pub counts: ChunkCounts,
    /// Monotonic time at the chunk's start.
    pub clock: u64,
    /// Return the buffer to the pool afterwards (false when the owning thread might
    /// still touch it: buffers taken from running threads at exit).
    pub recycle: bool,
}

/// An open trace file and its machinery.
pub(crate) struct Session {
    /// The trace descriptor (moved under the file lock, see `fds.rs`; -1 once lost).
    fd: AtomicI32,
    /// Path of the trace file.
    pub path: String,
    /// Recording process.
    pub pid: u32,
    start_ns: u64,
    level: i32,
    /// Faster zstd levels when the writers fall behind (`MEMLENS_ZSTD_ADAPT`).
    adapt: bool,
    /// Fold loops before compressing (`MEMLENS_FOLD`).
    fold: bool,
    /// Default buffer size.
    pub big: usize,
    pool_big: ArrayQueue<usize>,
    pool_small: ArrayQueue<usize>,
    jobs: ArrayQueue<Job>,
    /// Jobs queued or being written.
    inflight: AtomicUsize,
    /// Backpressure threshold on `inflight`.
    cap: usize,
    /// Bumped after every finished job (futex word for waiting producers).
    progress: AtomicU32,
    wake: AtomicU32,
    sleepers: AtomicU32,
    writers: AtomicU32,
    /// Next stream id.
    pub next_stream: AtomicU32,
    /// The trace is finished and its descriptor closed (a live `trace` probe was
    /// removed): the writers leave.
    closed: AtomicBool,
    /// The file's layout and accounting: what was written, what was dropped (events
    /// not recorded are counted there too), whether a write failed.
    pub core: FileCore,
    /// Serialises appends and descriptor moves.
    file: SpinLock,
    /// Module table (ids are stable for the whole trace).
    pub modules: Mutex<Vec<Module>>,
}

static SESSION: AtomicPtr<Session> = AtomicPtr::new(core::ptr::null_mut());

/// The current recording, if any.
#[inline]
pub(crate) fn session() -> Option<&'static Session> {
    // SAFETY: sessions are leaked, never freed.
    unsafe { SESSION.load(Acquire).as_ref() }
}

impl Session {
    /// Opens the trace, writes the header and the start metadata, starts the writers
    /// and installs the session as current.
    pub(crate) fn start(
        opts: &Options,
        base: &str,
        owner: bool,
        modules: Vec<Module>,
    ) -> Result<&'static Session, Error> {
        let (fd, path) = open_output(base, owner, sys::getpid())?;
        Ok(Session::start_on(opts, fd, path, modules))
    }

    /// [`Session::start`] on the trace `fd` already open at `path`.
    pub(crate) fn start_on(
        opts: &Options,
        fd: c_int,
        path: String,
        modules: Vec<Module>,
    ) -> &'static Session {
        let pid = sys::getpid();
        let big = opts.buffer_bytes;
        let cap = 8 + 4 * opts.writers;
        let s: &'static Session = Box::leak(Box::new(Session {
            fd: AtomicI32::new(fd),
            path,
            pid,
            start_ns: sys::realtime_ns(),
            level: opts.rec.zstd_level,
            adapt: opts.zstd_adapt,
            fold: opts.fold,
            big,
            pool_big: ArrayQueue::new(cap + 8),
            pool_small: ArrayQueue::new(256),
            jobs: ArrayQueue::new(4096),
            inflight: AtomicUsize::new(0),
            cap,
            progress: AtomicU32::new(0),
            wake: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            writers: AtomicU32::new(0),
            next_stream: AtomicU32::new(0),
            closed: AtomicBool::new(false),
            core: FileCore::new(),
            file: SpinLock::new(),
            modules: Mutex::new(modules),
        }));
        let header = s.base_header();
        if let Err(e) = s.core.start(&mut Fd(fd), &header) {
            s.warn_failed(&e);
        }
        let mut recs = vec![MetaRecord::Process {
            pid,
            exe: crate::modules::exe_path(),
            argv: crate::modules::cmdline(),
        }];
        recs.extend(opts.records());
        if let Ok(m) = s.modules.lock() {
            recs.extend(m.iter().cloned().map(MetaRecord::Module));
        }
        s.write_meta(&recs, false, false, None);
        s.start_writers(opts.writers);
        SESSION.store(s as *const Session as *mut Session, Release);
        s
    }

    /// Events and bytes written so far, and events dropped.
    pub(crate) fn written(&self) -> [u64; 3] {
        self.core.written()
    }

    /// The header before the file's figures are in.
    fn base_header(&self) -> FileHeader {
        FileHeader {
            pid: self.pid,
            start_ns: self.start_ns,
            threads: self.next_stream.load(Relaxed),
            ..FileHeader::default()
        }
    }

    /// After the trace is finished: closes its descriptor and lets the writers go.
    pub(crate) fn close(&self) {
        self.file.lock();
        let fd = self.fd.swap(-1, AcqRel);
        if fd >= 0 {
            crate::fds::close_raw(fd);
        }
        self.file.unlock();
        self.closed.store(true, SeqCst);
        self.wake_writers();
    }

    fn start_writers(&'static self, n: usize) {
        let create = real::get(real::R::pthread_create);
        if create == 0 {
            return;
        }
        type Create = unsafe extern "C" fn(
            *mut libc::pthread_t,
            *const libc::pthread_attr_t,
            extern "C" fn(*mut c_void) -> *mut c_void,
            *mut c_void,
        ) -> c_int;
        // SAFETY: the address came from dlsym("pthread_create").
        let create: Create = unsafe { core::mem::transmute::<usize, Create>(create) };
        // Writers start with every asynchronous signal blocked (they inherit this
        // thread's mask): a process-directed SIGTERM or SIGUSR1 must run the
        // program's handler, or the crash handler, on a program thread that can
        // record it, never on a writer.
        let old = crate::sys::block_async_signals();
        for _ in 0..n {
            // SAFETY: plain pthread calls with valid out-pointers; the session is 'static.
            unsafe {
                let mut attr: libc::pthread_attr_t = core::mem::zeroed();
                libc::pthread_attr_init(&mut attr);
                libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
                let mut t: libc::pthread_t = 0;
                let arg = self as *const Session as *mut c_void;
                if create(&mut t, &attr, writer_main, arg) == 0 {
                    self.writers.fetch_add(1, SeqCst);
                }
                libc::pthread_attr_destroy(&mut attr);
            }
        }
        crate::sys::set_signal_mask(&old);
    }

    /// The trace descriptor (-1 once lost).
    #[inline]
    pub(crate) fn fd(&self) -> c_int {
        self.fd.load(Acquire)
    }

    /// Moves the trace descriptor to `to(fd)` while no chunk is being written. A
    /// negative result means there is nowhere to go: the trace is given up (counted
    /// as dropped from here) so the program gets its descriptor.
    pub(crate) fn relocate(&self, to: impl FnOnce(c_int) -> c_int) {
        self.file.lock();
        let fd = self.fd.load(Relaxed);
        let new = if fd >= 0 { to(fd) } else { fd };
        if new < 0 && fd >= 0 {
            crate::fds::close_raw(fd);
            if self.core.fail() {
                sys::warn(&[
                    "the program needs the trace's descriptor and no other is free; ",
                    "later events of ",
                    &self.path,
                    " are counted as dropped",
                ]);
            }
        }
        self.fd.store(new, Release);
        self.file.unlock();
    }

    fn warn_failed(&self, e: &std::io::Error) {
        sys::warn(&[
            "cannot write the trace ",
            &self.path,
            ": ",
            &e.to_string(),
            "; later events are counted as dropped",
        ]);
    }

    /// Appends one chunk made of `parts`. `force` writes even after a failure (the
    /// final metadata); `timeout` bounds the wait for the file lock (crash path).
    fn write_chunk(&self, parts: &[&[u8]], events: u64, force: bool, timeout: Option<u64>) -> bool {
        let locked = match timeout {
            None => {
                self.file.lock();
                true
            }
            Some(ns) => self.file.lock_for(ns),
        };
        let r = self.core.append(&mut Fd(self.fd()), parts, events, force);
        let ok = match r {
            Append::Written => true,
            Append::Skipped => false,
            Append::Failed { error, first } => {
                if first {
                    self.warn_failed(&error);
                }
                false
            }
        };
        if locked {
            self.file.unlock();
        }
        ok
    }

    /// Writes metadata records as one chunk; `raw` skips compression (no zstd
    /// context to allocate on the crash path).
    pub(crate) fn write_meta(
        &self,
        recs: &[MetaRecord],
        raw: bool,
        force: bool,
        timeout: Option<u64>,
    ) {
        let mut enc = ChunkEncoder::new(if raw { 0 } else { self.level });
        let mut out = Vec::new();
        self.core.meta_chunk(recs, &mut enc, &mut out);
        self.write_chunk(&[&out], 0, force, timeout);
    }

    /// Rewrites the file header with the final figures (in place: no new space).
    pub(crate) fn write_header(&self, end: EndStatus, timeout: Option<u64>) {
        let (end_kind, end_value) = end.to_parts();
        let h = self.core.final_header(&FileHeader { end_kind, end_value, ..self.base_header() });
        let bytes = h.encode();
        let locked = match timeout {
            None => {
                self.file.lock();
                true
            }
            Some(ns) => self.file.lock_for(ns),
        };
        let _ = Fd(self.fd()).write_at(&bytes, 0);
        if locked {
            self.file.unlock();
        }
    }

    /// The end-of-trace metadata: statistics and how the process ended.
    pub(crate) fn end_records(&self, end: EndStatus) -> [MetaRecord; 2] {
        self.core.end_records(end)
    }

    /// An empty buffer, waiting while too many full ones are queued. `None` when no
    /// memory can be had or recording stopped while waiting.
    pub(crate) fn acquire(&self, small: bool) -> Option<(usize, usize)> {
        while self.inflight.load(Acquire) >= self.cap && !self.core.failed() {
            if STATE.load(Relaxed) != ACTIVE || self.writers.load(Relaxed) == 0 {
                break;
            }
            let p = self.progress.load(Acquire);
            if self.inflight.load(Acquire) < self.cap {
                break;
            }
            self.wake_writers();
            sys::futex_wait(&self.progress, p, 10_000_000);
        }
        let (pool, size) = if small && self.big > SMALL_BUF {
            (&self.pool_small, SMALL_BUF)
        } else {
            (&self.pool_big, self.big)
        };
        if let Some(b) = pool.pop() {
            return Some((b, size));
        }
        let p = sys::map(region_len(size));
        (!p.is_null()).then_some((p as usize, size))
    }

    fn recycle(&self, buf: usize, cap: usize) {
        let pool = if cap == self.big { &self.pool_big } else { &self.pool_small };
        if pool.push(buf).is_err() {
            // SAFETY: the buffer came from `map(cap)` and its owner gave it up.
            unsafe { sys::unmap(buf as *mut u8, region_len(cap)) };
        }
    }

    /// Gives a full buffer to the writers (or writes it here when there are none).
    pub(crate) fn submit(&self, job: Job) {
        if self.writers.load(Relaxed) == 0 {
            let mut enc = ChunkEncoder::new(self.level).with_fold(self.fold);
            self.run_job(job, Some(&mut enc), &mut Vec::new(), None);
            return;
        }
        self.inflight.fetch_add(1, AcqRel);
        let mut job = job;
        while let Err(j) = self.jobs.push(job) {
            job = j;
            self.wake_writers();
            sys::sleep_ns(50_000);
        }
        self.wake_writers();
    }

    /// Frames and writes one job; `enc = None` stores it uncompressed.
    pub(crate) fn run_job(
        &self,
        job: Job,
        enc: Option<&mut ChunkEncoder>,
        out: &mut Vec<u8>,
        timeout: Option<u64>,
    ) {
        // SAFETY: the producer handed over `len` initialised op bytes at `buf` and
        // `side_len` side bytes at `buf + cap` (within the region, see `region_len`);
        // the bytes between are mapped (zero or stale), never read.
        let side_len = job.side_len.min(region_len(job.cap) - job.cap);
        let region =
            unsafe { core::slice::from_raw_parts(job.buf as *const u8, job.cap + side_len) };
        let (ops, side) = (&region[..job.len], &region[job.cap..]);
        let flags = if job.last { FLAG_LAST } else { 0 };
        let events = u64::from(job.counts.events);
        if self.core.failed() {
            self.core.drop_chunk(events, (ops.len() + side.len()) as u64);
        } else if let Some(enc) = enc {
            let (s, q, c, t) = (job.stream, job.seq, job.counts, job.clock);
            let parts = EventParts::Region {
                buf: region,
                ops: 0..job.len,
                side: job.cap..job.cap + side_len,
            };
            enc.encode_event_parts(ChunkHeader::events(s, q, flags, c, t), parts, out);
            self.write_chunk(&[out], events, false, timeout);
        } else {
            // no allocation here (crash path): the frame's header and prefix on the stack
            let mut pre = [0u8; 10];
            let (s, q, c, t) = (job.stream, job.seq, job.counts, job.clock);
            let head = ChunkHeader::events(s, q, flags, c, t);
            let (h, k) = stored_event_frame(head, ops, side, &mut pre);
            self.write_chunk(&[&h, &pre[..k], ops, side], events, false, timeout);
        }
        if job.recycle {
            self.recycle(job.buf, job.cap);
        }
    }

    /// The zstd level for the next chunk when `backlog` more wait: the configured
    /// level while the writers keep up, zstd's fast levels as the queue fills (the
    /// traced threads block once [`Session::cap`] jobs are in flight, so a writer
    /// that compresses slower than they produce sets the pace of the program).
    fn level_for_backlog(&self, backlog: usize) -> i32 {
        if !self.adapt || self.level <= 0 {
            return self.level;
        }
        let fast = if backlog >= self.cap / 2 {
            FAST_LEVELS[1]
        } else if backlog >= self.cap / 4 {
            FAST_LEVELS[0]
        } else {
            return self.level;
        };
        fast.min(self.level)
    }

    fn wake_writers(&self) {
        self.wake.fetch_add(1, SeqCst);
        if self.sleepers.load(SeqCst) > 0 {
            sys::futex_wake(&self.wake);
        }
    }

    fn job_done(&self) {
        self.inflight.fetch_sub(1, AcqRel);
        self.progress.fetch_add(1, Release);
        sys::futex_wake(&self.progress);
    }

    /// Waits until every queued job is written; false on timeout.
    pub(crate) fn drain(&self, deadline: Option<u64>) -> bool {
        loop {
            let p = self.progress.load(Acquire);
            if self.inflight.load(Acquire) == 0 {
                return true;
            }
            if deadline.is_some_and(|d| sys::monotonic_ns() > d) || self.writers.load(Relaxed) == 0
            {
                return false;
            }
            self.wake_writers();
            sys::futex_wait(&self.progress, p, 5_000_000);
        }
    }

    /// Crash path: writes the queued jobs here, uncompressed, then waits (bounded)
    /// for the writers' jobs in progress.
    pub(crate) fn drain_here(&self, deadline: u64) {
        let timeout = Some(500_000_000);
        while let Some(job) = self.jobs.pop() {
            self.run_job(job, None, &mut Vec::new(), timeout);
            self.job_done();
        }
        self.drain(Some(deadline));
    }
}

/// The trace descriptor as the file core's sink.
struct Fd(c_int);

impl ChunkSink for Fd {
    fn write_at(&mut self, buf: &[u8], at: u64) -> std::io::Result<()> {
        sys::pwrite_all(self.0, buf, at).map_err(std::io::Error::from_raw_os_error)
    }

    fn truncate(&mut self, len: u64) {
        // Shrinking needs no space. SAFETY: plain syscall on our descriptor.
        unsafe { libc::ftruncate(self.0, len as libc::off_t) };
    }
}

/// Bytes mapped for a thread buffer of `cap` op-stream bytes: the op stream, then
/// room for the side stream that the op stream can never outgrow (see
/// [`SIDE_PER_OP`]), so the hot path checks the op stream alone. Only the pages
/// written are ever backed by memory.
pub(crate) const fn region_len(cap: usize) -> usize {
    cap + cap * SIDE_PER_OP + 4 * MAX_SIDE_LEN
}

/// Opens the trace: the first process of a recording truncates `base`; any other
/// (forked child, exec'd or spawned program) creates `base.<pid>` (or
/// `base.<pid>.<n>` if that exists) so it never overwrites another trace.
fn open_output(base: &str, owner: bool, pid: u32) -> Result<(c_int, String), Error> {
    let open = |path: &str, flags: c_int| -> Result<c_int, i32> {
        let c = std::ffi::CString::new(path).map_err(|_| libc::EINVAL)?;
        // SAFETY: valid NUL-terminated path.
        let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_WRONLY | libc::O_CLOEXEC, 0o644) };
        if fd < 0 {
            Err(sys::errno())
        } else {
            // out of the program's way (fds.rs)
            Ok(crate::fds::move_high(fd))
        }
    };
    if owner {
        if let Some(fd) = inherited_output() {
            return Ok((fd, base.to_string()));
        }
        // run without `memlens record`: at least never write through a planted link
        return open(base, libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW)
            .map(|fd| (fd, base.to_string()))
            .map_err(|errno| Error::Open { path: base.to_string(), errno });
    }
    let mut last = 0;
    for n in 0..1000 {
        let path = if n == 0 { format!("{base}.{pid}") } else { format!("{base}.{pid}.{n}") };
        match open(&path, libc::O_CREAT | libc::O_EXCL) {
            Ok(fd) => return Ok((fd, path)),
            Err(libc::EEXIST) => last = libc::EEXIST,
            Err(e) => return Err(Error::Open { path, errno: e }),
        }
    }
    Err(Error::Open { path: format!("{base}.{pid}"), errno: last })
}

/// Creates the trace of a live `trace` probe: a new file at `path` (never an
/// existing one, never through a link), out of the program's way.
pub(crate) fn create_new(path: &str) -> Result<c_int, Error> {
    let err = |errno| Error::Open { path: path.to_string(), errno };
    let c = std::ffi::CString::new(path).map_err(|_| err(libc::EINVAL))?;
    let flags = libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_WRONLY | libc::O_CLOEXEC;
    // SAFETY: valid NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), flags, 0o644) };
    if fd < 0 {
        return Err(err(sys::errno()));
    }
    Ok(crate::fds::move_high(fd))
}

/// The trace `memlens record` created (a fresh file, never a planted one) and
/// passed open as `MEMLENS_OUTPUT_FD`; taken once, kept from programs this one
/// starts.
fn inherited_output() -> Option<c_int> {
    let v = std::env::var("MEMLENS_OUTPUT_FD").ok()?;
    // SAFETY: NUL-terminated name; done while starting up.
    unsafe { libc::unsetenv(c"MEMLENS_OUTPUT_FD".as_ptr()) };
    let fd: c_int = v.parse().ok()?;
    // SAFETY: fcntl on any number is safe; a closed one fails.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fd < 0 || fl < 0 || fl & libc::O_ACCMODE == libc::O_RDONLY {
        return None;
    }
    // SAFETY: as above.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    Some(fd)
}

/// A writer thread: compresses and appends jobs until the process ends.
extern "C" fn writer_main(arg: *mut c_void) -> *mut c_void {
    // SAFETY: `arg` is the leaked session passed by `start_writers`.
    let s: &'static Session = unsafe { &*(arg as *const Session) };
    state::mark_runtime_thread();
    // SAFETY: PR_SET_NAME with a NUL-terminated name.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"memlens-writer".as_ptr()) };
    let mut enc = ChunkEncoder::new(s.level).with_fold(s.fold);
    // Sized for the largest chunk now: growing it later calls malloc, whose arena
    // lock a program thread may hold while it waits for this writer.
    let mut out = Vec::with_capacity(2 * s.big + 4096);
    loop {
        if let Some(job) = s.jobs.pop() {
            enc.set_level(s.level_for_backlog(s.jobs.len()));
            s.run_job(job, Some(&mut enc), &mut out, None);
            s.job_done();
            continue;
        }
        if s.closed.load(SeqCst) {
            s.writers.fetch_sub(1, SeqCst);
            return core::ptr::null_mut();
        }
        let w = s.wake.load(SeqCst);
        s.sleepers.fetch_add(1, SeqCst);
        if s.jobs.is_empty() {
            sys::futex_wait(&s.wake, w, 200_000_000);
        }
        s.sleepers.fetch_sub(1, SeqCst);
    }
}
