//! Trace versions: a version-3 trace folds loops into `repeat`s and reads back
//! event for event; a version-2 trace (no `repeat`s) still reads; a newer
//! version is refused with a message that says what to do.

use memlens_format::writer::{EventBuffer, TraceWriter};
use memlens_format::*;
use std::io::Cursor;

/// A loop of `n` iterations of two loads and a store at fixed strides.
fn loop_events(n: u64) -> Vec<Event> {
    let mut v = Vec::new();
    for i in 0..n {
        for (k, (base, stride)) in
            [(0x1000u64, 8u64), (0x9000, 64), (0x20000, 4)].iter().enumerate()
        {
            v.push(Event::Access {
                pc: Pc(0x40_1000 + 8 * k as u64),
                addr: Addr(base + i * stride),
                size: if k == 2 { 4 } else { 8 },
                kind: if k == 2 { AccessKind::Write } else { AccessKind::Read },
                atomic: false,
                value: None,
            });
        }
    }
    v
}

fn write(evs: &[Event], level: i32) -> Vec<u8> {
    let mut w = TraceWriter::new(Cursor::new(Vec::new()), 1, level).unwrap();
    let mut b = EventBuffer::new();
    for e in evs {
        b.push(e);
    }
    w.write_events(0, &mut b, true).unwrap();
    w.finish(|_| {}).unwrap().into_inner()
}

fn read(bytes: &[u8]) -> Result<Vec<Event>, Error> {
    let dir = std::env::temp_dir().join(format!("memlens-versions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("t{}.trace", bytes.len()));
    std::fs::write(&path, bytes).unwrap();
    let r = TraceReader::open(&path);
    let _ = std::fs::remove_file(&path);
    let r = r?;
    r.events(ThreadId(0)).collect()
}

/// Sets the header's version and its checksum.
fn with_version(mut bytes: Vec<u8>, v: u32) -> Vec<u8> {
    bytes[8..12].copy_from_slice(&v.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..124]);
    bytes[124..128].copy_from_slice(&crc.to_le_bytes());
    bytes
}

#[test]
fn loops_fold_and_read_back() {
    let evs = loop_events(10_000);
    let folded = write(&evs, 1);
    let plain = write(&evs, 0); // uncompressed chunks are never folded
    assert_eq!(u32::from_le_bytes(folded[8..12].try_into().unwrap()), VERSION);
    assert!(folded.len() * 20 < plain.len(), "{} vs {} bytes", folded.len(), plain.len());
    assert_eq!(read(&folded).unwrap(), evs);
    assert_eq!(read(&plain).unwrap(), evs);
}

#[test]
fn version_2_reads_and_newer_is_refused() {
    let evs = loop_events(100);
    let v2 = with_version(write(&evs, 0), 2);
    assert_eq!(read(&v2).unwrap(), evs);
    let v4 = with_version(write(&evs, 0), VERSION + 1);
    let e = read(&v4).unwrap_err();
    assert!(matches!(e, Error::Version(v) if v == VERSION + 1));
    let msg = e.to_string();
    assert!(msg.contains("versions 2 to 3") && msg.contains("newer"), "{msg}");
}
