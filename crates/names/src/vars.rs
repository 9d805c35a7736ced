//! Naming every access after its variable, field, heap block or mapping, for the
//! commands: `report --by variable`, `info`, and the [`Namer`]s of `analyze`, `view`
//! and `export`.

use crate::code::Names;
use crate::{Attributor, Error, FastMap, Granularity, HeapIndex, Kind, Label, LabelCounts, Maps};
use memlens_analysis::{AccessNamer, CodeName, DataName, Namer};
use memlens_format::{Addr, Event, Pc, ThreadId, TraceReader};
use std::collections::HashMap;
use std::sync::Mutex;

/// Builds the heap index: a pass over the chunks that hold allocations or frees.
pub fn heap_index(r: &TraceReader, names: &Names) -> Result<HeapIndex, Error> {
    HeapIndex::from_trace(r, names.alloc_fns())
}

/// Code names through DWARF; data addresses are not needed by any export.
pub struct CodeNamer<'a>(pub &'a Names);

impl Namer for CodeNamer<'_> {
    fn code(&self, pc: Pc) -> CodeName {
        plain(self.0.code(pc))
    }

    fn function(&self, pc: Pc) -> CodeName {
        plain(self.0.entered(pc))
    }

    fn data(&self, _addr: Addr) -> Option<DataName> {
        None
    }

    fn function_start(&self, pc: Pc) -> Option<Pc> {
        known_start(self.0, pc)
    }
}

/// A code name as the kernels' renderers take it.
fn plain(c: crate::code::CodeName) -> CodeName {
    CodeName { function: c.function.to_string(), file: c.file.to_string(), line: c.line }
}

/// The start of the function holding `pc`, as the attributor matches exits.
fn known_start(names: &Names, pc: Pc) -> Option<Pc> {
    Some(Pc(crate::function_start(names.symbolizer(), pc))).filter(|s| pc.0 != 0 && s.0 != 0)
}

/// Names for kernels' results (`analyze`, `view`): code via DWARF, data via the
/// attributor without a thread context (globals exactly, heap by the most recent
/// block at an address).
pub struct TraceNamer<'a> {
    names: &'a Names,
    attr: Mutex<Option<Attributor<'a>>>,
    /// The trace: a lazy namer reads its heap index on the first data name.
    reader: &'a TraceReader,
}

impl<'a> TraceNamer<'a> {
    /// A namer for trace `r`, its heap index read now.
    pub fn new(r: &'a TraceReader, names: &'a Names) -> Result<Self, Error> {
        let mut a = attributor(r, names)?;
        a.set_one_off();
        Ok(TraceNamer { names, attr: Mutex::new(Some(a)), reader: r })
    }

    /// A namer for trace `r` that reads the heap index only when a data address is
    /// first named (most kernels' tables name code only).
    pub fn lazy(r: &'a TraceReader, names: &'a Names) -> Self {
        TraceNamer { names, attr: Mutex::new(None), reader: r }
    }
}

/// Names each access of a trace where and when it happens, by whole variable:
/// the attributor `report --by variable` counts with, fed the events in each
/// thread's stream order (any interleaving of threads).
pub struct AccessNames<'a> {
    attr: Attributor<'a>,
    /// Per thread but `current`'s: the index of its next event.
    next: FastMap<ThreadId, u64>,
    /// The thread of the last event and the index of its next one.
    current: Option<(ThreadId, u64)>,
}

impl<'a> AccessNames<'a> {
    /// For trace `r` (reads its heap index).
    pub fn new(r: &TraceReader, names: &'a Names) -> Result<Self, Error> {
        let mut attr = attributor(r, names)?;
        attr.set_granularity(Granularity::Variable);
        Ok(AccessNames { attr, next: FastMap::default(), current: None })
    }
}

