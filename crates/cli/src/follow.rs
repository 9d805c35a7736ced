//! `memlens analyze KERNEL --follow TRACE`: the kernel over a trace that `memlens
//! record` is still writing. Snapshots go to stderr every `--every`; when the trace
//! is complete (or on Ctrl-C) the result goes to stdout, and for a complete trace it
//! is byte-identical to `memlens analyze KERNEL TRACE` run afterwards.

use crate::analyze::{self, AnalyzeOpts, Every};
use anyhow::{bail, Result};
use memlens_analysis::{DynKernel, KernelInfo, Live, Pipeline, Report, TailState};
use memlens_format::TraceReader;
use memlens_names::Names;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long to wait for the recording to create the trace.
const START_WAIT: Duration = Duration::from_secs(30);
/// Pause between polls when nothing new landed.
const POLL: Duration = Duration::from_millis(100);

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// `analyze --follow`.
pub fn follow(o: &AnalyzeOpts, info: &KernelInfo, every: Every) -> Result<()> {
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t);
    }
    // The filters need the module table, which the runtime writes first.
    let start = Instant::now();
    let r = loop {
        match TraceReader::open(&o.trace) {
            Ok(r) if !r.chunks().is_empty() => break r,
            _ if INTERRUPTED.load(Ordering::Relaxed) => bail!("interrupted"),
            _ if start.elapsed() > START_WAIT => bail!(
                "no trace at {} after {} s: start `memlens record -o {} -- PROG` first (or at the same time)",
                o.trace.display(),
                START_WAIT.as_secs(),
                o.trace.display()
            ),
            _ => std::thread::sleep(POLL),
        }
    };
    let names = analyze::names_for(&r, &o.alloc_fns)?;
    let filter = analyze::build_filter(&names, &r, o)?;
    let kopts = analyze::kernel_options(info, o, &names)?;
    drop(names);
    // order-free sums take chunks as they land, everything else the merged order
    let live = info.follow(&o.trace, &kopts, Pipeline { filter, roi: o.roi })?;
    let rep = follow_loop(o, every, live)?;
    if info.final_offline {
        // Snapshots name data by address; the final result is the offline run on
        // the finished trace, whose namer names each access (one namer, issue 23)
        // and needs the whole trace's heap index.
        return analyze::offline(o, info);
    }
    analyze::write_annotation(o, &*rep)?;
    print_final(o, &*rep)
}

/// Set when the follow loop printed why its result is partial.
static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Polls until the trace is complete, the writer is gone or Ctrl-C; prints
/// snapshots to stderr on the way.
fn follow_loop(
    o: &AnalyzeOpts,
    every: Every,
    mut live: Live<DynKernel>,
) -> Result<Box<dyn Report>> {
    let start = Instant::now();
    let mut last = (start, 0u64);
    let tty = std::io::stderr().is_terminal();
    loop {
        let before = live.source().offset();
        let state = live.poll()?;
        if state == TailState::Complete {
            // the trace is finished: the final result's one warning line says what
            // was damaged or cut (print_final)
            break;
        }
        if INTERRUPTED.load(Ordering::Relaxed) {
            WARNED.store(true, Ordering::Relaxed);
            eprintln!(
                "memlens: interrupted: the result covers the {} events read so far",
                live.events()
            );
            break;
        }
        let grew = live.source().offset() != before;
        if !grew && live.source().writer_gone() {
            // the last chunks may have landed just before the process went away
            live.poll()?;
            WARNED.store(true, Ordering::Relaxed);
            eprintln!(
                "memlens: warning: the recorded process is gone but never finished the trace \
                 (killed with SIGKILL?): the result covers the {} events written",
                live.events()
            );
            break;
        }
        let due = match every {
            Every::Time(d) => last.0.elapsed() >= d,
            Every::Events(n) => live.events() - last.1 >= n,
        };
        if due && live.events() > last.1 {
            last = (Instant::now(), live.events());
            snapshot(o, &live, start, tty)?;
        }
        if !grew {
            std::thread::sleep(POLL);
        }
    }
    Ok(live.finish())
}

/// One snapshot on stderr, named with what the trace holds so far.
fn snapshot(o: &AnalyzeOpts, live: &Live<DynKernel>, start: Instant, tty: bool) -> Result<()> {
    let out = live.snapshot();
    let r = TraceReader::open(&o.trace)?;
    // the globs matched at the start (and warned about then)
    let mut names = Names::new(&r.meta().modules);
    names.set_alloc_fns(&o.alloc_fns)?;
    let namer = memlens_names::TraceNamer::new(&r, &names)?;
    let t = out.render(&namer, &analyze::render_opts(o));
    let mut err = std::io::stderr().lock();
    if tty {
        // redraw in place, like top
        write!(err, "\x1b[H\x1b[2J")?;
    }
    writeln!(
        err,
        "memlens: live {}: {} events after {:.1} s (trace still growing){}",
        o.kernel,
        live.events(),
        start.elapsed().as_secs_f64(),
        if live.replays() > 0 { format!(", {} replays", live.replays()) } else { String::new() }
    )?;
    if o.json {
        serde_json::to_writer(&mut err, &t.to_json())?;
        writeln!(err)?;
    } else {
        write!(err, "{}", t.to_text())?;
    }
    Ok(err.flush()?)
}

/// The result on stdout, named with the whole trace as the offline run names it.
fn print_final(o: &AnalyzeOpts, out: &dyn Report) -> Result<()> {
    // One warning line: the follow loop's (interrupted, writer gone), or else the
    // trace's own (damaged chunks skipped, cut, events dropped).
    let r = if WARNED.load(Ordering::Relaxed) {
        crate::inspect::open_quiet(&o.trace)?
    } else {
        crate::inspect::open(&o.trace)?
    };
    let mut names = Names::new(&r.meta().modules);
    names.set_alloc_fns(&o.alloc_fns)?;
    let namer = memlens_names::TraceNamer::new(&r, &names)?;
    let complete = r.completeness().is_complete();
    analyze::print(out.render(&namer, &analyze::render_opts(o)), o.json, complete)
}
