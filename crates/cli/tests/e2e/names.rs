//! Every access named after its variable, field, heap block or mapping.

use crate::util::*;
use std::path::Path;

#[test]
fn globals_fields_stack_heap_tls_and_shared_libraries_are_named() {
    for cc in Cc::all() {
        let dir = scratch("names");
        let lib = dir.join("libnames.so");
        let p = programs();
        memlens_cc(
            cc,
            false,
            &[
                "-O0",
                "-shared",
                "-fPIC",
                p.join("libnames.c").to_str().unwrap(),
                "-o",
                lib.to_str().unwrap(),
            ],
        );
        let exe = dir.join("names");
        let rpath = format!("-Wl,-rpath,{}", dir.display());
        memlens_cc(
            cc,
            false,
            &[
                "-O0",
                p.join("names.c").to_str().unwrap(),
                "-L",
                dir.to_str().unwrap(),
                "-lnames",
                &rpath,
                "-o",
                exe.to_str().unwrap(),
            ],
        );
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &[]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "4 10 3\n");

        let rows = variables(&trace, "field");
        let stores = |name: &str| {
            var(&rows, name).unwrap_or_else(|| panic!("{cc:?}: no row for {name}; rows: {rows:#?}"))
                ["stores"]
                .as_u64()
                .unwrap()
        };
        assert_eq!(stores("stats.v[3]"), 5, "{cc:?}");
        assert_eq!(var(&rows, "stats.v[3]").unwrap()["kind"], "global");
        assert_eq!(stores("cfg.limits.max"), 1, "{cc:?}");
        assert_eq!(stores("table[7]"), 1, "{cc:?}");
        assert_eq!(stores("lib_value[2]"), 1, "{cc:?}");
        assert_eq!(stores("lib_hidden_counter"), 6, "{cc:?}");
        assert_eq!(stores("tls_counter"), 1, "{cc:?}");
        assert_eq!(var(&rows, "tls_counter").unwrap()["kind"], "tls");
        assert_eq!(stores("fill_local::buf[3]"), 2, "{cc:?}");
        assert_eq!(stores("fill_local::buf[15]"), 1, "{cc:?}");
        assert_eq!(var(&rows, "fill_local::buf[3]").unwrap()["kind"], "stack");
        // `struct item *items = malloc(10 * sizeof *items)`: typed from the source line.
        assert_eq!(stores("item[4].weight"), 1, "{cc:?}");
        assert_eq!(var(&rows, "item[4].weight").unwrap()["kind"], "heap");
        // the top line of a variable is where it is accessed
        let field_line = line_of("names.c", "field");
        assert_eq!(
            var(&rows, "stats.v[3]").unwrap()["lines"][0]["location"],
            format!("names.c:{field_line}")
        );

        // Whole-variable grouping rolls fields up.
        let whole = variables(&trace, "variable");
        assert_eq!(var(&whole, "stats").unwrap()["stores"], 5, "{cc:?}");
        assert_eq!(var(&whole, "fill_local::buf").unwrap()["stores"], 17, "{cc:?}");

        // dump names each access
        let ev = dump(&trace);
        assert!(ev.iter().any(|e| e["variable"] == "cfg.limits.max"), "{cc:?}");

        // coverage is reported
        let i = info(&trace);
        let cov = &i["coverage"];
        assert!(cov["with_line_pct"].as_f64().unwrap() > 90.0, "{cc:?}: {cov}");
        assert!(cov["with_name_pct"].as_f64().unwrap() > 80.0, "{cc:?}: {cov}");
    }
}

/// Loads and stores of a `report --by variable` row, panicking with the rows if absent.
fn counts(rows: &[serde_json::Value], name: &str) -> (u64, u64) {
    let r = var(rows, name).unwrap_or_else(|| panic!("no row for {name}; rows: {rows:#?}"));
    assert_eq!(r["kind"], "heap", "{name}");
    (r["loads"].as_u64().unwrap(), r["stores"].as_u64().unwrap())
}

