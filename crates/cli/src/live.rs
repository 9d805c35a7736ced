//! `memlens live` (the collector) and `memlens probe` (its client): argument parsing
//! and printing; the logic is in crates/live.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use memlens_live::inproc::Control;
use memlens_live::{client, Binary, Collector, Modules, Options, Target};
use serde_json::{json, Value};

use crate::Format;

#[derive(clap::Args)]
pub struct LiveArgs {
    /// Attach to this running process (instead of launching PROG).
    #[arg(long)]
    pid: Option<i32>,
    /// Insert this probe, MODULE:LOCATION[:ARGS] (repeatable); when launching, before
    /// the program's first instruction.
    #[arg(long = "probe", value_name = "SPEC")]
    probes: Vec<String>,
    /// Write a snapshot of every probe as one JSON line to FILE (`-`: stdout) every
    /// --every, and a final one when the target exits or on Ctrl-C.
    #[arg(long, value_name = "FILE|-")]
    json_stream: Option<String>,
    /// Port of the GUI on 127.0.0.1 (0: a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Open the GUI in a browser (otherwise its URL is only printed).
    #[arg(long)]
    open: bool,
    /// Do not serve the GUI.
    #[arg(long, conflicts_with_all = ["open", "port"])]
    no_gui: bool,
    /// Load an out-of-tree probe module (a shared library, examples/probe-module)
    /// (repeatable).
    #[arg(long = "module-path", value_name = "PATH")]
    module_paths: Vec<std::path::PathBuf>,
    /// Snapshot period (250ms, 1s, 0.5s).
    #[arg(long, default_value = "250ms", value_parser = parse_duration)]
    every: Duration,
    /// The program to launch and its arguments (after `--`).
    #[arg(trailing_var_arg = true, value_name = "PROG [ARGS]")]
    cmd: Vec<String>,
}

#[derive(clap::Args)]
pub struct ProbeArgs {
    /// The target's PID (default: the only running collector's).
    #[arg(long)]
    pid: Option<i32>,
    #[command(subcommand)]
    cmd: ProbeCmd,
}

