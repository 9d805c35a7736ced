//! `callgrind.out`: per-line costs and the call graph with inclusive costs, for
//! KCachegrind and `callgrind_annotate`.
//!
//! Events (`events: Dr Dw Rb Wb`): loads and stores as `memlens report` counts
//! them, and the bytes they read and wrote. All threads are summed, as callgrind
//! does without `--separate-threads`.
//!
//! - Self costs go to the function of the innermost open call, as callgrind
//!   does, at the file and line that `Namer::code` gives the access's code
//!   address (`fi=` when that is another file: inlined code). Outside any
//!   recorded call they go to the code address's own function. Without inlining
//!   this is `memlens report --by function`; with it, report names the inlined
//!   function and callgrind its caller, so that every operation is inside the
//!   inclusive cost of each function on the stack when it happened.
//! - Each call (a `FuncEnter`/`FuncExit` pair) becomes a `cfn=`/`calls=` record
//!   in its caller's block, at the line of its call site, carrying the memory
//!   operations its thread made while the call was open (callees included).
//! - A recursive call (its function already open on the thread) is counted in
//!   `calls=` but carries no cost: its operations are already in the outermost
//!   open call of that function. So a function's inclusive cost — the sum of the
//!   costs of the calls to it, as callgrind_annotate and KCachegrind add them —
//!   is the memory operations made while it was on the stack, each counted once,
//!   never above 100 %. (callgrind itself counts every level again.)
//!
//! Counters are kept per code address and per (caller, call site, callee) while
//! the trace streams by, then named and written with name compression
//! (`fl=(1) file`, later `fl=(1)`).

use crate::frames::Frames;
use crate::{DynNamer, Error, Summary};
use memlens_format::{Event, Pc, TraceReader};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufWriter, Write};

/// Dr Dw Rb Wb.
type Costs = [u64; 4];

fn add(a: &mut Costs, b: &Costs) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

fn sub(a: &Costs, b: &Costs) -> Costs {
    std::array::from_fn(|i| a[i] - b[i])
}

/// One open call of a thread.
struct Open {
    frame: u32,
    site: Pc,
    /// The thread's counters at the entry.
    at: Costs,
}

/// Calls of one callee from one call site of one caller.
#[derive(Default)]
struct CallCost {
    count: u64,
    inclusive: Costs,
}

/// The call records, and per frame how many calls of it the current thread has
/// open.
#[derive(Default)]
struct Calls {
    by_key: HashMap<(u32, Pc, u32), CallCost>,
    open: Vec<u32>,
}

impl Calls {
    fn enter(&mut self, frame: u32) {
        let f = frame as usize;
        if self.open.len() <= f {
            self.open.resize(f + 1, 0);
        }
        self.open[f] += 1;
    }

    fn close(&mut self, o: Open, now: &Costs, caller: Option<&Open>) {
        let n = &mut self.open[o.frame as usize];
        *n -= 1;
        let recursive = *n > 0;
        // a call with no recorded caller (the thread's outermost) has no call record
        if let Some(caller) = caller {
            let c = self.by_key.entry((caller.frame, o.site, o.frame)).or_default();
            c.count += 1;
            if !recursive {
                add(&mut c.inclusive, &sub(now, &o.at));
            }
        }
    }
}

/// A source position: file and line.
type Pos = (String, u32);

/// A function's block: self costs per position, calls per (position, callee frame).
#[derive(Default)]
struct Block {
    lines: BTreeMap<Pos, Costs>,
    calls: BTreeMap<(Pos, u32), CallCost>,
}

/// Name compression: `(id) name` the first time, `(id)` after.
#[derive(Default)]
struct Compressed {
    ids: HashMap<String, usize>,
}

impl Compressed {
    fn name(&mut self, s: &str) -> String {
        if let Some(i) = self.ids.get(s) {
            return format!("({i})");
        }
        let i = self.ids.len() + 1;
        self.ids.insert(s.to_string(), i);
        // a newline would end the line early
        format!("({i}) {}", s.replace('\n', " "))
    }
}

fn file_name(f: &str) -> &str {
    if f.is_empty() {
        "???"
    } else {
        f
    }
}

