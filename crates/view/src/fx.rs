//! Small helpers of the index builder: a fast hash for integer keys and a kernel
//! that can be switched off.

use memlens_analysis::Kernel;
use memlens_format::{Event, ThreadId};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A fast hash for integer keys (the per-access maps); keys are not attacker-chosen.
#[derive(Default)]
pub(crate) struct Fx(u64);

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

pub(crate) type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;
pub(crate) type FxSet<K> = std::collections::HashSet<K, BuildHasherDefault<Fx>>;

/// A kernel fed only when `on`. The sharing tables list only data two threads
/// touched, so a one-thread trace skips their per-access work (about half of the
/// build's CPU): its tables come out empty either way.
pub(crate) struct Gate<K> {
    pub(crate) on: bool,
    pub(crate) k: K,
}

impl<K: Kernel> Kernel for Gate<K> {
    type Output = K::Output;

    #[inline]
    fn process(&mut self, t: ThreadId, ev: &Event) {
        if self.on {
            self.k.process(t, ev);
        }
    }

    #[inline]
    fn process_batch(&mut self, t: ThreadId, evs: &[Event]) {
        if self.on {
            self.k.process_batch(t, evs);
        }
    }

    fn process_run(&mut self, t: ThreadId, body: &[Event], deltas: &[u64], reps: u64) {
        if self.on {
            self.k.process_run(t, body, deltas, reps);
        }
    }

    fn named_runs(&self) -> bool {
        !self.on || self.k.named_runs()
    }

    fn wants_runs(&self) -> bool {
        self.on && self.k.wants_runs()
    }

    #[inline]
    fn prefetch(&self, t: ThreadId, ev: &Event) {
        if self.on {
            self.k.prefetch(t, ev);
        }
    }

    fn finish(self) -> K::Output {
        self.k.finish()
    }
}
