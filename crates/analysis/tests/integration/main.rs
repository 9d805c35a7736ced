//! Integration tests of memlens-analysis (one binary).

mod cachegrind;