impl AccessNamer for AccessNames<'_> {
    fn observe(&mut self, thread: ThreadId, ev: &Event) -> Option<u32> {
        // the thread of the last event keeps its count here, the others in `next`
        let n = match &mut self.current {
            Some((t, n)) if *t == thread => n,
            cur => {
                if let Some((t, n)) = *cur {
                    self.next.insert(t, n);
                }
                &mut cur.insert((thread, self.next.get(&thread).copied().unwrap_or(0))).1
            }
        };
        let index = *n;
        *n += 1;
        match *ev {
            Event::Access { pc, addr, .. }
            | Event::Range { pc, addr, .. }
            | Event::Rmw { pc, addr, .. } => Some(self.attr.attribute(thread, index, pc, addr)),
            _ => {
                self.attr.observe(thread, ev);
                None
            }
        }
    }

    fn observe_run(
        &mut self,
        thread: ThreadId,
        body: &[Event],
        deltas: &[u64],
        reps: u64,
        ids: &mut Vec<u32>,
    ) -> bool {
        let n0 = match self.current {
            Some((t, n)) if t == thread => n,
            _ => self.next.get(&thread).copied().unwrap_or(0),
        };
        let p = body.len() as u64;
        for (j, (ev, &d)) in body.iter().zip(deltas).enumerate() {
            let (Event::Access { pc, addr, .. } | Event::Range { pc, addr, .. }) = *ev else {
                ids.clear();
                return false;
            };
            // iteration k (1..=reps) of body event j is the thread's event n0 + (k - 1) p + j
            let at = |k: u64| Addr(addr.0.wrapping_add(d.wrapping_mul(k)));
            let index = n0 + j as u64;
            match self.attr.attribute_run(thread, index, pc, at(1), at(reps)) {
                Some(id) => ids.push(id),
                None => {
                    ids.clear();
                    return false;
                }
            }
        }
        // the run's events are followed: the thread's next event comes after them
        let n = n0 + reps * p;
        match &mut self.current {
            Some((t, c)) if *t == thread => *c = n,
            cur => {
                if let Some((t, c)) = *cur {
                    self.next.insert(t, c);
                }
                *cur = Some((thread, n));
            }
        }
        true
    }

    fn prefetch(&self, addr: Addr) {
        self.attr.prefetch(addr);
    }

    fn variables(&self) -> Vec<String> {
        self.attr.labels().iter().map(|l| l.base.to_string()).collect()
    }
}

impl Namer for TraceNamer<'_> {
    fn code(&self, pc: Pc) -> CodeName {
        plain(self.names.code(pc))
    }

    fn function(&self, pc: Pc) -> CodeName {
        plain(self.names.entered(pc))
    }

    fn data(&self, addr: Addr) -> Option<DataName> {
        let mut a = self.attr.lock().unwrap_or_else(|e| e.into_inner());
        let a = a.get_or_insert_with(|| {
            let r = self.reader;
            let mut a = attributor(r, self.names).unwrap_or_else(|e| {
                eprintln!("memlens: warning: heap blocks not named: {e:#}");
                let maps = r.meta().maps.as_deref().map(Maps::parse);
                Attributor::new(self.names.symbolizer(), HeapIndex::default(), maps)
            });
            a.set_one_off();
            a
        });
        // the answer leaves as text: the labels need not stay
        a.forget_labels_over(1 << 16);
        let id = a.attribute(ThreadId(u32::MAX), u64::MAX, Pc(0), addr);
        let l = a.label(id);
        if l.kind == Kind::Unknown {
            return None;
        }
        Some(DataName { name: l.display(), variable: l.base.to_string() })
    }

    fn function_start(&self, pc: Pc) -> Option<Pc> {
        known_start(self.names, pc)
    }

    fn access_namer(&self) -> Option<Box<dyn AccessNamer + '_>> {
        match AccessNames::new(self.reader, self.names) {
            Ok(n) => Some(Box::new(n)),
            Err(e) => {
                eprintln!("memlens: warning: accesses not named per variable: {e}");
                None
            }
        }
    }
}

