//! `memlens view TRACE`: build the viewer index next to the trace (once) and serve
//! the web app on 127.0.0.1.

use crate::names::Names;
use anyhow::{Context, Result};
use std::io::Write;
use std::path::PathBuf;

/// What `view` was asked.
pub struct ViewOpts {
    /// The trace.
    pub trace: PathBuf,
    /// Port (0: a free one).
    pub port: u16,
    /// Open a browser.
    pub open: bool,
    /// Rebuild the index even when it is current.
    pub reindex: bool,
    /// Build the index only.
    pub no_serve: bool,
}

/// `memlens view`.
pub fn run(o: ViewOpts) -> Result<i32> {
    let r = crate::inspect::open(&o.trace)?;
    let dir = memlens_view::index_dir(&o.trace);
    if o.reindex || !memlens_view::is_fresh(&o.trace, &dir) {
        let names = Names::new(&r.meta().modules);
        let namer = crate::vars::TraceNamer::new(&r, &names)?;
        let pb = indicatif::ProgressBar::new(0);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "indexing {human_pos}/{human_len} events {wide_bar} {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let t = std::time::Instant::now();
        let meta = memlens_view::build(
            &r,
            &o.trace,
            &dir,
            &namer,
            memlens_view::BuildOptions::default(),
            &mut |n, total| {
                pb.set_length(total.max(n));
                pb.set_position(n);
            },
        )
        .with_context(|| format!("cannot index {}", o.trace.display()))?;
        pb.finish_and_clear();
        eprintln!(
            "memlens: indexed {} memory operations ({} cache lines, {} rows at most) in {:.2} s into {}",
            meta["ops"],
            meta["distinct_lines"],
            meta["max_rows"],
            t.elapsed().as_secs_f64(),
            dir.display()
        );
    }
    if o.no_serve {
        return Ok(0);
    }
    drop(r);
    let index = memlens_view::Index::open(&dir)?;
    let opts = memlens_view::ServeOptions { port: o.port, token: None };
    memlens_view::serve(index, opts, |url| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "memlens view: {url}");
        let _ = out.flush();
        if o.open {
            open_browser(url);
        }
    })?;
    Ok(0)
}

/// Starts the desktop's browser, if there is one; the URL is printed either way.
fn open_browser(url: &str) {
    for b in ["xdg-open", "chromium", "google-chrome", "firefox"] {
        let spawned = std::process::Command::new(b)
            .arg(url)
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
