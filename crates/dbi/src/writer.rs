//! The writer thread: compresses full per-thread buffers into chunks and appends
//! them to the trace; writes the header and metadata.

use memlens_format::{
    ChunkCounts, ChunkEncoder, ChunkKind, FileHeader, MetaRecord, Module, FLAG_LAST, META_STREAM,
    VERSION,
};
use std::collections::HashMap;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::sync::mpsc::{channel, Sender};
use std::sync::Mutex;

/// Work for the writer thread.
pub enum Msg {
    /// A raw chunk payload of a thread stream.
    Chunk { stream: u32, raw: Vec<u8>, counts: ChunkCounts, last: bool, clock: u64 },
    /// Metadata records.
    Meta(Vec<MetaRecord>),
    /// Finish the file and acknowledge.
    Finish(Sender<()>),
}

static TX: Mutex<Option<Sender<Msg>>> = Mutex::new(None);

/// Sends work to the writer thread (dropped if it is gone).
pub fn send(m: Msg) {
    if let Some(tx) = TX.lock().unwrap().as_ref() {
        let _ = tx.send(m);
    }
}

/// Creates the trace and starts the writer thread.
pub fn start(
    path: &std::path::Path,
    level: i32,
    exe: String,
    argv: Vec<String>,
    filter: String,
) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    let pid = std::process::id();
    let start_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut header = FileHeader { version: VERSION, pid, start_ns, ..FileHeader::default() };
    f.write_all(&header.encode())?;
    let (tx, rx) = channel::<Msg>();
    let mut meta = vec![
        MetaRecord::Process { pid, exe, argv },
        MetaRecord::Option("dbi".into(), "qemu".into()),
        MetaRecord::Option("dbi_filter".into(), filter),
    ];
    meta.extend(crate::modules::all().into_iter().map(MetaRecord::Module));
    tx.send(Msg::Meta(meta)).ok();
    std::thread::Builder::new().name("memlens-writer".into()).spawn(move || {
        let mut enc = ChunkEncoder::new(level);
        let mut seqs: HashMap<u32, u32> = HashMap::new();
        let mut frame = Vec::new();
        let mut failed = false;
        for m in rx {
            let (kind, stream, raw, counts, flags, clock) = match m {
                Msg::Chunk { stream, raw, counts, last, clock } => {
                    header.threads = header.threads.max(stream + 1);
                    let flags = if last { FLAG_LAST } else { 0 };
                    (ChunkKind::Events, stream, raw, counts, flags, clock)
                }
                Msg::Meta(recs) => {
                    let mut raw = Vec::new();
                    for r in &recs {
                        r.encode(&mut raw);
                    }
                    (ChunkKind::Meta, META_STREAM, raw, ChunkCounts::default(), 0, 0)
                }
                Msg::Finish(ack) => {
                    header.finished = true;
                    let _ = f
                        .seek(SeekFrom::Start(0))
                        .and_then(|_| f.write_all(&header.encode()))
                        .and_then(|_| f.flush());
                    let _ = ack.send(());
                    break;
                }
            };
            let seq = seqs.entry(stream).or_insert(0);
            enc.encode(kind, stream, *seq, flags, counts, clock, &raw, &mut frame);
            *seq += 1;
            if failed {
                header.dropped_events += u64::from(counts.events);
                header.dropped_bytes += frame.len() as u64;
            } else if f.write_all(&frame).is_err() {
                failed = true;
                header.dropped_events += u64::from(counts.events);
                header.dropped_bytes += frame.len() as u64;
            } else {
                header.chunks += 1;
            }
        }
    })?;
    *TX.lock().unwrap() = Some(tx);
    Ok(())
}

/// In a forked child: the parent's writer thread does not exist here; forget it.
pub fn reset_after_fork() {
    let mut tx = TX.lock().unwrap_or_else(|e| e.into_inner());
    // The parent's channel may be mid-use by its (now absent) writer: leak it.
    if let Some(old) = tx.take() {
        std::mem::forget(old);
    }
}

/// Writes the final module table and header; waits for the writer.
pub fn finish(modules: Vec<Module>) {
    let mut recs: Vec<MetaRecord> = modules.into_iter().map(MetaRecord::Module).collect();
    recs.push(MetaRecord::Stats { dropped_events: 0, dropped_bytes: 0 });
    send(Msg::Meta(recs));
    let (ack_tx, ack_rx) = channel();
    send(Msg::Finish(ack_tx));
    let _ = ack_rx.recv_timeout(std::time::Duration::from_secs(60));
    TX.lock().unwrap().take();
}
