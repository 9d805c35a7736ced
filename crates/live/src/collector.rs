//! The collector: holds the probes of one target, answers the control socket, writes
//! the JSON stream, and on exit or Ctrl-C closes every probe (the kernel restores the
//! original instructions) and leaves the target running.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::module::{Modules, Probe};
use crate::target::{State, Target};
use crate::{Error, Result};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Collector settings.
pub struct Options {
    /// Snapshot interval for the JSON stream.
    pub every: Duration,
    /// Where snapshots go (`--json-stream`).
    pub stream: Option<Box<dyn Write + Send>>,
}

struct Entry {
    spec: String,
    module: String,
    probe: Box<dyn Probe>,
    /// Source lines of its points, for the GUI.
    lines: Vec<(String, u64)>,
}

/// A request and where its answer goes.
type Call = (Value, mpsc::Sender<Value>);

/// Sends requests to a running collector from another thread (the GUI server): the
/// same requests and answers as the control socket, without the socket.
#[derive(Clone)]
pub struct Handle(mpsc::Sender<Call>);

impl Handle {
    /// Answers `req` (`{"cmd": ...}`) with `{"ok": true, "result": ...}` or
    /// `{"ok": false, "error": "..."}`; the collector takes it within a few ms.
    pub fn call(&self, req: Value) -> Value {
        let (tx, rx) = mpsc::channel();
        let gone = || json!({"ok": false, "error": "the collector has stopped"});
        if self.0.send((req, tx)).is_err() {
            return gone();
        }
        rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| gone())
    }
}

/// Largest source file the GUI is sent.
const MAX_SOURCE: u64 = 16 << 20;

/// One collector per target.
pub struct Collector {
    target: Target,
    modules: Modules,
    probes: BTreeMap<u32, Entry>,
    next_id: u32,
    listener: UnixListener,
    path: PathBuf,
    started: Instant,
    opts: Options,
    /// Probes being removed: closing their kernel events takes a grace period each.
    closing: Vec<std::thread::JoinHandle<()>>,
    calls: (mpsc::Sender<Call>, mpsc::Receiver<Call>),
    /// The binary's source files (from DWARF), read on first use.
    files: Option<Vec<String>>,
}

impl Collector {
    /// Binds the control socket for `target`.
    pub fn new(target: Target, modules: Modules, opts: Options) -> Result<Collector> {
        let (listener, path) = crate::sock::bind(target.pid())?;
        Ok(Collector {
            target,
            modules,
            probes: BTreeMap::new(),
            next_id: 1,
            listener,
            path,
            started: Instant::now(),
            opts,
            closing: Vec::new(),
            calls: mpsc::channel(),
            files: None,
        })
    }

    /// A handle to send requests from another thread while [`Collector::run`] runs.
    pub fn handle(&self) -> Handle {
        Handle(self.calls.0.clone())
    }

    /// The control socket's path.
    pub fn socket(&self) -> &std::path::Path {
        &self.path
    }

    /// Inserts the probe `spec` (`MODULE:LOCATION[:ARGS]`) and returns its id.
    pub fn add(&mut self, spec: &str) -> Result<u32> {
        let (name, args) = spec.split_once(':').unwrap_or((spec, ""));
        let module = self.modules.get(name)?;
        self.target.set_next_probe_id(self.next_id);
        let probe = module.create(&self.target, args)?;
        let id = self.next_id;
        self.next_id += 1;
        let b = self.target.binary();
        let mut lines: Vec<(String, u64)> =
            probe.points().iter().filter_map(|&a| b.line_of(a)).collect();
        lines.dedup();
        self.probes
            .insert(id, Entry { spec: spec.to_owned(), module: name.to_owned(), probe, lines });
        Ok(id)
    }

    /// Removes probe `id`. It leaves the list at once; its kernel events close in the
    /// background (the kernel serialises them, ~tens of ms each), so `rm` answers fast.
    pub fn remove(&mut self, id: u32) -> Result<()> {
        let e = self.probes.remove(&id).ok_or_else(|| {
            Error::Spec(format!("no probe with id {id} (see `memlens probe list`)"))
        })?;
        // An in-process probe goes at once (a `trace` is complete on disk when
        // `rm` answers); kernel events close in the background.
        if self.modules.get(&e.module).is_ok_and(|m| m.requires_memlens_runtime()) {
            drop(e);
        } else {
            self.closing.push(std::thread::spawn(move || drop(e)));
        }
        Ok(())
    }

    /// Closes every probe and waits until the kernel removed them all.
    fn remove_all(&mut self) {
        let all = std::mem::take(&mut self.probes);
        crate::perf::close_in_parallel(all.into_values().collect());
        for h in self.closing.drain(..) {
            let _ = h.join();
        }
    }

    /// Every probe: id, spec, module, location and its values.
    pub fn list(&mut self) -> Value {
        self.poll();
        let rows: Vec<Value> = self
            .probes
            .iter()
            .map(|(id, e)| {
                let mut o = Map::new();
                o.insert("id".into(), (*id).into());
                o.insert("spec".into(), e.spec.clone().into());
                o.insert("module".into(), e.module.clone().into());
                o.insert("location".into(), e.probe.location().into());
                o.extend(e.probe.values());
                Value::Object(o)
            })
            .collect();
        Value::Array(rows)
    }

    fn poll(&mut self) {
        for e in self.probes.values_mut() {
            e.probe.poll();
        }
    }

