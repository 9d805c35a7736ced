//! In-process probes of a memlens-built target: the client of the control socket
//! its runtime opens when `MEMLENS_CONTROL` is set (crates/rt/src/liveprobe.rs has
//! the protocol). A `count` or `timer` probe on a function turns the function's NOP
//! pad into a call to the runtime, which counts (and times) the calls in the
//! target's own memory: no privileges, no kernel round trip per hit. Removing the
//! probe writes the NOPs back.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::locate::Point;
use crate::module::Probe;
use crate::target::Target;
use crate::{Error, Result};

/// Per probe: count, sum, min and max of the timed calls (ns); for the heap probe
/// bytes, blocks, peak bytes and dropped blocks.
pub type Values = (u64, u64, u64, u64);

/// One allocation site of the heap probe, as the runtime counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteRow {
    /// Its run-time return address (1: the catch-all row of sites beyond the
    /// runtime's table).
    pub pc: u64,
    /// Bytes in use.
    pub bytes: u64,
    /// Blocks in use (`allocs - frees`).
    pub blocks: u64,
    /// The highest `bytes` since the probe was inserted.
    pub peak: u64,
    /// Allocation calls charged to the site since then.
    pub allocs: u64,
    /// Frees of its blocks since then.
    pub frees: u64,
}

/// The control protocol this collector speaks: the runtime's `hello` names its own,
/// and another one is refused.
pub use memlens_contract::control::PROTOCOL;

/// The watch probe's rows: the last store's (thread, run-time code address), 0 0
/// before any, and per (thread, code address) the loads and stores.
pub type WatchRows = ((u32, u64), Vec<(u32, u64, u64, u64)>);

/// A connection to a target's runtime.
pub struct Control {
    out: UnixStream,
    input: BufReader<UnixStream>,
    next_id: u32,
    /// The executable's load bias in the target.
    pub bias: u64,
    /// The values the runtime sent as the target exited.
    last: Option<HashMap<u32, Values>>,
    /// The heap probe's sites, sent as the target exited.
    last_heap: Option<Vec<SiteRow>>,
    /// The watch probe's rows, sent as the target exited.
    last_watch: Option<WatchRows>,
}

/// The control socket a runtime started with `MEMLENS_CONTROL=1` opens.
pub fn default_socket(pid: i32) -> Result<PathBuf> {
    Ok(memlens_contract::control::runtime_socket(&crate::sock::socket_dir()?, pid as u32))
}

