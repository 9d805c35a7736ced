//! Whole trace files: the reader must never panic, whatever the bytes.
//! The body is `memlens_format::fuzz::reader`, which `cargo test` also runs over
//! the corpus and seeded mutations (crates/format/tests/fuzz_smoke.rs).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| memlens_format::fuzz::reader(data));
