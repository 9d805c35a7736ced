//! `record --sink tcp://HOST:PORT` (send the trace to a collector as it is written)
//! and `memlens collect` (receive traces). The work is in crates/stream.

use anyhow::{bail, Context, Result};
use memlens_stream::{Collected, Sender};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// `tcp://HOST:PORT` → `HOST:PORT`.
pub fn parse(sink: &str) -> Result<String> {
    match sink.strip_prefix("tcp://") {
        Some(a)
            if a.rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok()) =>
        {
            Ok(a.to_string())
        }
        _ => bail!("--sink {sink}: expected tcp://HOST:PORT (e.g. tcp://127.0.0.1:7700)"),
    }
}

struct Active {
    addr: String,
    done: Arc<AtomicBool>,
    thread: JoinHandle<(Result<(), memlens_stream::Error>, u64, u64)>,
    local: Option<PathBuf>,
    quiet: bool,
    /// Holds the trace when there is no local copy; removed with it.
    _tmp: Option<crate::cc::TempDir>,
}

static ACTIVE: Mutex<Option<Active>> = Mutex::new(None);

/// Connects to the collector and starts sending the recording's trace as it grows;
/// returns where the recording writes it: `output` when given (a local copy), else a
/// file in a private temporary directory removed by [`finish`]. An unreachable
/// collector is an error before the program runs.
pub fn start(sink: &str, output: Option<&Path>, prog: &str, quiet: bool) -> Result<PathBuf> {
    let addr = parse(sink)?;
    let (tmp, trace) = match output {
        Some(o) => (None, o.to_path_buf()),
        None => {
            let t = crate::cc::TempDir::new()?;
            let p = t.path.join("memlens.trace");
            (Some(t), p)
        }
    };
    let name = Path::new(prog).file_name().map(|n| n.to_string_lossy().into_owned());
    let mut sender =
        Sender::connect(&addr, name.as_deref().unwrap_or("program")).with_context(|| {
            format!(
                "--sink {sink}: no collector there (start `memlens collect --listen {addr}` first)"
            )
        })?;
    let done = Arc::new(AtomicBool::new(false));
    let (d, path) = (done.clone(), trace.clone());
    let thread = std::thread::spawn(move || {
        let r = sender.run(&path, &d);
        (r, sender.chunks, sender.bytes)
    });
    let local = output.map(Path::to_path_buf);
    *ACTIVE.lock().unwrap_or_else(|e| e.into_inner()) =
        Some(Active { addr, done, thread, local, quiet, _tmp: tmp });
    Ok(trace)
}

/// Ends the sending (the recording is over and its header final) and says how it
/// went. Called before `record` exits, whichever way; a second call does nothing.
pub fn finish() {
    let Some(a) = ACTIVE.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
    a.done.store(true, SeqCst);
    let (r, chunks, bytes) = a.thread.join().unwrap_or((Ok(()), 0, 0));
    let kept = match &a.local {
        Some(p) => format!("the local copy {} is complete", p.display()),
        None => "no local copy was kept (give -o to keep one)".into(),
    };
    match r {
        Err(e) => eprintln!(
            "memlens: warning: sink tcp://{}: stopped after {chunks} chunks: {e}; the program ran to its end; {kept}",
            a.addr
        ),
        Ok(()) if !a.quiet => eprintln!(
            "memlens: sent {chunks} chunks ({:.1} MB) to tcp://{}",
            bytes as f64 / 1e6,
            a.addr
        ),
        Ok(()) => {}
    }
}

/// `memlens collect`: receives traces until interrupted, one line per event;
/// with a continuous query, prints its result every period.
pub fn collect(listen: &str, dir: &Path, query: Option<crate::sql::Continuous>) -> Result<i32> {
    if let Some((q, _, _)) = &query {
        // a query that cannot plan fails now, not at every window
        crate::sql::check(q)?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let md = std::fs::symlink_metadata(dir)?;
    if !md.is_dir() {
        bail!("{} is not a directory (a link is refused)", dir.display());
    }
    let l = std::net::TcpListener::bind(listen).with_context(|| {
        format!("cannot listen on {listen} (give a free HOST:PORT; port 0 picks one)")
    })?;
    eprintln!("memlens: collect: listening on {} into {}", l.local_addr()?, dir.display());
    if let Some(q) = query {
        let d = dir.to_path_buf();
        std::thread::spawn(move || crate::sql::continuous(d, q));
    }
    memlens_stream::collect(l, dir, &|e: Collected| match e {
        Collected::Started { peer, path } => {
            eprintln!("memlens: collect: {peer}: receiving {}", path.display())
        }
        Collected::Ended { peer, path, chunks, complete } => eprintln!(
            "memlens: collect: {peer}: {} {} ({chunks} chunks)",
            if complete { "finished" } else { "ended early" },
            path.display()
        ),
        Collected::CutOff { peer, reason } => {
            eprintln!("memlens: collect: {peer}: cut off: {reason}")
        }
    });
    Ok(0)
}