#[test]
fn cxx_heap_blocks_are_named_after_their_element_type() {
    for cc in Cc::all() {
        let dir = scratch("heaptypes");
        let exe = build(cc, "heaptypes.cpp", &dir, &[]);
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &[]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        // 0+..+7, plus vp[3].y, plus 0+..+4
        assert_eq!(stdout(&out), "41\n");
        let rows = variables(&trace, "field");
        // std::vector<Point>: the type parameter of std::__new_allocator<Point>.
        assert_eq!(counts(&rows, "Point[3].y"), (2, 1), "{cc:?}");
        assert_eq!(counts(&rows, "Point[5].y"), (1, 1), "{cc:?}");
        assert_eq!(counts(&rows, "Point[7].y"), (1, 1), "{cc:?}");
        assert!(var(&rows, "Point[8].y").is_none(), "{cc:?}");
        // `new Node`: clang's DW_AT_LLVM_alloc_type on the call site; gcc records no
        // type, and the source line `new Node` gives it.
        assert_eq!(counts(&rows, "Node.key"), (5, 5), "{cc:?}");
        // 5 in the sum, 5 in the delete loop
        assert_eq!(counts(&rows, "Node.next"), (10, 5), "{cc:?}");
        let site = line_of("heaptypes.cpp", "new-node");
        let untyped = format!("heap(heaptypes.cpp:{site} make_node(long, Node*))+8");
        assert!(var(&rows, &untyped).is_none(), "{cc:?}");
        // Whole-variable grouping rolls typed heap names up to the type.
        let whole = variables(&trace, "variable");
        let field_sum: u64 = rows
            .iter()
            .filter(|r| r["variable"].as_str().is_some_and(|v| v.starts_with("Point[")))
            .map(|r| r["loads"].as_u64().unwrap())
            .sum();
        assert!(field_sum >= 9, "{cc:?}");
        assert_eq!(var(&whole, "Point").unwrap()["loads"], field_sum, "{cc:?}");
    }
}

#[test]
fn c_heap_blocks_are_typed_from_the_allocating_line() {
    for cc in Cc::all() {
        let dir = scratch("heapsrc-c");
        let exe = build(cc, "heapsrc.c", &dir, &[]);
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &[]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "9 5 6 7 8\n"); // 0+1+2 + 0+1+2+3, then each store
        let rows = variables(&trace, "field");
        // `struct rec *r = malloc(n * sizeof(struct rec))`, n = 3
        for i in 0..3 {
            assert_eq!(counts(&rows, &format!("rec[{i}].field")), (1, 1), "{cc:?} rec[{i}]");
        }
        assert!(var(&rows, "rec[3].field").is_none(), "{cc:?}");
        // `p = calloc(n, sizeof *p)`: p's type from the function's DWARF.
        for i in 0..4 {
            assert_eq!(counts(&rows, &format!("pair[{i}].b")), (1, 1), "{cc:?} pair[{i}]");
        }
        // `struct pair *q = malloc(sizeof(struct rec))`: two types, no name.
        let line = line_of("heapsrc.c", "ambiguous");
        assert_eq!(counts(&rows, &format!("heap(heapsrc.c:{line} main)+8")), (1, 1), "{cc:?}");
        // `struct rec *h = malloc(20)`: 20 bytes hold no whole number of recs.
        let line = line_of("heapsrc.c", "odd-size");
        assert_eq!(counts(&rows, &format!("heap(heapsrc.c:{line} main)+8")), (1, 1), "{cc:?}");
        // `malloc(sizeof(struct rec) + 16)`: a header, not an element size.
        let line = line_of("heapsrc.c", "header");
        assert_eq!(counts(&rows, &format!("heap(heapsrc.c:{line} main)+24")), (1, 1), "{cc:?}");
        // `long *words = malloc(32)`: a scalar pointer alone says nothing.
        let line = line_of("heapsrc.c", "scalar");
        assert_eq!(counts(&rows, &format!("heap(heapsrc.c:{line} main)+16")), (1, 1), "{cc:?}");
        // The rows roll up to the type.
        let whole = variables(&trace, "variable");
        assert_eq!(var(&whole, "rec").unwrap()["loads"], 3, "{cc:?}");
        assert_eq!(var(&whole, "pair").unwrap()["stores"], 4, "{cc:?}");
    }
}

