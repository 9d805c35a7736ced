//! `memlens live` / `memlens probe`: kernel uprobes on a plain `gcc -O1 -g` program
//! (tests/programs/probed.c) whose phases are driven by signals, so every count is
//! exact. Needs root (or CAP_PERFMON) and the uprobe PMU: skipped with a note outside
//! CI when missing; CI runs them as root.

use crate::util::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

pub(crate) const N: u64 = 1000;

pub(crate) fn unsupported() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let uprobe = Path::new("/sys/bus/event_source/devices/uprobe/type").exists();
    if root && uprobe {
        return false;
    }
    assert!(std::env::var_os("CI").is_none(), "live probe tests need root and uprobes in CI");
    eprintln!("note: skipping live probe tests (need root and the uprobe PMU)");
    true
}

/// `probed` built with plain gcc -O1 -g (no memlens instrumentation).
pub(crate) fn build_probed(dir: &Path) -> PathBuf {
    let exe = dir.join("probed");
    let out = Command::new("gcc")
        .args(["-O1", "-g", "-pthread"])
        .arg(programs().join("probed.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(out.status.success(), "gcc: {}", String::from_utf8_lossy(&out.stderr));
    exe
}

pub(crate) struct Target {
    child: Child,
    lines: Receiver<String>,
}

impl Target {
    pub(crate) fn start(exe: &Path, n: u64) -> Target {
        Target::start_env(exe, n, &[])
    }

    pub(crate) fn start_env(exe: &Path, n: u64, env: &[(&str, &Path)]) -> Target {
        let mut cmd = Command::new(exe);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.arg(n.to_string()).stdout(Stdio::piped()).spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let t = Target { child, lines };
        assert!(t.line().starts_with("ready"));
        t
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub(crate) fn line(&self) -> String {
        self.lines.recv_timeout(Duration::from_secs(120)).expect("the target printed nothing")
    }

    /// Sends `sig` and returns the phase's result (the last word of its line).
    pub(crate) fn phase(&self, sig: i32) -> String {
        // SAFETY: our own child.
        unsafe { libc::kill(self.pid(), sig) };
        let l = self.line();
        assert!(l.starts_with("phase"), "{l}");
        l.rsplit(' ').next().unwrap().to_owned()
    }

    /// Ends it with SIGHUP: it prints "bye" and exits 0.
    pub(crate) fn finish(mut self) {
        // SAFETY: our own child.
        unsafe { libc::kill(self.pid(), libc::SIGHUP) };
        assert_eq!(self.line(), "bye");
        assert!(self.child.wait().unwrap().success());
    }

    /// `len` bytes of its memory at the runtime address of ELF address `vaddr`.
    pub(crate) fn code(&self, vaddr: u64, len: usize) -> Vec<u8> {
        let exe = std::fs::read_link(format!("/proc/{}/exe", self.pid())).unwrap();
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", self.pid())).unwrap();
        let base = maps
            .lines()
            .find(|l| {
                l.ends_with(exe.to_str().unwrap())
                    && l.split_whitespace().nth(2) == Some("00000000")
            })
            .and_then(|l| u64::from_str_radix(l.split('-').next().unwrap(), 16).ok())
            .expect("the executable's first mapping");
        let mut f = std::fs::File::open(format!("/proc/{}/mem", self.pid())).unwrap();
        f.seek(SeekFrom::Start(base + vaddr)).unwrap();
        let mut buf = vec![0; len];
        f.read_exact(&mut buf).unwrap();
        buf
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A collector; its control socket lives in the test's own XDG_RUNTIME_DIR.
pub(crate) struct Live {
    child: Child,
    pub(crate) runtime: PathBuf,
    pid: i32,
}

impl Live {
    pub(crate) fn attach(dir: &Path, pid: i32, extra: &[&str]) -> Live {
        let runtime = dir.join("run");
        std::fs::create_dir_all(&runtime).unwrap();
        let child = Command::new(memlens())
            .args(["live", "--pid", &pid.to_string()])
            .args(extra)
            .env("XDG_RUNTIME_DIR", &runtime)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let live = Live { child, runtime, pid };
        let t0 = Instant::now();
        // Connectable, not just present: a killed collector leaves a stale socket.
        while std::os::unix::net::UnixStream::connect(live.socket()).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(60), "the collector did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        live
    }

    pub(crate) fn socket(&self) -> PathBuf {
        self.runtime.join("memlens").join(format!("live-{}.sock", self.pid))
    }

    pub(crate) fn probe(&self, args: &[&str]) -> Output {
        Command::new(memlens())
            .args(["probe", "--pid", &self.pid.to_string()])
            .args(args)
            .env("XDG_RUNTIME_DIR", &self.runtime)
            .output()
            .unwrap()
    }

    pub(crate) fn add(&self, spec: &str) -> u64 {
        let o = self.probe(&["add", spec]);
        assert!(o.status.success(), "add {spec}: {}", stderr(&o));
        stdout(&o).trim().parse().unwrap()
    }

    pub(crate) fn rm(&self, id: u64) {
        let o = self.probe(&["rm", &id.to_string()]);
        assert!(o.status.success(), "rm {id}: {}", stderr(&o));
    }

    pub(crate) fn list(&self) -> Vec<Value> {
        let o = self.probe(&["list", "--format", "json"]);
        assert!(o.status.success(), "list: {}", stderr(&o));
        serde_json::from_str::<Value>(&stdout(&o)).unwrap().as_array().unwrap().clone()
    }

    pub(crate) fn get(&self, id: u64) -> Value {
        self.list().into_iter().find(|p| p["id"] == id).expect("probe listed")
    }

    /// Interrupts it like Ctrl-C and returns its exit status and stdout.
    pub(crate) fn interrupt(mut self) -> (i32, String) {
        // SAFETY: our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        self.wait()
    }

    pub(crate) fn wait(&mut self) -> (i32, String) {
        let mut out = String::new();
        self.child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        (self.child.wait().unwrap().code().unwrap_or(-1), out)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The ELF address in a location such as `work @ 0x1219`.
pub(crate) fn vaddr(probe: &Value) -> u64 {
    let loc = probe["location"].as_str().unwrap();
    let hex = loc.split("@ 0x").nth(1).unwrap().split(|c: char| !c.is_ascii_hexdigit()).next();
    u64::from_str_radix(hex.unwrap(), 16).unwrap()
}

/// Waits until the target's code at `vaddr` is `want` again (closing uprobe events
/// takes the kernel a grace period each).
pub(crate) fn await_code(t: &Target, vaddr: u64, want: &[u8]) {
    let t0 = Instant::now();
    while t.code(vaddr, want.len()) != want {
        assert!(t0.elapsed() < Duration::from_secs(30), "the original code never came back");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn attach_count_timer_exact_then_remove_restores_the_code() {
    if unsupported() {
        return;
    }
    let dir = scratch("live-attach");
    let exe = build_probed(&dir);
    let t = Target::start(&exe, N);
    let reference = t.phase(libc::SIGUSR1);
    let live = Live::attach(&dir, t.pid(), &[]);
    let line = line_of("probed.c", "probe-line");
    let ret = line_of("probed.c", "probe-ret");

    let count = live.add("count:work");
    let at = vaddr(&live.get(count));
    let original = {
        // The probe's int3 is there while it is in place; read the original from the file.
        let bytes = t.code(at, 16);
        assert_eq!(bytes[0], 0xcc, "a uprobe is a breakpoint at the function's entry");
        let file = std::fs::read(&exe).unwrap();
        // PIE text: file offset == ELF address in gcc's default layout.
        let orig = file[at as usize..at as usize + 16].to_vec();
        assert_eq!(bytes[1..], orig[1..]);
        orig
    };
    let timer = live.add("timer:work");
    let rec = live.add("timer:rec");
    let at_line = live.add(&format!("count:probed.c:{line}"));
    let range = live.add(&format!("timer:probed.c:{line}..probed.c:{ret}"));
    let perf = live.add("perf:work:task-clock,page-faults");
    // Nothing ran since the insertion.
    assert_eq!(live.get(count)["count"], 0);

    assert_eq!(t.phase(libc::SIGUSR1), reference, "the probed program computes the same");
    assert_eq!(live.get(count)["count"], N);
    assert_eq!(live.get(at_line)["count"], N);
    let tm = live.get(timer);
    assert_eq!(tm["count"], N, "{tm}");
    assert!(tm["sum_ns"].as_u64().unwrap() > 0);
    assert!(tm["min_ns"].as_u64().unwrap() <= tm["max_ns"].as_u64().unwrap());
    assert_eq!(tm["unmatched"], 0);
    let hist: u64 = tm["hist"].as_array().unwrap().iter().map(|b| b[1].as_u64().unwrap()).sum();
    assert_eq!(hist, N);
    // rec(4): five nested calls, each paired with its own return.
    let r = live.get(rec);
    assert_eq!((r["count"].as_u64(), r["unmatched"].as_u64()), (Some(5), Some(0)), "{r}");
    assert!(r["max_ns"].as_u64() >= r["min_ns"].as_u64());
    assert_eq!(live.get(range)["count"], N);
    let p = live.get(perf);
    assert_eq!(p["count"], N, "{p}");
    assert!(p["task-clock"].as_u64().unwrap() > 0, "{p}");
    assert!(p.get("page-faults").is_some());

    // The table names every probe.
    let table = stdout(&live.probe(&["list"]));
    assert!(table.contains("count:work") && table.contains("timer:rec"), "{table}");

    for id in [count, timer, rec, at_line, range, perf] {
        live.rm(id);
    }
    assert!(live.list().is_empty());
    await_code(&t, at, &original);
    assert_eq!(t.phase(libc::SIGUSR1), reference);
    // A new probe counts only what runs after it.
    let again = live.add("count:work");
    assert_eq!(live.get(again)["count"], 0);
    assert_eq!(t.phase(libc::SIGUSR1), reference);
    assert_eq!(live.get(again)["count"], N);

    // Ctrl-C removes every probe and leaves the target running as before.
    let (code, _) = live.interrupt();
    assert_eq!(code, 0);
    await_code(&t, at, &original);
    assert_eq!(t.phase(libc::SIGUSR1), reference);
    t.finish();
}

#[test]
fn eight_threads_while_probes_come_and_go() {
    if unsupported() {
        return;
    }
    let dir = scratch("live-threads");
    let exe = build_probed(&dir);
    let t = Target::start(&exe, N);
    let reference = t.phase(libc::SIGUSR2);
    let live = Live::attach(&dir, t.pid(), &[]);
    for round in 0..2 {
        let c = live.add("count:work");
        let tm = live.add("timer:work");
        assert_eq!(t.phase(libc::SIGUSR2), reference, "round {round}");
        assert_eq!(live.get(c)["count"], 8 * N, "round {round}");
        let v = live.get(tm);
        assert_eq!((v["count"].as_u64(), v["unmatched"].as_u64()), (Some(8 * N), Some(0)));
        live.rm(c);
        live.rm(tm);
    }
    // Probes inserted and removed while the 8 threads call work(): the program's
    // results do not change.
    // SAFETY: our own child.
    unsafe { libc::kill(t.pid(), libc::SIGUSR2) };
    for _ in 0..3 {
        let c = live.add("count:work");
        live.rm(c);
    }
    let l = t.line();
    assert!(l.ends_with(&format!(" {reference}")), "{l}");
    let c = live.add("count:work");
    assert_eq!(t.phase(libc::SIGUSR2), reference);
    assert_eq!(live.get(c)["count"], 8 * N);
    t.finish();
}

/// `memlens live --probe count:work --probe timer:rec -- EXE --once 500`: its last
/// JSON snapshot.
pub(crate) fn launch_once(dir: &Path, exe: &Path) -> Value {
    let stream = dir.join("stream.jsonl");
    let o = Command::new(memlens())
        .args(["live", "--probe", "count:work", "--probe", "timer:rec", "--json-stream"])
        .arg(&stream)
        .args(["--every", "50ms", "--"])
        .arg(exe)
        .args(["--once", "500"])
        .env("XDG_RUNTIME_DIR", dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("once "), "{}", stdout(&o));
    let text = std::fs::read_to_string(&stream).unwrap();
    serde_json::from_str(text.lines().last().unwrap()).unwrap()
}

#[test]
fn launch_counts_from_the_first_call_and_ends_with_a_final_snapshot() {
    if unsupported() {
        return;
    }
    let dir = scratch("live-launch");
    let exe = build_probed(&dir);
    let last = launch_once(&dir, &exe);
    assert_eq!(last["final"], true);
    assert_eq!(last["reason"], "target exited");
    assert_eq!(last["exit_code"], 0);
    let probes = last["probes"].as_array().unwrap();
    assert_eq!(probes[0]["spec"], "count:work");
    assert_eq!(probes[0]["count"], 500, "every call from the first one");
    assert_eq!(probes[1]["count"], 5);
    // The socket is gone with the collector.
    assert!(std::fs::read_dir(dir.join("memlens")).unwrap().next().is_none());
    // Without a stream the final values go to stderr; the program's stdout is its own.
    let o = Command::new(memlens())
        .args(["live", "--probe", "count:/^work$/", "--"])
        .arg(&exe)
        .args(["--once", "7"])
        .env("XDG_RUNTIME_DIR", &dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 1);
    assert!(stderr(&o).contains("memlens: live: 1 count:/^work$/ (work @ 0x"), "{}", stderr(&o));
    assert!(stderr(&o).contains("): count=7"), "{}", stderr(&o));
}

#[test]
fn target_exit_while_attached_and_collector_killed() {
    if unsupported() {
        return;
    }
    let dir = scratch("live-exit");
    let exe = build_probed(&dir);
    let t = Target::start(&exe, N);
    let reference = t.phase(libc::SIGUSR1);
    // Killed with -9: the kernel closes its events; the target runs on unchanged.
    let live = Live::attach(&dir, t.pid(), &[]);
    let c = live.add("count:work");
    live.add("timer:work");
    let at = vaddr(&live.get(c));
    assert_eq!(t.phase(libc::SIGUSR1), reference);
    assert_eq!(live.get(c)["count"], N);
    drop(live);
    let file = std::fs::read(&exe).unwrap();
    await_code(&t, at, &file[at as usize..at as usize + 16]);
    assert_eq!(t.phase(libc::SIGUSR1), reference);

    // The socket: mode 0600 in a 0700 directory; another uid cannot reach it.
    let mut live = Live::attach(&dir, t.pid(), &["--json-stream", "-"]);
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&live.socket()), 0o600);
    assert_eq!(mode(live.socket().parent().unwrap()), 0o700);
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(memlens())
        .args(["probe", "--pid", &t.pid().to_string(), "list"])
        .env("XDG_RUNTIME_DIR", &live.runtime)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));

    // The target exits while a probe is active: final snapshot, exit 0.
    let c = live.add("count:work");
    assert_eq!(t.phase(libc::SIGUSR1), reference);
    t.finish();
    let (code, out) = live.wait();
    assert_eq!(code, 0);
    let last: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(
        (last["final"].as_bool(), last["reason"].as_str()),
        (Some(true), Some("target exited"))
    );
    assert_eq!(last["probes"][0]["id"], c);
    assert_eq!(last["probes"][0]["count"], N);
}

#[test]
fn bad_input_is_one_line_exit_2_and_the_target_is_untouched() {
    if unsupported() {
        return;
    }
    let dir = scratch("live-bad");
    let exe = build_probed(&dir);
    let t = Target::start(&exe, N);
    let reference = t.phase(libc::SIGUSR1);
    let live = Live::attach(&dir, t.pid(), &[]);
    let one_line = |o: &Output, what: &str| {
        assert_eq!(o.status.code(), Some(2), "{what}: {}", stderr(o));
        let e = stderr(o);
        assert_eq!(e.lines().count(), 1, "{what}: {e}");
        assert!(e.contains(what), "{e} should mention {what}");
    };
    one_line(&live.probe(&["add", "nosuch:work"]), "unknown probe module");
    one_line(&live.probe(&["add", "count:no_such_function"]), "no function");
    one_line(&live.probe(&["add", "count:probed.c:1"]), "no code at this line");
    one_line(&live.probe(&["add", "count:nosuch.c:3"]), "no source file");
    one_line(&live.probe(&["add", "timer:probed.c:17"]), "stop line");
    one_line(&live.probe(&["add", "count:/[a/"]), "bad regular expression");
    one_line(&live.probe(&["add", "perf:work:nosuch"]), "unknown counter");
    one_line(&live.probe(&["rm", "99"]), "no probe with id 99");
    if !Path::new("/sys/bus/event_source/devices/cpu").exists() {
        // No hardware PMU here: hardware counters are refused with the reason.
        one_line(&live.probe(&["add", "perf:work:cycles"]), "no hardware PMU");
    }
    // Nothing was inserted.
    assert!(live.list().is_empty());
    // A regex inserts one probe per matching function.
    let bulk = live.add("count:/^work$|^rec$/");
    assert_eq!(t.phase(libc::SIGUSR1), reference);
    assert_eq!(live.get(bulk)["count"], N + 5);
    live.rm(bulk);

    // A PID that is gone, a stripped binary, no privilege.
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id().to_string();
    gone.wait().unwrap();
    one_line(&run_memlens(&["live", "--pid", &gone_pid]), "no process with PID");
    let stripped = dir.join("stripped");
    std::fs::copy(&exe, &stripped).unwrap();
    assert!(Command::new("strip").arg(&stripped).status().unwrap().success());
    let o = Command::new(memlens())
        .args(["live", "--probe", "count:work", "--"])
        .arg(&stripped)
        .args(["--once", "3"])
        .env("XDG_RUNTIME_DIR", &dir)
        .output()
        .unwrap();
    one_line(&o, "no debug information");
    assert_eq!(stdout(&o), "", "the program must not have run");
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(memlens())
        .args(["live", "--probe", "count:work", "--"])
        .arg(&exe)
        .args(["--once", "3"])
        .env("XDG_RUNTIME_DIR", &dir)
        .output()
        .unwrap();
    one_line(&o, "root or CAP_PERFMON");
    assert_eq!(stdout(&o), "");

    assert_eq!(t.phase(libc::SIGUSR1), reference);
    t.finish();
}
