//! `info`, `report` and `dump`: reading a trace back.

use anyhow::{Context, Result};
use memlens_analysis::counts::{Counts, PcCounts};
use memlens_format::{EndStatus, Event, ThreadId, TraceReader};
use memlens_names::CodeName;
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::io::{BufWriter, Write};
use std::path::Path;

/// What `report` groups by.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// Source line.
    Line,
    /// Function.
    Function,
    /// Variable, field, heap block or mapping.
    Variable(memlens_names::Granularity),
    /// Thread.
    Thread,
    /// Allocation site.
    Alloc,
}

/// Opens a trace with a message that says what to do, and prints the one warning
/// line when the trace is incomplete (every command that reads a trace opens it here).
pub fn open(path: &Path) -> Result<TraceReader> {
    let r = open_quiet(path)?;
    if let Some(w) = r.completeness().warning() {
        eprintln!("memlens: warning: {w}");
    }
    for e in memlens_symbols::changed_modules(&r.meta().modules) {
        eprintln!("memlens: warning: {e}: its code is left unnamed; keep the binary that ran (or its debug file) beside the trace, or record again");
    }
    Ok(r)
}

/// The last line of `dump --format json` (and `--merged`): whether the trace is
/// complete, and why not (the same reasons `info` gives).
pub fn end_of_trace_json(r: &TraceReader) -> Value {
    let c = r.completeness();
    json!({"event": "end_of_trace", "complete": c.is_complete(), "incomplete": c.reasons()})
}

/// [`open`] without the warning (for a caller that reported the damage itself).
pub fn open_quiet(path: &Path) -> Result<TraceReader> {
    if !path.exists() {
        anyhow::bail!(
            "trace {} does not exist; record one with `memlens record -- PROG`",
            path.display()
        );
    }
    TraceReader::open(path).with_context(|| format!("cannot read {}", path.display()))
}

fn end_text(e: EndStatus) -> String {
    match e {
        EndStatus::Unknown => "unknown".into(),
        EndStatus::Exited(c) => format!("exited with status {c}"),
        EndStatus::Signaled(s) => format!("killed by signal {s}"),
        EndStatus::Exec => "replaced by exec".into(),
    }
}

fn end_json(e: EndStatus) -> Value {
    match e {
        EndStatus::Unknown => json!({"kind": "unknown"}),
        EndStatus::Exited(c) => json!({"kind": "exit", "status": c}),
        EndStatus::Signaled(s) => json!({"kind": "signal", "signal": s}),
        EndStatus::Exec => json!({"kind": "exec"}),
    }
}

fn thread_info(r: &TraceReader, t: ThreadId) -> (u32, String) {
    for ev in r.events(t).take(4).flatten() {
        if let Event::ThreadStart { os_tid, name, .. } = ev {
            return (os_tid, name);
        }
    }
    (0, String::new())
}

