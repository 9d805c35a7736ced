//! `memlens sql`, `export --format parquet` and `collect --query` in a build
//! without the `sql` feature (`--no-default-features`, as `scripts/demo.sh`
//! builds to stay quick): each says how to get them.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// A continuous query of `collect`: the SQL, its period and output format.
pub type Continuous = (String, std::time::Duration, crate::SqlFormat);

const WHY: &str = "this memlens was built without SQL (the `sql` feature); \
    build it with `cargo build --release` (default features) for sql, parquet and collect --query";

pub fn sql(
    _: &[PathBuf],
    _: Option<&str>,
    _: crate::SqlFormat,
    _: Option<&str>,
    _: &[String],
) -> Result<i32> {
    bail!(WHY)
}

pub fn cluster(_: crate::ClusterCmd) -> Result<()> {
    bail!(WHY)
}

pub fn export_parquet(_: &Path, _: &[PathBuf], _: &[String]) -> Result<()> {
    bail!(WHY)
}

pub fn check(_: &str) -> Result<()> {
    bail!(WHY)
}

pub fn continuous(_: PathBuf, _: Continuous) {}
