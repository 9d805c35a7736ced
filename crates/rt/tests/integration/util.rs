//! Building test programs against the runtime, running them, reading their traces.

use memlens_format::{Event, ThreadId, TraceReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The cargo profile directory holding `libmemlens_rt.a` and `.rlib`
/// (`$CARGO_TARGET_DIR/<profile>`): two levels above this test binary.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent().and_then(Path::parent).expect("target/<profile>").to_path_buf()
}

/// The newest `libmemlens_rt.<ext>`: `cargo build` leaves it in the profile
/// directory, `cargo test` (building the library as a test dependency) only in
/// `deps/` under a hashed name; whichever was built last matches the sources.
pub fn runtime_artifact(ext: &str) -> PathBuf {
    let dir = profile_dir();
    let mut found: Vec<PathBuf> = vec![dir.join(format!("libmemlens_rt.{ext}"))];
    if let Ok(rd) = std::fs::read_dir(dir.join("deps")) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("libmemlens_rt-") && name.ends_with(&format!(".{ext}")) {
                found.push(e.path());
            }
        }
    }
    found
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .unwrap_or_else(|| panic!("no libmemlens_rt.{ext} under {}", dir.display()))
}

pub fn staticlib() -> PathBuf {
    runtime_artifact("a")
}

/// The native libraries the staticlib needs (`cargo rustc -p memlens-rt
/// --crate-type staticlib -- --print native-static-libs`).
pub const NATIVE_LIBS: [&str; 7] = ["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc"];

pub fn programs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs")
}

pub fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

#[path = "../../../../tests/support/scratch.rs"]
mod cleanup;

/// A fresh scratch directory for one test, removed when the test passes.
pub fn scratch(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "memlens-rt-{}-{}-{}",
        std::process::id(),
        name,
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    cleanup::remove_on_pass(&d);
    d
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compiler {
    Gcc,
    Clang,
}

pub const BOTH: [Compiler; 2] = [Compiler::Gcc, Compiler::Clang];

fn check(out: Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Compiles `programs/<src>` with TSan instrumentation (`-c`) and links it with
/// plain `cc`/`c++` plus the runtime archive. Returns the executable.
pub fn build(src: &str, cc: Compiler, dir: &Path) -> PathBuf {
    let cpp = src.ends_with(".cpp");
    let (compiler, extra): (&str, &[&str]) = match (cc, cpp) {
        (Compiler::Gcc, false) => ("gcc", &[]),
        (Compiler::Gcc, true) => ("g++", &[]),
        (Compiler::Clang, false) => {
            ("clang-22", &["-mllvm", "-tsan-instrument-read-before-write=1"])
        }
        (Compiler::Clang, true) => {
            ("clang++-22", &["-mllvm", "-tsan-instrument-read-before-write=1"])
        }
    };
    let stem = src.split('.').next().unwrap();
    let obj = dir.join(format!("{stem}-{cc:?}.o"));
    let exe = dir.join(format!("{stem}-{cc:?}"));
    let out = Command::new(compiler)
        .args(["-O2", "-g", "-fno-omit-frame-pointer", "-fsanitize=thread", "-c"])
        .args(extra)
        .arg("-I")
        .arg(include_dir())
        .arg(programs().join(src))
        .arg("-o")
        .arg(&obj)
        .output()
        .expect("run the compiler");
    check(out, &format!("{compiler} -c {src}"));
    // Link WITHOUT -fsanitize: that would pull in the real TSan runtime.
    let linker = if cpp { "c++" } else { "cc" };
    let out = Command::new(linker)
        .arg(&obj)
        .arg("-o")
        .arg(&exe)
        .arg(staticlib())
        .args(NATIVE_LIBS)
        .output()
        .expect("run the linker");
    check(out, &format!("linking {src}"));
    exe
}

/// Runs `exe` with the trace going to `trace` (None: runtime inactive).
pub fn run(exe: &Path, args: &[&str], trace: Option<&Path>, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(exe);
    cmd.args(args).env_remove("MEMLENS_OUTPUT").env_remove("MEMLENS_OWNER_PID");
    for k in ["VALUES", "ROI", "FILTER", "BUFFER_KB", "ZSTD_LEVEL", "STACK_DEPTH", "WRITERS"] {
        cmd.env_remove(format!("MEMLENS_{k}"));
    }
    if let Some(t) = trace {
        cmd.env("MEMLENS_OUTPUT", t);
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("run the test program")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The hex value after `key=` in the program's output.
pub fn hex_field(out: &str, key: &str) -> u64 {
    let v = out
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key}= missing in {out:?}"));
    u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap()
}

/// A decoded trace: the reader and every stream's events.
pub struct Trace {
    pub reader: TraceReader,
    pub streams: Vec<Vec<Event>>,
}

pub fn read(path: &Path) -> Trace {
    let reader = TraceReader::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut streams = Vec::new();
    for s in reader.streams() {
        let evs: Vec<Event> =
            reader.events(s.thread).collect::<Result<_, _>>().expect("stream decodes");
        assert_eq!(s.thread, ThreadId(streams.len() as u32), "stream ids are dense");
        streams.push(evs);
    }
    Trace { reader, streams }
}

impl Trace {
    pub fn all(&self) -> impl Iterator<Item = &Event> {
        self.streams.iter().flatten()
    }

    /// (loads, stores) of plain accesses of `size` bytes at `addr`.
    pub fn accesses_at(&self, stream: usize, addr: u64) -> (usize, usize) {
        let mut n = (0, 0);
        for e in &self.streams[stream] {
            if let Event::Access { addr: a, kind, atomic: false, .. } = e {
                if a.0 == addr {
                    match kind {
                        memlens_format::AccessKind::Read => n.0 += 1,
                        memlens_format::AccessKind::Write => n.1 += 1,
                    }
                }
            }
        }
        n
    }

    /// Every stream starts with ThreadStart, recorded entries and exits balance,
    /// chunk counters match the events, and the trace was finished.
    pub fn check_invariants(&self) {
        for (i, evs) in self.streams.iter().enumerate() {
            assert!(
                matches!(evs.first(), Some(Event::ThreadStart { .. })),
                "stream {i} starts with {:?}",
                evs.first()
            );
            let mut depth: i64 = 0;
            for e in evs {
                match e {
                    Event::FuncEnter { .. } => depth += 1,
                    Event::FuncExit { .. } => {
                        depth -= 1;
                        assert!(depth >= 0, "stream {i}: exit without entry");
                    }
                    _ => {}
                }
            }
            assert_eq!(depth, 0, "stream {i}: unbalanced entries/exits");
            let mut c = memlens_format::ChunkCounts::default();
            for e in evs {
                memlens_format::count(&mut c, e);
            }
            assert_eq!(c, self.reader.streams()[i].counts, "stream {i} counters");
        }
    }
}