/// `memlens info`.
pub fn info(path: &Path, as_json: bool, with_coverage: bool) -> Result<()> {
    let r = open(path)?;
    let h = r.header();
    let t = r.totals();
    let m = r.meta();
    let end = EndStatus::from_parts(h.end_kind, h.end_value);
    let accesses = u64::from(t.loads) + u64::from(t.stores);
    let bpa = if accesses > 0 { r.bytes_on_disk() as f64 / accesses as f64 } else { 0.0 };
    let dropped_bytes = h.dropped_bytes.max(m.dropped.map_or(0, |d| d.1));
    let streams: Vec<Value> = r
        .streams()
        .iter()
        .map(|s| {
            let (tid, name) = thread_info(&r, s.thread);
            json!({
                "thread": s.thread.0, "os_tid": tid, "name": name,
                "events": s.counts.events, "loads": s.counts.loads, "stores": s.counts.stores,
                "chunks": s.chunks.len(), "complete": s.complete && !s.gaps,
            })
        })
        .collect();
    let sum = |f: fn(&memlens_format::StreamInfo) -> u32| -> u64 {
        r.streams().iter().map(|s| u64::from(f(s))).sum()
    };
    let coverage = if with_coverage { Some(memlens_names::coverage(&r)?) } else { None };
    // `--order atomic` line locks taken over from blocked holders (possible misorders).
    let order_steals: u64 = m
        .options
        .iter()
        .rev()
        .find(|(k, _)| k == "order_steals")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    // The recording options (`option` records; a later one overrides an earlier one).
    let options: serde_json::Map<String, Value> =
        m.options.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
    let comp = r.completeness();
    let skipped: Vec<Value> = comp
        .skipped
        .iter()
        .map(|k| {
            let h = k.header.filter(|h| h.kind == memlens_format::ChunkKind::Events);
            json!({"offset": k.offset, "bytes": k.bytes, "reason": k.reason,
                "thread": h.map(|h| h.stream), "events": h.map(|h| h.counts.events)})
        })
        .collect();
    let v = json!({
        "complete": comp.is_complete(),
        "incomplete": comp.reasons(),
        "skipped": skipped,
        "coverage": coverage,
        "trace": path.display().to_string(),
        "pid": h.pid,
        "exe": m.exe,
        "argv": m.argv,
        "end": end_json(end),
        "finished": h.finished,
        "threads": r.streams().len(),
        "events": sum(|s| s.counts.events),
        "loads": sum(|s| s.counts.loads),
        "stores": sum(|s| s.counts.stores),
        "allocs": sum(|s| s.counts.allocs),
        "frees": sum(|s| s.counts.frees),
        "dropped": r.dropped_events(),
        "dropped_bytes": dropped_bytes,
        "order_steals": order_steals,
        "options": options,
        "bytes_on_disk": r.bytes_on_disk(),
        "bytes_per_access": (bpa * 1000.0).round() / 1000.0,
        "chunks": r.chunks().len(),
        "modules": m.modules.iter().map(|md| json!({
            "path": md.path, "base": format!("{:#x}", md.bias), "build_id": md.build_id_hex(),
        })).collect::<Vec<_>>(),
        "children": m.children.iter().map(|(p, f)| json!({"pid": p, "trace": f})).collect::<Vec<_>>(),
        "truncated": r.truncation().map(|t| json!({"offset": t.offset, "reason": t.reason})),
        "streams": streams,
    });
    let out = std::io::stdout();
    let mut out = out.lock();
    if as_json {
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
        return Ok(());
    }
    let stdout = out;
    let mut out: Vec<u8> = Vec::new();
    writeln!(out, "trace       {}", path.display())?;
    writeln!(out, "program     {} (pid {})", m.argv.join(" "), h.pid)?;
    writeln!(
        out,
        "ended       {}{}",
        end_text(end),
        if h.finished { "" } else { " (runtime did not finish the trace)" }
    )?;
    writeln!(out, "threads     {}", r.streams().len())?;
    writeln!(out, "events      {}", v["events"])?;
    writeln!(out, "loads       {}", v["loads"])?;
    writeln!(out, "stores      {}", v["stores"])?;
    writeln!(out, "allocs      {}", v["allocs"])?;
    writeln!(out, "frees       {}", v["frees"])?;
    writeln!(out, "dropped     {} events, {} bytes", r.dropped_events(), dropped_bytes)?;
    if order_steals > 0 {
        writeln!(
            out,
            "order       {order_steals} line lock(s) taken over from blocked threads (--order atomic): accesses around them may be out of order"
        )?;
    }
    writeln!(
        out,
        "on disk     {} bytes ({bpa:.3} B/access, {} chunks)",
        r.bytes_on_disk(),
        r.chunks().len()
    )?;
    // the one-line options (trace_calls and the like are for `dump`)
    let short: Vec<String> = options
        .iter()
        .filter_map(|(k, v)| v.as_str().map(|v| (k, v)))
        .filter(|(_, v)| !v.is_empty() && v.len() <= 40 && !v.contains('\n'))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !short.is_empty() {
        writeln!(out, "options     {}", short.join(" "))?;
    }
    writeln!(out, "modules     {}", m.modules.len())?;
    if let Some(c) = &v["coverage"].as_object() {
        // A percentage of nothing would claim a full naming that never happened.
        if c["accesses"].as_u64() == Some(0) {
            writeln!(out, "named       no accesses")?;
        } else {
            writeln!(
                out,
                "named       {}% of accesses have a source line, {}% a variable/field/heap name",
                c["with_line_pct"], c["with_name_pct"]
            )?;
        }
        for u in c["unnamed"].as_array().into_iter().flatten() {
            writeln!(
                out,
                "  unnamed   {} accesses in {}",
                u["accesses"],
                u["where"].as_str().unwrap_or("")
            )?;
        }
        for u in c["no_line"].as_array().into_iter().flatten() {
            writeln!(
                out,
                "  no line   {} accesses in {}",
                u["accesses"],
                u["where"].as_str().unwrap_or("")
            )?;
        }
    }
    for (p, f) in &m.children {
        writeln!(out, "child       pid {p}: {f}")?;
    }
    if let Some(t) = r.truncation() {
        writeln!(
            out,
            "TRUNCATED   at byte {}: {} (everything before it is readable)",
            t.offset, t.reason
        )?;
    }
    for k in &comp.skipped {
        let what = match k.header {
            Some(h) if h.kind == memlens_format::ChunkKind::Events => {
                format!("{} events of thread {}", h.counts.events, h.stream)
            }
            Some(_) => "metadata".to_string(),
            None => format!("{} bytes", k.bytes),
        };
        writeln!(out, "SKIPPED     damaged chunk at byte {} ({what}): {}", k.offset, k.reason)?;
    }
    for s in v["streams"].as_array().into_iter().flatten() {
        writeln!(
            out,
            "  T{:<4} tid {:<8} {:<16} {:>12} events{}",
            s["thread"],
            s["os_tid"],
            s["name"].as_str().unwrap_or(""),
            s["events"],
            if s["complete"] == true { "" } else { "  (stream incomplete)" }
        )?;
    }
    let mut stdout = stdout;
    for l in String::from_utf8_lossy(&out).lines() {
        stdout.write_all(fit_line(l).as_bytes())?;
    }
    Ok(())
}

