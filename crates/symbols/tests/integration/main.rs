//! Integration tests: real C, C++ and Rust programs compiled at test time, symbolized
//! through the public API, with addresses taken from `nm` and `objdump`.

mod c;
mod cpp;
mod lines;
mod rust;
mod selftest;
mod util;