#[test]
fn cxx_new_is_typed_from_the_allocating_line() {
    for cc in Cc::all() {
        let dir = scratch("heapsrc-cxx");
        let exe = build(cc, "heapsrc.cpp", &dir, &[]);
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &[]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "42\n"); // 0+..+7, 7, 3, 4
        let rows = variables(&trace, "field");
        // `Point *p = new Point[n]` (through `using geo::Point`): neither compiler's
        // DWARF types this block under memlens cc.
        for i in 0..8 {
            assert_eq!(counts(&rows, &format!("Point[{i}].y")), (1, 1), "{cc:?} Point[{i}]");
        }
        assert!(var(&rows, "Point[8].y").is_none(), "{cc:?}");
        // `new (std::nothrow) Node`
        assert_eq!(counts(&rows, "Node.key"), (1, 1), "{cc:?}");
        assert_eq!(counts(&rows, "Node.next"), (0, 1), "{cc:?}");
        // `node ? ... new Node : ... new Other`: ambiguous, keeps its site name.
        let line = line_of("heapsrc.cpp", "either");
        let name = format!("heap(heapsrc.cpp:{line} make_either(bool))+8");
        assert_eq!(counts(&rows, &name), (1, 1), "{cc:?}");
        // `std::make_unique<Big>()`: the line in libstdc++ says `new _Tp(...)`.
        assert_eq!(counts(&rows, "Big.c"), (1, 1), "{cc:?}");
        assert!(var(&rows, "Big.a").is_none(), "{cc:?}");
    }
}

#[test]
fn rust_box_and_vec_blocks_are_named_after_their_element_type() {
    let (dir, exe) = memlens_cargo_build("rsnames");
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &[]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert_eq!(stdout(&out), "6 52\n");
    let rows = variables(&trace, "field");
    // Box<Point>: one object; the volatile store to b.y, b.x + b.y loaded once.
    assert_eq!(counts(&rows, "Point.y"), (1, 1));
    // Vec<Point> (RawVec<Point>): push writes x and y, then the volatile y store;
    // the sum loads each field once.
    for i in [0, 3, 7] {
        assert_eq!(counts(&rows, &format!("Point[{i}].y")), (1, 2), "Point[{i}].y");
        assert_eq!(counts(&rows, &format!("Point[{i}].x")), (1, 1), "Point[{i}].x");
    }
    assert!(var(&rows, "Point[8].x").is_none());
}

#[test]
fn optimised_stack_locals_are_named_through_location_lists() {
    for cc in Cc::all() {
        let dir = scratch("stacklocals");
        let exe = build(cc, "stacklocals.c", &dir, &[]);
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &["x"]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "241 7\n"); // n = 2: 2*(0+..+15) - 6 + 7; r = 2+3, then 2+5
        let rows = variables(&trace, "field");
        let ls = |name: &str| {
            let r = var(&rows, name).unwrap_or_else(|| panic!("{cc:?}: no {name}: {rows:#?}"));
            assert_eq!(r["kind"], "stack", "{cc:?} {name}");
            (r["loads"].as_u64().unwrap(), r["stores"].as_u64().unwrap())
        };
        // A caller's struct read by the callee, named in the caller's frame.
        assert_eq!(ls("pass_struct::p.a").0, 2, "{cc:?}");
        assert_eq!(ls("pass_struct::p.b").0, 2, "{cc:?}");
        match cc {
            // clang -O2 splits the volatile array into one slot per element and
            // describes them with a location list of DW_OP_breg6/DW_OP_piece.
            Cc::Clang => {
                assert_eq!(ls("fill_local::buf[3]"), (1, 2), "{cc:?}");
                assert_eq!(ls("fill_local::buf[0]"), (1, 1), "{cc:?}");
                assert_eq!(ls("fill_local::buf[15]"), (1, 1), "{cc:?}");
                assert!(
                    !rows.iter().any(|r| r["variable"]
                        .as_str()
                        .is_some_and(|v| v.starts_with("fill_local::<frame>"))),
                    "{cc:?}: unnamed slots in fill_local: {rows:#?}"
                );
            }
            // gcc's ThreadSanitizer does not instrument locals whose address does
            // not escape: buf makes no accesses at all.
            Cc::Gcc => assert!(var(&rows, "fill_local::buf[3]").is_none()),
        }
    }
}