/// An `info` line in 120 columns: a path loses its start (`…`), a sentence wraps
/// under its value column.
fn fit_line(l: &str) -> String {
    use memlens_analysis::table::MAX_WIDTH;
    let n = l.chars().count();
    if n <= MAX_WIDTH {
        return format!("{l}\n");
    }
    let key: String = l.chars().take(12).collect();
    let rest: String = l.chars().skip(12).collect();
    if rest.contains('/') {
        let tail: String = rest.chars().skip(rest.chars().count() - (MAX_WIDTH - 13)).collect();
        format!("{key}…{tail}\n")
    } else {
        let wrapped = memlens_analysis::table::wrap(&rest, "            ");
        format!("{key}{}", &wrapped[12..])
    }
}

fn counts(r: &TraceReader) -> Result<Counts> {
    let total = u64::from(r.totals().events);
    let pb = if total > 20_000_000 {
        let pb = indicatif::ProgressBar::new(total);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} counting {human_pos}/{human_len} events {wide_bar} {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(pb)
    } else {
        None
    };
    // Counts are sums: chunks decode and count on every core, whatever the threads.
    let n = std::thread::available_parallelism().map_or(2, |n| n.get());
    // ...and need no addresses: the address-free scan
    let c = memlens_analysis::drive_counts(r, n, |n| {
        if let Some(pb) = &pb {
            pb.set_position(n)
        }
    })?;
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    Ok(c)
}

/// (file and line when grouping by line, function).
type RowKey = (Option<(std::sync::Arc<str>, u32)>, std::sync::Arc<str>);

#[derive(Default)]
struct Row {
    c: PcCounts,
}

/// A report table: numbers right-aligned first, names last, at most 120 columns.
fn table(out: &mut impl Write, header: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    use memlens_analysis::table::{layout, Align};
    let align: Vec<Align> = (0..header.len())
        .map(|i| {
            let numeric = rows.iter().filter_map(|r| r.get(i)).filter(|c| !c.is_empty());
            if numeric.clone().count() > 0 && numeric.clone().all(|c| c.parse::<f64>().is_ok()) {
                Align::Right
            } else {
                Align::Left
            }
        })
        .collect();
    out.write_all(layout(header, &align, rows).as_bytes())
}