/// Writes per-line costs and the call graph in callgrind's output format.
pub fn callgrind(r: &TraceReader, namer: DynNamer<'_>, out: impl Write) -> Result<Summary, Error> {
    let mut frames = Frames::new(namer);
    // self costs per (innermost open call's frame, code address)
    let mut by_pc: HashMap<(Option<u32>, Pc), Costs> = HashMap::new();
    let mut calls = Calls::default();
    let mut total: Costs = [0; 4];
    let mut sum = Summary::default();
    for s in r.streams() {
        sum.threads += 1;
        let mut now: Costs = [0; 4];
        let mut stack: Vec<Open> = Vec::new();
        for ev in r.events(s.thread) {
            let ev = ev?;
            match &ev {
                Event::FuncEnter { pc, call_site, .. } => {
                    let frame = frames.of(*pc);
                    calls.enter(frame);
                    stack.push(Open { frame, site: *call_site, at: now });
                    sum.calls += 1;
                }
                Event::FuncExit { .. } => {
                    // An exit without a recorded entry (tracing began inside it) is dropped.
                    if let Some(o) = stack.pop() {
                        calls.close(o, &now, stack.last());
                    }
                }
                Event::ThreadExit => {
                    while let Some(o) = stack.pop() {
                        calls.close(o, &now, stack.last());
                    }
                }
                e => {
                    let Some(pc) = e.pc() else { continue };
                    let (l, st) = e.loads_stores();
                    if l + st == 0 {
                        continue;
                    }
                    let (br, bw) = e.bytes_read_written();
                    let c = [l, st, br, bw];
                    add(&mut now, &c);
                    let top = stack.last().map(|o| o.frame);
                    add(by_pc.entry((top, pc)).or_default(), &c);
                }
            }
        }
        while let Some(o) = stack.pop() {
            calls.close(o, &now, stack.last());
        }
        add(&mut total, &now);
    }

    // (file, function) -> block; BTreeMaps give a stable, sorted file.
    let mut blocks: BTreeMap<(String, String), Block> = BTreeMap::new();
    let fname = |frames: &Frames<'_>, f: u32| -> (String, String) {
        let fr = frames.get(f);
        let name: String = serde_json::from_str(&fr.json_name).unwrap_or_default();
        (file_name(&fr.file).to_string(), name)
    };
    for ((top, pc), c) in &by_pc {
        let n = namer.code(*pc);
        let pos = (file_name(&n.file).to_string(), n.line);
        let func = match top {
            Some(f) => fname(&frames, *f),
            None => (pos.0.clone(), n.function),
        };
        add(blocks.entry(func).or_default().lines.entry(pos).or_default(), c);
    }
    for ((caller, site, callee), c) in calls.by_key {
        // a return address: its call instruction is the byte before
        let pos = match site.0 {
            0 => (frames.get(caller).file.clone(), 0),
            s => {
                let n = namer.code(Pc(s - 1));
                (n.file, n.line)
            }
        };
        let pos = (file_name(&pos.0).to_string(), pos.1);
        let b = blocks.entry(fname(&frames, caller)).or_default();
        let e = b.calls.entry((pos, callee)).or_default();
        e.count += c.count;
        add(&mut e.inclusive, &c.inclusive);
    }

    let mut out = BufWriter::new(out);
    writeln!(out, "# callgrind format")?;
    writeln!(out, "version: 1")?;
    writeln!(out, "creator: memlens")?;
    writeln!(out, "pid: {}", r.header().pid)?;
    writeln!(out, "cmd: {}", crate::command(r).replace('\n', " "))?;
    writeln!(out, "positions: line")?;
    writeln!(out, "event: Dr : loads")?;
    writeln!(out, "event: Dw : stores")?;
    writeln!(out, "event: Rb : bytes read")?;
    writeln!(out, "event: Wb : bytes written")?;
    writeln!(out, "events: Dr Dw Rb Wb")?;
    let (mut fl, mut fnames) = (Compressed::default(), Compressed::default());
    let costs = |c: &Costs| format!("{} {} {} {}", c[0], c[1], c[2], c[3]);
    for ((file, func), b) in &blocks {
        writeln!(out, "\nfl={}", fl.name(file))?;
        writeln!(out, "fn={}", fnames.name(func))?;
        sum.frames += 1;
        // `fi=`: lines of another file (inlined code) inside this function
        let mut cur = file;
        for ((f, line), c) in &b.lines {
            if f != cur {
                writeln!(out, "fi={}", fl.name(f))?;
                cur = f;
            }
            writeln!(out, "{line} {}", costs(c))?;
        }
        for (((f, line), callee), c) in &b.calls {
            if f != cur {
                writeln!(out, "fi={}", fl.name(f))?;
                cur = f;
            }
            let (cfile, cfunc) = fname(&frames, *callee);
            writeln!(out, "cfl={}", fl.name(&cfile))?;
            writeln!(out, "cfn={}", fnames.name(&cfunc))?;
            writeln!(out, "calls={} {}", c.count, frames.get(*callee).line)?;
            writeln!(out, "{line} {}", costs(&c.inclusive))?;
        }
    }
    writeln!(out, "\ntotals: {}", costs(&total))?;
    out.flush()?;
    sum.operations = total[0] + total[1];
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use memlens_format::Addr;

    fn call(pc: u64, site: u64) -> Event {
        Event::FuncEnter { pc: Pc(pc), call_site: Pc(site), frame: Addr(0) }
    }

    /// The export of `streams` after its header (from the first cost line on).
    fn body(streams: &[(u32, Vec<Event>)]) -> (String, Summary) {
        let mut out = Vec::new();
        let s = callgrind(&trace(streams), &ByPc, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        (text.split_once("events: Dr Dw Rb Wb\n").unwrap().1.to_string(), s)
    }

    #[test]
    fn calls_carry_inclusive_costs_at_their_call_site() {
        // f1 (entry line 1) calls f2 twice from line 5 and f3 once from line 6;
        // f3 calls f2 from line 9 (in f3).
        let t0 = vec![
            call(0x101, 0),
            wr(0x102, 0x1000),
            call(0x201, 0x106), // return address: line 6, call on line 5
            rd(0x203, 0x1000),
            rd(0x203, 0x1008),
            exit(),
            call(0x201, 0x106),
            rd(0x203, 0x1000),
            exit(),
            call(0x301, 0x107),
            wr(0x304, 0x2000),
            call(0x201, 0x30a),
            rd(0x203, 0x1000),
            exit(),
            exit(),
            exit(),
            exit(), // stray: dropped
        ];
        // open at the end: closed there
        let t1 = vec![start(101, "w"), call(0x301, 0), wr(0x304, 0x2000)];
        let (body, s) = body(&[(0, t0), (1, t1)]);
        assert_eq!(
            body,
            "\nfl=(1) /src/f.c\nfn=(1) f1\n2 0 1 0 8\n\
             cfl=(1)\ncfn=(2) f2\ncalls=2 1\n5 3 0 24 0\n\
             cfl=(1)\ncfn=(3) f3\ncalls=1 1\n6 1 1 8 8\n\
             \nfl=(1)\nfn=(2)\n3 4 0 32 0\n\
             \nfl=(1)\nfn=(3)\n4 0 2 0 16\n\
             cfl=(1)\ncfn=(2)\ncalls=1 1\n9 1 0 8 0\n\
             \ntotals: 4 3 32 24\n"
        );
        assert_eq!((s.threads, s.calls, s.frames, s.operations), (2, 6, 3, 7));
    }

    #[test]
    fn recursive_calls_count_their_operations_once() {
        // f1 → f2 (line 5) → f2 (line 9) → f2 (line 9), one load at each level
        let evs = vec![
            call(0x101, 0),
            call(0x201, 0x106),
            rd(0x203, 0x1000),
            call(0x201, 0x20a),
            rd(0x203, 0x1000),
            call(0x201, 0x20a),
            rd(0x203, 0x1000),
            exit(),
            exit(),
            exit(),
            exit(),
        ];
        let (body, _) = body(&[(0, evs)]);
        assert_eq!(
            body,
            "\nfl=(1) /src/f.c\nfn=(1) f1\n\
             cfl=(1)\ncfn=(2) f2\ncalls=1 1\n5 3 0 24 0\n\
             \nfl=(1)\nfn=(2)\n3 3 0 24 0\n\
             cfl=(1)\ncfn=(2)\ncalls=2 1\n9 0 0 0 0\n\
             \ntotals: 3 0 24 0\n"
        );
    }

    #[test]
    fn inlined_code_counts_in_the_open_call_and_outside_calls_by_its_address() {
        // in f1, an access at code of h.h (function f18: inlined); before any
        // call, one at f2's code
        let evs = vec![rd(0x203, 0x1000), call(0x101, 0), rd(0x1205, 0x1000), exit()];
        let (body, _) = body(&[(0, evs)]);
        assert_eq!(
            body,
            "\nfl=(1) /src/f.c\nfn=(1) f1\nfi=(2) /src/h.h\n5 1 0 8 0\n\
             \nfl=(1)\nfn=(2) f2\n3 1 0 8 0\n\ntotals: 2 0 16 0\n"
        );
    }
}
