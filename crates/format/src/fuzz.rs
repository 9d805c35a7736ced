//! The bodies of the fuzz targets (`fuzz/fuzz_targets`), as library functions so
//! that a bounded run over the checked-in corpus and seeded mutations of it
//! (`tests/fuzz_smoke.rs`) exercises them on stable Rust in every `cargo test`.
//! Each must return, never panic, whatever the bytes.

use crate::chunk::{ChunkHeader, ChunkKind, PayloadBuf, CHUNK_HEADER_SIZE};
use crate::codec::{AccessTally, Decoder};
use crate::meta::MetaRecord;
use crate::reader::{ChunkDecoder, TraceReader};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Target `decoder`: `data` as a decompressed event chunk payload (every event,
/// the count scan, the skeleton walk), as a metadata payload, and as a chunk
/// (header then stored payload, whatever its payload CRC says).
pub fn decoder(data: &[u8]) {
    for _ in Decoder::new(data) {}
    let mut batch = Vec::new();
    let mut d = Decoder::new(data);
    while let Ok(n) = d.next_batch(&mut batch, 64) {
        if n == 0 {
            break;
        }
    }
    let mut runs = crate::codec::EventRuns::default();
    let mut d = Decoder::new(data);
    while let Ok(n) = d.next_batch_runs(&mut batch, &mut runs, 64) {
        if n == 0 {
            break;
        }
    }
    let _ = Decoder::new(data).scan_counts(&mut AccessTally::default(), |_, _| {});
    let _ = Decoder::new(data).skeleton(|_, _| {});
    // the reader folds the loops of chunks the writer left unfolded
    let mut at = 0;
    if let Some(n) = crate::varint::get(data, &mut at) {
        let mid = usize::try_from(n).ok().and_then(|n| at.checked_add(n));
        if let Some(mid) = mid.filter(|&m| m <= data.len()) {
            let mut f = crate::codec::Folder::new();
            if let Some(s) = f.fold_region(data, at..mid, mid..data.len()) {
                for _ in Decoder::new(&s.to_raw()[..]) {}
            }
        }
    }
    let _ = MetaRecord::decode_all(data);
    if let Some(hb) = data.get(..CHUNK_HEADER_SIZE) {
        if let Ok(mut h) = ChunkHeader::decode(hb.try_into().expect("64 bytes"), 0) {
            let payload = &data[CHUNK_HEADER_SIZE..];
            // past the payload CRC, which a fuzzer cannot guess, into zstd and the decoder
            h.payload_crc = crc32fast::hash(payload);
            let mut b = PayloadBuf::new();
            b.payload = payload.to_vec();
            if b.decode(&h, 0).is_ok() && h.kind == ChunkKind::Events {
                for _ in Decoder::new(b.raw()) {}
            }
            b.payload = payload.to_vec();
            let _ = b.decode_ops(&h, 0);
        }
    }
}

/// Target `reader`: `data` as a whole trace file, opened and read every way the
/// commands read one (streams, chunk decoders, counts, completeness); then again
/// with its checksums made right, so that mutations get past the CRCs (which a
/// fuzzer cannot guess) into the decompressor and the decoders.
pub fn reader(data: &[u8]) {
    read_as_file(data);
    let fixed = with_checksums_fixed(data);
    if fixed != data {
        read_as_file(&fixed);
    }
}

/// `data` with the file header's and every chunk's CRCs recomputed (chunks are
/// followed by their length fields as long as they fit in the data).
pub fn with_checksums_fixed(data: &[u8]) -> Vec<u8> {
    let mut d = data.to_vec();
    if d.len() >= 128 {
        let crc = crc32fast::hash(&d[..124]);
        d[124..128].copy_from_slice(&crc.to_le_bytes());
    }
    let mut at = crate::chunk::HEADER_SIZE;
    while at + CHUNK_HEADER_SIZE <= d.len() {
        let len = u32::from_le_bytes(d[at + 20..at + 24].try_into().expect("4 bytes")) as usize;
        let start = at + CHUNK_HEADER_SIZE;
        let Some(end) = start.checked_add(len).filter(|&e| e <= d.len()) else { break };
        let crc = crc32fast::hash(&d[start..end]);
        d[at + 56..at + 60].copy_from_slice(&crc.to_le_bytes());
        let crc = crc32fast::hash(&d[at..at + 60]);
        d[at + 60..at + 64].copy_from_slice(&crc.to_le_bytes());
        at = end;
    }
    d
}

fn read_as_file(data: &[u8]) {
    static N: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "memlens-fuzz-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    // a fresh file of our own: never write through a planted link
    let Ok(mut f) = std::fs::OpenOptions::new().write(true).create_new(true).open(&path) else {
        return;
    };
    let ok = f.write_all(data).is_ok();
    drop(f);
    if ok {
        reader_file(&path);
    }
    let _ = std::fs::remove_file(&path);
}

/// [`reader`] on a file.
pub fn reader_file(path: &Path) {
    let Ok(r) = TraceReader::open(path) else { return };
    let _ = r.totals();
    let _ = r.dropped_events();
    let _ = r.completeness().warning();
    for s in r.streams() {
        for ev in r.events(s.thread) {
            if ev.is_err() {
                break;
            }
        }
    }
    let mut dec = ChunkDecoder::new();
    for c in r.stream_chunks() {
        let _ = dec.decode(&r, &c, |_| {});
        let _ = dec.scan_counts(&r, &c, |_, _| {});
        let _ = dec.skeleton(&r, &c, |_, _| {});
    }
}