/// `memlens report`.
/// `alloc_fns`: `--alloc-fn` globs (heap blocks allocated in those wrappers are
/// named after their callers; `--by variable` only).
pub fn report(path: &Path, by: By, top: usize, as_json: bool, alloc_fns: &[String]) -> Result<()> {
    if !alloc_fns.is_empty() && !matches!(by, By::Variable(_)) {
        anyhow::bail!("--alloc-fn names heap blocks for --by variable; for allocation sites use `memlens analyze heap --alloc-fn`");
    }
    let r = open(path)?;
    // --by variable makes its own pass; the counts would be thrown away
    let c = if matches!(by, By::Variable(_)) { Counts::default() } else { counts(&r)? };
    let names = crate::analyze::names_for(&r, alloc_fns)?;
    let top = if top == 0 { usize::MAX } else { top };
    let out = std::io::stdout();
    let mut out = BufWriter::new(out.lock());
    let mut hint = None;
    let rows: Vec<Value> = match by {
        By::Variable(g) => {
            let (rows, h) = memlens_names::variable_rows(&r, &names, g, top, !as_json)?;
            hint = h;
            rows
        }
        By::Line | By::Function => {
            let mut agg: HashMap<RowKey, Row> = HashMap::new();
            for (pc, pcc) in &c.by_pc {
                let CodeName { function, file, line, .. } = names.code(*pc);
                let key =
                    if by == By::Line { (Some((file, line)), function) } else { (None, function) };
                agg.entry(key).or_default().c.merge(pcc);
            }
            let mut v: Vec<_> = agg.into_iter().collect();
            v.sort_by(|a, b| {
                let ka = a.1.c.loads + a.1.c.stores;
                let kb = b.1.c.loads + b.1.c.stores;
                kb.cmp(&ka).then_with(|| a.0.cmp(&b.0))
            });
            v.into_iter()
                .take(top)
                .map(|((fl, function), row)| {
                    let mut o = serde_json::Map::new();
                    if let Some((file, line)) = fl {
                        o.insert("file".into(), json!(&*file));
                        o.insert("line".into(), json!(line));
                    }
                    o.insert("function".into(), json!(&*function));
                    o.insert("loads".into(), json!(row.c.loads));
                    o.insert("stores".into(), json!(row.c.stores));
                    o.insert("bytes_read".into(), json!(row.c.bytes_read));
                    o.insert("bytes_written".into(), json!(row.c.bytes_written));
                    o.insert("threads".into(), json!(row.c.threads.len()));
                    Value::Object(o)
                })
                .collect()
        }
        By::Thread => {
            let mut v: Vec<_> = c.by_thread.iter().collect();
            v.sort_by_key(|(t, _)| **t);
            v.into_iter()
                .take(top)
                .map(|(t, tc)| {
                    let (tid, name) = thread_info(&r, *t);
                    json!({"thread": t.0, "os_tid": tid, "name": name, "loads": tc.loads,
                        "stores": tc.stores, "bytes_read": tc.bytes_read,
                        "bytes_written": tc.bytes_written, "allocs": tc.allocs,
                        "frees": tc.frees, "calls": tc.calls})
                })
                .collect()
        }
        By::Alloc => {
            let mut agg: HashMap<CodeName, (u64, u64)> = HashMap::new();
            for (pc, a) in &c.allocs {
                let e = agg.entry(names.code(*pc)).or_default();
                e.0 += a.count;
                e.1 += a.bytes;
            }
            let mut v: Vec<_> = agg.into_iter().collect();
            v.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then_with(|| a.0.cmp(&b.0)));
            v.into_iter()
                .take(top)
                .map(|(n, (blocks, bytes))| {
                    json!({"file": &*n.file, "line": n.line, "function": &*n.function,
                        "blocks": blocks, "bytes": bytes})
                })
                .collect()
        }
    };
    if as_json {
        // Every row says whether the trace it was counted from is complete.
        let complete = r.completeness().is_complete();
        let rows: Vec<Value> = rows
            .into_iter()
            .map(|mut row| {
                if let Some(o) = row.as_object_mut() {
                    o.insert("complete".into(), json!(complete));
                }
                row
            })
            .collect();
        serde_json::to_writer_pretty(&mut out, &rows)?;
        writeln!(out)?;
        return Ok(out.flush()?);
    }
    let cols: &[&str] = match by {
        By::Line => &[
            "loads",
            "stores",
            "bytes_read",
            "bytes_written",
            "threads",
            "file",
            "line",
            "function",
        ],
        By::Function => &["loads", "stores", "bytes_read", "bytes_written", "threads", "function"],
        By::Thread => &[
            "thread",
            "os_tid",
            "loads",
            "stores",
            "bytes_read",
            "bytes_written",
            "allocs",
            "frees",
            "calls",
            "name",
        ],
        By::Alloc => &["blocks", "bytes", "file", "line", "function"],
        By::Variable(_) => {
            &["loads", "stores", "bytes_read", "bytes_written", "threads", "kind", "variable"]
        }
    };
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            cols.iter()
                .map(|c| match &row[*c] {
                    Value::String(s) => short_path(s),
                    v => v.to_string(),
                })
                .collect()
        })
        .collect();
    table(&mut out, cols, &cells)?;
    out.flush()?;
    if let Some(h) = hint {
        eprintln!("memlens: note: {h}");
    }
    Ok(())
}

