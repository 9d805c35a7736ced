//! memlens SQL on an Apache Ballista cluster: the scheduler, the executor and
//! the client, each with memlens's tables and functions.
//!
//! The engine is [`memlens_sql`]'s; this crate only teaches Ballista to carry
//! it. Its two codecs ([`LogicalCodec`], [`PhysicalCodec`]) put memlens's tables,
//! scans and functions on the wire through [`memlens_sql::wire`] and leave
//! everything else to Ballista's own codecs. Every machine reads the traces
//! from shared storage at the same absolute path (Parquet exports are read by
//! Ballista itself).
//!
//! ```no_run
//! use std::sync::Arc;
//! // on each machine: memlens_cluster::run_scheduler / run_executor, then
//! let data = Arc::new(memlens_sql::Dataset::open(&["/shared/a.trace".into()])?);
//! let s = memlens_cluster::connect("df://127.0.0.1:50050", data)?;
//! let (schema, rows) = s.query("SELECT thread, count(*) FROM accesses GROUP BY thread")?;
//! # Ok::<(), memlens_cluster::Error>(())
//! ```
#![deny(missing_docs)]

use ballista_core::extension::{SessionConfigExt, SessionStateExt};
use ballista_core::serde::{BallistaLogicalExtensionCodec, BallistaPhysicalExtensionCodec};
use ballista_executor::executor_process::{start_executor_process, ExecutorProcessConfig};
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::start_server;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::TableProvider;
use datafusion::common::TableReference;
use datafusion::datasource::file_format::FileFormatFactory;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SessionStateBuilder, TaskContext};
use datafusion::logical_expr::{Extension, LogicalPlan, ScalarUDF};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_proto::logical_plan::LogicalExtensionCodec;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use memlens_sql::{wire, Dataset, Session};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The cluster's address is not `df://HOST:PORT`.
    #[error("{0:?} is not a cluster address: write df://HOST:PORT (the scheduler's)")]
    Address(String),
    /// Nothing answers at the scheduler's address.
    #[error("no Ballista scheduler at {addr}: {why} (start one with `memlens cluster scheduler`)")]
    Unreachable {
        /// The address tried.
        addr: String,
        /// Why the connection failed.
        why: std::io::Error,
    },
    /// The SQL side failed (a trace, a query).
    #[error(transparent)]
    Sql(#[from] memlens_sql::Error),
    /// Ballista failed to start or stopped with an error.
    #[error("ballista: {0}")]
    Ballista(String),
    /// The async runtime could not start.
    #[error("tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

fn external(e: memlens_sql::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// Decodes `buf` with `ours` when memlens wrote it, else with Ballista's `theirs`.
fn decode_with<T>(
    buf: &[u8],
    ours: impl FnOnce(&[u8]) -> Result<T, memlens_sql::Error>,
    theirs: impl FnOnce() -> DfResult<T>,
) -> DfResult<T> {
    if wire::is_ours(buf) {
        ours(buf).map_err(external)
    } else {
        theirs()
    }
}

/// Appends memlens's bytes for a node (`Some`: one of ours), else lets Ballista's
/// codec encode it.
fn encode_with(
    ours: Option<Vec<u8>>,
    buf: &mut Vec<u8>,
    theirs: impl FnOnce(&mut Vec<u8>) -> DfResult<()>,
) -> DfResult<()> {
    match ours {
        Some(b) => {
            buf.extend_from_slice(&b);
            Ok(())
        }
        None => theirs(buf),
    }
}

/// Ballista's logical codec, plus memlens's tables and functions.
#[derive(Debug, Default)]
pub struct LogicalCodec {
    inner: BallistaLogicalExtensionCodec,
}

impl LogicalExtensionCodec for LogicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[LogicalPlan],
        ctx: &TaskContext,
    ) -> DfResult<Extension> {
        self.inner.try_decode(buf, inputs, ctx)
    }
    fn try_encode(&self, node: &Extension, buf: &mut Vec<u8>) -> DfResult<()> {
        self.inner.try_encode(node, buf)
    }
    fn try_decode_table_provider(
        &self,
        buf: &[u8],
        table_ref: &TableReference,
        schema: SchemaRef,
        ctx: &TaskContext,
    ) -> DfResult<Arc<dyn TableProvider>> {
        decode_with(buf, wire::decode_table, || {
            self.inner.try_decode_table_provider(buf, table_ref, schema, ctx)
        })
    }
    fn try_encode_table_provider(
        &self,
        table_ref: &TableReference,
        node: Arc<dyn TableProvider>,
        buf: &mut Vec<u8>,
    ) -> DfResult<()> {
        encode_with(wire::encode_table(node.as_ref()), buf, |buf| {
            self.inner.try_encode_table_provider(table_ref, node, buf)
        })
    }
    fn try_decode_file_format(
        &self,
        buf: &[u8],
        ctx: &TaskContext,
    ) -> DfResult<Arc<dyn FileFormatFactory>> {
        self.inner.try_decode_file_format(buf, ctx)
    }
    fn try_encode_file_format(
        &self,
        buf: &mut Vec<u8>,
        node: Arc<dyn FileFormatFactory>,
    ) -> DfResult<()> {
        self.inner.try_encode_file_format(buf, node)
    }
    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> DfResult<Arc<ScalarUDF>> {
        decode_with(buf, wire::decode_function, || self.inner.try_decode_udf(name, buf))
    }
    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> DfResult<()> {
        encode_with(wire::encode_function(node), buf, |buf| self.inner.try_encode_udf(node, buf))
    }
}

