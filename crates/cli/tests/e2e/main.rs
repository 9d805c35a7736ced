//! End-to-end tests: real programs built with `memlens cc`/`c++` by gcc and clang,
//! recorded, and checked for exact counts.

mod util;

mod analysis;
mod annotate;
mod calls;
mod dbi;
mod errors;
mod export;
mod fidelity;
mod live;
mod names;
mod order;
mod parallel_read;
mod record;
mod rust;
mod soak;
mod view;
