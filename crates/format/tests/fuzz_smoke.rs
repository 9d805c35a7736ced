//! Fuzz smoke run on stable Rust (cargo-fuzz needs nightly): each fuzz target's body
//! ([`memlens_format::fuzz`]) over the checked-in corpus (`fuzz/corpus/<target>/`,
//! made by `scripts/fuzz-corpus.sh`), then over seeded mutations of it. Deterministic
//! and bounded (well under a minute in a debug build); `MEMLENS_FUZZ_ITERS=N` runs N
//! mutations per target instead, `MEMLENS_FUZZ_SEED=S` another sequence. An input
//! that panics is saved under `target/fuzz-crashes/` and named in the failure.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.unwrap().path();
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
        })
        .collect();
    v.sort();
    assert!(
        v.len() >= 20,
        "{}: only {} inputs (run scripts/fuzz-corpus.sh)",
        dir.display(),
        v.len()
    );
    v
}

/// splitmix64: a seeded sequence, the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One to four libFuzzer-style edits: bit flips, interesting bytes and words,
/// cuts, deleted, duplicated and spliced-in ranges.
fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut d = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        if d.is_empty() {
            d.push(rng.next() as u8);
            continue;
        }
        let at = rng.below(d.len());
        match rng.below(8) {
            0 | 1 => d[at] ^= 1 << rng.below(8),
            2 => d[at] = [0, 1, 0x7f, 0x80, 0xff][rng.below(5)],
            3 => {
                let w = [0u32, 1, u32::MAX, 1 << 29, (1 << 29) + 1, 64][rng.below(6)];
                for (k, b) in w.to_le_bytes().iter().enumerate() {
                    if let Some(x) = d.get_mut(at + k) {
                        *x = *b;
                    }
                }
            }
            4 => d.truncate(at),
            5 => {
                let n = rng.below(64).min(d.len() - at);
                d.drain(at..at + n);
            }
            6 => {
                let n = rng.below(256).min(d.len() - at);
                let part = d[at..at + n].to_vec();
                let to = rng.below(d.len());
                d.splice(to..to, part);
            }
            _ => {
                if !other.is_empty() {
                    let from = rng.below(other.len());
                    let n = rng.below(512).min(other.len() - from);
                    let to = rng.below(d.len());
                    d.splice(to..to, other[from..from + n].iter().copied());
                }
            }
        }
    }
    d
}

fn save_crash(target: &str, what: &str, data: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz-crashes");
    let _ = std::fs::create_dir_all(&dir);
    let p = dir.join(format!("{target}-{what}"));
    let _ = std::fs::write(&p, data);
    p
}

fn run(target: &str, body: fn(&[u8]), default_iters: u64) {
    let inputs = corpus(target);
    let check = |what: &str, data: &[u8]| {
        if catch_unwind(AssertUnwindSafe(|| body(data))).is_err() {
            let p = save_crash(target, what, data);
            panic!("fuzz target {target} panicked on {what}: input saved as {}", p.display());
        }
    };
    for (name, data) in &inputs {
        check(name, data);
    }
    let iters = std::env::var("MEMLENS_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_iters);
    let seed = std::env::var("MEMLENS_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let mut rng = Rng(seed);
    let t = std::time::Instant::now();
    for i in 0..iters {
        let a = &inputs[rng.below(inputs.len())].1;
        let b = &inputs[rng.below(inputs.len())].1;
        let m = mutate(&mut rng, a, b);
        check(&format!("seed{seed}-mutation{i}"), &m);
    }
    eprintln!(
        "fuzz {target}: {} inputs, {iters} mutations in {:.1} s",
        inputs.len(),
        t.elapsed().as_secs_f64()
    );
}

#[test]
fn fuzz_reader_over_corpus_and_mutations() {
    run("reader", memlens_format::fuzz::reader, 10_000);
}

#[test]
fn fuzz_decoder_over_corpus_and_mutations() {
    run("decoder", memlens_format::fuzz::decoder, 150_000);
}
