//! Writes the fuzz corpus (`fuzz/corpus/reader/`, `fuzz/corpus/decoder/`): a
//! synthetic trace with every event and record kind, the traces given on the command
//! line (real recordings: `scripts/fuzz-corpus.sh` makes them), and truncated and
//! bit-flipped variants of each; for the decoder, their decompressed chunk payloads
//! and raw chunks.
//!
//! ```sh
//! cargo run -p memlens-format --example fuzz_corpus -- fuzz/corpus [TRACE...]
//! ```

use memlens_format::*;
use std::path::{Path, PathBuf};

fn synthetic() -> Vec<u8> {
    let mut w = TraceWriter::new(std::io::Cursor::new(Vec::new()), 42, 1).unwrap();
    w.write_meta(&[
        MetaRecord::Process { pid: 42, exe: "/bin/x".into(), argv: vec!["x".into(), "-v".into()] },
        MetaRecord::Module(Module {
            id: 0,
            path: "/bin/x".into(),
            build_id: vec![0xab, 0xcd],
            bias: 0x400000,
            segments: vec![Segment { vaddr: 0x1000, memsz: 0x2000, flags: 5 }],
        }),
        MetaRecord::Option("order".into(), "sync".into()),
    ])
    .unwrap();
    for t in 0..2u32 {
        for k in 0..2 {
            let mut b = EventBuffer::new();
            if k == 0 {
                b.push(&Event::ThreadStart {
                    os_tid: 100 + t,
                    parent: (t > 0).then_some(ThreadId(0)),
                    name: format!("w{t}"),
                    stack_lo: Addr(0x7000_0000),
                    stack_hi: Addr(0x7010_0000),
                    tls: Addr(0x7020_0000),
                });
            }
            b.push(&Event::Clock(1 + 10 * k + u64::from(t)));
            b.push(&Event::FuncEnter {
                pc: Pc(0x401000),
                call_site: Pc(0x400f00),
                frame: Addr(0x7008_0000),
            });
            b.push(&Event::Alloc {
                pc: Pc(0x401010),
                addr: Addr(0x60_0000),
                size: 64,
                kind: AllocKind::Malloc,
                stack: vec![Pc(0x401010), Pc(0x400f00)],
            });
            for i in 0..40u64 {
                b.push(&Event::Access {
                    pc: Pc(0x401020 + i % 3),
                    addr: Addr(0x60_0000 + 8 * (i % 8)),
                    size: 8,
                    kind: if i % 2 == 0 { AccessKind::Write } else { AccessKind::Read },
                    atomic: false,
                    value: (i % 5 == 0).then_some(i),
                });
            }
            b.push(&Event::Rmw {
                pc: Pc(0x401030),
                addr: Addr(0x60_0008),
                size: 8,
                op: RmwOp::FetchAdd,
                value: Some(7),
            });
            b.push(&Event::Range {
                pc: Pc(0x401040),
                addr: Addr(0x60_0000),
                len: 64,
                kind: AccessKind::Read,
            });
            b.push(&Event::Fence { pc: Pc(0x401044), order: 5 });
            b.push(&Event::Call { func: Pc(0x402000), sp: Addr(0x7008_0000), args: [1, 2, 3] });
            b.push(&Event::Return { func: Pc(0x402000), sp: Addr(0x7008_0000), value: 9 });
            b.push(&Event::Realloc {
                pc: Pc(0x401050),
                old: Addr(0x60_0000),
                new: Addr(0x61_0000),
                size: 128,
                stack: vec![Pc(0x401050)],
            });
            b.push(&Event::Free { pc: Pc(0x401060), addr: Addr(0x61_0000), kind: FreeKind::Free });
            b.push(&Event::Roi(true));
            b.push(&Event::Roi(false));
            b.push(&Event::Dropped(3));
            b.push(&Event::FuncExit { pc: Pc(0x401070) });
            if k == 1 {
                b.push(&Event::ThreadExit);
            }
            w.write_events(t, &mut b, k == 1).unwrap();
        }
    }
    w.write_meta(&[
        MetaRecord::Stats { dropped_events: 0, dropped_bytes: 0 },
        MetaRecord::End(EndStatus::Exited(0)),
        MetaRecord::Maps("00400000-00401000 r-xp 0 0:0 0 /bin/x\n".into()),
    ])
    .unwrap();
    w.finish(|_| {}).unwrap().into_inner()
}