/// An attributor for a trace, naming heap sites by their source line.
pub fn attributor<'a>(r: &TraceReader, names: &'a Names) -> Result<Attributor<'a>, Error> {
    let heap = heap_index(r, names)?;
    let maps = r.meta().maps.as_deref().map(Maps::parse);
    let mut a = Attributor::new(names.symbolizer(), heap, maps);
    a.set_site_namer(move |pc: Pc| site_name(names, pc));
    Ok(a)
}

/// Counters of one label.
pub type VarCounts = LabelCounts;

/// The result of naming every access.
pub struct VarReport {
    /// The labels accessed.
    pub labels: Vec<Label>,
    /// Per label, parallel to `labels`.
    pub by_label: Vec<VarCounts>,
    /// Accesses seen.
    pub accesses: u64,
    /// Accesses whose code address has a source line.
    pub with_line: u64,
    /// Accesses with a variable, field or heap block name.
    pub with_name: u64,
    /// Unnamed accesses by kind of fallback.
    pub unnamed: HashMap<String, u64>,
    /// The heap blocks the accesses were named against.
    pub heap: HeapIndex,
    /// Accesses without a source line, by function (or module when no symbol).
    pub no_line: HashMap<String, u64>,
}

/// How heap blocks are named: `heap(file:line function)`.
fn site_name(names: &Names, pc: Pc) -> String {
    let c = names.code(pc);
    if c.line == 0 {
        c.function.to_string()
    } else {
        let file = c.file.rsplit('/').next().unwrap_or(&c.file).to_string();
        format!("{file}:{} {}", c.line, c.function)
    }
}

/// Names every access of the trace, chunk-parallel on every core or serially,
/// whichever is faster for the trace (see `attribute_trace_auto`; both give the
/// same result). `MEMLENS_NAMES_PARALLEL=0` or `=1` forces one.
pub fn attribute_all(r: &TraceReader, names: &Names, g: Granularity) -> Result<VarReport, Error> {
    let maps = r.meta().maps.as_deref().map(Maps::parse);
    let namer = |pc: Pc| site_name(names, pc);
    let n = std::thread::available_parallelism().map_or(2, |n| n.get());
    let sym = names.symbolizer();
    let alloc_fns = names.alloc_fns();
    let naming =
        crate::Naming { trace: r, sym, maps, site_namer: &namer, granularity: g, alloc_fns };
    let att = match std::env::var("MEMLENS_NAMES_PARALLEL").as_deref() {
        Ok("0") => crate::attribute_trace_serial(naming)?,
        Ok("1") => crate::attribute_trace(naming, n)?,
        _ => crate::attribute_trace_auto(naming, n)?,
    };
    let mut rep = VarReport {
        labels: att.labels,
        by_label: att.counts,
        heap: att.heap,
        accesses: 0,
        with_line: 0,
        with_name: 0,
        unnamed: HashMap::new(),
        no_line: HashMap::new(),
    };
    // Everything that depends on the label alone or the pc alone (names, lines,
    // fallback kinds) is derived once per distinct key, not once per event.
    let mut per_pc: FastMap<Pc, u64> = FastMap::default();
    for (label, c) in rep.labels.iter().zip(&rep.by_label) {
        let n = c.loads + c.stores;
        rep.accesses += n;
        if label.kind.is_named() {
            rep.with_name += n;
        } else {
            *rep.unnamed.entry(label.base.to_string()).or_default() += n;
        }
        for &(pc, k) in &c.pcs {
            *per_pc.entry(pc).or_default() += k;
        }
    }
    for (pc, n) in per_pc {
        if names.code(pc).line != 0 {
            rep.with_line += n;
        } else {
            *rep.no_line.entry(no_line_where(names, pc)).or_default() += n;
        }
    }
    Ok(rep)
}

/// Where an access without a source line comes from: its function and module.
fn no_line_where(names: &Names, pc: Pc) -> String {
    let module = names
        .symbolizer()
        .module_of_pc(pc)
        .map(|m| m.path.rsplit('/').next().unwrap_or(&m.path).to_string())
        .unwrap_or_else(|| "?".into());
    format!("{} [{module}]", names.code(pc).function)
}