fn short_path(s: &str) -> String {
    if let Ok(cwd) = std::env::current_dir() {
        if let Ok(rel) = Path::new(s).strip_prefix(&cwd) {
            return rel.display().to_string();
        }
    }
    s.to_string()
}

/// `memlens dump`.
/// `alloc_fns`: `--alloc-fn` globs (heap blocks allocated in those wrappers are
/// named after their callers).
pub fn dump(
    path: &Path,
    as_json: bool,
    thread: Option<u32>,
    with_names: bool,
    alloc_fns: &[String],
) -> Result<()> {
    let r = open(path)?;
    if !with_names && !alloc_fns.is_empty() {
        anyhow::bail!("--alloc-fn names heap blocks, which --no-names leaves out");
    }
    let names = with_names.then(|| crate::analyze::names_for(&r, alloc_fns)).transpose()?;
    let mut attr = match &names {
        Some(n) => Some(memlens_names::attributor(&r, n)?),
        None => None,
    };
    let out = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, out.lock());
    let threads: BTreeSet<ThreadId> =
        r.streams().iter().map(|s| s.thread).filter(|t| thread.is_none_or(|n| t.0 == n)).collect();
    if let Some(n) = thread {
        if threads.is_empty() {
            anyhow::bail!("the trace has no thread {n} (see `memlens info`)");
        }
    }
    for t in threads {
        let mut it = r.events(t);
        while let Some(ev) = it.next() {
            let ev = ev?;
            let i = it.index();
            let name = match (&names, ev.pc()) {
                (Some(n), Some(pc)) if pc.0 != 0 => Some(n.code(pc)),
                _ => None,
            };
            let var = match (&mut attr, &ev) {
                (
                    Some(a),
                    Event::Access { pc, addr, .. }
                    | Event::Range { pc, addr, .. }
                    | Event::Rmw { pc, addr, .. },
                ) => {
                    a.observe(t, &ev);
                    let id = a.attribute(t, i, *pc, *addr);
                    Some(a.label(id).display())
                }
                (Some(a), _) => {
                    a.observe(t, &ev);
                    None
                }
                _ => None,
            };
            if as_json {
                let mut v = event_json(&ev);
                v["thread"] = json!(t.0);
                v["index"] = json!(i);
                if let Some(var) = &var {
                    v["variable"] = json!(var);
                }
                if let Some(n) = name {
                    v["function"] = json!(&*n.function);
                    if n.line != 0 {
                        v["file"] = json!(&*n.file);
                        v["line"] = json!(n.line);
                        v["column"] = json!(n.column);
                    }
                }
                serde_json::to_writer(&mut out, &v)?;
                writeln!(out)?;
            } else {
                write!(out, "T{} {i} {ev}", t.0)?;
                if let Some(var) = &var {
                    write!(out, " {var}")?;
                }
                if let Some(n) = name {
                    if n.line != 0 {
                        let file = Path::new(&*n.file)
                            .file_name()
                            .map(|f| f.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        write!(out, " {file}:{}:{} {}", n.line, n.column, n.function)?;
                    } else {
                        write!(out, " {}", n.function)?;
                    }
                }
                writeln!(out)?;
            }
        }
    }
    if as_json {
        serde_json::to_writer(&mut out, &end_of_trace_json(&r))?;
        writeln!(out)?;
    }
    Ok(out.flush()?)
}

