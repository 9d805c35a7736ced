//! Naming every access after its variable, field, heap block or mapping.

use crate::names::Names;
use anyhow::Result;
use memlens_format::{Event, Pc, ThreadId, TraceReader};
use memlens_names::{Attributor, HeapIndex, Kind, LabelId, Maps};
use std::collections::HashMap;

/// Builds the heap index: a pass over the chunks that hold allocations or frees.
pub fn heap_index(r: &TraceReader) -> Result<HeapIndex> {
    let mut h = HeapIndex::default();
    for s in r.streams() {
        let mut it = r.events_where(s.thread, |c| c.counts.allocs > 0 || c.counts.frees > 0);
        while let Some(ev) = it.next() {
            let i = it.index();
            match ev? {
                Event::Alloc { pc, addr, size, stack, .. } => {
                    h.add_block(s.thread, i, addr, size, pc, stack)
                }
                Event::Realloc { pc, old, new, size, stack } => {
                    h.free(s.thread, i, old);
                    h.add_block(s.thread, i, new, size, pc, stack);
                }
                Event::Free { addr, .. } => h.free(s.thread, i, addr),
                _ => {}
            }
        }
    }
    h.finish();
    Ok(h)
}

/// An attributor for a trace, naming heap sites by their source line.
pub fn attributor<'a>(r: &TraceReader, names: &'a Names) -> Result<Attributor<'a>> {
    let heap = heap_index(r)?;
    let maps = r.meta().maps.as_deref().map(Maps::parse);
    let mut a = Attributor::new(names.symbolizer(), heap, maps);
    a.set_site_namer(move |pc: Pc| {
        let c = names.code(pc);
        if c.line == 0 {
            c.function.to_string()
        } else {
            let file = c.file.rsplit('/').next().unwrap_or(&c.file).to_string();
            format!("{file}:{} {}", c.line, c.function)
        }
    });
    Ok(a)
}

/// Counters of one label.
#[derive(Default, Clone)]
pub struct VarCounts {
    /// Loads.
    pub loads: u64,
    /// Stores.
    pub stores: u64,
    /// Bytes loaded.
    pub bytes_read: u64,
    /// Bytes stored.
    pub bytes_written: u64,
    /// Threads (sorted, distinct).
    pub threads: Vec<ThreadId>,
    /// Accesses per code address.
    pub pcs: HashMap<Pc, u64>,
}

/// The result of naming every access.
pub struct VarReport {
    /// Per label.
    pub by_label: HashMap<LabelId, VarCounts>,
    /// Accesses seen.
    pub accesses: u64,
    /// Accesses whose code address has a source line.
    pub with_line: u64,
    /// Accesses with a variable, field or heap block name.
    pub with_name: u64,
    /// Unnamed accesses by kind of fallback.
    pub unnamed: HashMap<String, u64>,
}

/// Names every access of the trace.
pub fn attribute_all<'a>(r: &TraceReader, names: &'a Names) -> Result<(Attributor<'a>, VarReport)> {
    let mut a = attributor(r, names)?;
    let mut rep = VarReport {
        by_label: HashMap::new(),
        accesses: 0,
        with_line: 0,
        with_name: 0,
        unnamed: HashMap::new(),
    };
    let mut line_known: HashMap<Pc, bool> = HashMap::new();
    for s in r.streams() {
        let t = s.thread;
        let mut it = r.events(t);
        while let Some(ev) = it.next() {
            let ev = ev?;
            let i = it.index();
            a.observe(t, &ev);
            let (pc, addr) = match &ev {
                Event::Access { pc, addr, .. }
                | Event::Range { pc, addr, .. }
                | Event::Rmw { pc, addr, .. } => (*pc, *addr),
                _ => continue,
            };
            let id = a.attribute(t, i, pc, addr);
            let (l, st) = ev.loads_stores();
            let (br, bw) = ev.bytes_read_written();
            let n = l + st;
            rep.accesses += n;
            let known = *line_known.entry(pc).or_insert_with(|| names.code(pc).line != 0);
            if known {
                rep.with_line += n;
            }
            let label = a.label(id);
            if label.kind.is_named() {
                rep.with_name += n;
            } else {
                *rep.unnamed.entry(label.base.to_string()).or_default() += n;
            }
            let c = rep.by_label.entry(id).or_default();
            c.loads += l;
            c.stores += st;
            c.bytes_read += br;
            c.bytes_written += bw;
            if let Err(p) = c.threads.binary_search(&t) {
                c.threads.insert(p, t);
            }
            *c.pcs.entry(pc).or_default() += n;
        }
    }
    Ok((a, rep))
}

