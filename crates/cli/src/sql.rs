//! `memlens sql` and `export --format parquet`: argument handling and printing
//! only; the engine is `memlens-sql` (see docs/sql.md).

use anyhow::{Context, Result};
use memlens_sql::{Dataset, Format, Session};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The engine's output format for the CLI's.
fn engine_format(f: crate::SqlFormat) -> Format {
    match f {
        crate::SqlFormat::Table => Format::Table,
        crate::SqlFormat::Json => Format::Json,
        crate::SqlFormat::Csv => Format::Csv,
    }
}

/// Plans `q` over no trace: a syntax error or unknown column fails now.
pub fn check(q: &str) -> Result<()> {
    Session::new(Arc::new(Dataset::empty()))?.check(q)?;
    Ok(())
}

/// A continuous query of `collect`: the SQL, its period and output format.
pub type Continuous = (String, std::time::Duration, crate::SqlFormat);

/// Runs `q` over every trace in `dir` each period, printing each result on stdout
/// after a `-- window N: traces T, events E` line (the chunks arrived so far of
/// traces still streaming; their incompleteness is not a warning here).
pub fn continuous(dir: PathBuf, (q, every, format): Continuous) {
    let format = engine_format(format);
    let mut n = 0u64;
    loop {
        std::thread::sleep(every);
        n += 1;
        let Ok(data) = memlens_sql::Dataset::open(std::slice::from_ref(&dir)) else {
            continue; // nothing arrived yet
        };
        data.take_warnings();
        let events: u64 = data
            .traces
            .iter()
            .flat_map(|t| t.reader.chunks())
            .map(|c| u64::from(c.header.counts.events))
            .sum();
        let traces = data.traces.len();
        let s = match memlens_sql::Session::new(std::sync::Arc::new(data)) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("memlens: collect: query: {e}");
                continue;
            }
        };
        let out = std::io::stdout();
        let mut out = out.lock();
        let r = s.query(&q).map_err(anyhow::Error::from).and_then(|(schema, batches)| {
            use std::io::Write;
            writeln!(out, "-- window {n}: traces {traces}, events {events}")?;
            memlens_sql::write_result(&schema, &batches, format, &mut out)?;
            out.flush()?;
            Ok(())
        });
        if let Err(e) = r {
            eprintln!("memlens: collect: query: {e}");
        }
    }
}

/// A query that did not plan or run: the engine's message and the tables (exit 2).
fn query_error(e: memlens_sql::Error) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

fn warn_all(s: &Session) {
    for w in s.take_warnings() {
        eprintln!("memlens: warning: {w}");
    }
}

/// `memlens sql TRACE... [-e QUERY] [--cluster df://HOST:PORT]`.
pub fn sql(
    traces: &[PathBuf],
    query: Option<&str>,
    format: crate::SqlFormat,
    cluster: Option<&str>,
    alloc_fns: &[String],
) -> Result<i32> {
    let format = engine_format(format);
    let mut data = Dataset::open(traces)?;
    data.set_alloc_fns(alloc_fns)?;
    let data = Arc::new(data);
    let s = match cluster {
        None => Session::new(data)?,
        Some(url) => connect(url, data)?,
    };
    warn_all(&s);
    match query {
        Some(q) => {
            let r = s.query(q);
            warn_all(&s);
            let (schema, batches) = r.map_err(query_error)?;
            let out = std::io::stdout();
            let mut out = std::io::BufWriter::new(out.lock());
            memlens_sql::write_result(&schema, &batches, format, &mut out)?;
            out.flush()?;
            Ok(0)
        }
        None => interactive(&s, format),
    }
}

fn history_path() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    Some(Path::new(&home).join(".memlens_sql_history"))
}

