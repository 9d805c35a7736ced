//! `memlens analyze KERNEL`: run one of the analysis kernels over a trace.

use anyhow::{bail, Context, Result};
use memlens_analysis::cachesim::{CacheConfig, CacheReport};
use memlens_analysis::registry::{self, KernelInfo, KernelOption};
use memlens_analysis::{Filter, KernelOptions, Pipeline, RenderOpts, Report, WindowBasis};
use memlens_format::{Addr, Pc, ThreadId, TraceReader};
use memlens_names::Names;
use std::io::Write;
use std::path::PathBuf;

/// What `analyze` was asked (validated CLI arguments).
pub struct AnalyzeOpts {
    /// Kernel name.
    pub kernel: String,
    /// The trace.
    pub trace: PathBuf,
    /// JSON output.
    pub json: bool,
    /// Rows per section.
    pub top: usize,
    /// Extra sections.
    pub verbose: bool,
    /// Only these threads.
    pub threads: Vec<u32>,
    /// Only code in functions matching these globs.
    pub functions: Vec<String>,
    /// Only code in source files matching these globs.
    pub files: Vec<String>,
    /// Only data in these variables (globals, by name glob).
    pub variables: Vec<String>,
    /// Allocation wrappers (function glob lists): their callers are the sites.
    pub alloc_fns: Vec<String>,
    /// Only events with these indices (per thread), `A..B`.
    pub window: Option<(u64, u64)>,
    /// Only accesses between ROI markers.
    pub roi: bool,
    /// cachesim: cachegrind-style geometry flags (`--D1=...`, `--LL=...`).
    pub cache_args: Vec<String>,
    /// cachesim: config file.
    pub cache_config: Option<PathBuf>,
    /// cachesim: simulated cores.
    pub cores: Option<usize>,
    /// cachesim: write the per-access hit/miss annotation here.
    pub annotate: Option<PathBuf>,
    /// Cache line size for false-sharing, reuse, working-set.
    pub line: u64,
    /// Working-set interval in accesses.
    pub interval: u64,
    /// Follow a trace still being written, printing a snapshot this often.
    pub follow: Option<Every>,
}

/// How often `--follow` prints a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Every {
    /// Wall-clock time.
    Time(std::time::Duration),
    /// Events processed.
    Events(u64),
}

/// Parses `--every`: `2s`, `500ms`, `1m` (time) or `500000`, `10k`, `5M` (events).
pub fn parse_every(s: &str) -> Result<Every> {
    let bad = || {
        anyhow::anyhow!(
            "--every {s}: give a time (2s, 500ms, 1m) or an event count (500000, 10k, 5M)"
        )
    };
    let num = |d: &str| d.parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0);
    // a snapshot period of up to a day (Duration panics on huge seconds)
    let time = |secs: f64| {
        if secs > 86_400.0 {
            return Err(anyhow::anyhow!("--every {s}: the longest period is a day (1440m)"));
        }
        Ok(Every::Time(std::time::Duration::from_secs_f64(secs)))
    };
    let e = if let Some(d) = s.strip_suffix("ms") {
        time(num(d).ok_or_else(bad)? / 1000.0)?
    } else if let Some(d) = s.strip_suffix('s') {
        time(num(d).ok_or_else(bad)?)?
    } else if let Some(d) = s.strip_suffix('m') {
        time(num(d).ok_or_else(bad)? * 60.0)?
    } else {
        let (d, mul) = match s.as_bytes().last() {
            Some(b'k' | b'K') => (&s[..s.len() - 1], 1e3),
            Some(b'M') => (&s[..s.len() - 1], 1e6),
            Some(b'G') => (&s[..s.len() - 1], 1e9),
            _ => (s, 1.0),
        };
        Every::Events(((num(d).ok_or_else(bad)? * mul) as u64).max(1))
    };
    Ok(e)
}

