//! End-to-end tests: real programs built with `memlens cc`/`c++` by gcc and clang,
//! recorded, and checked for exact counts.

mod util;

mod analysis;
mod dbi;
mod errors;
mod names;
mod order;
mod record;
mod rust;