/// Rows of `report --by variable`, one per field (`stats.v[3]`) or per whole
/// variable (`stats`; then no label is made per field or element), and with
/// `hint` the [`alloc_fn_hint`] (the text table prints it).
pub fn variable_rows(
    r: &TraceReader,
    names: &Names,
    group: Granularity,
    top: usize,
    hint: bool,
) -> Result<(Vec<serde_json::Value>, Option<String>), Error> {
    let rep = attribute_all(r, names, group)?;
    // the hint from the heap index the naming built (another pass over a trace
    // with allocations everywhere took as long as the naming itself)
    let hint = if hint { alloc_fn_hint_in(&rep.heap, names) } else { None };
    // Rows: labels grouped by name and kind; a row's counters are summed only if it
    // is shown (a heap array of structs has millions of labels, a report 20 rows).
    let mut at: FastMap<(String, Kind), u32> = FastMap::default();
    // per row: accesses and its first label; per label: the next label of its row
    let mut rows: Vec<(u64, u32)> = Vec::new();
    let mut next: Vec<u32> = vec![u32::MAX; rep.labels.len()];
    for (i, (l, c)) in rep.labels.iter().zip(&rep.by_label).enumerate() {
        let n = c.loads + c.stores;
        if n == 0 {
            continue;
        }
        let key = match group {
            Granularity::Field => l.display(),
            Granularity::Variable => l.base.to_string(),
        };
        let r = *at.entry((key, l.kind)).or_insert_with(|| {
            rows.push((0, u32::MAX));
            (rows.len() - 1) as u32
        });
        let row = &mut rows[r as usize];
        row.0 += n;
        next[i] = row.1;
        row.1 = i as u32;
    }
    let mut rows: Vec<((String, Kind), u64, u32)> = {
        let mut keyed: Vec<Option<(String, Kind)>> = vec![None; rows.len()];
        for (k, r) in at {
            keyed[r as usize] = Some(k);
        }
        keyed
            .into_iter()
            .zip(rows)
            .map(|(k, (n, first))| (k.expect("a key per row"), n, first))
            .collect()
    };
    // most accessed first, ties by name: the first `top` rows without sorting all
    let order = |x: &((String, Kind), u64, u32), y: &((String, Kind), u64, u32)| {
        y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0))
    };
    if top < rows.len() {
        rows.select_nth_unstable_by(top, order);
        rows.truncate(top);
    }
    rows.sort_unstable_by(order);
    let out = rows
        .into_iter()
        .map(|((name, kind), _, first)| {
            let mut c = VarCounts::default();
            let mut lines: HashMap<String, u64> = HashMap::new();
            let mut i = first;
            while i != u32::MAX {
                let m = &rep.by_label[i as usize];
                i = next[i as usize];
                c.loads += m.loads;
                c.stores += m.stores;
                c.bytes_read += m.bytes_read;
                c.bytes_written += m.bytes_written;
                for &t in &m.threads {
                    if let Err(p) = c.threads.binary_search(&t) {
                        c.threads.insert(p, t);
                    }
                }
                for &(pc, n) in &m.pcs {
                    let cn = names.code(pc);
                    let file = cn.file.rsplit('/').next().unwrap_or(&cn.file).to_string();
                    *lines.entry(format!("{file}:{}", cn.line)).or_default() += n;
                }
            }
            let mut lines: Vec<_> = lines.into_iter().collect();
            lines.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            lines.truncate(3);
            serde_json::json!({
                "variable": name, "kind": kind.name(), "loads": c.loads, "stores": c.stores,
                "bytes_read": c.bytes_read, "bytes_written": c.bytes_written,
                "threads": c.threads.len(),
                "lines": lines.iter().map(|(l, n)| serde_json::json!({"location": l, "accesses": n})).collect::<Vec<_>>(),
            })
        })
        .collect();
    // The process ends after the report: freeing millions of labels one by one
    // would cost seconds for nothing.
    std::mem::forget(rep);
    Ok((out, hint))
}

