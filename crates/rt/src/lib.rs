//! The memlens recording runtime: linked into an instrumented program, it receives
//! every load, store, atomic operation, function entry and exit, allocation and
//! thread event, and writes them as a compressed trace (`memlens-format`).
//!
//! # How programs are instrumented and linked
//!
//! - **C/C++** (gcc or clang): compile with the compiler's ThreadSanitizer
//!   instrumentation, but link *without* `-fsanitize` (that would pull in the real
//!   TSan runtime and silently bypass this one) and with the static library:
//!   ```text
//!   clang -O2 -g -fno-omit-frame-pointer -fsanitize=thread \
//!         -mllvm -tsan-instrument-read-before-write=1 -c x.c
//!   cc x.o -o x libmemlens_rt.a -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
//!   ```
//!   The native libraries are what `cargo rustc -p memlens-rt --crate-type staticlib
//!   -- --print native-static-libs` prints. Link it into the executable (its
//!   thread-local state uses the initial-exec TLS model, so it cannot live in a
//!   `dlopen`ed library); instrumented shared libraries are built with their
//!   callbacks undefined and resolve them against the executable, which must then
//!   export them (`-Wl,--export-dynamic-symbol=__tsan_*`).
//!   SanitizerCoverage `-fsanitize-coverage=edge,trace-loads,trace-stores` works too.
//! - **Rust**: only the program's own crates are compiled with
//!   `-C passes=function(tsan),sancov-module -C llvm-args=-sanitizer-coverage-level=3
//!   -C llvm-args=-sanitizer-coverage-trace-loads
//!   -C llvm-args=-sanitizer-coverage-trace-stores` (the tsan pass runs first, so
//!   atomics become `__tsan_atomic*` calls and sancov sees only plain accesses); this
//!   crate is a prebuilt, uninstrumented rlib. Since the program never names it,
//!   rustc would drop it: link it with `--extern force:memlens_rt=<rlib>
//!   -Z unstable-options` (stable rustc under `RUSTC_BOOTSTRAP=1`) or name it with
//!   `extern crate memlens_rt;`, plus `-L dependency=<the rlib's deps/>`. The
//!   integration test `rust.rs` builds a program both ways.
//!
//! Recording happens only when `MEMLENS_OUTPUT` names the trace file; otherwise the
//! callbacks only perform the atomic operations and copies they stand for, so an
//! instrumented program runs normally. Other options: `MEMLENS_VALUES`,
//! `MEMLENS_STACK_DEPTH`, `MEMLENS_ZSTD_LEVEL`, `MEMLENS_BUFFER_KB`, `MEMLENS_FILTER`,
//! `MEMLENS_ROI`, `MEMLENS_WRITERS`, `MEMLENS_REGISTERED_ONLY`, and the ordering
//! options `MEMLENS_ORDER`, `MEMLENS_ORDER_LOCKS`, `MEMLENS_ORDER_LINE`,
//! `MEMLENS_CAS_AS_WRITE` (see `options.rs` and `order.rs`: Lamport clocks at atomics
//! and interposed pthread synchronisation, `sync.rs`), and `MEMLENS_TRACE_CALLS`
//! (`calls.rs`: calls and returns of listed functions with arguments and return
//! value, by patching the NOP pads `-fpatchable-function-entry=5` leaves).
//!
//! # Brief overview
//! - Entry points: the TSan ABI (`__tsan_read4`, `__tsan_atomic64_fetch_add`, ...),
//!   SanitizerCoverage (`__sanitizer_cov_load8`, ...), interposed libc/libstdc++
//!   functions (malloc family, `operator new/delete`, `mem*`/`str*`, `pthread_create`,
//!   `fork`, `exec*`, `_exit`), `__memlens_custom_alloc/free` for user allocators,
//!   `__memlens_loop_run` for loops the pass compiled as runs (`loops.rs`), and
//!   the annotation API of `include/memlens.h` ([`roi_begin`], [`trace_off`], ...).
//!   Each callback is a naked trampoline that passes its return address (the
//!   instrumented instruction) as an extra argument and tail-jumps to the Rust code.
//! - Hot path (`record.rs`): thread-local state, one comparison (`pos < limit`), the
//!   event encoded straight into the thread's buffer, a counter bumped. No locks,
//!   allocation or system calls; anything unusual takes the general path.
//! - Buffers and writers (`session.rs`): full buffers go over a lock-free queue to
//!   background writer threads that frame them as chunks (zstd), so traced threads
//!   never compress. Backpressure instead of dropping; write errors are counted.
//! - Process lifecycle (`process.rs`): start-up, exit, `_exit`, fatal signals
//!   (flushed synchronously, then re-raised), fork (the child writes
//!   `<output>.<pid>`), exec (trace finished first), threads; an alternate
//!   signal stack per thread (`altstack.rs`) so a stack overflow is flushed too.
//! - The trace descriptor (`fds.rs`): high, close-on-exec, and invisible to the
//!   program's `close`/`dup*`/`fcntl`/`close_range`/`closefrom`.
//! - Values mode wraps the program's signal handlers (`sigwrap.rs`) so a handler
//!   never reads a store's location before the interrupted store is done.
//!
//! # Function entry and exit
//!
//! Each thread keeps a shadow stack of the stack pointers seen at
//! `__tsan_func_entry`. A frame whose stack pointer lies below the current one when
//! another entry or exit arrives was left without an exit (`longjmp`, an exception
//! unwinding through code without cleanups) and gets a synthesized
//! `FuncExit { pc: 0 }`; so does one at the same stack pointer, unless the new
//! entry is that of a function inlined into it (rustc instruments before inlining:
//! same stack pointer and call site, another entry pc), which nests. Frames still open when a thread or the process ends are
//! closed the same way. Recorded entries and exits therefore always balance per
//! thread; `longjmp` needs no interposer. Exceptions: streams cut short at process
//! end (threads still running at `exit`, `exec` or a fatal signal) end with their
//! frames open, and so does a crashing thread when the signal interrupted one of its
//! own events.
//!
//! # Limits
//! - x86_64 Linux, glibc, dynamically linked programs.
//! - Copies the compiler inlines (small `memcpy`, gcc's inlined `memset`) are
//!   invisible; only calls reach the libc interposers. gcc may report an aggregate
//!   copy both as `__tsan_read/write_range` and through an interposed `memcpy`.
//! - `execl*` (variadic) reach `execve` inside libc and are not seen; `vfork` children
//!   are left alone. `posix_spawn`ed instrumented programs write `<output>.<pid>`.
//! - Allocation stacks come from a frame-pointer walk: compile with
//!   `-fno-omit-frame-pointer` for useful ones.
//! - A fault while the thread blocks the signal (inside glibc's `pthread_kill`,
//!   for one) kills the process before any handler runs: no trace is written.
//! - `MEMLENS_VALUES`: 16-byte accesses record their low 64 bits; a store's value is
//!   read at the thread's next event or before its next release or atomic
//!   (`record::settle`; docs/trace-format.md), so a store to memory unmapped right after it
//!   (with no event in between) would fault; a still-running thread's last pending
//!   store at exit is counted as dropped.
//! - 128-bit atomic loads use `cmpxchg16b` and need writable memory.
//! - An atomic (or pthread release) in a signal handler that interrupted an atomic
//!   of the same thread on the same ordering stripe is not ordered: it gets no
//!   `Clock` (waiting for the stripe would never end, `order.rs`).
//! - At most 16384 threads are tracked for the final flush at exit.
#![deny(missing_docs)]
// The exported C entry points' contracts are those of the TSan/SanitizerCoverage
// ABI and of the libc functions they replace.
#![allow(clippy::missing_safety_doc)]
// Unit tests do not export the entry points, which leaves them unused there.
#![cfg_attr(test, allow(dead_code))]

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
compile_error!("memlens-rt supports x86_64 Linux only");

