//! Every access named after its variable, field, heap block or mapping.

use crate::util::*;

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
        let heap_line = line_of("names.c", "heap-alloc");
        let heap_name = format!("heap(names.c:{heap_line} main)+72");
        assert_eq!(stores(&heap_name), 1, "{cc:?}");
        assert_eq!(var(&rows, &heap_name).unwrap()["kind"], "heap");
        // the top line of a variable is where it is accessed
        let field_line = line_of("names.c", "field");
        assert_eq!(
            var(&rows, "stats.v[3]").unwrap()["lines"][0]["line"],
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
        match cc {
            // `new Node`: clang's DW_AT_LLVM_alloc_type on the call site.
            Cc::Clang => {
                assert_eq!(counts(&rows, "Node.key"), (5, 5), "{cc:?}");
                // 5 in the sum, 5 in the delete loop
                assert_eq!(counts(&rows, "Node.next"), (10, 5), "{cc:?}");
            }
            // gcc records no type for `new`: the block keeps its site name.
            Cc::Gcc => {
                let site = line_of("heaptypes.cpp", "new-node");
                let name = format!("heap(heaptypes.cpp:{site} make_node(long, Node*))+8");
                assert_eq!(counts(&rows, &name), (10, 5), "{cc:?}");
            }
        }
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
fn rust_box_and_vec_blocks_are_named_after_their_element_type() {
    require_runtime();
    let dir = scratch("rsnames");
    let proj = dir.join("rsnames");
    std::fs::create_dir_all(proj.join("src")).unwrap();
    let src = programs().join("rsnames");
    std::fs::copy(src.join("Cargo.toml"), proj.join("Cargo.toml")).unwrap();
    std::fs::copy(src.join("src/main.rs"), proj.join("src/main.rs")).unwrap();
    let out = std::process::Command::new(memlens())
        .args(["cargo", "build", "--release", "--quiet"])
        .current_dir(&proj)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap();
    assert!(out.status.success(), "memlens cargo failed:\n{}", stderr(&out));
    let exe = proj.join("target/memlens/x86_64-unknown-linux-gnu/release/rsnames");
    let trace = dir.join("t.trace");
    let out = record(&exe, &trace, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
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