fn hex(v: u64) -> String {
    format!("{v:#x}")
}

/// The JSON object of one event.
pub fn event_json(ev: &Event) -> Value {
    use memlens_format::AccessKind::*;
    let rw = |k| if k == Read { "read" } else { "write" };
    match ev {
        Event::Access { pc, addr, size, kind, atomic, value } => {
            let mut v = json!({"event": rw(*kind), "addr": hex(addr.0), "size": size, "pc": hex(pc.0), "atomic": atomic});
            if let Some(x) = value {
                v["value"] = json!(x);
            }
            v
        }
        Event::Range { pc, addr, len, kind } => {
            json!({"event": format!("range_{}", rw(*kind)), "addr": hex(addr.0), "size": len, "pc": hex(pc.0)})
        }
        Event::Rmw { pc, addr, size, op, value } => {
            let mut v = json!({"event": "rmw", "op": op.name(), "addr": hex(addr.0), "size": size, "pc": hex(pc.0)});
            if let Some(x) = value {
                v["value"] = json!(x);
            }
            v
        }
        Event::Fence { pc, order } => json!({"event": "fence", "order": order, "pc": hex(pc.0)}),
        Event::FuncEnter { pc, call_site, frame } => json!({"event": "enter", "pc": hex(pc.0),
            "call_site": hex(call_site.0), "frame": hex(frame.0)}),
        Event::FuncExit { pc } => json!({"event": "exit", "pc": hex(pc.0)}),
        Event::Call { func, sp, args } => {
            json!({"event": "call", "entry": hex(func.0), "sp": hex(sp.0), "args": args})
        }
        Event::Return { func, sp, value } => {
            json!({"event": "return", "entry": hex(func.0), "sp": hex(sp.0), "value": value})
        }
        Event::Alloc { pc, addr, size, kind, stack } => {
            json!({"event": "alloc", "kind": kind.name(),
            "addr": hex(addr.0), "size": size, "pc": hex(pc.0),
            "stack": stack.iter().map(|p| hex(p.0)).collect::<Vec<_>>()})
        }
        Event::Realloc { pc, old, new, size, stack } => {
            json!({"event": "realloc", "old": hex(old.0),
            "addr": hex(new.0), "size": size, "pc": hex(pc.0),
            "stack": stack.iter().map(|p| hex(p.0)).collect::<Vec<_>>()})
        }
        Event::Free { pc, addr, kind } => {
            json!({"event": "free", "kind": kind.name(), "addr": hex(addr.0), "pc": hex(pc.0)})
        }
        Event::ThreadStart { os_tid, parent, name, stack_lo, stack_hi, tls } => json!({
            "event": "thread_start", "os_tid": os_tid, "parent": parent.map(|p| p.0), "name": name,
            "stack_lo": hex(stack_lo.0), "stack_hi": hex(stack_hi.0), "tls": hex(tls.0)}),
        Event::ThreadExit => json!({"event": "thread_exit"}),
        Event::ThreadName(n) => json!({"event": "thread_name", "name": n}),
        Event::RegisterThread(id) => json!({"event": "register_thread", "id": id}),
        Event::Roi(b) => json!({"event": if *b { "roi_begin" } else { "roi_end" }}),
        Event::Tracing(b) => json!({"event": if *b { "trace_on" } else { "trace_off" }}),
        Event::Fork { child_pid } => json!({"event": "fork", "child_pid": child_pid}),
        Event::Exec => json!({"event": "exec"}),
        Event::Clock(t) => json!({"event": "clock", "time": t}),
        Event::Dropped(n) => json!({"event": "dropped", "events": n}),
        Event::Signal(s) => json!({"event": "signal", "signal": s}),
        Event::Time(ns) => json!({"event": "time", "ns": ns}),
    }
}
