//! One call stack for every reader (format's `CallStack`): after a longjmp and after
//! an exit whose entry was never recorded, the Perfetto and speedscope exports, the
//! viewer's flame chart and the stack-local names nest calls alike, at exact depths.

use super::calls_from_trace_events;
use crate::util::*;
use memlens_format::{Event, EventBuffer, MetaRecord, Pc, ThreadId, TraceReader, TraceWriter};
use serde_json::Value;
use std::path::Path;

/// (function, depth) of every call, in entry order.
type Calls = Vec<(String, usize)>;

fn perfetto_calls(trace: &Path) -> Calls {
    let v: Value = serde_json::from_str(&super::export(trace, "perfetto", &[])).unwrap();
    let mut c = calls_from_trace_events(v["traceEvents"].as_array().unwrap());
    c.sort_by_key(|c| (c.2, c.1));
    c.into_iter().map(|c| (c.0, c.1)).collect()
}

fn speedscope_calls(trace: &Path) -> Calls {
    let v: Value = serde_json::from_str(&super::export(trace, "speedscope", &[])).unwrap();
    let names: Vec<String> = v["shared"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect();
    let mut open: Vec<u64> = Vec::new();
    let mut calls = Vec::new();
    for e in v["profiles"][0]["events"].as_array().unwrap() {
        let f = e["frame"].as_u64().unwrap();
        if e["type"] == "O" {
            calls.push((names[f as usize].clone(), open.len()));
            open.push(f);
        } else {
            assert_eq!(open.pop(), Some(f), "speedscope closes the innermost frame");
        }
    }
    assert!(open.is_empty());
    calls
}

fn viewer_calls(trace: &Path) -> Calls {
    let out = run_memlens(&["view", "--no-serve", trace.to_str().unwrap()]);
    assert!(out.status.success(), "view: {}", stderr(&out));
    let ix = memlens_view::Index::open(&memlens_view::index_dir(trace)).unwrap();
    let funcs = ix.meta()["functions"].as_array().unwrap().clone();
    let mut spans = ix.spans(0, u64::MAX, 0, usize::MAX).unwrap();
    spans.sort_by_key(|s| (s.start, s.depth));
    spans
        .iter()
        .map(|s| (funcs[s.func as usize].as_str().unwrap().to_string(), s.depth as usize))
        .collect()
}

/// The variable names `dump` gives the stores (names' frames decide stack locals).
fn store_names(trace: &Path) -> Vec<String> {
    dump(trace)
        .iter()
        .filter(|e| e["event"] == "write")
        .map(|e| e["variable"].as_str().unwrap_or("").to_string())
        .collect()
}

/// `trace` rewritten as a recorder would that neither closes frames left by
/// longjmp (the runtime's `FuncExit { pc: 0 }` are dropped) nor pairs every exit
/// with an entry: an exit of `after`, never entered there, follows `outer`'s entry.
fn rewrite(trace: &Path, out: &Path, after: Pc) {
    let r = TraceReader::open(trace).unwrap();
    let m = r.meta();
    let mut meta =
        vec![MetaRecord::Process { pid: m.pid, exe: m.exe.clone(), argv: m.argv.clone() }];
    meta.extend(m.modules.iter().cloned().map(MetaRecord::Module));
    meta.extend(m.end.map(MetaRecord::End));
    let mut w = TraceWriter::new(std::fs::File::create(out).unwrap(), m.pid, 1).unwrap();
    w.write_meta(&meta).unwrap();
    let mut buf = EventBuffer::new();
    let mut enters = 0;
    for ev in r.events(ThreadId(0)) {
        let ev = ev.unwrap();
        if ev == (Event::FuncExit { pc: Pc(0) }) {
            continue;
        }
        buf.push(&ev);
        if matches!(ev, Event::FuncEnter { .. }) {
            enters += 1;
            if enters == 2 {
                buf.push(&Event::FuncExit { pc: after });
            }
        }
    }
    w.write_events(0, &mut buf, true).unwrap();
    w.finish(|_| {}).unwrap();
}

#[test]
fn longjmp_and_unmatched_exits_nest_alike_everywhere() {
    // rt closes leaf ×4 at after's entry; middle, whose frame pointer after's frame
    // takes over, stays open until outer returns (names' rule: only frames strictly
    // below the new one are left)
    let want: Calls = [
        ("main", 0),
        ("outer", 1),
        ("middle", 2),
        ("leaf", 3),
        ("leaf", 4),
        ("leaf", 5),
        ("leaf", 6),
        ("after", 3),
        ("after", 3),
    ]
    .iter()
    .map(|(f, d)| (f.to_string(), *d))
    .collect();
    for cc in Cc::all() {
        let dir = scratch("stacks");
        let exe = build(cc, "longjmp.c", &dir, &[]);
        let real = dir.join("real.trace");
        let out = record(&exe, &real, &[]);
        assert_eq!(stdout(&out), "sink=10\n", "{cc:?}: {}", stderr(&out));
        let after = dump(&real)
            .iter()
            .find(|e| e["event"] == "enter" && e["function"] == "after")
            .map(|e| u64::from_str_radix(e["pc"].as_str().unwrap().trim_start_matches("0x"), 16))
            .unwrap()
            .unwrap();
        let bare = dir.join("bare.trace");
        rewrite(&real, &bare, Pc(after));
        let exits = |t: &Path| dump(t).iter().filter(|e| e["event"] == "exit").count();
        assert_eq!(exits(&bare), exits(&real) - 5 + 1, "{cc:?}: 5 synthesised exits dropped");
        for t in [&real, &bare] {
            let what = format!("{cc:?} {}", t.display());
            assert_eq!(perfetto_calls(t), want, "perfetto, {what}");
            assert_eq!(speedscope_calls(t), want, "speedscope, {what}");
            assert_eq!(viewer_calls(t), want, "viewer, {what}");
        }
        // names follow the same frames: each store is named alike in both traces
        let names = store_names(&real);
        assert_eq!(store_names(&bare), names, "{cc:?}");
        if matches!(cc, Cc::Clang) {
            // clang records the locals (gcc's TSan pass does not)
            for v in ["outer::tmp[1]", "after::local[1]", "after::local[2]"] {
                assert!(names.iter().any(|n| n == v), "{cc:?}: {v} in {names:?}");
            }
        }
    }
}