impl Control {
    /// Connects to `path`, waiting up to `wait` for the runtime to open it.
    pub fn connect(path: &Path, wait: Duration) -> Result<Control> {
        let end = Instant::now() + wait;
        let s = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= end => {
                    return Err(Error::Target(format!(
                        "no memlens runtime answers on {} ({e}): was the program built with memlens cc and started with MEMLENS_CONTROL=1 (or by memlens live)?",
                        path.display()
                    )))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let input = BufReader::new(s.try_clone().map_err(|e| Error::io("control socket", e))?);
        let mut c = Control {
            out: s,
            input,
            next_id: 1,
            bias: 0,
            last: None,
            last_heap: None,
            last_watch: None,
        };
        let hello = c.ask("hello")?;
        c.bias = check_hello(&hello, path)?;
        Ok(c)
    }

    fn ask(&mut self, req: &str) -> Result<String> {
        let io = |e| Error::io("control socket", e);
        // a target that exited hung up: its `exit` line may still wait to be read
        let sent = self.out.write_all(format!("{req}\n").as_bytes());
        let mut line = String::new();
        loop {
            line.clear();
            if self.input.read_line(&mut line).map_err(io)? == 0 {
                sent.map_err(io)?;
                return Err(Error::Target("the target's runtime hung up".into()));
            }
            // the target is exiting: keep its last values, the answer never comes
            if let Some(rest) = line.strip_prefix("exit ok") {
                self.last = Some(parse_values(rest));
            } else if let Some(rest) = line.strip_prefix("exit heap") {
                self.last_heap = Some(parse_sites(rest));
            } else if let Some(rest) = line.strip_prefix("exit watch") {
                self.last_watch = Some(parse_watch(rest));
            } else {
                break;
            }
        }
        let line = line.trim_end();
        match line.strip_prefix("ok") {
            Some(rest) => Ok(rest.trim_start().to_string()),
            None => Err(Error::Target(
                line.strip_prefix("err ").unwrap_or("the target's runtime hung up").to_string(),
            )),
        }
    }

    /// Inserts a `count` or `timer` probe at the pad at file address `pad`.
    pub fn add(&mut self, kind: &str, pad: u64) -> Result<u32> {
        let id = self.next_id;
        self.next_id += 1;
        self.ask(&format!("add {id} {kind} {pad:x}"))?;
        Ok(id)
    }

    /// Starts the heap probe: from now on the runtime accounts every allocation to
    /// its call site.
    pub fn add_heap(&mut self) -> Result<u32> {
        let id = self.next_id;
        self.next_id += 1;
        self.ask(&format!("add {id} heap"))?;
        Ok(id)
    }

    /// The heap probe's allocation sites (after the target exited: as it exited).
    pub fn heap(&mut self) -> Result<Vec<SiteRow>> {
        match self.ask("heap") {
            Ok(rest) => Ok(parse_sites(&rest)),
            Err(e) => self.last_heap.clone().ok_or(e),
        }
    }

    /// Starts the watch probe on `size` bytes at file address `at`.
    pub fn add_watch(&mut self, at: u64, size: u64) -> Result<u32> {
        let id = self.next_id;
        self.next_id += 1;
        self.ask(&format!("add {id} watch {at:x} {size}"))?;
        Ok(id)
    }

    /// Starts a trace probe into the new file `path` (absolute): of the extent of
    /// the function whose pad is at file address `pad`, or of everything.
    pub fn add_trace(&mut self, pad: Option<u64>, path: &Path) -> Result<u32> {
        let path = path.to_str().filter(|p| !p.contains('\n')).ok_or_else(|| {
            Error::Spec(format!("{}: the trace path must be UTF-8 on one line", path.display()))
        })?;
        let id = self.next_id;
        self.next_id += 1;
        let at = pad.map_or("now".to_string(), |p| format!("{p:x}"));
        self.ask(&format!("add {id} trace {at} {path}"))?;
        Ok(id)
    }

    /// The watch probe's rows (after the target exited: as it exited).
    pub fn watch(&mut self) -> Result<WatchRows> {
        match self.ask("watch") {
            Ok(rest) => Ok(parse_watch(&rest)),
            Err(e) => self.last_watch.clone().ok_or(e),
        }
    }

    /// Removes probe `id` (the pad's NOPs are back when this returns).
    pub fn remove(&mut self, id: u32) -> Result<()> {
        self.ask(&format!("rm {id}")).map(|_| ())
    }

    /// Lets a runtime started with `MEMLENS_CONTROL_HOLD` run `main`.
    pub fn go(&mut self) -> Result<()> {
        self.ask("go").map(|_| ())
    }

    /// A timer probe's calls per log2 bucket of their durations (see
    /// `crates/rt/src/liveprobe.rs`); an error once the target is gone.
    pub fn hist(&mut self, id: u32) -> Result<[u64; 65]> {
        let rest = self.ask(&format!("hist {id}"))?;
        let mut h = [0u64; 65];
        for w in rest.split_whitespace() {
            if let Some((b, n)) = w.split_once(':') {
                if let (Ok(b), Ok(n)) = (b.parse::<usize>(), n.parse::<u64>()) {
                    if let Some(x) = h.get_mut(b) {
                        *x = n;
                    }
                }
            }
        }
        Ok(h)
    }

    /// Every probe's values (after the target exited: the values it sent then).
    pub fn read(&mut self) -> Result<HashMap<u32, Values>> {
        match self.ask("read") {
            Ok(rest) => Ok(parse_values(&rest)),
            Err(e) => self.last.clone().ok_or(e),
        }
    }
}

/// The load bias a runtime's `hello` answer (after `ok`) gives, when it speaks
/// [`PROTOCOL`]; otherwise one line saying what to do.
fn check_hello(hello: &str, path: &Path) -> Result<u64> {
    let mut w = hello.split_whitespace();
    let (name, version) = (w.next(), w.next());
    let bias =
        w.find_map(|w| w.strip_prefix("bias=0x")).and_then(|h| u64::from_str_radix(h, 16).ok());
    match (name, version.map(str::parse::<u32>), bias) {
        (Some("memlens-rt"), Some(Ok(PROTOCOL)), Some(b)) => Ok(b),
        (Some("memlens-rt"), Some(Ok(v)), _) => Err(Error::Target(format!(
            "the program's memlens runtime ({}) speaks control protocol {v}, this memlens speaks {PROTOCOL}: rebuild the program with this memlens (`memlens cc`/`memlens c++`)",
            path.display()
        ))),
        _ => Err(Error::Target(format!(
            "{}: not a memlens runtime (it answered `{}`)",
            path.display(),
            hello.chars().take(80).collect::<String>()
        ))),
    }
}

fn parse_values(text: &str) -> HashMap<u32, Values> {
    let n: Vec<u64> = text.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    n.chunks_exact(5).map(|c| (c[0] as u32, (c[1], c[2], c[3], c[4]))).collect()
}

fn parse_sites(text: &str) -> Vec<SiteRow> {
    let w: Vec<&str> = text.split_whitespace().collect();
    w.chunks_exact(6)
        .filter_map(|c| {
            let n = |s: &str| s.parse::<u64>().ok();
            Some(SiteRow {
                pc: u64::from_str_radix(c[0], 16).ok()?,
                bytes: n(c[1])?,
                blocks: n(c[2])?,
                peak: n(c[3])?,
                allocs: n(c[4])?,
                frees: n(c[5])?,
            })
        })
        .collect()
}

fn parse_watch(text: &str) -> WatchRows {
    let w: Vec<&str> = text.split_whitespace().collect();
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    let last = match w.as_slice() {
        [t, pc, ..] => (t.parse().unwrap_or(0), hex(pc).unwrap_or(0)),
        _ => (0, 0),
    };
    let rows = w
        .get(2..)
        .unwrap_or_default()
        .chunks_exact(4)
        .filter_map(|c| {
            Some((c[0].parse().ok()?, hex(c[1])?, c[2].parse().ok()?, c[3].parse().ok()?))
        })
        .collect();
    (last, rows)
}

/// The pad file address of each point, when every point is a function entry with
/// a pad (a memlens-built function); `None` otherwise.
pub(crate) fn pads(target: &Target, points: &[Point]) -> Option<Vec<u64>> {
    points.iter().map(|p| target.binary().pad_at(p)).collect()
}

/// A pad probe: one runtime probe per point.
pub(crate) struct PadProbe {
    control: Arc<Mutex<Control>>,
    ids: Vec<u32>,
    timer: bool,
    location: String,
    /// The probed functions' entries (ELF addresses), for the GUI's source lines.
    points: Vec<u64>,
    /// Last values read, kept when the target is gone.
    last: Mutex<Values>,
    /// A timer's last histogram read, likewise.
    hist: Mutex<[u64; 65]>,
}

impl PadProbe {
    pub(crate) fn insert(
        target: &Target,
        points: &[Point],
        pads: &[u64],
        timer: bool,
    ) -> Result<Self> {
        let control = target.control().expect("pad probes need a control socket");
        let kind = if timer { "timer" } else { "count" };
        let mut ids = Vec::new();
        {
            let mut c = control.lock().map_err(|_| Error::Target("control lock".into()))?;
            for &pad in pads {
                match c.add(kind, pad) {
                    Ok(id) => ids.push(id),
                    Err(e) => {
                        for id in ids {
                            let _ = c.remove(id);
                        }
                        return Err(e);
                    }
                }
            }
        }
        let location = format!("{} (pad)", crate::count::describe(target, points));
        let points = points.iter().map(|p| p.vaddr).collect();
        let (last, hist) = (Mutex::new((0, 0, 0, 0)), Mutex::new([0; 65]));
        Ok(PadProbe { control, ids, timer, location, points, last, hist })
    }
}

impl Drop for PadProbe {
    fn drop(&mut self) {
        if let Ok(mut c) = self.control.lock() {
            for &id in &self.ids {
                let _ = c.remove(id);
            }
        }
    }
}

impl Probe for PadProbe {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn points(&self) -> Vec<u64> {
        self.points.clone()
    }

