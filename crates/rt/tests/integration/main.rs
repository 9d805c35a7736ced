//! End-to-end tests of the runtime: small C, C++ and Rust programs are built with
//! the compilers' instrumentation and linked against the freshly built
//! `libmemlens_rt.a` (or `.rlib`), run with `MEMLENS_OUTPUT` set, and their traces
//! decoded with `memlens_format::TraceReader`.

mod c;
mod cpp;
mod process;
mod rust;
mod util;