#[test]
fn thread_locals_of_shared_libraries_are_named() {
    for cc in Cc::all() {
        let dir = scratch("tlslib");
        let p = programs();
        let lib = dir.join("libtls.so");
        let (l, s) = (lib.to_str().unwrap(), p.join("libtls.c"));
        memlens_cc(cc, false, &["-O2", "-shared", "-fPIC", s.to_str().unwrap(), "-o", l]);
        let exe = dir.join("tlslib");
        let rpath = format!("-Wl,-rpath,{}", dir.display());
        let src = p.join("tlslib.c");
        let d = dir.to_str().unwrap();
        let e = exe.to_str().unwrap();
        memlens_cc(
            cc,
            false,
            &["-O2", "-pthread", src.to_str().unwrap(), "-L", d, "-ltls", &rpath, "-o", e],
        );
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &[]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "1\n");
        let rows = variables(&trace, "field");
        let row = |name: &str| {
            let r = var(&rows, name).unwrap_or_else(|| panic!("{cc:?}: no {name}: {rows:#?}"));
            assert_eq!(r["kind"], "tls", "{cc:?} {name}");
            (r["loads"].as_u64().unwrap(), r["stores"].as_u64().unwrap(), r["threads"].clone())
        };
        // The library's block follows the executable's in the static TLS area; each
        // thread has its own, found from its thread pointer.
        assert_eq!(row("lib_tls[2]"), (0, 3, 2.into()), "{cc:?}");
        assert_eq!(row("lib_tls_count"), (3, 3, 2.into()), "{cc:?}");
        assert_eq!(row("exe_tls[1]").1, 2, "{cc:?}");
    }
}

#[test]
fn thread_locals_of_dlopened_libraries_are_named() {
    // The dynamic loader's TLS allocation is recognised by its function names, from
    // glibc's detached debug symbols (libc6-dbg; CI installs it).
    if !Path::new("/usr/lib/debug/.build-id").is_dir() {
        assert!(std::env::var_os("CI").is_none(), "libc6-dbg is required in CI");
        eprintln!("note: libc6-dbg not installed; skipping dlopen TLS naming");
        return;
    }
    for cc in Cc::all() {
        let dir = scratch("dltls");
        let p = programs();
        let lib = dir.join("libtls.so");
        let (l, s) = (lib.to_str().unwrap(), p.join("libtls.c"));
        memlens_cc(cc, false, &["-O2", "-shared", "-fPIC", s.to_str().unwrap(), "-o", l]);
        let exe = dir.join("dltls");
        let src = p.join("dltls.c");
        let e = exe.to_str().unwrap();
        memlens_cc(cc, false, &["-O2", "-pthread", src.to_str().unwrap(), "-ldl", "-o", e]);
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &[l]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "ok\n");
        let rows = variables(&trace, "field");
        let row = |name: &str| {
            let r = var(&rows, name).unwrap_or_else(|| panic!("{cc:?}: no {name}: {rows:#?}"));
            assert_eq!(r["kind"], "tls", "{cc:?} {name}");
            (r["loads"].as_u64().unwrap(), r["stores"].as_u64().unwrap(), r["threads"].clone())
        };
        // Each thread's block is the dynamic loader's allocation of the library's TLS
        // size on first use (`__tls_get_addr`): one call in main, two in the worker.
        assert_eq!(row("lib_tls[2]"), (0, 3, 2.into()), "{cc:?}");
        assert_eq!(row("lib_tls_count"), (3, 3, 2.into()), "{cc:?}");
        assert!(
            !rows.iter().any(|r| r["variable"].as_str().is_some_and(|v| v.contains("rtld"))),
            "{cc:?}: {rows:#?}"
        );
    }
}