/// The code `--function`/`--file` select in every module of the trace, as pc ranges
/// (pcs are return addresses: instruction + 1). Same meaning as `record`'s filters.
fn code_ranges(
    names: &Names,
    r: &TraceReader,
    o: &AnalyzeOpts,
) -> Result<Vec<std::ops::Range<Pc>>> {
    let mut spec = memlens_symbols::CodeFilter::default();
    for g in &o.functions {
        spec.add_list(g, false)?;
    }
    for g in &o.files {
        spec.add_list(g, true)?;
    }
    if spec.is_empty() {
        return Ok(Vec::new());
    }
    let labels = spec.labels();
    let mut matched = vec![false; labels.len()];
    let mut out = Vec::new();
    for m in &r.meta().modules {
        let Ok(syms) = names.symbolizer().module_symbols(m.id) else { continue };
        let sel = syms.select_code(&spec)?;
        for (a, b) in matched.iter_mut().zip(&sel.matched) {
            *a |= b;
        }
        out.extend(sel.ranges.iter().map(|rg| Pc(rg.start.0 + 1)..Pc(rg.end.0 + 1)));
    }
    if out.is_empty() {
        bail!(
            "{} select no code of the traced program (see `memlens report --by function`)",
            labels.join(", ").replace("--functions", "--function").replace("--files", "--file")
        );
    }
    let labels: Vec<String> = labels
        .iter()
        .map(|l| l.replace("--functions", "--function").replace("--files", "--file"))
        .collect();
    crate::filter::warn_unmatched(&labels, &matched, "the traced program");
    Ok(out)
}

fn data_ranges(
    names: &Names,
    r: &TraceReader,
    o: &AnalyzeOpts,
) -> Result<Vec<std::ops::Range<Addr>>> {
    let globs =
        o.variables.iter().map(|g| memlens_symbols::Glob::new(g)).collect::<Result<Vec<_>, _>>()?;
    let mut out = Vec::new();
    for m in &r.meta().modules {
        let Ok(syms) = names.symbolizer().module_symbols(m.id) else { continue };
        for v in syms.static_variables() {
            if globs.iter().any(|g| g.is_match(&v.name)) {
                let start = v.start.0;
                out.push(Addr(start)..Addr(start + v.size.max(1)));
            }
        }
    }
    if out.is_empty() && !o.variables.is_empty() {
        bail!("no global variable matches --variable (see `memlens report --by variable`)");
    }
    Ok(out)
}

