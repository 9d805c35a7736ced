//! `memlens view TRACE`: build the viewer index next to the trace (once) and serve
//! the web app on 127.0.0.1. `memlens view A B`: the same for both traces, then the
//! diff page (B against A) instead.

use anyhow::{Context, Result};
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What `view` was asked.
pub struct ViewOpts {
    /// The trace, or the two traces to compare (A, B).
    pub traces: Vec<PathBuf>,
    /// Port (0: a free one).
    pub port: u16,
    /// Open a browser.
    pub open: bool,
    /// Rebuild the index even when it is current.
    pub reindex: bool,
    /// Build the index only.
    pub no_serve: bool,
    /// Remove the index only.
    pub clean: bool,
    /// Allocation wrappers (`--alloc-fn` function glob lists).
    pub alloc_fns: Vec<String>,
}

/// `memlens view`.
pub fn run(o: ViewOpts) -> Result<i32> {
    if o.clean {
        for t in &o.traces {
            // The trace itself need not exist any more.
            let dir = memlens_view::index_dir(t);
            match memlens_view::clean(&dir)? {
                Some(n) => eprintln!("memlens: removed {} ({})", dir.display(), human_bytes(n)),
                None => eprintln!("memlens: no index at {}", dir.display()),
            }
        }
        return Ok(0);
    }
    // Every trace opens before anything is indexed: a bad second trace is reported
    // at once, not after the first one's index.
    let readers = o.traces.iter().map(|t| crate::inspect::open(t)).collect::<Result<Vec<_>>>()?;
    for (t, r) in o.traces.iter().zip(&readers) {
        ensure_index(t, r, o.reindex, &o.alloc_fns)?;
    }
    if o.no_serve {
        return Ok(0);
    }
    let mut sources = HashSet::new();
    for r in &readers {
        sources.extend(dwarf_sources(&r.meta().modules));
    }
    drop(readers);
    let opts = memlens_view::ServeOptions { port: o.port, token: None, sources };
    let mut launcher = None;
    let ready = |url: &str| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "memlens view: {url}");
        let _ = out.flush();
        if o.open {
            match Launcher::write(url) {
                Ok(l) => {
                    open_browser(&l.file);
                    launcher = Some(l);
                }
                Err(e) => eprintln!("memlens: {e:#}; open the URL above"),
            }
        }
    };
    match &o.traces[..] {
        [a, b] => {
            let diff = memlens_view::Diff::open(a, b)
                .with_context(|| format!("cannot compare {} with {}", b.display(), a.display()))?;
            memlens_view::serve_diff(diff, opts, ready)?;
        }
        _ => {
            let index = memlens_view::Index::open(&memlens_view::index_dir(&o.traces[0]))?;
            memlens_view::serve(index, opts, ready)?;
        }
    }
    drop(launcher);
    Ok(0)
}

/// Builds `TRACE.mlview/` unless it is current (or `reindex`).
/// An index built with other `--alloc-fn` globs is rebuilt.
fn ensure_index(
    trace: &Path,
    r: &memlens_format::TraceReader,
    reindex: bool,
    alloc_fn_globs: &[String],
) -> Result<()> {
    let dir = memlens_view::index_dir(trace);
    if !reindex
        && memlens_view::is_fresh(trace, &dir)
        && memlens_view::alloc_fn_globs(&dir) == alloc_fn_globs
    {
        return Ok(());
    }
    let names = crate::analyze::names_for(r, alloc_fn_globs)
        .with_context(|| format!("in {}", trace.display()))?;
    let opts = memlens_view::BuildOptions {
        alloc_fns: names.alloc_fns().clone(),
        alloc_fn_globs: alloc_fn_globs.to_vec(),
        ..Default::default()
    };
    let namer = memlens_names::TraceNamer::new(r, &names)?;
    let pb = indicatif::ProgressBar::new(0);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "indexing {human_pos}/{human_len} events {wide_bar} {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let t = std::time::Instant::now();
    let meta = memlens_view::build(r, trace, &dir, &namer, opts, &mut |n, total| {
        pb.set_length(total.max(n));
        pb.set_position(n);
    })
    .with_context(|| format!("cannot index {}", trace.display()))?;
    pb.finish_and_clear();
    eprintln!(
        "memlens: indexed {} memory operations ({} cache lines, {} rows at most) in {:.2} s into {} ({}, {} levels)",
        meta["ops"],
        meta["distinct_lines"],
        meta["max_rows"],
        t.elapsed().as_secs_f64(),
        dir.display(),
        human_bytes(memlens_view::size_of_dir(&dir)),
        meta["levels"].as_array().map_or(0, Vec::len),
    );
    Ok(())
}

/// `1.2 MB`-style sizes for messages.
fn human_bytes(n: u64) -> String {
    match n {
        0..=9_999 => format!("{n} B"),
        10_000..=9_999_999 => format!("{:.1} kB", n as f64 / 1e3),
        _ => format!("{:.1} MB", n as f64 / 1e6),
    }
}

/// Every source file the DWARF of the trace's modules names: the only files the
/// server shows. Recomputed here, at start, because the index beside the trace is
/// a file anyone who can write there could plant.
fn dwarf_sources(modules: &[memlens_format::Module]) -> HashSet<String> {
    let sym = memlens_symbols::Symbolizer::new(modules);
    let mut out = HashSet::new();
    for m in modules {
        if let Ok(files) = sym.module_symbols(m.id).and_then(|ms| ms.source_files()) {
            out.extend(files);
        }
    }
    out
}

/// `--open`: the URL holds the token, and a browser's command line is readable by
/// every user in /proc/PID/cmdline. The browser gets the path of a 0600 file in a
/// fresh 0700 directory instead, a page that redirects to the URL; both go when
/// the server stops.
pub(crate) struct Launcher {
    dir: PathBuf,
    pub(crate) file: PathBuf,
}

impl Launcher {
    pub(crate) fn write(url: &str) -> Result<Launcher> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        // The URL is ours (http://127.0.0.1:PORT/?token=HEX): nothing in it to escape.
        anyhow::ensure!(
            url.bytes().all(|b| b.is_ascii_alphanumeric() || b":/.?=".contains(&b)),
            "unexpected characters in the URL"
        );
        let base = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|d| d.is_absolute() && d.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        // mkdir fails on anything already there (a planted directory or link): try
        // another name a few times.
        let mut dir = None;
        for k in 0..16u32 {
            let d = base.join(format!("memlens-view-{}-{:08x}", std::process::id(), t ^ k));
            match std::fs::DirBuilder::new().mode(0o700).create(&d) {
                Ok(()) => {
                    dir = Some(d);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot create {}", d.display())),
            }
        }
        let dir = dir.with_context(|| format!("no free directory name in {}", base.display()))?;
        let file = dir.join("open.html");
        let l = Launcher { dir, file };
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&l.file)
            .with_context(|| format!("cannot create {}", l.file.display()))?;
        writeln!(
            f,
            "<!doctype html><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url={url}\">\
             <title>memlens view</title><a href=\"{url}\">memlens view</a>"
        )
        .with_context(|| format!("cannot write {}", l.file.display()))?;
        Ok(l)
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Starts the desktop's browser on `page`, if there is one; the URL is printed either way.
pub(crate) fn open_browser(page: &std::path::Path) {
    for b in ["xdg-open", "chromium", "google-chrome", "firefox"] {
        let spawned = std::process::Command::new(b)
            .arg(page)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if spawned.is_ok() {
            return;
        }
    }
    eprintln!("memlens: no browser found (xdg-open, chromium); open the URL above");
}