    fn emit(&mut self, last: Option<Value>) {
        if self.opts.stream.is_none() {
            return;
        }
        let probes = self.list();
        let mut snap = json!({
            "time_ms": self.started.elapsed().as_millis() as u64,
            "pid": self.target.pid(),
            "final": last.is_some(),
            "probes": probes,
        });
        if let Some(Value::Object(extra)) = last {
            snap.as_object_mut().expect("an object").extend(extra);
        }
        if let Some(w) = &mut self.opts.stream {
            // A broken stream must not stop the collector (the probes stay useful).
            let _ = writeln!(w, "{snap}").and_then(|()| w.flush());
        }
    }

    fn answer(&mut self, req: &Value) -> Result<Value> {
        match req["cmd"].as_str() {
            Some("add") => {
                let spec = req["spec"].as_str().unwrap_or("");
                Ok(self.add(spec)?.into())
            }
            Some("rm") => {
                let id = req["id"].as_u64().unwrap_or(0);
                self.remove(u32::try_from(id).unwrap_or(0))?;
                Ok(Value::Null)
            }
            Some("list") => Ok(self.list()),
            Some("modules") => Ok(self.modules.describe()),
            Some("info") => Ok(json!({
                "pid": self.target.pid(),
                "exe": self.target.binary().path().display().to_string(),
            })),
            Some("state") => Ok(self.state()),
            Some("files") => Ok(self.source_files().clone().into()),
            Some("source") => self.source(req["file"].as_str().unwrap_or("")),
            _ => Err(Error::Spec(format!("unknown request {req}"))),
        }
    }

    /// What the GUI polls: the probes with their values, source lines and tables.
    fn state(&mut self) -> Value {
        let mut probes = self.list();
        for (row, e) in probes.as_array_mut().into_iter().flatten().zip(self.probes.values()) {
            row["lines"] = e.lines.iter().map(|(f, l)| json!([f, l])).collect();
            // After list(): tables come from the values it just read.
            row["tables"] = e.probe.tables().iter().map(crate::module::Table::to_json).collect();
        }
        json!({
            "pid": self.target.pid(),
            "exe": self.target.binary().path().display().to_string(),
            "time_ms": self.started.elapsed().as_millis() as u64,
            "probes": probes,
        })
    }

    fn source_files(&mut self) -> &Vec<String> {
        let b = self.target.binary();
        self.files.get_or_insert_with(|| b.source_files())
    }

    /// The text of a source file the DWARF names (no other file), and its lines
    /// with code, each with its function.
    fn source(&mut self, file: &str) -> Result<Value> {
        if !self.source_files().iter().any(|f| f == file) {
            return Err(Error::Spec(format!("{file}: not a source file of this program")));
        }
        let unreadable = |why: String| Error::Target(format!("cannot read {file}: {why}"));
        // stat first: opening a FIFO named like a source file would block.
        let md = std::fs::metadata(file).map_err(|e| unreadable(e.to_string()))?;
        if !md.is_file() || md.len() > MAX_SOURCE {
            return Err(unreadable("not a regular file of at most 16 MiB".into()));
        }
        let text = std::fs::read(file).map_err(|e| unreadable(e.to_string()))?;
        let lines: Vec<Value> =
            self.target.binary().code_lines(file).into_iter().map(|(l, f)| json!([l, f])).collect();
        Ok(json!({"file": file, "text": String::from_utf8_lossy(&text), "lines": lines}))
    }

    fn reply(&mut self, req: &Value) -> Value {
        match self.answer(req) {
            Ok(v) => json!({"ok": true, "result": v}),
            Err(e) => json!({"ok": false, "error": e.to_string()}),
        }
    }

    fn serve(&mut self, s: UnixStream) {
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let reply = match crate::sock::peer_uid(&s)
            .map_err(|e| Error::io("SO_PEERCRED", e))
            .and_then(|uid| crate::sock::check_peer(uid, crate::sock::own_uid()))
        {
            Err(e) => json!({"ok": false, "error": e.to_string()}),
            Ok(()) => {
                let mut line = String::new();
                let _ = BufReader::new((&s).take(1 << 16)).read_line(&mut line);
                match serde_json::from_str::<Value>(&line) {
                    Ok(req) => self.reply(&req),
                    Err(_) => json!({"ok": false, "error": "a request must be one JSON line"}),
                }
            }
        };
        let _ = writeln!(&s, "{reply}");
    }

    /// Runs until the target exits (final snapshot; returns its exit status when we
    /// launched it, else 0) or SIGINT/SIGTERM (removes the probes, returns 0). Also
    /// returns the probes' final values.
    pub fn run(mut self) -> Result<(i32, Value)> {
        // SAFETY: the handler only stores to an atomic.
        unsafe {
            libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
            libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        }
        let mut next = Instant::now() + self.opts.every;
        loop {
            if STOP.load(Ordering::SeqCst) {
                self.emit(Some(json!({"reason": "interrupted"})));
                let last = self.list();
                self.remove_all();
                return Ok((0, last));
            }
            self.closing.retain(|h| !h.is_finished());
            self.poll();
            if let State::Exited(code) = self.target.state() {
                let mut extra = json!({"reason": "target exited"});
                if let Some(c) = code {
                    extra["exit_code"] = c.into();
                }
                self.emit(Some(extra));
                let last = self.list();
                self.remove_all();
                return Ok((code.unwrap_or(0), last));
            }
            while let Ok((s, _)) = self.listener.accept() {
                self.serve(s);
            }
            while let Ok((req, tx)) = self.calls.1.try_recv() {
                let _ = tx.send(self.reply(&req));
            }
            if Instant::now() >= next {
                self.emit(None);
                next += self.opts.every;
                if next < Instant::now() {
                    next = Instant::now() + self.opts.every;
                }
            }
            let mut pfd =
                libc::pollfd { fd: self.listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd; a signal just ends the wait early.
            unsafe { libc::poll(&mut pfd, 1, 5) };
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
