//! The `memlens` command line: the only crate that knows clap.

// Doc comments on the argument types are clap's help text (`PROG[:ARGS]`, `<pid>`),
// not rustdoc markup.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

mod allocdefs;
mod analyze;
mod cc;
mod dbi;
mod export;
mod files;
mod filter;
mod follow;
mod inspect;
mod live;
mod merge;
mod record;
mod runtime;
mod rust;
mod sink;
#[cfg(feature = "sql")]
mod sql;
#[cfg(not(feature = "sql"))]
#[path = "nosql.rs"]
mod sql;
mod stubs;
mod view;

use anyhow::Result;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Shows how a program really uses memory: records every load, store, allocation
/// and function call of a program built with memlens, names each access, and
/// analyses the trace.
#[derive(Parser)]
#[command(name = "memlens", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// C compiler driver: `memlens cc [gcc/clang args]` (MEMLENS_CC picks the compiler)
    #[command(name = "cc", disable_help_flag = true)]
    Cc {
        /// Arguments for the compiler.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// C++ compiler driver: `memlens c++ [g++/clang++ args]` (MEMLENS_CXX picks it)
    #[command(name = "c++", alias = "cxx", disable_help_flag = true)]
    Cxx {
        /// Arguments for the compiler.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Build a Rust project instrumented: `memlens cargo build --release`
    #[command(disable_help_flag = true)]
    Cargo {
        /// Arguments for cargo.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run a program built with memlens and record its trace
    Record(RecordArgs),
    /// Summarise what a trace holds
    Info {
        /// Skip the attribution-coverage pass (reads only chunk headers: instant).
        #[arg(long)]
        fast: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// The trace.
        trace: PathBuf,
    },
    /// Hottest lines, functions, variables, threads or allocation sites
    Report {
        /// What to group by.
        #[arg(long, value_enum, default_value_t = By::Line)]
        by: By,
        /// With --by variable: whole variables (`stats`, a heap block's type or
        /// site), or every field and array element (`stats.v[3]`; slower on large
        /// arrays, which have a row per element).
        #[arg(long, value_enum, default_value_t = GroupBy::Variable)]
        group_by: GroupBy,
        /// Rows to show (0: all).
        #[arg(long, default_value_t = 20)]
        top: usize,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// With --by variable: allocation wrappers (function globs, comma-separated,
        /// as massif takes them); a heap block allocated inside one is named after
        /// its first caller outside them.
        #[arg(long, value_name = "GLOBS")]
        alloc_fn: Vec<String>,
        /// The trace.
        trace: PathBuf,
    },
    /// Run an analysis kernel: counts, sharing, false-sharing, cachesim, reuse,
    /// working-set, heap, layout
    Analyze(AnalyzeArgs),
    /// Print every event, one per line
    Dump {
        /// Output format.
        #[arg(long, value_enum, default_value_t = DumpFormat::Text)]
        format: DumpFormat,
        /// Only this thread (memlens thread index).
        #[arg(long)]
        thread: Option<u32>,
        /// Leave code addresses unnamed (faster).
        #[arg(long)]
        no_names: bool,
        /// All threads in one order consistent with synchronisation
        /// (`clock thread index event`; `--format amt`: atomic-memory-trace's text).
        #[arg(long)]
        merged: bool,
        /// Allocation wrappers (function globs, comma-separated, as massif takes
        /// them): a heap block allocated inside one is named after its first caller
        /// outside them.
        #[arg(long, value_name = "GLOBS")]
        alloc_fn: Vec<String>,
        /// The trace.
        trace: PathBuf,
    },
    /// Live probes on a running process (--pid PID) or a launched one (-- PROG):
    /// the collector `memlens probe` talks to
    Live(live::LiveArgs),
    /// Add, remove and list live probes: `memlens probe [--pid PID] add SPEC|rm ID|list|modules`
    Probe(live::ProbeArgs),
    /// Receive traces that `record --sink tcp://HOST:PORT` sends, any number at once
    Collect {
        /// Address to listen on (loopback unless you name another one; port 0 picks one).
        #[arg(long, default_value = "127.0.0.1:7700")]
        listen: String,
        /// Directory for the received traces (NAME-PID.trace each).
        #[arg(short, long, default_value = "collected")]
        output: PathBuf,
        /// A continuous query: this SQL (docs/sql.md) over every trace arrived so
        /// far, its result printed on stdout every --every.
        #[arg(long, value_name = "SQL")]
        query: Option<String>,
        /// With --query: the period (250ms, 1s, 1m).
        #[arg(long, default_value = "1s", value_parser = live::parse_duration, requires = "query")]
        every: std::time::Duration,
        /// With --query: the output format.
        #[arg(long, value_enum, default_value_t = SqlFormat::Table, requires = "query")]
        format: SqlFormat,
    },
    /// Show a trace in the browser: memory map, flame chart, source, tables (two
    /// traces: their difference per line, function and variable)
    View {
        /// Port on 127.0.0.1 (default: a free one).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Open a browser (xdg-open or chromium).
        #[arg(long)]
        open: bool,
        /// Rebuild the index (TRACE.mlview/) even if it is newer than the trace.
        #[arg(long)]
        reindex: bool,
        /// Build the index and exit.
        #[arg(long)]
        no_serve: bool,
        /// Remove the index (TRACE.mlview/) and exit.
        #[arg(long, conflicts_with_all = ["reindex", "no_serve", "open"])]
        clean: bool,
        /// Allocation wrappers (function globs, comma-separated, as massif takes
        /// them): a block allocated inside one belongs to its first caller outside
        /// them, in the heap tables and the diff's allocation sites.
        #[arg(long, value_name = "GLOBS")]
        alloc_fn: Vec<String>,
        /// The trace; two traces A B: the diff of B against A (per line, function
        /// and variable).
        #[arg(required = true, num_args = 1..=2, value_name = "TRACE")]
        traces: Vec<PathBuf>,
    },
    /// Merge an atomic-memory-trace text trace (stdin) by timestamp (stdout)
    Merge {
        /// Drop the timestamp column, as atomic-memory-trace's merge does.
        #[arg(long)]
        strip_ts: bool,
        /// Merge this memlens trace instead, reading its chunks in file order as a
        /// streaming consumer would (output as `dump --merged`).
        #[arg(long)]
        trace: Option<PathBuf>,
        /// With --trace: print the events held back at most, and the chunk sizes, on stderr.
        #[arg(long, requires = "trace")]
        stats: bool,
    },
    /// Write a trace in another tool's format: perfetto, perfetto-pb, speedscope,
    /// spall, cachegrind, callgrind, dhat (see docs/export.md), or parquet
    /// (OUT_DIR TRACE..., docs/sql.md)
    Export(ExportArgs),
    /// Query traces with SQL (tables accesses, calls, allocations, threads, code,
    /// data; see docs/sql.md). Without -e: an interactive prompt
    Sql {
        /// The query; without it, a prompt with history.
        #[arg(short = 'e', long = "execute", value_name = "QUERY")]
        query: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = SqlFormat::Table)]
        format: SqlFormat,
        /// Run the query on the Apache Ballista cluster whose scheduler is at
        /// df://HOST:PORT (see `memlens cluster`); every machine must see the
        /// traces at the same absolute path.
        #[arg(long, value_name = "df://HOST:PORT")]
        cluster: Option<String>,
        /// Allocation wrappers (function globs, comma-separated, as massif takes
        /// them): a heap block allocated inside one is its first caller's, in
        /// `allocations.site`, `data` and `variable()`.
        #[arg(long, value_name = "GLOBS")]
        alloc_fn: Vec<String>,
        /// Traces, or directories of traces: one dataset with a `trace` column.
        #[arg(required = true)]
        traces: Vec<PathBuf>,
    },
    /// Run a node of an Apache Ballista cluster for `memlens sql --cluster`
    #[command(subcommand)]
    Cluster(ClusterCmd),
}