/// Ballista's physical codec, plus memlens's scans and functions.
#[derive(Debug, Default)]
pub struct PhysicalCodec {
    inner: BallistaPhysicalExtensionCodec,
}

impl PhysicalExtensionCodec for PhysicalCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        conv: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        decode_with(
            buf,
            |b| wire::decode_plan(b, inputs),
            || self.inner.try_decode(buf, inputs, ctx, conv),
        )
    }
    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        conv: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<()> {
        encode_with(wire::encode_plan(node.as_ref()), buf, |buf| {
            self.inner.try_encode(node, buf, conv)
        })
    }
    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> DfResult<Arc<ScalarUDF>> {
        decode_with(buf, wire::decode_function, || self.inner.try_decode_udf(name, buf))
    }
    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> DfResult<()> {
        encode_with(wire::encode_function(node), buf, |buf| self.inner.try_encode_udf(node, buf))
    }
}

/// `df://HOST:PORT` → the scheduler's socket address.
fn parse_url(url: &str) -> Result<(String, SocketAddr), Error> {
    let bad = || Error::Address(url.to_string());
    let hp = url.strip_prefix("df://").ok_or_else(bad)?.trim_end_matches('/');
    let addr = hp.to_socket_addrs().map_err(|_| bad())?.next().ok_or_else(bad)?;
    Ok((hp.to_string(), addr))
}

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(Error::Runtime)
}

/// Partitions of a cluster query's scans and shuffles.
pub const PARTITIONS: usize = 16;

/// A SQL session whose queries run on the cluster whose scheduler is at `url`
/// (`df://HOST:PORT`). The client reads the traces' chunk indexes; the scans run
/// on the executors, which open the same files.
pub fn connect(url: &str, data: Arc<Dataset>) -> Result<Session, Error> {
    let (hp, addr) = parse_url(url)?;
    data.set_plain_text();
    std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|why| Error::Unreachable { addr: hp.clone(), why })?;
    // more partitions than one machine's cores: each executor gets some
    let config = SessionConfig::new_with_ballista()
        .with_target_partitions(PARTITIONS)
        .with_information_schema(true)
        .with_ballista_logical_extension_codec(Arc::new(LogicalCodec::default()))
        .with_ballista_physical_extension_codec(Arc::new(PhysicalCodec::default()));
    let state = SessionStateBuilder::new().with_config(config).with_default_features().build();
    let state = state
        .upgrade_for_ballista(format!("http://{hp}"))
        .map_err(|e| Error::Ballista(e.to_string()))?;
    // `FROM '/shared/export/accesses/'` reads a Parquet export on the executors
    let ctx = SessionContext::new_with_state(state).enable_url_table();
    Ok(Session::with_context(data, ctx)?)
}

/// Runs a scheduler listening on `bind` until the process is stopped.
pub fn run_scheduler(bind: SocketAddr) -> Result<(), Error> {
    let config = SchedulerConfig {
        bind_host: bind.ip().to_string(),
        bind_port: bind.port(),
        external_host: bind.ip().to_string(),
        override_logical_codec: Some(Arc::new(LogicalCodec::default())),
        override_physical_codec: Some(Arc::new(PhysicalCodec::default())),
        ..SchedulerConfig::default()
    };
    runtime()?.block_on(async {
        let cluster = BallistaCluster::new_from_config(&config)
            .await
            .map_err(|e| Error::Ballista(e.to_string()))?;
        start_server(cluster, bind, Arc::new(config))
            .await
            .map_err(|e| Error::Ballista(e.to_string()))
    })
}

/// Where an executor listens and which scheduler it serves.
#[derive(Clone, Debug)]
pub struct ExecutorOptions {
    /// The scheduler's address.
    pub scheduler: SocketAddr,
    /// The address and port of the executor's Flight service (results are fetched there).
    pub bind: SocketAddr,
    /// The port of its gRPC service.
    pub grpc_port: u16,
    /// Where its shuffle files go (None: a directory of its own under the temp dir).
    pub work_dir: Option<PathBuf>,
    /// Tasks run at once (0: one per core).
    pub tasks: usize,
}

/// Runs an executor until the process is stopped (SIGTERM, Ctrl-C) or the
/// scheduler tells it to stop.
pub fn run_executor(o: &ExecutorOptions) -> Result<(), Error> {
    // a work directory that lives as long as the executor
    let tmp;
    let work_dir = match &o.work_dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::Builder::new()
                .prefix("memlens-executor-")
                .tempdir()
                .map_err(Error::Runtime)?;
            tmp.path().to_path_buf()
        }
    };
    let config = ExecutorProcessConfig {
        scheduler_host: o.scheduler.ip().to_string(),
        scheduler_port: o.scheduler.port(),
        bind_host: o.bind.ip().to_string(),
        port: o.bind.port(),
        grpc_port: o.grpc_port,
        work_dir: Some(work_dir.display().to_string()),
        vcores: o.tasks,
        override_logical_codec: Some(Arc::new(LogicalCodec::default())),
        override_physical_codec: Some(Arc::new(PhysicalCodec::default())),
        ..ExecutorProcessConfig::default()
    };
    runtime()?.block_on(async {
        start_executor_process(Arc::new(config)).await.map_err(|e| Error::Ballista(e.to_string()))
    })
}
