//! The worker thread: turns the raw per-thread buffers filled by the callbacks into
//! encoded, compressed chunks and appends them to the trace with
//! `memlens-format`'s [`TraceWriter`] (header, framing, metadata, drop accounting).
//!
//! The callbacks only append fixed-size raw records (see [`crate::thread`]): the
//! delta/prediction encoding, the merging of split 16-byte accesses and zstd all
//! run here, on the core a single-threaded guest leaves idle. Full buffers come
//! over a channel (no lock on the sending side) and go back through a lock-free
//! queue to be refilled.

use crate::decode::{MERGE, OP_MASK, WIDE32};
use crate::thread::{MARK, M_CLOCK, M_ENTER, M_EVENT, M_EXIT, M_TIME, M_VALUE, PC_MASK, RAW_WORDS};
use crossbeam_queue::ArrayQueue;
use memlens_contract::options::Recording;
use memlens_format::codec::{access_tag, Encoder, Streams, MAX_ACCESS_LEN};
use memlens_format::{
    count, AccessKind, ChunkCounts, EndStatus, Event, FileHeader, MetaRecord, Module, RmwOp,
    TraceWriter,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::mpsc::{channel, Sender};
use std::sync::{LazyLock, Mutex};

/// Encoded bytes per chunk.
const CHUNK: usize = 1 << 20;
/// Raw buffers queued for the worker before a producer waits (each
/// [`RAW_WORDS`] × 8 bytes): bounds memory when the guest outruns the worker.
const MAX_INFLIGHT: usize = 512;

/// A full raw buffer of one thread: records, the events its `M_EVENT` markers
/// stand for, and whether the thread's stream ends with it.
pub struct Raw {
    pub stream: u32,
    pub words: Vec<u64>,
    pub events: Vec<Event>,
    pub last: bool,
    /// The stream's clock before its first record (used by a stream's first buffer).
    pub clock0: u64,
}

/// Work for the worker thread.
pub enum Msg {
    /// Raw records of a thread stream.
    Raw(Raw),
    /// Metadata records.
    Meta(Vec<MetaRecord>),
    /// Finish the file (with the process's end, if known) and acknowledge.
    Finish(Option<EndStatus>, Sender<()>),
}

static TX: Mutex<Option<Sender<Msg>>> = Mutex::new(None);
static INFLIGHT: AtomicUsize = AtomicUsize::new(0);
/// Emptied raw buffers, for reuse (their pages are already faulted in).
static FREE: LazyLock<ArrayQueue<Vec<u64>>> = LazyLock::new(|| ArrayQueue::new(MAX_INFLIGHT + 8));

/// Sends work to the worker thread (dropped if it is gone).
pub fn send(m: Msg) {
    if let Some(tx) = TX.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        let _ = tx.send(m);
    }
}