#[derive(Subcommand)]
enum ClusterCmd {
    /// The scheduler: plans queries and hands their tasks to executors
    Scheduler {
        /// Address to listen on (clients and executors connect here). Loopback
        /// unless you name another address.
        #[arg(long, default_value = "127.0.0.1:50050")]
        bind: std::net::SocketAddr,
    },
    /// An executor: runs tasks, reading the traces from shared storage
    Executor {
        /// The scheduler's address.
        #[arg(long, default_value = "127.0.0.1:50050")]
        scheduler: std::net::SocketAddr,
        /// Address of its Flight service (results are fetched there); loopback
        /// unless you name another address.
        #[arg(long, default_value = "127.0.0.1:50051")]
        bind: std::net::SocketAddr,
        /// Port of its gRPC service.
        #[arg(long, default_value_t = 50052)]
        grpc_port: u16,
        /// Directory for its shuffle files (default: a new one under the temp dir).
        #[arg(long)]
        work_dir: Option<PathBuf>,
        /// Tasks run at once (0: one per core).
        #[arg(long, default_value_t = 0)]
        tasks: usize,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SqlFormat {
    Table,
    Json,
    Csv,
}

#[derive(clap::Args)]
struct ExportArgs {
    /// Output format.
    #[arg(long, value_enum)]
    format: export::ExportFormat,
    /// Output file (`-`: stdout). Default: memlens.perfetto.json, memlens.perfetto-trace,
    /// memlens.speedscope.json, memlens.spall.json, cachegrind.out.<pid>,
    /// callgrind.out.<pid> or dhat.json.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// cachegrind: add D1mr D1mw DLmr DLmw from a cache simulation (default
    /// geometry; --D1, --LL and --cache-config imply it).
    #[arg(long)]
    cache_sim: bool,
    #[command(flatten)]
    cache: CacheGeometry,
    /// The trace (with --format parquet: the output directory, then the traces).
    trace: PathBuf,
    /// --format parquet: the traces (after OUT_DIR).
    #[arg(value_name = "TRACE")]
    more: Vec<PathBuf>,
    /// dhat, parquet: allocation wrappers (function globs, comma-separated, as
    /// massif takes them); a heap block allocated inside one is its first caller's.
    #[arg(long, value_name = "GLOBS")]
    alloc_fn: Vec<String>,
}

/// The simulated caches of `analyze cachesim` and `export --format cachegrind`.
#[derive(clap::Args)]
struct CacheGeometry {
    /// cachesim, cachegrind: first-level data cache `size,assoc,line` (as cachegrind).
    #[arg(long = "D1", value_name = "SIZE,ASSOC,LINE")]
    d1: Option<String>,
    /// cachesim, cachegrind: last-level cache `size,assoc,line` (as cachegrind).
    #[arg(long = "LL", value_name = "SIZE,ASSOC,LINE")]
    ll: Option<String>,
    /// cachesim, cachegrind: hierarchy description file (see docs/analysis.md).
    #[arg(long, value_name = "FILE")]
    cache_config: Option<PathBuf>,
}

impl CacheGeometry {
    /// `--D1` and `--LL` as cachegrind's arguments.
    fn cachegrind_args(&self) -> Vec<String> {
        [("D1", &self.d1), ("LL", &self.ll)]
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("--{k}={v}")))
            .collect()
    }
}