/// `report --by variable` names chunks on every core, each from the frames, stack and
/// heap blocks its thread had at the chunk's start: the result must equal one serial
/// pass (`MEMLENS_NAMES_PARALLEL=0`; `=1` forces the parallel one) and the known counts, with frames opened and
/// closed across many chunk boundaries in three threads.
#[test]
fn parallel_naming_equals_the_serial_pass() {
    const THREADS: u64 = 3;
    const N: u64 = 50_000;
    const ROUNDS: u64 = 20_000;
    for cc in Cc::all() {
        let dir = scratch("namespar");
        let exe = build(cc, "namespar.c", &dir, &[]);
        let trace = dir.join("t.trace");
        let out = std::process::Command::new(memlens())
            .args(["record", "-q", "-o"])
            .arg(&trace)
            .arg("--")
            .arg(&exe)
            .env("MEMLENS_BUFFER_KB", "64")
            .output()
            .unwrap();
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "total=4350315000\n", "{cc:?}");
        let i = info(&trace);
        let busy: Vec<_> = i["streams"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["stores"].as_u64().unwrap() >= N)
            .collect();
        assert_eq!(busy.len(), THREADS as usize, "{cc:?}: {i}");
        assert!(
            busy.iter().all(|s| s["chunks"].as_u64().unwrap() >= 4),
            "{cc:?}: the test needs several chunks per thread: {i}"
        );

        let t = trace.to_str().unwrap();
        for group in ["field", "variable"] {
            let args = [
                "report",
                "--by",
                "variable",
                "--group-by",
                group,
                "--top",
                "0",
                "--format",
                "json",
                t,
            ];
            let serial = std::process::Command::new(memlens())
                .args(args)
                .env("MEMLENS_NAMES_PARALLEL", "0")
                .output()
                .unwrap();
            assert!(serial.status.success(), "{}", stderr(&serial));
            let parallel = std::process::Command::new(memlens())
                .args(args)
                .env("MEMLENS_NAMES_PARALLEL", "1")
                .output()
                .unwrap();
            assert!(parallel.status.success(), "{}", stderr(&parallel));
            assert_eq!(stdout(&parallel), stdout(&serial), "{cc:?} --group-by {group}");
        }
        let serial_info = std::process::Command::new(memlens())
            .args(["info", "--format", "json", t])
            .env("MEMLENS_NAMES_PARALLEL", "0")
            .output()
            .unwrap();
        let serial_info: serde_json::Value = serde_json::from_slice(&serial_info.stdout).unwrap();
        assert_eq!(i["coverage"], serial_info["coverage"], "{cc:?}");

        let rows = variables(&trace, "variable");
        let get = |name: &str, key: &str| {
            var(&rows, name).unwrap_or_else(|| panic!("{cc:?}: no {name} in {rows:#?}"))[key]
                .as_u64()
                .unwrap()
        };
        // the global: one store per worker, one load per worker in main
        assert_eq!(get("shared_sum", "stores"), THREADS, "{cc:?}");
        assert_eq!(get("shared_sum", "loads"), THREADS, "{cc:?}");
        assert_eq!(get("shared_sum", "threads"), THREADS + 1, "{cc:?}");
        // the stack array, written by the callee into its caller's frame
        assert_eq!(get("local_work::buf", "bytes_written"), THREADS * ROUNDS * 64, "{cc:?}");
        assert_eq!(get("local_work::buf", "loads"), THREADS * ROUNDS, "{cc:?}");
        assert_eq!(get("local_work::buf", "threads"), THREADS, "{cc:?}");
        assert_eq!(var(&rows, "local_work::buf").unwrap()["kind"], "stack");
        // the heap blocks (however they are named: site or element type)
        let heap: Vec<_> = rows.iter().filter(|r| r["kind"] == "heap").collect();
        let sum = |key: &str| heap.iter().map(|r| r[key].as_u64().unwrap()).sum::<u64>();
        assert_eq!(sum("bytes_written"), THREADS * N * 8, "{cc:?}: {heap:#?}");
        assert_eq!(sum("bytes_read"), THREADS * N * 8, "{cc:?}: {heap:#?}");
    }
}

/// The argument strings sit in the kernel's `[stack]` mapping above the top of the
/// main thread's stack as pthread reports it (how far above depends on ASLR): they
/// are named like the rest of that stack, so the same bytes get the same name in
/// every run (two runs diffed in the viewer showed `[stack]` against `[stack of T0]`).
#[test]
fn argument_strings_are_named_as_the_main_threads_stack() {
    for cc in Cc::all() {
        let dir = scratch("argsum");
        let exe = build(cc, "argsum.c", &dir, &[]);
        let arg = "a".repeat(20_000);
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &[&arg]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), format!("{}\n", 97 * 20_000), "{cc:?}");
        let rows = variables(&trace, "variable");
        assert!(var(&rows, "[stack]").is_none(), "{cc:?}: {rows:#?}");
        // 20,000 bytes and the terminating NUL, and argv[1] itself
        let r = var(&rows, "[stack of T0]").unwrap_or_else(|| panic!("{cc:?}: {rows:#?}"));
        assert_eq!(r["loads"], 20_002, "{cc:?}: {rows:#?}");
        assert_eq!(r["bytes_read"], 20_001 + 8, "{cc:?}");
    }
}