/// A progress bar for long runs (hidden when stderr is not a terminal).
fn progress_bar(r: &TraceReader) -> Option<indicatif::ProgressBar> {
    let total = r.totals().events as u64;
    (total > 20_000_000).then(|| {
        let pb = indicatif::ProgressBar::new(total);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {human_pos}/{human_len} events {wide_bar} {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        pb
    })
}

/// Prints a result; JSON carries `complete` (whether the trace had every event).
pub(crate) fn print(t: memlens_analysis::Table, json: bool, complete: bool) -> Result<()> {
    let out = std::io::stdout();
    let mut out = out.lock();
    if json {
        let mut v = t.to_json();
        v["complete"] = serde_json::json!(complete);
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", t.to_text())?;
    }
    Ok(out.flush()?)
}

/// The filters `o` asks for (code and data globs resolved against `r`'s modules).
pub(crate) fn build_filter(names: &Names, r: &TraceReader, o: &AnalyzeOpts) -> Result<Filter> {
    let mut filter = Filter::new();
    if !o.threads.is_empty() {
        filter = filter.threads(o.threads.iter().map(|&t| ThreadId(t)));
    }
    for rg in code_ranges(names, r, o)? {
        filter = filter.pc_range(rg);
    }
    for rg in data_ranges(names, r, o)? {
        filter = filter.addr_range(rg);
    }
    if let Some((a, b)) = o.window {
        filter = filter.window(a..b, WindowBasis::PerThread);
    }
    Ok(filter)
}

pub(crate) fn render_opts(o: &AnalyzeOpts) -> RenderOpts {
    let mut opts = RenderOpts::default();
    opts.top = if o.top == 0 { usize::MAX } else { o.top };
    opts.verbose = o.verbose;
    opts
}

/// The options `info` reads, from `o` (a cache config file is read only for the
/// kernels that simulate caches).
pub(crate) fn kernel_options(
    info: &KernelInfo,
    o: &AnalyzeOpts,
    names: &Names,
) -> Result<KernelOptions> {
    let mut k = KernelOptions { line: o.line, interval: o.interval, ..Default::default() };
    if info.reads(KernelOption::Cache) {
        k.cache = cache_config(o)?;
    }
    k.alloc_fns = names.alloc_fns().clone();
    Ok(k)
}

/// After a table of heap blocks (text output): a note when a function of the
/// program looks like an allocation wrapper (`memlens_names::alloc_fn_hint`).
pub(crate) fn note_alloc_fn(r: &TraceReader, names: &Names) {
    if let Ok(Some(h)) = memlens_names::alloc_fn_hint(r, names) {
        eprintln!("memlens: note: {h}");
    }
}

/// Names for trace `r` with `--alloc-fn` resolved (a warning for globs that match
/// nothing): heap blocks allocated in those wrappers are their callers'.
pub(crate) fn names_for(r: &TraceReader, alloc_fns: &[String]) -> Result<Names> {
    let mut names = Names::new(&r.meta().modules);
    let unmatched = names.set_alloc_fns(alloc_fns)?;
    if !alloc_fns.is_empty() && names.alloc_fns().is_empty() {
        bail!(
            "{} names no function of the traced program (see `memlens report --by function`)",
            unmatched.join(", ")
        );
    }
    crate::filter::warn_unmatched(&unmatched, &vec![false; unmatched.len()], "the traced program");
    Ok(names)
}

/// The cache hierarchy `o` describes (flags, config file, cores, annotation).
fn cache_config(o: &AnalyzeOpts) -> Result<CacheConfig> {
    let mut cfg = match &o.cache_config {
        Some(p) => {
            let text = crate::files::read_text(p, "cache config", crate::files::CONFIG_CAP)?;
            CacheConfig::parse(&text)?
        }
        None if !o.cache_args.is_empty() => CacheConfig::from_cachegrind_args(&o.cache_args)?,
        None => CacheConfig::default(),
    };
    if let Some(n) = o.cores {
        cfg = cfg.cores(n);
    }
    if o.annotate.is_some() {
        cfg = cfg.annotate(true);
    }
    Ok(cfg)
}

/// Writes the cachesim annotation where `--annotate` asked.
pub(crate) fn write_annotation(o: &AnalyzeOpts, rep: &dyn Report) -> Result<()> {
    let annotation = rep.as_any().downcast_ref::<CacheReport>().and_then(|r| r.annotation.as_ref());
    if let (Some(path), Some(a)) = (&o.annotate, annotation) {
        let mut out = crate::files::Output::create(path)?;
        let mut w = std::io::BufWriter::new(out.file());
        a.write_to(&mut w)
            .and_then(|_| w.flush())
            .with_context(|| format!("cannot write the annotation to {}", path.display()))?;
        drop(w);
        out.commit()?;
    }
    Ok(())
}

/// `memlens analyze`.
pub fn analyze(o: AnalyzeOpts) -> Result<()> {
    let info = registry::kernel(&o.kernel)?;
    if let Some(every) = o.follow {
        return crate::follow::follow(&o, info, every);
    }
    offline(&o, info)
}

/// The analysis of the trace as it is on disk now (also `--follow`'s final result
/// for the kernels that name each access, whose namer reads the whole trace's heap).
pub(crate) fn offline(o: &AnalyzeOpts, info: &KernelInfo) -> Result<()> {
    let r = crate::inspect::open(&o.trace)?;
    let names = names_for(&r, &o.alloc_fns)?;
    let namer = memlens_names::TraceNamer::lazy(&r, &names);
    let filter = build_filter(&names, &r, o)?;
    let kopts = kernel_options(info, o, &names)?;
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let pb = progress_bar(&r);
    let mut tick = |n| {
        if let Some(pb) = &pb {
            pb.set_position(n)
        }
    };
    let p = Pipeline { filter, roi: o.roi };
    let rep = info.run(&r, &kopts, p, &namer, threads, &mut tick)?;
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    write_annotation(o, &*rep)?;
    print(rep.render(&namer, &render_opts(o)), o.json, r.completeness().is_complete())?;
    if !o.json && matches!(info.name, "heap" | "layout") {
        note_alloc_fn(&r, &names);
    }
    Ok(())
}

/// Parses `A..B`.
pub fn parse_window(s: &str) -> Result<(u64, u64)> {
    let (a, b) = s.split_once("..").context("--window takes START..END (event indices)")?;
    let a: u64 =
        if a.is_empty() { 0 } else { a.parse().context("--window START is not a number")? };
    let b: u64 =
        if b.is_empty() { u64::MAX } else { b.parse().context("--window END is not a number")? };
    if a >= b {
        bail!("--window {s}: START must be below END");
    }
    Ok((a, b))
}
