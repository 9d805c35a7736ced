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

/// Whether a row of `cols` has a recorded value (`memlens record --values`).
fn has_values(cols: &Columns) -> bool {
    !cols.value.is_empty()
        || cols.other.iter().any(|(_, e)| matches!(e, Event::Rmw { value: Some(_), .. }))
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
    let has_values = has_values(cols);
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

/// A chunk's `accesses` rows grouped by pc as segments: each run's iterations of
/// one body row are a segment of steady columns (`seq` and `address` step, the
/// rest repeat), never written out row by row; the other rows are explicit.
#[derive(Debug, Default)]
pub(crate) struct SegRows {
    /// Rows in all.
    pub rows: usize,
    /// The rows in their order: explicit rows of the arenas, or a run's.
    pub segs: Vec<RowSeg>,
    /// The explicit rows' columns, in their order.
    pub seq: Vec<u64>,
    pub clock: Vec<u64>,
    pub size: Vec<u64>,
    pub addr: Vec<u64>,
    pub pc: Vec<u64>,
    /// Every row's kind (0 load, 1 store, 2 read-modify-write) and atomic flag.
    pub kind: Vec<i8>,
    pub atomic: Vec<bool>,
}

/// Consecutive rows of a [`SegRows`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) enum RowSeg {
    /// Explicit rows `at..at + n` of the arenas.
    Rows { at: usize, n: usize },
    /// `n` rows: `seq` and `addr` start at `.0` and step by `.1`; the others repeat.
    Run { n: usize, seq: (u64, u64), addr: (u64, u64), clock: u64, size: u64, pc: u64 },
    #[default]
    Empty,
}

impl RowSeg {
    pub(crate) fn len(&self) -> usize {
        match self {
            RowSeg::Rows { n, .. } | RowSeg::Run { n, .. } => *n,
            RowSeg::Empty => 0,
        }
    }
}

/// Where each group's next explicit row, segment and row go.
struct Places {
    at: Vec<usize>,
    seg: Vec<usize>,
    row: Vec<usize>,
    /// The group's last segment is explicit rows (the next one extends it).
    open: Vec<bool>,
}

impl Places {
    fn explicit(&mut self, out: &mut SegRows, g: usize, v: [u64; 5], kind: i8, atomic: bool) {
        let p = self.at[g];
        self.at[g] += 1;
        [out.seq[p], out.clock[p], out.size[p], out.addr[p], out.pc[p]] = v;
        out.kind[self.row[g]] = kind;
        out.atomic[self.row[g]] = atomic;
        self.row[g] += 1;
        if self.open[g] {
            if let RowSeg::Rows { n, .. } = &mut out.segs[self.seg[g] - 1] {
                *n += 1;
            }
        } else {
            out.segs[self.seg[g]] = RowSeg::Rows { at: p, n: 1 };
            self.seg[g] += 1;
            self.open[g] = true;
        }
    }
}

