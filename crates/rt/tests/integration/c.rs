//! C programs built with gcc and clang TSan instrumentation.

use crate::util::*;
use memlens_format::{AllocKind, EndStatus, Event, FreeKind, RmwOp, ThreadId};

#[test]
fn volatile_loop_mallocs_copy_exact_counts() {
    for cc in BOTH {
        let dir = scratch("basic");
        let exe = build("basic.c", cc, &dir);
        let native = run(&exe, &[], None, &[]);
        let trace = dir.join("t.trace");
        let out = run(&exe, &[], Some(&trace), &[]);
        assert_eq!(out.status.code(), Some(3), "{cc:?}: exit status passes through");
        assert_eq!(stdout(&out).split("g_addr").next(), stdout(&native).split("g_addr").next());
        assert!(!dir.join("t.trace.").exists());
        let s = stdout(&out);
        let g = hex_field(&s, "g_addr");
        let t = read(&trace);
        t.check_invariants();
        assert_eq!(t.streams.len(), 1, "{cc:?}");
        // 1000 iterations of `g = g + i`, then 7 stores `g = i * 3`, 1 final load.
        assert_eq!(t.accesses_at(0, g), (1001, 1007), "{cc:?}");
        for i in 0..10u64 {
            let allocs: Vec<_> = t.streams[0]
                .iter()
                .filter_map(|e| match e {
                    Event::Alloc { addr, size, kind: AllocKind::Malloc, .. }
                        if *size == 1000 + i =>
                    {
                        Some(addr.0)
                    }
                    _ => None,
                })
                .collect();
            assert_eq!(allocs.len(), 1, "{cc:?}: malloc({})", 1000 + i);
            let frees = t.streams[0]
                .iter()
                .filter(|e| matches!(e, Event::Free { addr, kind: FreeKind::Free, .. } if addr.0 == allocs[0]))
                .count();
            assert_eq!(frees, 1, "{cc:?}");
        }
        // The libc memcpy of 21 bytes (gcc: a libc call; clang: __tsan_memcpy).
        let (src, dst) = (hex_field(&s, "src"), hex_field(&s, "dst"));
        let ranges = |addr: u64, k: memlens_format::AccessKind| {
            t.all()
                .filter(|e| matches!(e, Event::Range { addr: a, len: 21, kind, .. } if a.0 == addr && *kind == k))
                .count()
        };
        assert_eq!(ranges(src, memlens_format::AccessKind::Read), 1, "{cc:?}");
        assert_eq!(ranges(dst, memlens_format::AccessKind::Write), 1, "{cc:?}");
        assert!(
            t.all().any(|e| *e == Event::Roi(true)) && t.all().any(|e| *e == Event::Roi(false))
        );
        assert!(t.all().any(|e| *e == Event::ThreadName("main-thread".into())));
        assert_eq!(t.reader.meta().end, Some(EndStatus::Exited(3)));
        let h = t.reader.header();
        assert!(h.finished && h.dropped_events == 0 && h.threads == 1);
        assert!(t.reader.meta().modules.iter().any(|m| m.path == exe.to_string_lossy()));
        assert!(t.reader.meta().options.iter().any(|(k, v)| k == "zstd_level" && v == "1"));
    }
}

#[test]
fn inactive_without_output() {
    let dir = scratch("inactive");
    let exe = build("basic.c", Compiler::Clang, &dir);
    let out = run(&exe, &[], None, &[]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stdout(&out).starts_with("g=18 "), "{}", stdout(&out));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2, "no trace written");
}