#[derive(clap::Args)]
struct RecordArgs {
    /// Where to write the trace [default: memlens.trace; with --sink and no -o, no
    /// local copy is kept].
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Also send the trace to `memlens collect` as it is written (a dropped
    /// connection is reported; the program runs on).
    #[arg(long, value_name = "tcp://HOST:PORT")]
    sink: Option<String>,
    /// Also record the value each load read and each store wrote.
    #[arg(long)]
    values: bool,
    /// Depth of the call stack recorded with each allocation.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(0..=64))]
    stack_depth: u32,
    /// zstd level for the trace (0: uncompressed).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(0..=19))]
    zstd_level: i32,
    /// Record accesses only between memlens_roi_begin() and memlens_roi_end().
    #[arg(long)]
    roi: bool,
    /// Trace only these functions (comma-separated globs; `!glob` excludes).
    #[arg(long, value_name = "GLOBS")]
    functions: Option<String>,
    /// Trace only functions in these source files (comma-separated globs; `!glob` excludes).
    #[arg(long, value_name = "GLOBS")]
    files: Option<String>,
    /// DINAMITE function_filter.json (blacklist / whitelist).
    #[arg(long, value_name = "FILE")]
    filter_file: Option<PathBuf>,
    /// Record calls of the functions listed in FILE (one name per line, `#`
    /// comments) with their first three integer arguments and stack pointer, and
    /// their returns with the return value (`dump --merged --format amt`: fc/fr).
    #[arg(long, value_name = "FILE")]
    trace_calls: Option<PathBuf>,
    /// Print nothing but the program's own output.
    #[arg(short, long)]
    quiet: bool,
    /// Trace an unmodified x86-64 program under QEMU user mode (qemu-x86_64).
    #[arg(long)]
    dbi: bool,
    /// With --dbi, the code to trace: exe, all, lib:NAME, 0xSTART-0xEND (comma-separated).
    #[arg(long, value_name = "WHAT", default_value = "exe", requires = "dbi")]
    dbi_filter: String,
    #[command(flatten)]
    order: merge::OrderArgs,
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, required = true, value_name = "PROG [ARGS]")]
    cmd: Vec<String>,
}

