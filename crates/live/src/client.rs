//! The CLI's side of the control socket: one JSON request line, one JSON answer line.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::{Error, Result};

/// The socket of the collector holding `pid`, or of the only running collector.
pub fn find_socket(pid: Option<i32>) -> Result<PathBuf> {
    let dir = crate::sock::socket_dir()?;
    if let Some(pid) = pid {
        let p = memlens_contract::control::collector_socket(&dir, pid);
        if !p.exists() {
            return Err(Error::Collector(format!(
                "no collector holds PID {pid}: start one with `memlens live --pid {pid}`"
            )));
        }
        return Ok(p);
    }
    let mut live = Vec::new();
    for e in std::fs::read_dir(&dir).map_err(|e| Error::io(format!("{}", dir.display()), e))? {
        let Ok(e) = e else { continue };
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("live-").and_then(|n| n.strip_suffix(".sock")) else {
            continue;
        };
        // Skip sockets whose collector was killed.
        if UnixStream::connect(e.path()).is_ok() {
            live.push((pid.to_owned(), e.path()));
        }
    }
    match live.len() {
        0 => Err(Error::Collector(
            "no collector is running: start one with `memlens live --pid PID` or `memlens live -- PROG`".into(),
        )),
        1 => Ok(live.remove(0).1),
        _ => {
            let pids: Vec<String> = live.into_iter().map(|l| l.0).collect();
            Err(Error::Collector(format!(
                "several collectors run (PIDs {}): pick one with --pid",
                pids.join(", ")
            )))
        }
    }
}

/// Sends `req` and returns the answer's `result`, or its error as an error.
pub fn request(path: &Path, req: &Value) -> Result<Value> {
    let mut s = UnixStream::connect(path)
        .map_err(|e| Error::io(format!("cannot reach the collector at {}", path.display()), e))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let mut line = req.to_string();
    line.push('\n');
    s.write_all(line.as_bytes()).map_err(|e| Error::io("writing to the collector", e))?;
    let mut answer = String::new();
    BufReader::new(&s)
        .read_line(&mut answer)
        .map_err(|e| Error::io("reading the collector's answer", e))?;
    let v: Value = serde_json::from_str(&answer).map_err(|_| {
        Error::Collector("the collector closed the connection without an answer".into())
    })?;
    if v["ok"] == Value::Bool(true) {
        Ok(v["result"].clone())
    } else {
        Err(Error::Collector(v["error"].as_str().unwrap_or("the collector refused").to_owned()))
    }
}