#[test]
fn four_threads_atomic_counts_exact() {
    for cc in BOTH {
        let dir = scratch("atomics");
        let exe = build("atomics.c", cc, &dir);
        let trace = dir.join("t.trace");
        let out = run(&exe, &[], Some(&trace), &[]);
        assert!(out.status.success());
        let s = stdout(&out);
        assert!(s.starts_with("counter=400000 cas=4000 "), "{cc:?}: {s}");
        let (counter, cas) = (hex_field(&s, "counter_addr"), hex_field(&s, "cas_addr"));
        let t = read(&trace);
        t.check_invariants();
        assert_eq!(t.streams.len(), 5, "{cc:?}: main + 4 workers");
        for (i, evs) in t.streams.iter().enumerate().skip(1) {
            assert!(
                matches!(&evs[0], Event::ThreadStart { parent: Some(ThreadId(0)), .. }),
                "{cc:?}: {:?}",
                evs[0]
            );
            assert_eq!(evs.last(), Some(&Event::ThreadExit), "{cc:?}");
            let adds = evs
                .iter()
                .filter(|e| matches!(e, Event::Rmw { addr, op: RmwOp::FetchAdd, size: 8, .. } if addr.0 == counter))
                .count();
            assert_eq!(adds, 100_000, "{cc:?} stream {i}");
            let cas_ok = evs
                .iter()
                .filter(|e| matches!(e, Event::Rmw { addr, op: RmwOp::Cas, size: 4, .. } if addr.0 == cas))
                .count();
            assert_eq!(cas_ok, 1000, "{cc:?} stream {i}");
            let loads = evs
                .iter()
                .filter(|e| matches!(e, Event::Access { addr, atomic: true, .. } if addr.0 == cas))
                .count();
            assert_eq!(loads, 1000, "{cc:?} stream {i}: atomic loads");
            assert!(t.reader.streams()[i].complete);
        }
    }
}

#[test]
fn longjmp_and_pthread_exit_keep_calls_balanced() {
    for cc in BOTH {
        let dir = scratch("jumps");
        let exe = build("jumps.c", cc, &dir);
        let trace = dir.join("t.trace");
        let out = run(&exe, &[], Some(&trace), &[]);
        assert_eq!(stdout(&out), "jumps=3\n");
        let t = read(&trace);
        t.check_invariants();
        assert_eq!(t.streams.len(), 2);
        // Frames skipped by longjmp and by pthread_exit get synthesized exits (pc 0).
        for evs in &t.streams {
            let synth =
                evs.iter().filter(|e| matches!(e, Event::FuncExit { pc } if pc.0 == 0)).count();
            assert!(synth >= 4, "{cc:?}: {synth} synthesized exits");
        }
        assert_eq!(t.streams[1].last(), Some(&Event::ThreadExit));
    }
}

#[test]
fn thousand_threads() {
    let dir = scratch("many");
    let exe = build("many.c", Compiler::Clang, &dir);
    let trace = dir.join("t.trace");
    let out = run(&exe, &[], Some(&trace), &[]);
    assert_eq!(stdout(&out), "threads=1000\n");
    let t = read(&trace);
    t.check_invariants();
    assert_eq!(t.streams.len(), 1001);
    for evs in &t.streams[1..] {
        let stores = evs.iter().filter(|e| matches!(e, Event::Access { size: 4, .. })).count();
        assert_eq!(stores, 10);
        assert_eq!(evs.last(), Some(&Event::ThreadExit));
    }
}

#[test]
fn running_thread_is_flushed_at_exit() {
    let dir = scratch("spin");
    let exe = build("spin.c", Compiler::Gcc, &dir);
    let trace = dir.join("t.trace");
    let out = run(&exe, &[], Some(&trace), &[]);
    assert!(out.status.success());
    let g = hex_field(&stdout(&out), "g_addr");
    let t = read(&trace);
    assert_eq!(t.streams.len(), 2);
    assert!(t.reader.streams()[1].complete, "the spinning thread's last chunk is marked");
    let (loads, _) = t.accesses_at(1, g);
    assert!(loads >= 100_000, "{loads}");
}