/// Chunk offsets and headers of a well-formed trace, in file order.
fn chunks(t: &[u8]) -> Vec<(usize, ChunkHeader)> {
    let mut out = Vec::new();
    let mut at = HEADER_SIZE;
    while at + CHUNK_HEADER_SIZE <= t.len() {
        let Ok(h) = ChunkHeader::decode(t[at..at + CHUNK_HEADER_SIZE].try_into().unwrap(), 0)
        else {
            break;
        };
        out.push((at, h));
        at += CHUNK_HEADER_SIZE + h.payload_len as usize;
    }
    out
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(out) = args.first().map(PathBuf::from) else {
        eprintln!("usage: fuzz_corpus OUT_DIR [TRACE...]");
        std::process::exit(2);
    };
    let (rd, dd) = (out.join("reader"), out.join("decoder"));
    for d in [&rd, &dd] {
        std::fs::create_dir_all(d).unwrap();
    }
    let mut traces = vec![("synthetic".to_string(), synthetic())];
    for p in &args[1..] {
        let name = Path::new(p).file_stem().unwrap().to_string_lossy().into_owned();
        traces.push((name, std::fs::read(p).unwrap()));
    }
    let tmp = std::env::temp_dir().join(format!("memlens-corpus-{}", std::process::id()));
    for (name, t) in &traces {
        let cs = chunks(t);
        write(&rd, &format!("{name}-whole"), t);
        // cut: inside the file header, inside a chunk header, inside a payload
        write(&rd, &format!("{name}-cut-header"), &t[..100]);
        if let Some(&(at, h)) = cs.get(cs.len() / 2) {
            write(&rd, &format!("{name}-cut-chunk-header"), &t[..at + 20]);
            write(&rd, &format!("{name}-cut-payload"), &t[..at + 64 + h.payload_len as usize / 2]);
            // flipped: a payload bit (the chunk is skipped), a header bit (the
            // reader steps to the next header), a file header bit
            let mut f = t.clone();
            f[at + 64 + h.payload_len as usize / 2] ^= 0x10;
            write(&rd, &format!("{name}-flip-payload"), &f);
            let mut f = t.clone();
            f[at + 16] ^= 0x01;
            write(&rd, &format!("{name}-flip-chunk-header"), &f);
        }
        let mut f = t.clone();
        f[50] ^= 0x04;
        write(&rd, &format!("{name}-flip-file-header"), &f);
        // decoder inputs: raw chunks and decompressed payloads (small ones)
        std::fs::write(&tmp, t).unwrap();
        let r = TraceReader::open(&tmp).unwrap();
        for (k, c) in r.chunks().iter().enumerate() {
            let kind = if c.header.kind == ChunkKind::Meta { "meta" } else { "events" };
            let raw = r.read_chunk(c).unwrap();
            if raw.len() > 16 << 10 {
                continue;
            }
            write(&dd, &format!("{name}-{kind}-{k}-payload"), &raw);
            let at = c.offset as usize;
            let chunk = &t[at..at + CHUNK_HEADER_SIZE + c.header.payload_len as usize];
            write(&dd, &format!("{name}-{kind}-{k}-chunk"), chunk);
            if k == 1 {
                write(&dd, &format!("{name}-{kind}-{k}-payload-cut"), &raw[..raw.len() / 2]);
                let mut f = raw.clone();
                let i = f.len() / 3;
                f[i] ^= 0x40;
                write(&dd, &format!("{name}-{kind}-{k}-payload-flip"), &f);
            }
        }
        let _ = std::fs::remove_file(&tmp);
    }
    let n = |d: &Path| std::fs::read_dir(d).unwrap().count();
    eprintln!("fuzz corpus: {} reader inputs, {} decoder inputs", n(&rd), n(&dd));
}