/// Defines an exported naked entry point `$sym` that runs `$asm` (typically
/// `mov <next argument register>, [rsp]`, handing the return address over) and
/// tail-jumps to `$imp`.
macro_rules! entry {
    ($abi:literal fn $name:ident = $sym:expr; ($($a:ident: $t:ty),*) $(-> $r:ty)?;
     [$($asm:literal),+] => $imp:path) => {
        #[unsafe(naked)]
        #[cfg_attr(not(test), unsafe(export_name = $sym))]
        #[cfg_attr(test, allow(dead_code))]
        pub(crate) unsafe extern $abi fn $name($($a: $t),*) $(-> $r)? {
            core::arch::naked_asm!($($asm,)+ "jmp {f}", f = sym $imp)
        }
    };
}

mod alloc;
mod altstack;
pub mod api;
mod atomics;
mod calls;
mod elfsyms;
mod fds;
mod filter;
mod liveheap;
mod liveprobe;
mod livetrace;
mod livewatch;
mod loops;
mod modules;
mod options;
mod order;
mod process;
mod real;
mod record;
mod sancov;
mod session;
mod sigwrap;
mod state;
mod strings;
mod sync;
mod sys;
mod tsan;
mod vector;

pub use api::{register_thread, roi_begin, roi_end, thread_name, trace_off, trace_on};

/// Why recording could not start (reported on stderr; the program runs on).
#[derive(Debug)]
pub(crate) enum Error {
    /// The trace file could not be created.
    Open {
        /// The path tried.
        path: String,
        /// The `errno` of `open`.
        errno: i32,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Open { path, errno } => write!(
                f,
                "cannot create the trace {path}: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
        }
    }
}
