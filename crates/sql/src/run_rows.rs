//! A chunk's `accesses` rows written out from its loops' runs, for the export.
//!
//! A trace recorded by `memlens cc` keeps a loop's iterations as runs (a body
//! and its address deltas). The export wants each instruction's rows together
//! (a loop's instruction steps by a steady stride, which delta packing stores
//! in a few bits a row): decoding every run into rows in recorded order and
//! then gathering each column by instruction misses the cache on every row
//! (a third of a loop-dense export). Here each run's rows are written straight
//! to their place, one sequential stream per body row, and no column is ever
//! gathered.

use memlens_format::codec::{Columns, Run};
use memlens_format::Event;
use std::collections::HashMap;

/// The `accesses` columns of one chunk (every row, read-modify-writes included).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct AccessRows {
    pub seq: Vec<u64>,
    pub clock: Vec<u64>,
    /// 0 load, 1 store, 2 read-modify-write (`tables::ACCESS_KINDS`).
    pub kind: Vec<i8>,
    pub size: Vec<u64>,
    pub addr: Vec<u64>,
    pub pc: Vec<u64>,
    /// Empty when no row has a value.
    pub value: Vec<Option<u64>>,
    pub atomic: Vec<bool>,
}

/// One source of rows in stream order.
enum Item<'a> {
    Row(usize),
    Run(&'a Run),
    Other(u64, &'a Event),
}

/// Visits `cols`' rows, runs and other events in stream order.
fn walk<'a>(cols: &'a Columns, mut f: impl FnMut(Item<'a>)) {
    let mut other = cols.other.iter().peekable();
    let mut runs = cols.runs.iter().peekable();
    let n = cols.len();
    for i in 0..=n {
        while let Some(r) = runs.next_if(|r| r.row == i) {
            while let Some((s, e)) = other.next_if(|(s, _)| *s < r.seq) {
                f(Item::Other(*s, e));
            }
            f(Item::Run(r));
        }
        if i == n {
            break;
        }
        while let Some((s, e)) = other.next_if(|(s, _)| *s < cols.seq[i]) {
            f(Item::Other(*s, e));
        }
        f(Item::Row(i));
    }
    for (s, e) in other {
        f(Item::Other(*s, e));
    }
}

/// Group ids by pc, in order of first appearance (a loop's few pcs hit a small
/// cache before the map).
#[derive(Default)]
struct Groups {
    ids: HashMap<u64, u32>,
    cache: Vec<(u64, u32)>,
}

impl Groups {
    fn id(&mut self, pc: u64) -> u32 {
        if self.cache.is_empty() {
            self.cache = vec![(u64::MAX, 0); 64];
        }
        let slot = &mut self.cache[((pc ^ (pc >> 6)) & 63) as usize];
        if slot.0 == pc {
            return slot.1;
        }
        let next = self.ids.len() as u32;
        let id = *self.ids.entry(pc).or_insert(next);
        *slot = (pc, id);
        id
    }
}

/// Every access row of `cols` (decoded with [`Columns::keep_runs`]), runs written
/// out, each row's `clock` the last clock event before it (`first_clock` before
/// any). `grouped`: rows ordered by pc (in order of first appearance), each pc's
/// rows in `seq` order; else in `seq` order.
pub(crate) fn access_rows(cols: &Columns, first_clock: u64, grouped: bool) -> AccessRows {
    let n = cols.len();
    // the group of each row (0 for all when not grouped) and each group's rows
    let mut groups = Groups::default();
    let mut group = |pc: u64| if grouped { groups.id(pc) } else { 0 };
    let mut of_row = Vec::with_capacity(n);
    let mut counts: Vec<u64> = Vec::new();
    let add = |counts: &mut Vec<u64>, g: u32, k: u64| {
        if counts.len() <= g as usize {
            counts.resize(g as usize + 1, 0);
        }
        counts[g as usize] += k;
    };
    let mut rmw_groups = Vec::new();
    walk(cols, |it| match it {
        Item::Row(i) => {
            let g = group(cols.pc[i]);
            of_row.push(g);
            add(&mut counts, g, 1);
        }
        Item::Run(r) => {
            for &g in &of_row[r.row - r.events..r.row] {
                add(&mut counts, g, r.reps);
            }
        }
        Item::Other(_, Event::Rmw { pc, .. }) => {
            let g = group(pc.0);
            rmw_groups.push(g);
            add(&mut counts, g, 1);
        }
        Item::Other(..) => {}
    });
    let total: u64 = counts.iter().sum();
    let total = total as usize;
    let mut next = Vec::with_capacity(counts.len());
    let mut at = 0u64;
    for &c in &counts {
        next.push(at);
        at += c;
    }
    let has_values = !cols.value.is_empty()
        || cols.other.iter().any(|(_, e)| matches!(e, Event::Rmw { value: Some(_), .. }));
    let mut out = AccessRows {
        seq: vec![0; total],
        clock: vec![0; total],
        kind: vec![0; total],
        size: vec![0; total],
        addr: vec![0; total],
        pc: vec![0; total],
        value: if has_values { vec![None; total] } else { Vec::new() },
        atomic: vec![false; total],
    };
    let kind_of = |k: u8| i8::from(k & Columns::WRITE != 0);
    let value_of = |i: usize| {
        (cols.kind[i] & Columns::VALUE != 0).then(|| cols.value.get(i).copied().unwrap_or(0))
    };
    let mut clock = first_clock;
    let mut rmw = rmw_groups.into_iter();
    // per body row of a run: (its group's rows per iteration, its slot among them)
    let mut body: Vec<(u64, u64)> = Vec::new();
    walk(cols, |it| match it {
        Item::Row(i) => {
            let g = of_row[i] as usize;
            let p = next[g] as usize;
            next[g] += 1;
            out.seq[p] = cols.seq[i];
            out.clock[p] = clock;
            out.kind[p] = kind_of(cols.kind[i]);
            out.size[p] = cols.size[i];
            out.addr[p] = cols.addr[i];
            out.pc[p] = cols.pc[i];
            out.atomic[p] = cols.kind[i] & Columns::ATOMIC != 0;
            if has_values {
                out.value[p] = value_of(i);
            }
        }
        Item::Run(r) => {
            let rows = r.row - r.events..r.row;
            let gs = &of_row[rows.clone()];
            // a pc twice in one body (or every row in one group): its rows interleave
            body.clear();
            for (j, &g) in gs.iter().enumerate() {
                let before = gs[..j].iter().filter(|&&h| h == g).count() as u64;
                let all = before + gs[j..].iter().filter(|&&h| h == g).count() as u64;
                body.push((all, before));
            }
            let deltas = cols.deltas(r);
            let k = r.events as u64;
            if !grouped {
                // recorded order: iteration after iteration, each a copy of the body
                // with its addresses moved
                let start = next[0] as usize;
                let (ev, body_rows) = (r.events, rows.clone());
                for i in 0..r.reps as usize {
                    let at = start + i * ev;
                    let m = i as u64 + 1;
                    for (j, b) in body_rows.clone().enumerate() {
                        let p = at + j;
                        out.seq[p] = r.seq + (i * ev + j) as u64;
                        out.addr[p] = cols.addr[b].wrapping_add(deltas[j].wrapping_mul(m));
                    }
                    out.clock[at..at + ev].fill(clock);
                    out.size[at..at + ev].copy_from_slice(&cols.size[body_rows.clone()]);
                    out.pc[at..at + ev].copy_from_slice(&cols.pc[body_rows.clone()]);
                    for (j, b) in body_rows.clone().enumerate() {
                        out.kind[at + j] = kind_of(cols.kind[b]);
                        out.atomic[at + j] = cols.kind[b] & Columns::ATOMIC != 0;
                        if has_values {
                            out.value[at + j] = value_of(b);
                        }
                    }
                }
                next[0] += r.reps * k;
                return;
            }
            for (j, b) in rows.enumerate() {
                let g = gs[j] as usize;
                let (step, slot) = body[j];
                let start = (next[g] + slot) as usize;
                let step = step as usize;
                let reps = r.reps as usize;
                let (d, a0) = (deltas[j], cols.addr[b]);
                let s0 = r.seq + j as u64;
                let places = (0..reps).map(|i| start + i * step);
                if step == 1 {
                    // the common case: one sequential stream per column
                    let span = start..start + reps;
                    for (x, i) in out.seq[span.clone()].iter_mut().zip(0u64..) {
                        *x = s0 + i * k;
                    }
                    let mut a = a0;
                    for x in out.addr[span.clone()].iter_mut() {
                        a = a.wrapping_add(d);
                        *x = a;
                    }
                    out.clock[span.clone()].fill(clock);
                    out.kind[span.clone()].fill(kind_of(cols.kind[b]));
                    out.size[span.clone()].fill(cols.size[b]);
                    out.pc[span.clone()].fill(cols.pc[b]);
                    out.atomic[span.clone()].fill(cols.kind[b] & Columns::ATOMIC != 0);
                    if has_values {
                        out.value[span].fill(value_of(b));
                    }
                } else {
                    for (i, p) in places.enumerate() {
                        out.seq[p] = s0 + i as u64 * k;
                        out.addr[p] = a0.wrapping_add(d.wrapping_mul(i as u64 + 1));
                        out.clock[p] = clock;
                        out.kind[p] = kind_of(cols.kind[b]);
                        out.size[p] = cols.size[b];
                        out.pc[p] = cols.pc[b];
                        out.atomic[p] = cols.kind[b] & Columns::ATOMIC != 0;
                        if has_values {
                            out.value[p] = value_of(b);
                        }
                    }
                }
            }
            for (j, &g) in gs.iter().enumerate() {
                if body[j].1 == 0 {
                    next[g as usize] += r.reps * body[j].0;
                }
            }
        }
        Item::Other(_, Event::Clock(v)) => clock = *v,
        Item::Other(s, Event::Rmw { pc, addr, size, value, .. }) => {
            let g = rmw.next().unwrap_or(0) as usize;
            let p = next[g] as usize;
            next[g] += 1;
            out.seq[p] = s;
            out.clock[p] = clock;
            out.kind[p] = 2;
            out.size[p] = u64::from(*size);
            out.addr[p] = addr.0;
            out.pc[p] = pc.0;
            out.atomic[p] = true;
            if has_values {
                out.value[p] = *value;
            }
        }
        Item::Other(..) => {}
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlens_format::codec::{Decoder, Encoder, Folder, Streams};
    use memlens_format::{AccessKind, Addr, Pc, RmwOp};

    /// A stream of loops (folded into runs by the writer's folder), random
    /// accesses, clocks and read-modify-writes.
    fn stream() -> Vec<Event> {
        let mut ev = Vec::new();
        let mut x = 7u64;
        let acc = |pc: u64, addr: u64, kind| Event::Access {
            pc: Pc(pc),
            addr: Addr(addr),
            size: 8,
            kind,
            atomic: false,
            value: None,
        };
        for round in 0..6u64 {
            ev.push(Event::Clock(1000 + round));
            for i in 0..3000u64 {
                ev.push(acc(0x400, 0x10_0000 + i * 8, AccessKind::Read));
                ev.push(acc(0x408, 0x20_0000 + i * 64, AccessKind::Read));
                ev.push(acc(0x410, 0x30_0000 + i * 8, AccessKind::Write));
            }
            // one instruction twice an iteration (the folder leaves it as rows)
            for i in 0..2000u64 {
                ev.push(acc(0x600, 0x50_0000 + i * 16, AccessKind::Read));
                ev.push(acc(0x600, 0x60_0000 + i * 16, AccessKind::Read));
            }
            for _ in 0..500 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ev.push(acc(0x500 + (x & 3) * 8, x & 0xff_fff8, AccessKind::Read));
            }
            ev.push(Event::Rmw {
                pc: Pc(0x408),
                addr: Addr(0x40_0000),
                size: 4,
                op: RmwOp::FetchAdd,
                value: None,
            });
        }
        ev
    }

    /// Each row as (seq, clock, kind, size, addr, pc, atomic), from the events.
    fn expected(ev: &[Event]) -> Vec<(u64, u64, i8, u64, u64, u64, bool)> {
        let mut clock = 0;
        let mut out = Vec::new();
        for (s, e) in ev.iter().enumerate() {
            match e {
                Event::Clock(v) => clock = *v,
                Event::Access { pc, addr, size, kind, atomic, .. } => out.push((
                    s as u64,
                    clock,
                    i8::from(*kind == AccessKind::Write),
                    u64::from(*size),
                    addr.0,
                    pc.0,
                    *atomic,
                )),
                Event::Rmw { pc, addr, size, .. } => {
                    out.push((s as u64, clock, 2, u64::from(*size), addr.0, pc.0, true))
                }
                _ => {}
            }
        }
        out
    }

    fn rows(r: &AccessRows) -> Vec<(u64, u64, i8, u64, u64, u64, bool)> {
        (0..r.seq.len())
            .map(|i| (r.seq[i], r.clock[i], r.kind[i], r.size[i], r.addr[i], r.pc[i], r.atomic[i]))
            .collect()
    }

    fn decoded(ev: &[Event]) -> Columns {
        let mut enc = Encoder::new();
        let mut st = Streams::new();
        for e in ev {
            enc.push(&mut st, e);
        }
        let mut folder = Folder::new();
        let raw = match folder.fold(&st.ops, &st.side) {
            Some(f) => f.to_raw(),
            None => panic!("the loops fold"),
        };
        let mut cols = Columns { keep_runs: true, ..Columns::default() };
        let mut dec = Decoder::new(&raw[..]);
        while dec.decode_columns(&mut cols, 1 << 20).expect("decodes") > 0 {}
        cols
    }

    #[test]
    fn runs_written_out_in_order_are_the_events() {
        let ev = stream();
        let cols = decoded(&ev);
        assert_eq!(cols.runs.len(), 6, "the loops are runs: {:?}", cols.runs);
        assert_eq!(rows(&access_rows(&cols, 0, false)), expected(&ev));
    }

    #[test]
    fn runs_grouped_by_pc_keep_each_pcs_rows_in_seq_order() {
        let ev = stream();
        let cols = decoded(&ev);
        let got = rows(&access_rows(&cols, 0, true));
        let mut want = expected(&ev);
        // pcs in order of first appearance, each one's rows by seq
        let mut first = HashMap::new();
        for r in &want {
            let n = first.len();
            first.entry(r.5).or_insert(n);
        }
        want.sort_by_key(|r| (first[&r.5], r.0));
        assert_eq!(got, want);
    }
}