/// Attribution coverage figures for `info`.
pub fn coverage(r: &TraceReader) -> Result<serde_json::Value, Error> {
    let names = Names::new(&r.meta().modules);
    // what is named depends on the variable, not the field
    let rep = attribute_all(r, &names, Granularity::Variable)?;
    let pct = |n: u64| {
        if rep.accesses == 0 {
            100.0
        } else {
            (n as f64 * 10000.0 / rep.accesses as f64).round() / 100.0
        }
    };
    // Ties by name, so the output does not depend on hash order.
    let mut unnamed: Vec<_> = rep.unnamed.into_iter().collect();
    unnamed.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    unnamed.truncate(5);
    let mut no_line: Vec<_> = rep.no_line.into_iter().collect();
    no_line.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    no_line.truncate(5);
    Ok(serde_json::json!({
        "accesses": rep.accesses,
        "no_line": no_line.iter().map(|(k, n)| serde_json::json!({"where": k, "accesses": n})).collect::<Vec<_>>(),
        "with_line_pct": pct(rep.with_line),
        "with_name_pct": pct(rep.with_name),
        "unnamed": unnamed.iter().map(|(k, n)| serde_json::json!({"where": k, "accesses": n})).collect::<Vec<_>>(),
    }))
}

/// A hint for `--alloc-fn`: the function of the program (not a library's, not
/// inlined: it has a frame to step over) inside which a quarter or more of the
/// heap's bytes were allocated, called from two or more places, as an
/// allocation wrapper (`xmalloc`, `default_bzalloc`) is. Its blocks are all named
/// after its one call site, so the note says how to name them after its callers.
/// `None` when no function looks like that (or the stacks were not recorded).
pub fn alloc_fn_hint(r: &TraceReader, names: &Names) -> Result<Option<String>, Error> {
    Ok(alloc_fn_hint_in(&heap_index(r, names)?, names))
}

/// [`alloc_fn_hint`] from the heap index of the trace (`names`' `--alloc-fn`s applied).
pub fn alloc_fn_hint_in(heap: &HeapIndex, names: &Names) -> Option<String> {
    let sym = names.symbolizer();
    let exe = sym.modules().first().map(|m| m.id);
    let mut total = 0u64;
    // per function: bytes, its site's location, the places calling it
    let mut per: HashMap<String, (u64, String, std::collections::BTreeSet<Pc>)> = HashMap::new();
    for b in heap.blocks() {
        let bytes = b.end - b.start;
        total += bytes;
        let (Some(f), Some(caller)) = (sym.function_symbol(b.site), b.stack.first()) else {
            continue;
        };
        if sym.module_of_pc(b.site).map(|m| m.id) != exe {
            continue;
        }
        let code = names.code(b.site);
        // an inlined wrapper has no frame: its callers are already the sites
        if code.line == 0 || !f.name.starts_with(&*code.function) {
            continue;
        }
        let e = per.entry(code.function.to_string()).or_insert_with(|| {
            let file = code.file.rsplit('/').next().unwrap_or(&code.file).to_string();
            (0, format!("{file}:{}", code.line), Default::default())
        });
        e.0 += bytes;
        // recursion into itself is not a wrapper's
        if names.code(*caller).function != code.function {
            e.2.insert(*caller);
        }
    }
    let best = per
        .into_iter()
        .filter(|(f, (bytes, _, callers))| f != "main" && callers.len() >= 2 && bytes * 4 >= total)
        .max_by(|a, b| a.1 .0.cmp(&b.1 .0).then_with(|| b.0.cmp(&a.0)));
    best.map(|(f, (bytes, at, callers))| {
        let pct = (bytes as f64 * 100.0 / total.max(1) as f64).round();
        format!(
            "{pct}% of the heap's bytes were allocated in {f} ({at}), called from {} places: \
             if {f} wraps malloc, `--alloc-fn {f}` names those blocks after its callers",
            callers.len()
        )
    })
}
