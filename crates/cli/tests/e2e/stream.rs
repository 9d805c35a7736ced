//! `record --sink tcp://` and `memlens collect`: programs stream their traces over
//! loopback while they run; the collected trace equals the local copy, several
//! programs arrive at once, a peer sending garbage is cut off without taking the
//! collector down, and a collector that goes away leaves the program running.

use crate::util::*;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

struct Collector {
    child: Child,
    addr: String,
    lines: Receiver<String>,
}

impl Collector {
    fn start(dir: &Path) -> Collector {
        let mut child = Command::new(memlens())
            .args(["collect", "--listen", "127.0.0.1:0", "-o"])
            .arg(dir)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let first = lines.recv_timeout(Duration::from_secs(60)).expect("collect printed nothing");
        let addr = first
            .strip_prefix("memlens: collect: listening on ")
            .and_then(|r| r.split(' ').next())
            .unwrap_or_else(|| panic!("{first}"))
            .to_string();
        Collector { child, addr, lines }
    }

    /// The next line containing `what`.
    fn wait_for(&self, what: &str) -> String {
        loop {
            let l = self.lines.recv_timeout(Duration::from_secs(60)).expect(what);
            if l.contains(what) {
                return l;
            }
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn traces(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

#[test]
fn streamed_traces_equal_the_local_copy_and_programs_arrive_together() {
    let dir = scratch("stream");
    let exe = build(Cc::all()[0], "threads.c", &dir, &[]);
    let inbox = dir.join("inbox");
    let c = Collector::start(&inbox);
    let sink = format!("tcp://{}", c.addr);
    let local = dir.join("local.trace");
    // an earlier trace at the -o path is not what the next run sends
    let o =
        run_memlens(&["record", "-q", "-o", local.to_str().unwrap(), "--", exe.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let old_pid = info(&local)["pid"].as_u64().unwrap();
    // one with a local copy, two without, all at once
    let spawn = |out: Option<&Path>| {
        let mut cmd = Command::new(memlens());
        cmd.args(["record", "-q", "--sink", &sink]);
        if let Some(o) = out {
            cmd.arg("-o").arg(o);
        }
        cmd.arg("--").arg(&exe).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()
    };
    let runs = [spawn(Some(&local)), spawn(None), spawn(None)];
    for r in runs {
        let o = r.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    for _ in 0..3 {
        c.wait_for("finished");
    }
    let got = traces(&inbox);
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(!dir.join("memlens.trace").exists(), "no local copy without -o");
    let want = report(&local, "variable");
    let pid = info(&local)["pid"].as_u64().unwrap();
    assert_ne!(pid, old_pid);
    let same = got.iter().find(|p| p.to_str().unwrap().ends_with(&format!("-{pid}.trace")));
    let same = same.expect("the -o run's trace, named after its pid");
    assert_eq!(report(same, "variable"), want, "the collected trace reads as the local one");
    assert_eq!(info(same)["complete"], true);
    for t in &got {
        // every run of the program records the same accesses
        let i = info(t);
        assert_eq!(i["end"]["status"], 0, "{i}");
        assert_eq!(i["stores"], info(&local)["stores"], "{}", t.display());
    }
}

#[test]
fn garbage_is_cut_off_and_a_lost_collector_leaves_the_program_running() {
    let dir = scratch("stream-bad");
    let exe = build(Cc::all()[0], "threads.c", &dir, &[]);
    let inbox = dir.join("inbox");
    let mut c = Collector::start(&inbox);
    let mut s = std::net::TcpStream::connect(&c.addr).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let l = c.wait_for("cut off");
    assert!(l.contains("not a memlens stream"), "{l}");
    // a well-formed start, then a frame claiming 4 GB
    let mut s = std::net::TcpStream::connect(&c.addr).unwrap();
    s.write_all(b"MEMLENS-STREAM1\nN\xff\xff\xff\xff").unwrap();
    let l = c.wait_for("cut off");
    assert!(l.contains("at most"), "{l}");
    // the collector still takes a real program
    let o = run_memlens(&[
        "record",
        "-q",
        "--sink",
        &format!("tcp://{}", c.addr),
        "--",
        exe.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    c.wait_for("finished");

    // The collector dies while the program records: the program runs to its end,
    // its local copy is complete, and record says what happened.
    let slow = build(Cc::all()[0], "sigwait.c", &dir, &[]);
    let local = dir.join("local.trace");
    let mut rec = Command::new(memlens())
        .args(["record", "--sink", &format!("tcp://{}", c.addr), "-o"])
        .arg(&local)
        .arg("--")
        .arg(&slow)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(rec.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("ready") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the program ended early");
    }
    c.child.kill().unwrap();
    c.child.wait().unwrap();
    // SAFETY: signalling our own child (memlens), which forwards it.
    unsafe { libc::kill(rec.id() as i32, libc::SIGTERM) };
    let o = rec.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("warning: sink tcp://") && err.contains("local copy"), "{err}");
    let i = info(&local);
    assert_eq!(i["complete"], true, "{i}");
    assert!(i["stores"].as_u64().unwrap() >= 1000, "{i}");
    // an unreachable collector: one line naming the address, the program not run
    let o = run_memlens(&["record", "--sink", "tcp://127.0.0.1:9", "--", exe.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("tcp://127.0.0.1:9"), "{}", stderr(&o));
    assert_eq!(stdout(&o), "");
}
