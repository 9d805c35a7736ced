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