/// A program rebuilt after its recording: its code is left unnamed (never named
/// from the new binary) and every command that reads the trace says why, once.
#[test]
fn a_program_rebuilt_after_recording_is_not_named_from_the_new_binary() {
    let dir = scratch("names-rebuilt");
    let exe = build(Cc::Gcc, "diffprog.c", &dir, &[]);
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &["3", "1"]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    let lines_of = |t: &Path| -> (Vec<String>, String) {
        let out = run_memlens(&[
            "report",
            "--by",
            "line",
            "--top",
            "0",
            "--format",
            "json",
            t.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        let files = rows.iter().map(|r| r["file"].as_str().unwrap_or("").to_string()).collect();
        (files, stderr(&out))
    };
    let (files, err) = lines_of(&trace);
    assert!(files.iter().any(|f| f.ends_with("diffprog.c")), "{files:?}");
    assert!(err.is_empty(), "{err}");
    // the same path, other code (-O0 after build's -O2)
    let again = build(Cc::Gcc, "diffprog.c", &dir, &["-O0"]);
    assert_eq!(again, exe);
    let (files, err) = lines_of(&trace);
    assert!(
        !files.iter().any(|f| f.ends_with("diffprog.c")),
        "named from the new binary: {files:?}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("{} was rebuilt after the trace was recorded", exe.display()))
            && err.contains("record again"),
        "{err}"
    );
}

/// A stack address's name depends on the frame that owns it and, through the call
/// site the frame called out from, on the scope live there: two scopes' arrays that
/// stack colouring lays in one slot, filled by one callee from two call sites. The
/// parallel pass's label cache keeps a stack answer across calls while that frame
/// and call site stay; it must name each array as the uncached serial pass does.
#[test]
fn one_stack_slot_two_scopes_named_by_call_site() {
    for cc in Cc::all() {
        let dir = scratch("stackslots");
        let exe = build(cc, "stackslots.c", &dir, &["-g"]);
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &["1000"]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "total=12044000\n", "{cc:?}");
        let t = trace.to_str().unwrap();
        let by = |parallel: &str| {
            let out = std::process::Command::new(memlens())
                .args(["report", "--by", "variable", "--top", "0", "--format", "json", t])
                .env("MEMLENS_NAMES_PARALLEL", parallel)
                .output()
                .unwrap();
            assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
            stdout(&out)
        };
        let (parallel, serial) = (by("1"), by("0"));
        assert_eq!(parallel, serial, "{cc:?}: the cached and the uncached naming differ");
        let rows: Vec<serde_json::Value> = serde_json::from_str(&parallel).unwrap();
        for name in ["twice::first", "twice::second"] {
            let r = var(&rows, name).unwrap_or_else(|| panic!("{cc:?}: no {name}: {rows:#?}"));
            // 1000 calls, 8 stores by fill and 8 loads by sum each
            assert_eq!(
                (r["loads"].as_u64(), r["stores"].as_u64()),
                (Some(8000), Some(8000)),
                "{cc:?} {name}"
            );
        }
    }
}

/// A live block over the old starts of 200 dead blocks that each reached past the
/// bytes written (`heapwindow.c`): its stores are its own, not the newest dead
/// block's (the block search looked at 64 starts below an address and missed it).
#[test]
fn a_live_block_over_hundreds_of_old_starts_owns_its_bytes() {
    for cc in Cc::all() {
        let dir = scratch(&format!("heapwindow-{cc:?}"));
        // -O0: the stores to blocks freed right after are the point
        let exe = build(cc, "heapwindow.c", &dir, &["-O0"]);
        let trace = dir.join("t.trace");
        let out = record(&exe, &trace, &[]);
        assert!(out.status.success(), "{cc:?}: {}", stderr(&out));
        // the layout the test is about: the last block starts below the old ones
        let allocs: Vec<u64> = dump(&trace)
            .iter()
            .filter(|e| e["event"] == "alloc" && e["size"] == 60000)
            .map(|e| u64::from_str_radix(&e["addr"].as_str().unwrap()[2..], 16).unwrap())
            .collect();
        let last = *allocs.last().unwrap();
        let inside: std::collections::BTreeSet<u64> =
            allocs.iter().copied().filter(|&a| a > last && a <= last + 59000).collect();
        assert!(inside.len() > 100, "{cc:?}: {} old starts inside the last block", inside.len());
        let rows = variables(&trace, "variable");
        let row = |tag: &str| format!("heap(heapwindow.c:{} main)", line_of("heapwindow.c", tag));
        assert_eq!(counts(&rows, &row("last")), (0, 100), "{cc:?}");
        assert_eq!(counts(&rows, &row("old")), (0, 200), "{cc:?}");
        assert_eq!(counts(&rows, &row("small")), (200, 0), "{cc:?}");
    }
}
