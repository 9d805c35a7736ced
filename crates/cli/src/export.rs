//! `memlens export`: a trace in other tools' formats (see `docs/export.md`).

use anyhow::Result;
use memlens_analysis::cachesim::CacheConfig;
use memlens_export::CachegrindOpts;
use memlens_names::CodeNamer;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// Chrome trace-event JSON for ui.perfetto.dev and chrome://tracing.
    Perfetto,
    /// Perfetto's native protobuf trace with interned names (ui.perfetto.dev,
    /// trace_processor): several times smaller than the JSON.
    PerfettoPb,
    /// speedscope's JSON (one evented profile per thread).
    Speedscope,
    /// Spall's JSON (trace-event array).
    Spall,
    /// cachegrind.out per source line (cg_annotate, KCachegrind).
    Cachegrind,
    /// callgrind.out: per-line costs and the call graph with inclusive costs
    /// (KCachegrind, callgrind_annotate).
    Callgrind,
    /// DHAT's JSON per allocation site (dh_view.html).
    Dhat,
    /// Parquet files, one directory per table (`export --format parquet OUT_DIR TRACE...`).
    Parquet,
}

/// What `export` was asked.
pub struct ExportOpts {
    /// Output format.
    pub format: ExportFormat,
    /// Output file (`-` for stdout); None: the format's default name.
    pub output: Option<PathBuf>,
    /// The trace.
    pub trace: PathBuf,
    /// cachegrind: simulate the caches.
    pub cache_sim: bool,
    /// cachegrind: `--D1=...`, `--LL=...` (imply the simulation).
    pub cache_args: Vec<String>,
    /// cachegrind: a hierarchy file (implies the simulation).
    pub cache_config: Option<PathBuf>,
    /// dhat: `--alloc-fn` globs.
    pub alloc_fns: Vec<String>,
}

fn default_name(f: ExportFormat, pid: u32) -> PathBuf {
    PathBuf::from(match f {
        ExportFormat::Perfetto => "memlens.perfetto.json".to_string(),
        ExportFormat::PerfettoPb => "memlens.perfetto-trace".to_string(),
        ExportFormat::Speedscope => "memlens.speedscope.json".to_string(),
        ExportFormat::Spall => "memlens.spall.json".to_string(),
        ExportFormat::Cachegrind => format!("cachegrind.out.{pid}"),
        ExportFormat::Callgrind => format!("callgrind.out.{pid}"),
        ExportFormat::Dhat => "dhat.json".to_string(),
        ExportFormat::Parquet => "memlens.parquet".to_string(),
    })
}

fn cache_config(o: &ExportOpts) -> Result<Option<CacheConfig>> {
    if let Some(p) = &o.cache_config {
        let text = crate::files::read_text(p, "cache config", crate::files::CONFIG_CAP)?;
        return Ok(Some(CacheConfig::parse(&text)?));
    }
    if !o.cache_args.is_empty() {
        return Ok(Some(CacheConfig::from_cachegrind_args(&o.cache_args)?));
    }
    Ok(o.cache_sim.then(CacheConfig::default))
}

/// `memlens export`.
pub fn export(o: ExportOpts) -> Result<()> {
    let cache = cache_config(&o)?;
    if cache.is_some() && o.format != ExportFormat::Cachegrind {
        anyhow::bail!(
            "--cache-sim, --D1, --LL and --cache-config apply to --format cachegrind only"
        );
    }
    if !o.alloc_fns.is_empty() && o.format != ExportFormat::Dhat {
        anyhow::bail!("--alloc-fn applies to --format dhat and parquet only");
    }
    let r = crate::inspect::open(&o.trace)?;
    let names = crate::analyze::names_for(&r, &o.alloc_fns)?;
    let namer = CodeNamer(&names);
    let path = o.output.clone().unwrap_or_else(|| default_name(o.format, r.header().pid));
    let to_stdout = path == Path::new("-");
    // a file is written under a fresh name and renamed into place when complete
    let mut file = if to_stdout { None } else { Some(crate::files::Output::create(&path)?) };
    let out: Box<dyn Write> = match &mut file {
        None => Box::new(std::io::stdout().lock()),
        Some(f) => Box::new(f.take_file()),
    };
    let s = match o.format {
        ExportFormat::Perfetto => memlens_export::perfetto(&r, &namer, out),
        ExportFormat::PerfettoPb => memlens_export::perfetto_pb(&r, &namer, out),
        ExportFormat::Speedscope => memlens_export::speedscope(&r, &namer, out),
        ExportFormat::Spall => memlens_export::spall(&r, &namer, out),
        ExportFormat::Cachegrind => {
            memlens_export::cachegrind(&r, &namer, &CachegrindOpts { cache }, out)
        }
        ExportFormat::Callgrind => memlens_export::callgrind(&r, &namer, out),
        ExportFormat::Dhat => memlens_export::dhat(&r, &namer, names.alloc_fns(), out),
        ExportFormat::Parquet => anyhow::bail!("parquet is written by sql::export_parquet"),
    }?;
    if let Some(f) = file {
        f.commit()?;
    }
    if !to_stdout {
        let what = match o.format {
            ExportFormat::Cachegrind => format!(
                "{} source lines in {} functions, {} memory operations",
                s.calls, s.frames, s.operations
            ),
            ExportFormat::Callgrind => format!(
                "{} calls, {} functions with costs, {} memory operations",
                s.calls, s.frames, s.operations
            ),
            ExportFormat::Dhat => {
                format!("{} allocation sites, {} heap accesses", s.calls, s.operations)
            }
            _ => format!(
                "{} calls of {} functions, {} memory operations",
                s.calls, s.frames, s.operations
            ),
        };
        eprintln!("memlens: wrote {} ({what}, {} threads)", path.display(), s.threads);
    }
    Ok(())
}