/// [`access_rows`] grouped by pc, as segments. None when a row has a value or a
/// body holds one pc twice (then [`access_rows`] writes the rows out).
pub(crate) fn access_segs(cols: &Columns, first_clock: u64) -> Option<SegRows> {
    if has_values(cols) {
        return None;
    }
    // Per group: explicit rows, segments, all rows; and whether its last item
    // was explicit (the next explicit row then extends that segment).
    #[derive(Clone, Copy, Default)]
    struct G {
        explicit: usize,
        segs: usize,
        rows: usize,
        open: bool,
    }
    let mut groups = Groups::default();
    let mut gs: Vec<G> = Vec::new();
    let mut of_row = Vec::with_capacity(cols.len());
    let mut twice = false;
    let explicit = |gs: &mut Vec<G>, g: u32| {
        if gs.len() <= g as usize {
            gs.resize(g as usize + 1, G::default());
        }
        let x = &mut gs[g as usize];
        x.explicit += 1;
        x.rows += 1;
        if !x.open {
            x.segs += 1;
            x.open = true;
        }
    };
    walk(cols, |it| match it {
        Item::Row(i) => {
            let g = groups.id(cols.pc[i]);
            of_row.push(g);
            explicit(&mut gs, g);
        }
        Item::Run(r) => {
            let body = &of_row[r.row - r.events..r.row];
            for (j, &g) in body.iter().enumerate() {
                twice |= body[..j].contains(&g);
                let x = &mut gs[g as usize];
                x.segs += 1;
                x.rows += r.reps as usize;
                x.open = false;
            }
        }
        Item::Other(_, Event::Rmw { pc, .. }) => explicit(&mut gs, groups.id(pc.0)),
        Item::Other(..) => {}
    });
    if twice {
        return None;
    }
    // each group's first explicit row, segment and row
    let (mut at, mut seg, mut row) = (Vec::new(), Vec::new(), Vec::new());
    let (mut a, mut s, mut r) = (0, 0, 0);
    for g in &gs {
        at.push(a);
        seg.push(s);
        row.push(r);
        a += g.explicit;
        s += g.segs;
        r += g.rows;
    }
    let mut out = SegRows {
        rows: r,
        segs: vec![RowSeg::Empty; s],
        seq: vec![0; a],
        clock: vec![0; a],
        size: vec![0; a],
        addr: vec![0; a],
        pc: vec![0; a],
        kind: vec![0; r],
        atomic: vec![false; r],
    };
    let mut clock = first_clock;
    let mut pl = Places { at, seg, row, open: vec![false; gs.len()] };
    walk(cols, |it| match it {
        Item::Row(i) => {
            let g = of_row[i] as usize;
            let v = [cols.seq[i], clock, cols.size[i], cols.addr[i], cols.pc[i]];
            let k = cols.kind[i];
            pl.explicit(
                &mut out,
                g,
                v,
                i8::from(k & Columns::WRITE != 0),
                k & Columns::ATOMIC != 0,
            );
        }
        Item::Run(r) => {
            let body = r.row - r.events..r.row;
            let deltas = cols.deltas(r);
            for (j, b) in body.enumerate() {
                let g = of_row[b] as usize;
                let n = r.reps as usize;
                let d = deltas[j];
                out.segs[pl.seg[g]] = RowSeg::Run {
                    n,
                    seq: (r.seq + j as u64, r.events as u64),
                    addr: (cols.addr[b].wrapping_add(d), d),
                    clock,
                    size: cols.size[b],
                    pc: cols.pc[b],
                };
                pl.seg[g] += 1;
                pl.open[g] = false;
                let k = cols.kind[b];
                let rows = pl.row[g]..pl.row[g] + n;
                out.kind[rows.clone()].fill(i8::from(k & Columns::WRITE != 0));
                out.atomic[rows].fill(k & Columns::ATOMIC != 0);
                pl.row[g] += n;
            }
        }
        Item::Other(_, Event::Clock(v)) => clock = *v,
        Item::Other(s, Event::Rmw { pc, addr, size, .. }) => {
            let g = groups.id(pc.0) as usize;
            pl.explicit(&mut out, g, [s, clock, u64::from(*size), addr.0, pc.0], 2, true);
        }
        Item::Other(..) => {}
    });
    Some(out)
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
    fn segments_are_the_rows_grouped_by_pc() {
        let ev = stream();
        let cols = decoded(&ev);
        let segs = access_segs(&cols, 0).expect("no values, no pc twice in a body");
        assert!(segs.segs.iter().any(|s| matches!(s, RowSeg::Run { .. })));
        assert!(segs.seq.len() * 2 < segs.rows, "the runs are not written out");
        let mut got = Vec::new();
        for s in &segs.segs {
            match *s {
                RowSeg::Rows { at, n } => {
                    for p in at..at + n {
                        got.push((
                            segs.seq[p],
                            segs.clock[p],
                            segs.size[p],
                            segs.addr[p],
                            segs.pc[p],
                        ));
                    }
                }
                RowSeg::Run { n, seq, addr, clock, size, pc } => {
                    for i in 0..n as u64 {
                        let a = addr.0.wrapping_add(addr.1.wrapping_mul(i));
                        got.push((seq.0 + seq.1 * i, clock, size, a, pc));
                    }
                }
                RowSeg::Empty => panic!("a segment left empty"),
            }
        }
        let rows = access_rows(&cols, 0, true);
        let want: Vec<_> = (0..rows.seq.len())
            .map(|i| (rows.seq[i], rows.clock[i], rows.size[i], rows.addr[i], rows.pc[i]))
            .collect();
        assert_eq!(got, want);
        assert_eq!((segs.kind, segs.atomic), (rows.kind, rows.atomic));
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