/// The prompt: one statement per line (a trailing `;` is optional), `.tables`, `.quit`.
fn interactive(s: &Session, format: Format) -> Result<i32> {
    let mut rl =
        rustyline::DefaultEditor::new().context("cannot open the terminal for the prompt")?;
    let hist = history_path();
    if let Some(h) = &hist {
        let _ = rl.load_history(h);
    }
    eprintln!(
        "memlens sql: one statement per line; .tables lists the tables, .quit (or Ctrl-D) leaves"
    );
    loop {
        let line = match rl.readline("memlens> ") {
            Ok(l) => l,
            Err(rustyline::error::ReadlineError::Interrupted) => continue,
            Err(_) => break,
        };
        let q = line.trim().trim_end_matches(';').trim();
        if q.is_empty() {
            continue;
        }
        let _ = rl.add_history_entry(line.as_str());
        match q {
            ".quit" | ".exit" | "\\q" => break,
            ".tables" | "\\d" => {
                println!("{}", memlens_sql::describe_tables());
                continue;
            }
            _ => {}
        }
        match s.query(q) {
            Ok((schema, batches)) => {
                let out = std::io::stdout();
                let mut out = out.lock();
                memlens_sql::write_result(&schema, &batches, format, &mut out)?;
            }
            Err(e) => eprintln!("memlens: error: {e}"),
        }
        warn_all(s);
    }
    if let Some(h) = &hist {
        let _ = rl.save_history(h);
    }
    Ok(0)
}

/// `memlens export --format parquet OUT_DIR TRACE...`.
pub fn export_parquet(out: &Path, traces: &[PathBuf], alloc_fns: &[String]) -> Result<()> {
    if traces.is_empty() {
        anyhow::bail!("export --format parquet takes OUT_DIR then one or more traces: memlens export --format parquet OUT_DIR TRACE");
    }
    let mut data = Dataset::open(traces)?;
    data.set_alloc_fns(alloc_fns)?;
    for w in data.take_warnings() {
        eprintln!("memlens: warning: {w}");
    }
    let t = std::time::Instant::now();
    let st = memlens_sql::export_parquet(&data, out)?;
    for w in data.take_warnings() {
        eprintln!("memlens: warning: {w}");
    }
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "memlens: wrote {} ({} files; {} accesses in {:.2} s, {:.1} M accesses/s, {:.2} bytes/access)",
        out.display(),
        st.files,
        st.accesses,
        secs,
        st.accesses as f64 / secs.max(1e-9) / 1e6,
        st.access_bytes as f64 / (st.accesses.max(1) as f64)
    );
    Ok(())
}

#[cfg(feature = "cluster")]
fn connect(url: &str, data: Arc<Dataset>) -> Result<Session> {
    Ok(memlens_cluster::connect(url, data)?)
}

#[cfg(not(feature = "cluster"))]
fn connect(_: &str, _: Arc<Dataset>) -> Result<Session> {
    anyhow::bail!(NO_CLUSTER)
}

#[cfg(not(feature = "cluster"))]
const NO_CLUSTER: &str = "this memlens was built without the cluster (the `cluster` feature); \
    build it with default features for `sql --cluster` and `memlens cluster`";

/// `memlens cluster scheduler|executor`: runs until stopped.
#[cfg(feature = "cluster")]
pub fn cluster(c: crate::ClusterCmd) -> Result<()> {
    match c {
        crate::ClusterCmd::Scheduler { bind } => {
            eprintln!("memlens: cluster scheduler listening on {bind} (df://{bind})");
            memlens_cluster::run_scheduler(bind)?;
        }
        crate::ClusterCmd::Executor { scheduler, bind, grpc_port, work_dir, tasks } => {
            eprintln!("memlens: cluster executor on {bind} (gRPC port {grpc_port}) for scheduler {scheduler}");
            memlens_cluster::run_executor(&memlens_cluster::ExecutorOptions {
                scheduler,
                bind,
                grpc_port,
                work_dir,
                tasks,
            })?;
        }
    }
    Ok(())
}

#[cfg(not(feature = "cluster"))]
pub fn cluster(_: crate::ClusterCmd) -> Result<()> {
    anyhow::bail!(NO_CLUSTER)
}
