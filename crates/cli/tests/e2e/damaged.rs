//! Damaged and cut traces: every command that reads a trace skips what is damaged,
//! finishes, says in one warning line what it skipped, and counts exactly the rest;
//! JSON results say whether the trace was complete.

use crate::util::*;
use memlens_format::{ChunkHeader, ChunkKind, TraceReader, CHUNK_HEADER_SIZE};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds `damaged.c` and records it in 64 KiB chunks (three per worker thread).
fn recorded(name: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(name);
    let exe = build(Cc::Gcc, "damaged.c", &dir, &[]);
    let trace = dir.join("t.trace");
    let out = Command::new(memlens())
        .args(["record", "-q", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .env("MEMLENS_BUFFER_KB", "64")
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    (dir, trace)
}

/// The trace's chunks in file order (offset, header), read with the format crate.
fn chunks(trace: &Path) -> Vec<(u64, ChunkHeader)> {
    let r = TraceReader::open(trace).unwrap();
    assert!(r.completeness().is_complete());
    r.chunks().iter().map(|c| (c.offset, c.header)).collect()
}

/// Runs memlens, which must exit 0; returns stdout and its warning lines.
fn run(args: &[&str]) -> (String, Vec<String>, String) {
    let out = run_memlens(args);
    let err = stderr(&out);
    assert!(out.status.success(), "memlens {args:?} failed: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let warnings = err.lines().filter(|l| l.contains("warning")).map(String::from).collect();
    (stdout(&out), warnings, err)
}

/// What every reading command reports about `trace`, by name; each command's
/// warning lines; the `complete` field of each JSON result.
struct Seen {
    figures: BTreeMap<String, u64>,
    warnings: Vec<(String, Vec<String>)>,
    complete: Vec<(String, Value)>,
}

fn number_before(text: &str, word: &str) -> u64 {
    let at = text.find(word).unwrap_or_else(|| panic!("no `{word}` in {text}"));
    let digits: String = text[..at]
        .trim_end()
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().unwrap()
}

fn seen(trace: &Path) -> Seen {
    let t = trace.to_str().unwrap();
    let mut s = Seen { figures: BTreeMap::new(), warnings: Vec::new(), complete: Vec::new() };
    let mut fig = |k: String, v: &Value| {
        s.figures.insert(k, v.as_u64().unwrap_or_else(|| panic!("{v}")));
    };
    let mut warn = Vec::new();
    let mut complete = Vec::new();
    for fast in [false, true] {
        let name = if fast { "info --fast" } else { "info" };
        let mut args = vec!["info", "--format", "json", t];
        if fast {
            args.insert(1, "--fast");
        }
        let (out, w, _) = run(&args);
        let v: Value = serde_json::from_str(&out).unwrap();
        for k in ["events", "loads", "stores"] {
            fig(format!("{name}.{k}"), &v[k]);
        }
        warn.push((name.to_string(), w));
        complete.push((name.to_string(), v["complete"].clone()));
    }
    let (out, w, _) = run(&["report", "--by", "thread", "--top", "0", "--format", "json", t]);
    for row in serde_json::from_str::<Vec<Value>>(&out).unwrap() {
        for k in ["loads", "stores"] {
            fig(format!("report.T{}.{k}", row["thread"]), &row[k]);
        }
        complete.push((format!("report T{}", row["thread"]), row["complete"].clone()));
    }
    warn.push(("report".into(), w));
    // dump's JSON lines end with an end_of_trace line saying whether it is complete.
    for (name, args) in [
        ("dump json", vec!["dump", "--no-names", "--format", "json", t]),
        ("dump --merged json end", vec!["dump", "--merged", "--format", "json", t]),
    ] {
        let (out, _, _) = run(&args);
        let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert_eq!(last["event"], "end_of_trace", "{name}");
        complete.push((name.to_string(), last["complete"].clone()));
    }
    for (name, args) in [
        ("dump", vec!["dump", "--no-names", t]),
        ("dump --merged", vec!["dump", "--merged", t]),
        ("dump --merged json", vec!["dump", "--merged", "--format", "json", t]),
    ] {
        let (out, w, _) = run(&args);
        fig(format!("{name}.lines"), &Value::from(out.lines().count()));
        warn.push((name.to_string(), w));
    }
    for k in memlens_kernels() {
        let (out, w, _) = run(&["analyze", k, "--format", "json", "--top", "0", t]);
        let v: Value = serde_json::from_str(&out).unwrap();
        if k == "counts" {
            for row in v["by_thread"].as_array().unwrap() {
                for f in ["loads", "stores"] {
                    fig(format!("counts.T{}.{f}", row["thread"]), &row[f]);
                }
            }
        }
        if k == "cachesim" {
            fig("cachesim.loads".into(), &v["levels"][0]["loads"]);
            fig("cachesim.stores".into(), &v["levels"][0]["stores"]);
        }
        warn.push((format!("analyze {k}"), w));
        complete.push((format!("analyze {k}"), v["complete"].clone()));
    }
    let pf = trace.with_extension("perfetto.json");
    let (_, w, err) = run(&["export", "--format", "perfetto", "-o", pf.to_str().unwrap(), t]);
    fig("export.operations".into(), &Value::from(number_before(&err, "memory operations")));
    warn.push(("export".into(), w));
    let (_, w, err) = run(&["merge", "--trace", t, "--stats"]);
    let events = err.lines().find_map(|l| l.strip_prefix("events ")).unwrap();
    fig("merge.events".into(), &Value::from(events.parse::<u64>().unwrap()));
    warn.push(("merge".into(), w));
    let (_, w, err) = run(&["view", "--no-serve", t]);
    fig("view.operations".into(), &Value::from(number_before(&err, "memory operations")));
    warn.push(("view".into(), w));
    s.warnings = warn;
    s.complete = complete;
    s
}

fn memlens_kernels() -> [&'static str; 8] {
    ["counts", "sharing", "false-sharing", "cachesim", "reuse", "working-set", "heap", "layout"]
}

/// The figures of the intact trace less the events of the chunks in `lost`.
fn expected(intact: &BTreeMap<String, u64>, lost: &[ChunkHeader]) -> BTreeMap<String, u64> {
    let mut want = intact.clone();
    for h in lost.iter().filter(|h| h.kind == ChunkKind::Events) {
        let (e, l, s) =
            (u64::from(h.counts.events), u64::from(h.counts.loads), u64::from(h.counts.stores));
        for (k, v) in want.iter_mut() {
            let t = format!(".T{}.", h.stream);
            let less = match k.as_str() {
                k if k.ends_with(".events") || k.ends_with(".lines") => e,
                k if k.ends_with(".loads") && (k.starts_with("info") || k.contains(&t)) => l,
                k if k.ends_with(".stores") && (k.starts_with("info") || k.contains(&t)) => s,
                "cachesim.loads" => l,
                "cachesim.stores" => s,
                "export.operations" | "view.operations" => l + s,
                _ => 0,
            };
            *v -= less;
        }
    }
    // a thread left without accesses has no row
    want.retain(|_, v| *v != 0);
    want
}

fn check(got: &Seen, want: &BTreeMap<String, u64>, warning: Option<&str>, complete: bool) {
    let figures: BTreeMap<String, u64> =
        got.figures.iter().filter(|(_, v)| **v != 0).map(|(k, v)| (k.clone(), *v)).collect();
    assert_eq!(&figures, want);
    for (cmd, w) in &got.warnings {
        let want: Vec<String> = warning.into_iter().map(String::from).collect();
        assert_eq!(w, &want, "{cmd}");
    }
    for (cmd, c) in &got.complete {
        assert_eq!(c, &Value::Bool(complete), "{cmd}");
    }
}

#[test]
fn intact_trace_is_complete_and_quiet() {
    let (_dir, trace) = recorded("intact");
    let s = seen(&trace);
    // 2 × 40000 stores and loads by the workers; 160029 events in all
    assert_eq!(s.figures["report.T1.stores"], 40000);
    assert_eq!(s.figures["report.T2.loads"], 40000);
    check(&s, &expected(&s.figures, &[]), None, true);
}

#[test]
fn a_flipped_payload_bit_skips_one_chunk_in_every_command() {
    let (dir, trace) = recorded("damaged");
    let intact = seen(&trace).figures;
    let all = chunks(&trace);
    let t1: Vec<&(u64, ChunkHeader)> =
        all.iter().filter(|(_, h)| h.kind == ChunkKind::Events && h.stream == 1).collect();
    assert!(t1.len() >= 3, "{all:?}");
    let (off, h) = *t1[t1.len() / 2];
    let mut bytes = std::fs::read(&trace).unwrap();
    let at = off as usize + CHUNK_HEADER_SIZE + h.payload_len as usize / 2;
    bytes[at] ^= 0x08;
    let bad = dir.join("bad.trace");
    std::fs::write(&bad, &bytes).unwrap();
    let warning = format!(
        "memlens: warning: incomplete trace: skipped 1 damaged chunk ({} events of thread 1; \
         at byte {off}: chunk payload checksum mismatch); the results cover the rest",
        h.counts.events
    );
    check(&seen(&bad), &expected(&intact, &[h]), Some(&warning), false);
    // `analyze --follow` steps over the damaged chunk too, with the same one line,
    // and gives the offline result (merged-order and chunk-order kernels).
    let b = bad.to_str().unwrap();
    for k in ["counts", "sharing"] {
        let (offline, w1, _) = run(&["analyze", k, "--format", "json", b]);
        let (live, w2, _) = run(&["analyze", k, "--follow", "--format", "json", b]);
        assert_eq!(w1, std::slice::from_ref(&warning), "analyze {k}");
        assert_eq!(w2, std::slice::from_ref(&warning), "analyze {k} --follow");
        assert_eq!(
            serde_json::from_str::<Value>(&live).unwrap(),
            serde_json::from_str::<Value>(&offline).unwrap(),
            "analyze {k} --follow"
        );
    }
}

#[test]
fn a_cut_trace_is_read_up_to_the_cut_by_every_command() {
    let (dir, trace) = recorded("cut");
    let intact = seen(&trace).figures;
    let all = chunks(&trace);
    // inside the last chunk of thread 2: it and every chunk after it are lost
    let &(off, h) = all.iter().rfind(|(_, h)| h.stream == 2).unwrap();
    let keep = off as usize + CHUNK_HEADER_SIZE + h.payload_len as usize / 2;
    let bytes = std::fs::read(&trace).unwrap();
    let cut = dir.join("cut.trace");
    std::fs::write(&cut, &bytes[..keep]).unwrap();
    let lost: Vec<ChunkHeader> = all.iter().filter(|(o, _)| *o >= off).map(|(_, h)| *h).collect();
    let warning = format!(
        "memlens: warning: incomplete trace: cut at byte {off}: file ends inside a chunk \
         ({} of {} payload bytes present); the results cover the rest",
        h.payload_len / 2,
        h.payload_len
    );
    check(&seen(&cut), &expected(&intact, &lost), Some(&warning), false);
}

#[test]
fn events_dropped_by_the_runtime_are_reported_by_report_analyze_and_dump_merged() {
    let (dir, trace) = recorded("dropped");
    let events = info(&trace)["events"].as_u64().unwrap();
    // the runtime's counter in the file header, as a full disk leaves it
    let mut bytes = std::fs::read(&trace).unwrap();
    let mut h = memlens_format::FileHeader::decode(&bytes).unwrap();
    h.dropped_events = 123;
    bytes[..memlens_format::HEADER_SIZE].copy_from_slice(&h.encode());
    let p = dir.join("dropped.trace");
    std::fs::write(&p, &bytes).unwrap();
    let t = p.to_str().unwrap();
    let warning = "memlens: warning: incomplete trace: 123 events dropped while recording; \
                   the results cover the rest";
    let (out, w, _) = run(&["report", "--by", "thread", "--format", "json", t]);
    assert_eq!(w, [warning]);
    let rows: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[1]["stores"], 40000);
    let (out, w, _) = run(&["analyze", "counts", "--format", "json", t]);
    assert_eq!(w, [warning]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["complete"], false);
    assert_eq!(v["by_thread"][2]["loads"], 40000);
    let (out, w, _) = run(&["dump", "--merged", t]);
    assert_eq!(w, [warning]);
    assert_eq!(out.lines().count() as u64, events);
    let (out, w, _) = run(&["info", "--format", "json", t]);
    assert_eq!(w, [warning]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["complete"].clone(), v["dropped"].clone()),
        (Value::Bool(false), Value::from(123))
    );
}
