//! Every `--format json` output follows its JSON Schema in docs/schemas (the one
//! vocabulary of docs/output.md): real programs recorded, every JSON-emitting
//! command run on them, each output validated. The schemas allow no other keys, so
//! a renamed, misspelled or new key fails here until its schema (and docs/output.md)
//! says what it means.

use crate::live_probes::{unsupported, Live, Target, N};
use crate::util::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn schema_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/schemas")
}

fn validator(name: &str) -> jsonschema::Validator {
    let p = schema_dir().join(format!("{name}.schema.json"));
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema", "{}", p.display());
    jsonschema::draft202012::new(&s).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Validates outputs and remembers which schemas and which sections of them held rows.
#[derive(Default)]
struct Checker {
    validators: BTreeMap<String, jsonschema::Validator>,
    /// schema -> sections (top-level keys) seen with at least one row
    rows: BTreeMap<String, BTreeSet<String>>,
}

impl Checker {
    fn check(&mut self, name: &str, what: &str, v: &Value) {
        let val = self.validators.entry(name.to_string()).or_insert_with(|| validator(name));
        let errs: Vec<String> =
            val.iter_errors(v).take(5).map(|e| format!("{e} at {}", e.instance_path())).collect();
        assert!(
            errs.is_empty(),
            "{what}: not as docs/schemas/{name}.schema.json says:\n{}",
            errs.join("\n")
        );
        let seen = self.rows.entry(name.to_string()).or_default();
        match v {
            Value::Object(o) => seen.extend(
                o.iter()
                    .filter(|(_, x)| x.as_array().is_some_and(|a| !a.is_empty()))
                    .map(|(k, _)| k.clone()),
            ),
            Value::Array(a) if !a.is_empty() => {
                seen.insert("[]".into());
            }
            _ => {}
        }
    }

    fn json(&mut self, name: &str, args: &[&str]) -> Value {
        let v = json(args);
        self.check(name, &args.join(" "), &v);
        v
    }

    /// JSON Lines: each line.
    fn lines(&mut self, name: &str, args: &[&str]) -> usize {
        let out = run_memlens(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let text = stdout(&out);
        for (i, l) in text.lines().enumerate() {
            let v: Value = serde_json::from_str(l).unwrap();
            self.check(name, &format!("{} line {}", args.join(" "), i + 1), &v);
        }
        text.lines().count()
    }
}

const KERNELS: [&str; 8] =
    ["counts", "sharing", "false-sharing", "cachesim", "reuse", "working-set", "heap", "layout"];

fn trace_outputs(c: &mut Checker, trace: &Path) {
    let t = trace.to_str().unwrap();
    c.json("info", &["info", "--format", "json", t]);
    c.json("info", &["info", "--fast", "--format", "json", t]);
    for by in ["line", "function", "variable", "thread", "alloc"] {
        c.json("report", &["report", "--by", by, "--top", "0", "--format", "json", t]);
    }
    c.json("report", &["report", "--by", "variable", "--group-by", "field", "--format", "json", t]);
    assert!(c.lines("dump", &["dump", "--format", "json", t]) > 1);
    assert!(c.lines("dump", &["dump", "--merged", "--format", "json", t]) > 1);
    assert!(c.lines("dump", &["dump", "--no-names", "--format", "json", t]) > 1);
    for k in KERNELS {
        let name = format!("analyze-{k}");
        c.json(&name, &["analyze", k, "--top", "0", "--format", "json", t]);
        c.json(&name, &["analyze", k, "-v", "--top", "0", "--format", "json", t]);
    }
}

#[test]
fn every_json_output_follows_its_schema() {
    let dir = scratch("schemas");
    let mut c = Checker::default();
    // threads, atomics, heap blocks and shared data
    let hot = dir.join("hotspots");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hotspots.c");
    memlens_cc(
        Cc::Gcc,
        false,
        &["-O2", "-pthread", src.to_str().unwrap(), "-o", hot.to_str().unwrap()],
    );
    let t = dir.join("hotspots.trace");
    assert!(record(&hot, &t, &[]).status.success());
    trace_outputs(&mut c, &t);
    // false sharing, and with padded counters the sharing predicted for 128-byte lines
    let Traced { trace, .. } = build_and_record(Cc::Gcc, "schemas-fs", "falseshare.c");
    trace_outputs(&mut c, &trace);
    let exe = build(Cc::Gcc, "falseshare.c", &dir, &["-DPADDED"]);
    let t = dir.join("padded.trace");
    assert!(record(&exe, &t, &[]).status.success());
    trace_outputs(&mut c, &t);
    // calls and returns of listed functions, and exits of frames left by longjmp
    let exe = build(Cc::Gcc, "longjmp.c", &dir, &[]);
    let list = dir.join("functions.txt");
    std::fs::write(&list, "after\nmiddle\n").unwrap();
    let t = dir.join("calls.trace");
    let (l, ts, e) = (list.to_str().unwrap(), t.to_str().unwrap(), exe.to_str().unwrap());
    let out = run_memlens(&["record", "-q", "--trace-calls", l, "-o", ts, "--", e]);
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    trace_outputs(&mut c, &t);
    let events: BTreeSet<String> =
        dump(&t).iter().map(|e| e["event"].as_str().unwrap().to_string()).collect();
    for e in ["call", "return", "enter", "exit", "write"] {
        assert!(events.contains(e), "{e} in {events:?}");
    }

    // live probes (root and the uprobe PMU)
    if !unsupported() {
        let exe = crate::live_probes::build_probed(&dir);
        let target = Target::start(&exe, N);
        let live = Live::attach(&dir, target.pid(), &[]);
        live.add("count:work");
        live.add("timer:work");
        let probe = |args: &[&str]| -> Value {
            let o = live.probe(args);
            assert!(o.status.success(), "{args:?}: {}", stderr(&o));
            serde_json::from_str(&stdout(&o)).unwrap()
        };
        target.phase(libc::SIGUSR1);
        let v = probe(&["list", "--format", "json"]);
        c.check("probe-list", "probe list", &v);
        assert_eq!(v.as_array().unwrap().len(), 2);
        c.check("probe-modules", "probe modules", &probe(&["modules", "--format", "json"]));
        drop(live);
        target.finish();
    }

    // every schema was used, and every row type held rows somewhere (info's
    // `children` and `skipped` need forks and damage: damaged.rs has those)
    let files: BTreeSet<String> = std::fs::read_dir(schema_dir())
        .unwrap()
        .map(|e| {
            e.unwrap().file_name().to_string_lossy().trim_end_matches(".schema.json").to_string()
        })
        .collect();
    let used: BTreeSet<String> = c.rows.keys().cloned().collect();
    let live_only: BTreeSet<String> = ["probe-list", "probe-modules"].map(String::from).into();
    assert_eq!(
        &files - &live_only,
        &used - &live_only,
        "schemas without a test, or tests without a schema"
    );
    for (name, seen) in &c.rows {
        let s: Value = serde_json::from_str(
            &std::fs::read_to_string(schema_dir().join(format!("{name}.schema.json"))).unwrap(),
        )
        .unwrap();
        let want: BTreeSet<String> = match s["type"].as_str() {
            Some("array") => ["[]".to_string()].into(),
            _ if !name.starts_with("analyze-") => BTreeSet::new(),
            _ => s["properties"]
                .as_object()
                .unwrap()
                .iter()
                .filter(|(_, p)| p["type"] == "array" && p["items"]["type"] == "object")
                .map(|(k, _)| k.clone())
                .collect(),
        };
        let missing: Vec<&String> = want.difference(seen).collect();
        assert!(missing.is_empty(), "{name}: no output had rows in {missing:?}");
    }
}

/// The schemas reject what they do not describe: an old key in a real output fails.
#[test]
fn a_key_the_schema_lacks_fails() {
    let Traced { trace, .. } = build_and_record(Cc::Gcc, "schemas-neg", "sharing.c");
    let t = trace.to_str().unwrap();
    let v = json(&["analyze", "sharing", "--top", "0", "--format", "json", t]);
    let val = validator("analyze-sharing");
    assert!(val.is_valid(&v), "{v}");
    let mut bad = v.clone();
    bad["by_variable"][0]["reads"] = Value::from(1);
    assert!(!val.is_valid(&bad), "an unknown key in a row passes");
    let mut bad = v.clone();
    bad["by_variable"][0].as_object_mut().unwrap().remove("threads");
    assert!(!val.is_valid(&bad), "a missing key passes");
    let rows = json(&["report", "--by", "alloc", "--top", "0", "--format", "json", t]);
    let val = validator("report");
    assert!(val.is_valid(&rows));
    let mut bad = rows.clone();
    bad[0]["count"] = bad[0]["blocks"].clone();
    assert!(!val.is_valid(&bad), "report --by alloc with the old `count` passes");
}