#[test]
fn values_mode_records_loaded_and_stored_values() {
    let dir = scratch("values");
    let exe = build("basic.c", Compiler::Clang, &dir);
    let trace = dir.join("t.trace");
    let out = run(&exe, &[], Some(&trace), &[("MEMLENS_VALUES", "1")]);
    let g = hex_field(&stdout(&out), "g_addr");
    let t = read(&trace);
    t.check_invariants();
    let stores: Vec<u64> = t.streams[0]
        .iter()
        .filter_map(|e| match e {
            Event::Access {
                addr, kind: memlens_format::AccessKind::Write, value: Some(v), ..
            } if addr.0 == g => Some(*v),
            _ => None,
        })
        .collect();
    let mut want: Vec<u64> = Vec::new();
    let mut v = 0u64;
    for i in 0..1000 {
        v += i;
        want.push(v);
    }
    want.extend((0..7).map(|i| i * 3));
    assert_eq!(stores, want);
}

#[test]
fn roi_mode_records_only_inside_the_region() {
    let dir = scratch("roi");
    let exe = build("basic.c", Compiler::Gcc, &dir);
    let trace = dir.join("t.trace");
    let out = run(&exe, &[], Some(&trace), &[("MEMLENS_ROI", "1")]);
    let g = hex_field(&stdout(&out), "g_addr");
    let t = read(&trace);
    t.check_invariants();
    assert_eq!(t.accesses_at(0, g), (0, 7));
    // Allocations are recorded outside the region too.
    assert!(t.streams[0].iter().filter(|e| matches!(e, Event::Alloc { .. })).count() >= 10);
}

#[test]
fn custom_allocator_entry_points() {
    let dir = scratch("custom");
    let exe = build("custom.c", Compiler::Gcc, &dir);
    let trace = dir.join("t.trace");
    let out = run(&exe, &[], Some(&trace), &[]);
    let p = hex_field(&stdout(&out), "p");
    let t = read(&trace);
    t.check_invariants();
    let custom: Vec<_> = t.streams[0]
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Alloc { kind: AllocKind::Custom, .. }
                    | Event::Free { kind: FreeKind::Custom, .. }
            )
        })
        .cloned()
        .collect();
    assert_eq!(custom.len(), 2, "{custom:?}");
    assert!(
        matches!(&custom[0], Event::Alloc { addr, size: 48, pc, .. } if addr.0 == p && pc.0 == 0x1234)
    );
    assert!(matches!(&custom[1], Event::Free { addr, pc, .. } if addr.0 == p && pc.0 == 0x5678));
}

#[test]
fn filter_keeps_only_listed_code() {
    let dir = scratch("filter");
    let exe = build("custom.c", Compiler::Clang, &dir);
    // hot()'s file address range from the symbol table.
    let nm = std::process::Command::new("nm").arg("-S").arg(&exe).output().unwrap();
    let syms = String::from_utf8_lossy(&nm.stdout);
    let line = syms.lines().find(|l| l.ends_with(" T hot")).expect("hot in nm -S");
    let f: Vec<u64> =
        line.split_whitespace().take(2).map(|h| u64::from_str_radix(h, 16).unwrap()).collect();
    let filter = dir.join("filter.txt");
    std::fs::write(
        &filter,
        format!("# hot only\n{}\t{:x}\t{:x}\n", exe.display(), f[0], f[0] + f[1]),
    )
    .unwrap();
    let trace = dir.join("t.trace");
    let out = run(&exe, &[], Some(&trace), &[("MEMLENS_FILTER", filter.to_str().unwrap())]);
    let s = stdout(&out);
    let (hot, cold) = (hex_field(&s, "hot"), hex_field(&s, "cold"));
    let t = read(&trace);
    t.check_invariants();
    assert_eq!(t.accesses_at(0, hot), (0, 100));
    assert_eq!(t.accesses_at(0, cold), (0, 0));
    let calls = t.streams[0].iter().filter(|e| matches!(e, Event::FuncEnter { .. })).count();
    assert_eq!(calls, 1, "only hot()'s entry is inside the filter");
}
