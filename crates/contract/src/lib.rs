//! The recording contract of memlens's two recorders.
//!
//! The compiled path (`memlens-rt`, linked into programs built with `memlens cc`)
//! and the QEMU path (`memlens-dbi`, the plugin, with `memlens-dbi-preload` in the
//! guest) must record the same program the same way. What they must agree on lives
//! here, once:
//!
//! - [`entry`]: the table of interposed allocation and synchronisation entry points
//!   (symbol, symbol version, role, signature), expanded by both recorders with
//!   their own implementations, so an entry point cannot exist in one and not the
//!   other;
//! - [`filter`]: the `--dbi-filter` text the CLI writes and the plugin reads;
//! - [`options`]: the `MEMLENS_*` options both read, with one syntax for flags and
//!   one list of the `option` metadata records they write;
//! - [`control`]: the live control socket the runtime and `memlens live` share
//!   (where it lives, who may connect, the protocol version).
//!
//! Only libc: the guest preload library links it.
#![deny(missing_docs)]

pub mod control;
pub mod entry;
pub mod filter;
pub mod options;