/// How `report --by variable` groups names.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// Full member path (`stats.v[3]`).
    Field,
    /// Whole variable (`stats`).
    Variable,
}

/// Rows of `report --by variable`.
pub fn variable_rows(r: &TraceReader, group: Group, top: usize) -> Result<Vec<serde_json::Value>> {
    let names = Names::new(&r.meta().modules);
    let (a, rep) = attribute_all(r, &names)?;
    let mut agg: HashMap<(String, Kind), VarCounts> = HashMap::new();
    for (id, c) in &rep.by_label {
        let l = a.label(*id);
        let key = match group {
            Group::Field => l.display(),
            Group::Variable => l.base.to_string(),
        };
        let e = agg.entry((key, l.kind)).or_default();
        e.loads += c.loads;
        e.stores += c.stores;
        e.bytes_read += c.bytes_read;
        e.bytes_written += c.bytes_written;
        for &t in &c.threads {
            if let Err(p) = e.threads.binary_search(&t) {
                e.threads.insert(p, t);
            }
        }
        for (pc, n) in &c.pcs {
            *e.pcs.entry(*pc).or_default() += n;
        }
    }
    let mut v: Vec<_> = agg.into_iter().collect();
    v.sort_by(|x, y| (y.1.loads + y.1.stores).cmp(&(x.1.loads + x.1.stores)).then(x.0.cmp(&y.0)));
    Ok(v.into_iter()
        .take(top)
        .map(|((name, kind), c)| {
            let mut lines: HashMap<String, u64> = HashMap::new();
            for (pc, n) in &c.pcs {
                let cn = names.code(*pc);
                let file = cn.file.rsplit('/').next().unwrap_or(&cn.file).to_string();
                *lines.entry(format!("{file}:{}", cn.line)).or_default() += n;
            }
            let mut lines: Vec<_> = lines.into_iter().collect();
            lines.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            lines.truncate(3);
            serde_json::json!({
                "variable": name, "kind": kind.name(), "loads": c.loads, "stores": c.stores,
                "bytes_read": c.bytes_read, "bytes_written": c.bytes_written,
                "threads": c.threads.len(),
                "lines": lines.iter().map(|(l, n)| serde_json::json!({"line": l, "accesses": n})).collect::<Vec<_>>(),
            })
        })
        .collect())
}

/// Attribution coverage figures for `info`.
pub fn coverage(r: &TraceReader) -> Result<serde_json::Value> {
    let names = Names::new(&r.meta().modules);
    let (_, rep) = attribute_all(r, &names)?;
    let pct = |n: u64| {
        if rep.accesses == 0 {
            100.0
        } else {
            (n as f64 * 10000.0 / rep.accesses as f64).round() / 100.0
        }
    };
    let mut unnamed: Vec<_> = rep.unnamed.into_iter().collect();
    unnamed.sort_by_key(|u| std::cmp::Reverse(u.1));
    unnamed.truncate(5);
    Ok(serde_json::json!({
        "accesses": rep.accesses,
        "with_line_pct": pct(rep.with_line),
        "with_name_pct": pct(rep.with_name),
        "unnamed": unnamed.iter().map(|(k, n)| serde_json::json!({"where": k, "accesses": n})).collect::<Vec<_>>(),
    }))
}
