//! SQL over memlens traces with Apache DataFusion, and their Parquet export.
//!
//! A [`Dataset`] is one or more traces read in place (no conversion step). Its
//! tables (`accesses`, `allocations`, `calls`, `threads`, `code`, `data`) are
//! DataFusion table providers over [`memlens_format::TraceReader`]: one partition
//! per range of chunks, only the projected columns built, chunks skipped by
//! thread and access kind. Names come from the symbols and names crates through
//! the scalar functions `line`, `function`, `variable`, `field` and `cache_line`.
//! `docs/sql.md` lists every column.
//!
//! ```no_run
//! use std::sync::Arc;
//! let data = Arc::new(memlens_sql::Dataset::open(&["memlens.trace".into()])?);
//! let s = memlens_sql::Session::new(data)?;
//! let (schema, rows) =
//!     s.query("SELECT variable(address) v, count(*) n FROM accesses GROUP BY v ORDER BY n DESC")?;
//! memlens_sql::write_result(&schema, &rows, memlens_sql::Format::Table, &mut std::io::stdout())?;
//! # Ok::<(), memlens_sql::Error>(())
//! ```
#![deny(missing_docs)]

mod dataset;
mod names;
mod output;
mod parquet_out;
mod pq_pages;
mod run_rows;
mod small;
mod tables;
pub mod wire;

pub use dataset::{Dataset, Trace};
pub use output::{write as write_result, Format};
pub use parquet_out::{export_parquet, ExportStats};

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::prelude::{SessionConfig, SessionContext};
use std::sync::Arc;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A trace could not be opened.
    #[error("{path}: {source}")]
    Trace {
        /// The file.
        path: String,
        /// Why.
        source: memlens_format::Error,
    },
    /// A path named no trace.
    #[error("{0}")]
    Input(String),
    /// The query did not plan or run (a syntax error, an unknown column...).
    #[error("{message}\n{tables}")]
    Query {
        /// The engine's message.
        message: String,
        /// The tables and their columns, to say what can be asked.
        tables: String,
    },
    /// The engine failed outside a query.
    #[error(transparent)]
    Engine(#[from] datafusion::error::DataFusionError),
    /// Writing failed.
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    /// Parquet writing failed.
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
}

/// A SQL session over a dataset: every table and function registered.
pub struct Session {
    ctx: SessionContext,
    data: Arc<Dataset>,
    rt: tokio::runtime::Runtime,
}

impl Session {
    /// A session over `data`, scanning on every core.
    pub fn new(data: Arc<Dataset>) -> Result<Session, Error> {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let cfg = SessionConfig::new().with_target_partitions(cores).with_information_schema(true);
        Session::with_context(data, SessionContext::new_with_config(cfg))
    }

    /// A session over `data` in a context made elsewhere (a cluster's client:
    /// its planner sends the plans away). Registers the tables and functions.
    pub fn with_context(data: Arc<Dataset>, ctx: SessionContext) -> Result<Session, Error> {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        tables::register(&ctx, &data)?;
        names::register(&ctx, &data);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cores)
            .enable_all()
            .build()
            .map_err(|e| Error::Io("tokio runtime".into(), e))?;
        Ok(Session { ctx, data, rt })
    }

    /// Runs `f` on the session's runtime (a cluster client connects on it).
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Runs one statement and collects its result.
    pub fn query(
        &self,
        sql: &str,
    ) -> Result<(Arc<datafusion::arrow::datatypes::Schema>, Vec<RecordBatch>), Error> {
        let q = |e: datafusion::error::DataFusionError| Error::Query {
            message: e.to_string(),
            tables: tables::describe(),
        };
        self.rt.block_on(async {
            let df = self.ctx.sql(sql).await.map_err(q)?;
            let schema = Arc::new(df.schema().as_arrow().clone());
            let batches = df.collect().await.map_err(q)?;
            Ok((schema, batches))
        })
    }

    /// Plans `sql` without running it: a syntax error or an unknown table or
    /// column is reported as [`Error::Query`].
    pub fn check(&self, sql: &str) -> Result<(), Error> {
        let q = |e: datafusion::error::DataFusionError| Error::Query {
            message: e.to_string(),
            tables: tables::describe(),
        };
        self.rt.block_on(async { self.ctx.sql(sql).await.map(|_| ()).map_err(q) })
    }

    /// Warnings collected so far (damaged chunks met while scanning), each once.
    pub fn take_warnings(&self) -> Vec<String> {
        self.data.take_warnings()
    }
}

/// The tables and their columns, one line per table.
pub fn describe_tables() -> String {
    tables::describe()
}