#[derive(Subcommand)]
enum ProbeCmd {
    /// Insert a probe, MODULE:LOCATION[:ARGS]; prints its id
    Add {
        /// count:work, count:prog.c:42, timer:work, timer:prog.c:40..prog.c:47,
        /// perf:work:task-clock,page-faults, count:/^work_/
        spec: String,
    },
    /// Remove a probe (the original instructions are restored)
    Rm {
        /// The id `add` printed.
        id: u32,
    },
    /// Every probe with its values
    List {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// The probe modules: description, requirements, available or why not
    Modules {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
}

pub(crate) fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let (num, unit) =
        s.find(|c: char| c.is_ascii_alphabetic()).map_or((s, "s"), |i| (&s[..i], &s[i..]));
    let v: f64 = num.parse().map_err(|_| format!("`{s}` is not a duration (250ms, 1s)"))?;
    let secs = match unit {
        "ms" => v / 1e3,
        "s" => v,
        "m" => v * 60.0,
        _ => return Err(format!("`{s}`: unit must be ms, s or m")),
    };
    if !(secs > 0.0 && secs < 1e6) {
        return Err(format!("`{s}`: the period must be positive"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn stream(spec: &Option<String>) -> Result<Option<Box<dyn Write + Send>>> {
    Ok(match spec.as_deref() {
        None => None,
        Some("-") => Some(Box::new(std::io::stdout())),
        Some(path) => Some(Box::new(
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
                .with_context(|| format!("cannot create {path}"))?,
        )),
    })
}

pub fn live(a: LiveArgs) -> Result<i32> {
    let mut list = memlens_live::builtin_modules();
    for p in &a.module_paths {
        list.push(memlens_live::load_module(p)?);
    }
    let modules = Modules::init(list);
    if let Err(why) = modules.any_available() {
        bail!("no probe module is usable: {why}");
    }
    let opts = Options { every: a.every, stream: stream(&a.json_stream)? };
    match (a.pid, a.cmd.is_empty()) {
        (Some(_), false) => bail!("give either --pid PID or -- PROG ARGS, not both"),
        (None, true) => bail!("nothing to probe: give --pid PID or -- PROG ARGS"),
        (Some(pid), true) => {
            let mut target = Target::attach(pid)?;
            modules.precheck(&a.probes, target.binary())?;
            // a memlens-built program started with MEMLENS_CONTROL=1 takes pad probes
            let rt = memlens_live::inproc::default_socket(pid)?;
            if rt.exists() {
                target.set_control(Control::connect(&rt, Duration::from_secs(2))?);
            } else {
                memlens_live::require_uprobes()?;
            }
            let mut c = Collector::new(target, modules, opts)?;
            for spec in &a.probes {
                c.add(spec)?;
            }
            let _gui = gui(&a, &c)?;
            eprintln!(
                "memlens: live: attached to PID {pid}, control socket {}; Ctrl-C removes the probes",
                c.socket().display()
            );
            finish(c.run()?, a.json_stream.is_none())
        }
        (None, false) => {
            let path = memlens_live::find_program(&a.cmd[0])?;
            let binary = Binary::open(&path)?;
            modules.precheck(&a.probes, &binary)?;
            // A memlens-built program opens a control socket for pad probes and
            // waits before `main` until the `--probe`s are in.
            let rt = binary.memlens_built().then(|| {
                memlens_live::sock::socket_dir()
                    .map(|d| d.join(format!("rt-launch-{}.sock", std::process::id())))
            });
            let rt = rt.transpose()?;
            if rt.is_none() {
                memlens_live::require_uprobes()?;
            }
            if let Some(p) = &rt {
                std::env::set_var("MEMLENS_CONTROL", p);
                std::env::set_var("MEMLENS_CONTROL_HOLD", "1");
            }
            let mut held = memlens_live::launch_held(&path, &a.cmd)?;
            std::env::remove_var("MEMLENS_CONTROL");
            std::env::remove_var("MEMLENS_CONTROL_HOLD");
            let mut control = None;
            let started = (|| -> memlens_live::Result<Collector> {
                let mut target = Target::launched(held.pid, binary)?;
                if let Some(p) = &rt {
                    // uprobes go in before exec; the runtime's socket exists after it
                    held.release();
                    target.set_control(Control::connect(p, Duration::from_secs(10))?);
                    control = target.control();
                }
                let mut c = Collector::new(target, modules, opts)?;
                for spec in &a.probes {
                    c.add(spec)?;
                }
                Ok(c)
            })();
            let started = started.map_err(anyhow::Error::from).and_then(|c| {
                let g = gui(&a, &c)?;
                Ok((c, g))
            });
            match started {
                Ok((c, _gui)) => {
                    eprintln!(
                        "memlens: live: launched PID {}, control socket {}",
                        held.pid,
                        c.socket().display()
                    );
                    held.release();
                    if let Some(ctl) = control {
                        ctl.lock().map_err(|_| anyhow::anyhow!("control socket lock"))?.go()?;
                    }
                    if let Some(p) = &rt {
                        let _ = std::fs::remove_file(p);
                    }
                    finish(c.run()?, a.json_stream.is_none())
                }
                Err(e) => {
                    // The program never ran: it is still held before exec.
                    held.abort();
                    Err(e)
                }
            }
        }
    }
}

/// Serves the GUI on a thread of its own (it asks the collector through a
/// [`memlens_live::Handle`]) and prints its URL; with `--open`, starts a browser on
/// it. The returned launcher page lives as long as the collector.
fn gui(a: &LiveArgs, c: &Collector) -> Result<Option<crate::view::Launcher>> {
    if a.no_gui {
        return Ok(None);
    }
    let h = c.handle();
    let backend: memlens_view::LiveBackend = std::sync::Arc::new(move |req| h.call(req));
    let opts = memlens_view::ServeOptions { port: a.port, ..Default::default() };
    let (tx, rx) = std::sync::mpsc::channel();
    let tx2 = tx.clone();
    std::thread::Builder::new()
        .name("memlens-gui".into())
        .spawn(move || {
            let r = memlens_view::serve_live(backend, opts, |url| {
                let _ = tx.send(Ok(url.to_owned()));
            });
            if let Err(e) = r {
                let _ = tx2.send(Err(e));
            }
        })
        .context("cannot start the GUI thread")?;
    let url = match rx.recv() {
        Ok(Ok(url)) => url,
        Ok(Err(e)) => return Err(e).context("cannot serve the GUI (--no-gui runs without it)"),
        Err(_) => bail!("the GUI server stopped before it listened"),
    };
    eprintln!("memlens: live: GUI {url}");
    if !a.open {
        return Ok(None);
    }
    match crate::view::Launcher::write(&url) {
        Ok(l) => {
            crate::view::open_browser(&l.file);
            Ok(Some(l))
        }
        Err(e) => {
            eprintln!("memlens: {e:#}; open the URL above");
            Ok(None)
        }
    }
}

/// Without a JSON stream, the final values go to stderr as a table (like bpftrace's
/// maps at exit); the target's stdout stays its own.
fn finish((code, last): (i32, Value), summary: bool) -> Result<i32> {
    if summary {
        for r in last.as_array().into_iter().flatten() {
            eprintln!(
                "memlens: live: {} {} ({}): {}",
                r["id"].as_u64().unwrap_or(0),
                r["spec"].as_str().unwrap_or(""),
                r["location"].as_str().unwrap_or(""),
                values_text(r)
            );
        }
    }
    Ok(code)
}

fn values_text(row: &Value) -> String {
    let skip = ["id", "spec", "module", "location", "hist", "sites", "threads", "lines"];
    row.as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| !skip.contains(&k.as_str()))
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

pub fn probe(a: ProbeArgs) -> Result<i32> {
    let sock = client::find_socket(a.pid)?;
    match a.cmd {
        ProbeCmd::Add { spec } => {
            let id = client::request(&sock, &json!({"cmd": "add", "spec": spec}))?;
            println!("{id}");
        }
        ProbeCmd::Rm { id } => {
            client::request(&sock, &json!({"cmd": "rm", "id": id}))?;
        }
        ProbeCmd::List { format } => {
            let rows = client::request(&sock, &json!({"cmd": "list"}))?;
            if format == Format::Json {
                println!("{rows}");
            } else {
                println!("{:<4} {:<8} {:<28} {:<36} VALUES", "ID", "MODULE", "SPEC", "LOCATION");
                for r in rows.as_array().into_iter().flatten() {
                    println!(
                        "{:<4} {:<8} {:<28} {:<36} {}",
                        r["id"].as_u64().unwrap_or(0),
                        r["module"].as_str().unwrap_or(""),
                        r["spec"].as_str().unwrap_or(""),
                        r["location"].as_str().unwrap_or(""),
                        values_text(r)
                    );
                }
            }
        }
        ProbeCmd::Modules { format } => {
            let rows = client::request(&sock, &json!({"cmd": "modules"}))?;
            if format == Format::Json {
                println!("{rows}");
            } else {
                for r in rows.as_array().into_iter().flatten() {
                    let reqs: Vec<&str> = r["requirements"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    let state = if r["available"] == Value::Bool(true) {
                        "available".to_owned()
                    } else {
                        format!("unavailable: {}", r["reason"].as_str().unwrap_or("?"))
                    };
                    println!(
                        "{:<6} {} (needs {}) [{state}]",
                        r["name"].as_str().unwrap_or(""),
                        r["description"].as_str().unwrap_or(""),
                        reqs.join(", ")
                    );
                }
            }
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("0ms").is_err() && parse_duration("5h").is_err());
    }
}