    fn values(&self) -> Map<String, Value> {
        let (read, hists) = match self.control.lock() {
            Ok(mut c) => {
                let read = c.read().ok();
                let hists: Option<Vec<[u64; 65]>> = if self.timer {
                    self.ids.iter().map(|&id| c.hist(id).ok()).collect()
                } else {
                    None
                };
                (read, hists)
            }
            Err(_) => (None, None),
        };
        let mut hist = self.hist.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(hs) = hists {
            *hist = [0; 65];
            for h in hs {
                for (t, n) in hist.iter_mut().zip(h) {
                    *t += n;
                }
            }
        }
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(all) = read {
            let mut v = (0u64, 0u64, u64::MAX, 0u64);
            for id in &self.ids {
                if let Some(&(n, s, lo, hi)) = all.get(id) {
                    v.0 += n;
                    v.1 += s;
                    if n > 0 {
                        v.2 = v.2.min(lo);
                    }
                    v.3 = v.3.max(hi);
                }
            }
            if v.2 == u64::MAX {
                v.2 = 0;
            }
            *last = v;
        }
        let mut m = Map::new();
        if self.timer {
            // the uprobe timer's values, histogram included
            let (count, sum, min, max) = *last;
            let min = if count == 0 { u64::MAX } else { min };
            let agg = crate::timer::Agg { count, sum, min, max, hist: *hist, unmatched: 0 };
            agg.to_json(&mut m);
        } else {
            m.insert("count".into(), last.0.into());
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_of_another_protocol_is_refused_in_one_line() {
        let p = Path::new("/run/rt-1.sock");
        assert_eq!(check_hello("memlens-rt 2 pid=7 bias=0x5000", p).unwrap(), 0x5000);
        let e = check_hello("memlens-rt 1 pid=7 bias=0x5000", p).unwrap_err().to_string();
        assert_eq!(
            e,
            "the program's memlens runtime (/run/rt-1.sock) speaks control protocol 1, this memlens speaks 2: rebuild the program with this memlens (`memlens cc`/`memlens c++`)"
        );
        let e = check_hello("hello there", p).unwrap_err().to_string();
        assert!(e.contains("not a memlens runtime") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn heap_rows_have_six_columns() {
        let rows = parse_sites(" 401a2b 300 3 500 5 2 1 0 0 64 1000 1000");
        assert_eq!(
            rows,
            [
                SiteRow { pc: 0x401a2b, bytes: 300, blocks: 3, peak: 500, allocs: 5, frees: 2 },
                SiteRow { pc: 1, bytes: 0, blocks: 0, peak: 64, allocs: 1000, frees: 1000 },
            ]
        );
    }
}