/// The registered kernels, with their one-line descriptions for `analyze --help`.
fn kernel_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        memlens_analysis::registry::KERNELS
            .iter()
            .map(|k| clap::builder::PossibleValue::new(k.name).help(k.about)),
    )
}

#[derive(clap::Args)]
struct AnalyzeArgs {
    /// The kernel.
    #[arg(value_parser = kernel_names())]
    kernel: String,
    /// The trace.
    trace: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Rows per section (0: all).
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Secondary sections (per core, per thread, histograms).
    #[arg(short, long)]
    verbose: bool,
    /// Only these threads (memlens thread indices; repeat or comma-separate).
    #[arg(long, value_delimiter = ',')]
    thread: Vec<u32>,
    /// Only accesses made by functions matching these globs (comma-separated; `!glob` excludes).
    #[arg(long, value_name = "GLOBS")]
    function: Vec<String>,
    /// Only accesses made by code of source files matching these globs (comma-separated; `!glob` excludes).
    #[arg(long, value_name = "GLOBS")]
    file: Vec<String>,
    /// Only accesses to global variables matching these globs.
    #[arg(long, value_delimiter = ',')]
    variable: Vec<String>,
    /// Allocation wrappers (function globs, comma-separated, as valgrind's massif
    /// takes them): a block allocated inside one belongs to its first caller outside
    /// them (heap and layout kernels).
    #[arg(long, value_name = "GLOBS")]
    alloc_fn: Vec<String>,
    /// Only events START..END of each thread (event indices, either side may be empty).
    #[arg(long)]
    window: Option<String>,
    /// Only accesses inside memlens_roi_begin()/memlens_roi_end().
    #[arg(long)]
    roi: bool,
    #[command(flatten)]
    cache: CacheGeometry,
    /// cachesim: simulated cores, 1 to 1024 (threads map round-robin).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    cores: Option<u32>,
    /// cachesim: write per-access hit/miss levels to FILE.
    #[arg(long, value_name = "FILE")]
    annotate: Option<PathBuf>,
    /// Cache line size for false-sharing, reuse and working-set.
    #[arg(long, default_value_t = 64)]
    line: u64,
    /// working-set: accesses per interval.
    #[arg(long, default_value_t = 100_000)]
    interval: u64,
    /// Follow a trace that `memlens record` is still writing: snapshots on stderr
    /// every --every, the final result on stdout (the same as a run on the finished
    /// trace) when the recording ends, or what was read on Ctrl-C.
    #[arg(long)]
    follow: bool,
    /// With --follow: snapshot period, a time (2s, 500ms, 1m) or events (10M, 500000).
    #[arg(long, default_value = "2s", value_name = "TIME|EVENTS", requires = "follow")]
    every: String,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Format {
    Table,
    Json,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum GroupBy {
    Field,
    Variable,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum DumpFormat {
    Text,
    Json,
    /// atomic-memory-trace's text format (with --merged).
    Amt,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum By {
    Line,
    Function,
    Variable,
    Thread,
    Alloc,
}

fn main() {
    // glibc hands the free top of every thread arena back to the kernel (madvise)
    // once it passes 128 KiB, so buffers freed per chunk fault in again on the next:
    // `sql -e "SELECT count(*) ..."` spent 2.9 s of 2.5 s wall in the kernel on two
    // cores. Keep up to 256 MiB, and take blocks under 32 MiB from the arenas.
    // SAFETY: mallopt only sets allocator parameters; nothing is allocated yet.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
    let code = match real_main() {
        Ok(code) => code,
        Err(e) => {
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                0
            } else {
                eprintln!("memlens: error: {}", error_text(&e));
                2
            }
        }
    };
    std::process::exit(code);
}

/// The error and its causes on one line. Library errors often print their source
/// in their own text too, so a cause already said (or the context it extends) is
/// not repeated.
fn error_text(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in e.chain() {
        let s = c.to_string();
        match parts.last_mut() {
            Some(last) if last.contains(&s) => {}
            Some(last) if s.starts_with(last.as_str()) => *last = s,
            _ => parts.push(s),
        }
    }
    parts.join(": ")
}

/// clap's error as one line, like every other memlens error: the message, then
/// clap's "did you mean" tip and the possible values, then where help is.
fn one_line_usage_error(text: &str, argv: &[String]) -> String {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let mut out =
        lines.next().unwrap_or("invalid arguments").trim_start_matches("error: ").to_string();
    for l in lines {
        if l.starts_with("tip:") || l.starts_with("[possible values") {
            out.push_str("; ");
            out.push_str(l.trim_start_matches('[').trim_end_matches(']'));
        }
    }
    let sub = argv.get(1).filter(|s| Cli::command().find_subcommand(s.as_str()).is_some());
    match sub {
        Some(s) => out.push_str(&format!(" (see `memlens {s} --help`)")),
        None => out.push_str(" (see `memlens --help`)"),
    }
    out
}

/// cargo's copy of the binary under `deps/` is `memlens-<16 hex digits>`.
fn is_cargo_hash(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn real_main() -> Result<i32> {
    // Compiler drivers take the compiler's arguments verbatim, `--help` included.
    let argv: Vec<String> = std::env::args().collect();
    if rust::is_wrapper_call() && argv.len() > 1 && !argv[1].starts_with('-') {
        return rust::wrapper(argv[1..].to_vec());
    }
    // Installed as `memlens-cc` / `memlens-c++` (symlinks), memlens is the compiler
    // itself: `CC=memlens-cc cmake ..` needs a single path.
    let argv0 = argv.first().map(|a| a.rsplit('/').next().unwrap_or(a).to_string());
    match argv0.as_deref() {
        Some("memlens-cc") => return cc::main(cc::Lang::C, argv[1..].to_vec()),
        Some("memlens-c++") | Some("memlens-cxx") => {
            return cc::main(cc::Lang::Cxx, argv[1..].to_vec())
        }
        // `memlens-g++`, `memlens-clang-22`: that compiler, so CMake's cache (which
        // keeps the compiler's path, not MEMLENS_CXX) keeps the choice too.
        Some(name)
            if name.starts_with("memlens-")
                && name.len() > "memlens-".len()
                && !is_cargo_hash(&name["memlens-".len()..]) =>
        {
            return cc::main_named(&name["memlens-".len()..], argv[1..].to_vec())
        }
        _ => {}
    }
    // `memlens help cc|c++|cargo`: memlens's own options for the drivers (clap
    // only knows them as argument lists).
    if argv.get(1).is_some_and(|a| a == "help") {
        match argv.get(2).map(String::as_str) {
            Some("cc") | Some("c++") | Some("cxx") => {
                print!("{}", cc::HELP);
                return Ok(0);
            }
            Some("cargo") => {
                print!("{}", rust::HELP);
                return Ok(0);
            }
            _ => {}
        }
    }
    match argv.get(1).map(String::as_str) {
        Some("cc") => return cc::main(cc::Lang::C, argv[2..].to_vec()),
        Some("c++") | Some("cxx") => return cc::main(cc::Lang::Cxx, argv[2..].to_vec()),
        Some("cargo") => return rust::cargo(argv[2..].to_vec()),
        // CMake's ASM language drops the `cc` of `CC="memlens cc"`.
        Some(a) if a.starts_with('-') && cc::is_assembler_call(&argv[1..]) => {
            return cc::main(cc::Lang::C, argv[1..].to_vec())
        }
        _ => {}
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return Ok(0);
        }
        Err(e) => {
            eprintln!("memlens: error: {}", one_line_usage_error(&e.to_string(), &argv));
            return Ok(2);
        }
    };
    match cli.cmd {
        Cmd::Cc { args } => cc::main(cc::Lang::C, args),
        Cmd::Cxx { args } => cc::main(cc::Lang::Cxx, args),
        Cmd::Cargo { args } => rust::cargo(args),
        Cmd::Record(mut a) => {
            let output = match &a.sink {
                Some(s) => {
                    let prog = a.cmd.first().map(String::as_str).unwrap_or("program");
                    sink::start(s, a.output.as_deref(), prog, a.quiet)?
                }
                None => a.output.take().unwrap_or_else(|| PathBuf::from("memlens.trace")),
            };
            let code = record_cmd(a, output);
            sink::finish();
            code
        }
        Cmd::Collect { listen, output, query, every, format } => {
            let q = query.map(|q| (q, every, format));
            sink::collect(&listen, &output, q)
        }
        Cmd::Info { fast, format, trace } => {
            inspect::info(&trace, format == Format::Json, !fast).map(|_| 0)
        }
        Cmd::Report { by, group_by, top, format, alloc_fn, trace } => {
            let by = match by {
                By::Line => inspect::By::Line,
                By::Function => inspect::By::Function,
                By::Variable => inspect::By::Variable(match group_by {
                    GroupBy::Field => memlens_names::Granularity::Field,
                    GroupBy::Variable => memlens_names::Granularity::Variable,
                }),
                By::Thread => inspect::By::Thread,
                By::Alloc => inspect::By::Alloc,
            };
            inspect::report(&trace, by, top, format == Format::Json, &alloc_fn).map(|_| 0)
        }
        Cmd::Analyze(a) => {
            let window = a.window.as_deref().map(analyze::parse_window).transpose()?;
            analyze::analyze(analyze::AnalyzeOpts {
                kernel: a.kernel,
                trace: a.trace,
                json: a.format == Format::Json,
                top: a.top,
                verbose: a.verbose,
                threads: a.thread,
                functions: a.function,
                files: a.file,
                variables: a.variable,
                alloc_fns: a.alloc_fn,
                window,
                roi: a.roi,
                cache_args: a.cache.cachegrind_args(),
                cache_config: a.cache.cache_config,
                cores: a.cores.map(|n| n as usize),
                annotate: a.annotate,
                line: a.line,
                interval: a.interval,
                follow: a.follow.then(|| analyze::parse_every(&a.every)).transpose()?,
            })
            .map(|_| 0)
        }
        Cmd::Dump { format, thread, no_names, merged, alloc_fn, trace } => {
            if merged || format == DumpFormat::Amt {
                let f = match format {
                    DumpFormat::Text => merge::MergedFormat::Text,
                    DumpFormat::Json => merge::MergedFormat::Json,
                    DumpFormat::Amt => merge::MergedFormat::Amt,
                };
                if !alloc_fn.is_empty() {
                    anyhow::bail!("--alloc-fn names heap blocks; the merged dump names none");
                }
                return merge::dump_merged(&trace, f).map(|_| 0);
            }
            inspect::dump(&trace, format == DumpFormat::Json, thread, !no_names, &alloc_fn)
                .map(|_| 0)
        }
        Cmd::Live(a) => live::live(a),
        Cmd::Probe(a) => live::probe(a),
        Cmd::View { port, open, reindex, no_serve, clean, alloc_fn, traces } => {
            view::run(view::ViewOpts {
                traces,
                port,
                open,
                reindex,
                no_serve,
                clean,
                alloc_fns: alloc_fn,
            })
        }
        Cmd::Merge { trace: Some(trace), stats, .. } => {
            let s = merge::merge_file_order(&trace, std::io::stdout().lock())?;
            if stats {
                eprintln!(
                    "events {}\nchunks {}\nmax buffered events {}\nmax events per chunk {}",
                    s.events, s.chunks, s.max_buffered, s.max_chunk_events
                );
            }
            Ok(0)
        }
        Cmd::Merge { strip_ts, trace: None, .. } => {
            merge::merge_amt(std::io::stdin().lock(), std::io::stdout().lock(), strip_ts).map(|_| 0)
        }
        Cmd::Sql { query, format, cluster, alloc_fn, traces } => {
            sql::sql(&traces, query.as_deref(), format, cluster.as_deref(), &alloc_fn)
        }
        Cmd::Cluster(c) => sql::cluster(c).map(|_| 0),
        Cmd::Export(a) if a.format == export::ExportFormat::Parquet => {
            let (out, traces) = match a.output {
                Some(o) => (o, std::iter::once(a.trace).chain(a.more).collect::<Vec<_>>()),
                None => (a.trace, a.more),
            };
            sql::export_parquet(&out, &traces, &a.alloc_fn).map(|_| 0)
        }
        Cmd::Export(a) => {
            if !a.more.is_empty() {
                anyhow::bail!("export --format {:?} takes one trace", a.format);
            }
            export::export(export::ExportOpts {
                format: a.format,
                output: a.output,
                trace: a.trace,
                cache_sim: a.cache_sim,
                cache_args: a.cache.cachegrind_args(),
                cache_config: a.cache.cache_config,
                alloc_fns: a.alloc_fn,
            })
            .map(|_| 0)
        }
    }
}

fn record_cmd(a: RecordArgs, output: PathBuf) -> Result<i32> {
    if a.dbi && a.trace_calls.is_some() {
        anyhow::bail!("--trace-calls is not supported with --dbi");
    }
    if a.dbi {
        if a.filter_file.is_some() || a.order.registered_only || a.order.cas_as_write {
            anyhow::bail!(
                "--filter-file, --registered-only and --cas-as-write are not supported with --dbi"
            );
        }
        let mut code = filter::FilterSpec::default();
        if let Some(f) = &a.functions {
            code.add_list(f, false)?;
        }
        if let Some(f) = &a.files {
            code.add_list(f, true)?;
        }
        return dbi::run(dbi::DbiOpts {
            output: output.clone(),
            zstd_level: a.zstd_level,
            filter: a.dbi_filter,
            code,
            values: a.values,
            roi: a.roi,
            stack_depth: a.stack_depth,
            order: match a.order.order {
                merge::OrderMode::Sync => "sync",
                merge::OrderMode::Atomic => "atomic",
                merge::OrderMode::None => "none",
            },
            quiet: a.quiet,
            cmd: a.cmd,
        });
    }
    let mut filter = filter::FilterSpec::default();
    if let Some(f) = &a.functions {
        filter.add_list(f, false)?;
    }
    if let Some(f) = &a.files {
        filter.add_list(f, true)?;
    }
    if let Some(p) = &a.filter_file {
        filter::DinamiteFilter::add_dinamite_json(&mut filter, p)?;
    }
    record::run(record::RecordOpts {
        output: output.clone(),
        values: a.values,
        stack_depth: a.stack_depth,
        zstd_level: a.zstd_level,
        roi: a.roi,
        filter,
        quiet: a.quiet,
        env: a.order.env(),
        trace_calls: a.trace_calls,
        cmd: a.cmd,
    })
}