thread_local! {
    /// This thread's handle on the channel: no lock per buffer.
    static MY_TX: std::cell::RefCell<Option<(u64, Sender<Msg>)>> = const { std::cell::RefCell::new(None) };
}
/// Bumped whenever the channel is replaced (a forked child's new worker).
static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Hands a full raw buffer to the worker; waits while too many are queued.
pub fn hand_over(r: Raw) {
    let mut spins = 0u32;
    while INFLIGHT.load(Acquire) >= MAX_INFLIGHT && spins < 200_000 {
        spins += 1;
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
    INFLIGHT.fetch_add(1, AcqRel);
    let gen = GENERATION.load(Acquire);
    let sent = MY_TX.try_with(|c| {
        let mut c = c.borrow_mut();
        if c.as_ref().is_none_or(|(g, _)| *g != gen) {
            *c = TX.lock().unwrap_or_else(|e| e.into_inner()).clone().map(|tx| (gen, tx));
        }
        c.as_ref().map(|(_, tx)| tx.send(Msg::Raw(r)).is_ok())
    });
    if sent != Ok(Some(true)) {
        INFLIGHT.fetch_sub(1, AcqRel);
    }
}

/// An empty raw buffer with room for [`RAW_WORDS`] words.
pub fn fresh_words() -> Vec<u64> {
    FREE.pop().unwrap_or_else(|| Vec::with_capacity(RAW_WORDS))
}

/// One thread stream as the worker encodes it.
struct Stream {
    enc: Encoder,
    raw: Streams,
    counts: ChunkCounts,
    /// The clock in force now, and where the current chunk started.
    clock: u64,
    chunk_clock: u64,
    /// The 8-byte pieces so far of a vector access QEMU split: pc (0: none),
    /// address, bytes so far, bytes of the whole access, store, value of the first.
    pend: (u64, u64, u64, u64, bool, Option<u64>),
    /// A time stamp that arrived between the pieces of `pend`: written after it,
    /// so it does not split the access (0: none).
    held_time: u64,
    ended: bool,
}

impl Stream {
    fn new(clock: u64) -> Stream {
        Stream {
            enc: Encoder::new(),
            raw: Streams { ops: Vec::with_capacity(CHUNK + 4096), side: Vec::with_capacity(CHUNK) },
            counts: ChunkCounts::default(),
            clock,
            chunk_clock: clock,
            pend: (0, 0, 0, 0, false, None),
            held_time: 0,
            ended: false,
        }
    }

    #[inline(always)]
    fn access(&mut self, pc: u64, addr: u64, shift: u8, write: bool, value: Option<u64>) {
        let kind = if write { AccessKind::Write } else { AccessKind::Read };
        let tag = access_tag(kind, false, shift);
        // SAFETY: an access writes at most MAX_ACCESS_LEN op bytes.
        unsafe {
            self.enc.put(&mut self.raw, MAX_ACCESS_LEN, |e, p| match value {
                Some(v) => e.access_value(p, tag, pc, addr, v),
                None => e.access(p, tag, pc, addr),
            });
        }
        self.counts.events += 1;
        if write {
            self.counts.stores += 1;
        } else {
            self.counts.loads += 1;
        }
    }

    /// Writes the pending pieces as one access: 8 or 16 bytes as an access, other
    /// lengths (32) as a range, as the compiled path records odd widths.
    #[inline(always)]
    fn flush_pending(&mut self) {
        if self.pend.0 != 0 {
            let (pc, a, len, _, w, v) = self.pend;
            self.pend.0 = 0;
            match len {
                8 => self.access(pc, a, 3, w, v),
                16 => self.access(pc, a, 4, w, None),
                _ => {
                    let kind = if w { AccessKind::Write } else { AccessKind::Read };
                    let pc = memlens_format::Pc(pc);
                    self.event(&Event::Range { pc, addr: memlens_format::Addr(a), len, kind });
                }
            }
        }
        if self.held_time != 0 {
            let t = std::mem::take(&mut self.held_time);
            self.event(&Event::Time(t));
        }
    }

    fn event(&mut self, ev: &Event) {
        self.flush_pending();
        if let Event::Clock(t) = *ev {
            self.clock = t;
        }
        self.enc.push(&mut self.raw, ev);
        count(&mut self.counts, ev);
    }

    /// One raw access record (see `thread::Ts::put`).
    #[inline(always)]
    fn record(&mut self, addr: u64, w: u64, value: Option<u64>) {
        let pc = w & PC_MASK;
        let shift = ((w >> 48) & 7) as u8;
        let rw = (w >> 51) & 3;
        let flags = (w >> 56) as u8;
        if rw == 3 {
            // An atomic read-modify-write: QEMU reports it once, after the fact.
            let op = RmwOp::from_u8(flags & OP_MASK).unwrap_or(RmwOp::FetchAdd);
            self.event(&Event::Rmw {
                pc: memlens_format::Pc(pc),
                addr: memlens_format::Addr(addr),
                size: 1 << shift,
                op,
                value: None,
            });
            return;
        }
        let write = rw & 2 != 0;
        if flags & MERGE != 0 && shift == 3 {
            // QEMU 7.2 splits a 16- or 32-byte SSE/AVX access into adjacent 8-byte
            // ones, in order; the decoded width says where one access ends (the
            // next execution of the same instruction may touch the next bytes).
            let (ppc, pa, len, whole, pw, _) = self.pend;
            if ppc == pc && pw == write && addr == pa.wrapping_add(len) && len < whole {
                self.pend.2 += 8;
                if self.pend.2 == whole {
                    self.flush_pending();
                }
                return;
            }
            self.flush_pending();
            let whole = if flags & OP_MASK == WIDE32 { 32 } else { 16 };
            self.pend = (pc, addr, 8, whole, write, value);
            return;
        }
        self.flush_pending();
        self.access(pc, addr, shift, write, value);
    }

    /// Encodes a raw buffer; full chunks go to `out`.
    fn take(&mut self, r: &Raw, out: &mut impl FnMut(&mut Stream, bool)) {
        let w = &r.words;
        let mut ev = r.events.iter();
        let mut i = 0;
        while i + 1 < w.len() {
            let (a, b) = (w[i], w[i + 1]);
            i += 2;
            if b & MARK == 0 {
                let value = if i + 1 < w.len()
                    && w[i + 1] & MARK != 0
                    && (w[i + 1] >> 48) & 0x7f == M_VALUE
                {
                    i += 2;
                    Some(w[i - 2])
                } else {
                    None
                };
                self.record(a, b, value);
            } else {
                match (b >> 48) & 0x7f {
                    M_EVENT => {
                        if let Some(e) = ev.next() {
                            self.event(e);
                        }
                    }
                    M_ENTER => {
                        self.flush_pending();
                        // SAFETY: an entry writes at most MAX_ACCESS_LEN op bytes.
                        unsafe {
                            self.enc.put(&mut self.raw, MAX_ACCESS_LEN, |e, p| {
                                e.func_enter(p, b & PC_MASK, a, 0)
                            });
                        }
                        self.counts.events += 1;
                    }
                    M_EXIT => {
                        self.flush_pending();
                        // SAFETY: an exit writes at most MAX_ACCESS_LEN op bytes.
                        unsafe {
                            self.enc.put(&mut self.raw, MAX_ACCESS_LEN, |e, p| {
                                e.func_exit(p, b & PC_MASK)
                            });
                        }
                        self.counts.events += 1;
                    }
                    M_CLOCK => self.event(&Event::Clock(a)),
                    M_TIME if self.pend.0 != 0 => self.held_time = a,
                    M_TIME => self.event(&Event::Time(a)),
                    _ => {} // a stray value marker
                }
            }
            if self.raw.len() >= CHUNK {
                out(self, false);
            }
        }
        if r.last {
            self.flush_pending();
            self.ended = true;
            out(self, true);
        }
    }
}

/// Creates the trace and starts the worker thread.
pub fn start(
    path: &std::path::Path,
    rec: &Recording,
    exe: String,
    argv: Vec<String>,
    filter: String,
) -> std::io::Result<()> {
    // `memlens record` made the file fresh; never write through a link planted since
    let f = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)?
    };
    let pid = std::process::id();
    let start_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let header = FileHeader { pid, start_ns, ..FileHeader::default() };
    let level = rec.zstd_level;
    let mut w = TraceWriter::with_header(f, header, level)?;
    let (tx, rx) = channel::<Msg>();
    let mut meta = vec![
        MetaRecord::Process { pid, exe, argv },
        MetaRecord::Option("dbi".into(), "qemu".into()),
        MetaRecord::Option("dbi_filter".into(), filter),
        MetaRecord::Option("clock_offset".into(), crate::thread::clock_offset().to_string()),
    ];
    // the options the compiled path records too, by the same names
    meta.extend(rec.records().into_iter().map(|(k, v)| MetaRecord::Option(k.into(), v)));
    meta.extend(crate::modules::all().into_iter().map(MetaRecord::Module));
    tx.send(Msg::Meta(meta)).ok();
    // A failed write is counted as dropped in the header (`TraceWriter`): go on.
    std::thread::Builder::new().name("memlens-writer".into()).spawn(move || {
        let mut streams: HashMap<u32, Stream> = HashMap::new();
        for m in rx {
            match m {
                Msg::Raw(r) => {
                    INFLIGHT.fetch_sub(1, AcqRel);
                    let s = streams.entry(r.stream).or_insert_with(|| Stream::new(r.clock0));
                    if !s.ended {
                        let id = r.stream;
                        s.take(&r, &mut |s: &mut Stream, last: bool| {
                            let c = std::mem::take(&mut s.counts);
                            let (o, d) = (&s.raw.ops, &s.raw.side);
                            let _ = w.write_encoded(id, last, c, s.chunk_clock, o, d);
                            s.raw.clear();
                            s.enc.reset();
                            s.chunk_clock = s.clock;
                        });
                    }
                    let mut words = r.words;
                    words.clear();
                    let _ = FREE.push(words);
                }
                Msg::Meta(recs) => {
                    let _ = w.write_meta(&recs);
                }
                Msg::Finish(end, ack) => {
                    // Streams still open (threads cut at exit) end here.
                    let mut ids: Vec<u32> = streams.keys().copied().collect();
                    ids.sort_unstable();
                    for id in ids {
                        let s = streams.get_mut(&id).unwrap();
                        if s.ended {
                            continue;
                        }
                        s.flush_pending();
                        let c = std::mem::take(&mut s.counts);
                        let (o, d) = (&s.raw.ops, &s.raw.side);
                        let _ = w.write_encoded(id, true, c, s.chunk_clock, o, d);
                        s.ended = true;
                    }
                    if let Some(end) = end {
                        let _ = w.write_meta(&[MetaRecord::End(end)]);
                    }
                    let _ = w.finish(|h| {
                        if let Some(end) = end {
                            (h.end_kind, h.end_value) = end.to_parts();
                        }
                    });
                    let _ = ack.send(());
                    break;
                }
            }
        }
    })?;
    *TX.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
    GENERATION.fetch_add(1, AcqRel);
    Ok(())
}

/// In a forked child: the parent's worker thread does not exist here; forget it.
pub fn reset_after_fork() {
    let mut tx = TX.lock().unwrap_or_else(|e| e.into_inner());
    // The parent's channel may be mid-use by its (now absent) worker: leak it.
    if let Some(old) = tx.take() {
        std::mem::forget(old);
    }
    // This thread's cached sender is the parent's too.
    let _ = MY_TX.try_with(|c| {
        if let Some(old) = c.borrow_mut().take() {
            std::mem::forget(old);
        }
    });
    INFLIGHT.store(0, SeqCst);
    GENERATION.fetch_add(1, AcqRel);
}

/// Writes the final module table and header; waits for the worker.
pub fn finish(modules: Vec<Module>, end: Option<EndStatus>) {
    let mut recs: Vec<MetaRecord> = modules.into_iter().map(MetaRecord::Module).collect();
    recs.push(MetaRecord::Stats { dropped_events: 0, dropped_bytes: 0 });
    send(Msg::Meta(recs));
    let (ack_tx, ack_rx) = channel();
    send(Msg::Finish(end, ack_tx));
    let _ = ack_rx.recv_timeout(std::time::Duration::from_secs(120));
    TX.lock().unwrap_or_else(|e| e.into_inner()).take();
}
