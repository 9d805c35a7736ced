//! Scratch directories that a passing test removes (shared by the e2e and the
//! runtime's integration tests through `#[path]`).
//!
//! Every test program links the runtime with its debug info (~20 MB), and a CI
//! run builds hundreds: kept, they filled the CI machine's disk. A directory is
//! removed when the test thread that made it ends without a panic; a failing
//! test keeps its directory for a look.

use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::sync::Once;

struct Made(RefCell<Vec<PathBuf>>);

impl Drop for Made {
    fn drop(&mut self) {
        if FAILED.with(Cell::get) || std::env::var_os("MEMLENS_KEEP_SCRATCH").is_some() {
            return;
        }
        for dir in self.0.borrow().iter() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

thread_local! {
    static MADE: Made = const { Made(RefCell::new(Vec::new())) };
    static FAILED: Cell<bool> = const { Cell::new(false) };
}

/// Removes `dir` when the current test passes. Only test threads (libtest names
/// them after the test) register: a directory made by a helper thread, or for a
/// value cached across tests, stays.
pub fn remove_on_pass(dir: &std::path::Path) {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let _ = FAILED.try_with(|f| f.set(true));
            prev(info)
        }));
    });
    let named = std::thread::current().name().is_some_and(|n| n != "main");
    if named {
        let _ = MADE.try_with(|m| m.0.borrow_mut().push(dir.to_path_buf()));
    }
}
