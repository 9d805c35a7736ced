//! `memlens cargo`: instrumented Rust builds (filled in with the runtime's link recipe).

use anyhow::{bail, Result};

/// Runs cargo with memlens instrumentation.
pub fn cargo(_args: Vec<String>) -> Result<i32> {
    bail!("memlens cargo is not available in this build")
}
