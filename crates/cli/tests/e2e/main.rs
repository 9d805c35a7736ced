//! End-to-end tests: real programs built with `memlens cc`/`c++` by gcc and clang,
//! recorded, and checked for exact counts.

mod util;

mod analysis;
mod errors;
mod names;
mod record;
mod rust;
