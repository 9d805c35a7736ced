//! End-to-end tests: real programs built with `memlens cc`/`c++` by gcc and clang,
//! recorded, and checked for exact counts.

mod util;

mod agree;
mod analysis;
mod annotate;
mod builds;
mod calls;
mod columns;
mod contract;
mod damaged;
mod dbi;
mod dbi_fidelity;
mod errors;
mod export;
mod fidelity;
mod filters;
mod limits;
mod live;
mod live_gui;
mod live_mem;
mod live_pads;
mod live_probes;
mod live_trace;
mod loops;
mod names;
mod order;
mod parallel_read;
mod paths;
mod record;
mod rust;
mod schemas;
mod soak;
mod sql;
mod stream;
mod tables;
mod untraced;
mod view;
mod view_calls;
mod view_diff;
mod view_index;
mod view_layout;
mod view_range;
mod view_time;
mod view_ux;
