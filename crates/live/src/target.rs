//! The target process: attached by PID or launched held before its first instruction.

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use std::sync::{Arc, Mutex};

use crate::inproc::Control;
use crate::locate::{Binary, Point};
use crate::perf::{self, Attr};
use crate::{Error, Result};

/// A process probes are inserted into.
pub struct Target {
    pid: i32,
    binary: Arc<Binary>,
    /// The uprobe PMU's type, or why there is none (pad probes need none).
    pmu: std::result::Result<u32, String>,
    cpus: Vec<i32>,
    /// Launched by us (we reap it), rather than attached.
    child: bool,
    /// The memlens runtime's control socket, for in-process (pad) probes.
    control: Option<Arc<Mutex<Control>>>,
    /// The collector's id of the probe being created (names a trace file).
    next_probe: u32,
}

/// Whether the target still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Running (or stopped).
    Running,
    /// Gone; the exit status when we launched it.
    Exited(Option<i32>),
}

fn proc_state(pid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the parenthesised command name.
    s.rsplit_once(')')?.1.trim_start().chars().next()
}

impl Target {
    /// Attaches to a running process.
    pub fn attach(pid: i32) -> Result<Target> {
        match proc_state(pid) {
            None | Some('Z') | Some('X') => {
                return Err(Error::Target(format!("no process with PID {pid} (it exited?)")))
            }
            Some(_) => {}
        }
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map_err(|e| {
            Error::Target(format!(
                "cannot read the executable of PID {pid} ({e}): is it yours, and does it still run?"
            ))
        })?;
        Target::new(pid, &exe, false)
    }

    fn new(pid: i32, exe: &Path, child: bool) -> Result<Target> {
        let binary = Binary::open(exe)?;
        Target::with_binary(pid, binary, child)
    }

    /// A target whose binary was already read.
    pub fn with_binary(pid: i32, binary: Binary, child: bool) -> Result<Target> {
        let pmu = perf::uprobe_type().map_err(|e| format!("the kernel has no uprobe PMU: {e}"));
        Ok(Target {
            pid,
            binary: Arc::new(binary),
            pmu,
            cpus: perf::online_cpus(),
            child,
            control: None,
            next_probe: 1,
        })
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The executable.
    pub fn binary(&self) -> &Binary {
        &self.binary
    }

    /// The executable, for probes that name addresses after the target is gone.
    pub(crate) fn shared_binary(&self) -> Arc<Binary> {
        self.binary.clone()
    }

    /// Uses the memlens runtime's control socket for function probes.
    pub fn set_control(&mut self, c: Control) {
        self.control = Some(Arc::new(Mutex::new(c)));
    }

    /// Sets the id the next probe created on this target gets.
    pub fn set_next_probe_id(&mut self, id: u32) {
        self.next_probe = id;
    }

    /// The id the probe being created gets (`memlens probe add` prints it).
    pub(crate) fn next_probe_id(&self) -> u32 {
        self.next_probe
    }

    /// The runtime's control socket, when the target has one.
    pub fn control(&self) -> Option<Arc<Mutex<Control>>> {
        self.control.clone()
    }

    pub(crate) fn cpus(&self) -> &[i32] {
        &self.cpus
    }

    /// The process's threads now. Events opened on each with `inherit` also cover the
    /// threads they create later.
    pub(crate) fn tids(&self) -> Result<Vec<i32>> {
        let dir = std::fs::read_dir(format!("/proc/{}/task", self.pid))
            .map_err(|_| Error::Target(format!("no process with PID {} (it exited?)", self.pid)))?;
        let mut out: Vec<i32> =
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
        out.sort_unstable();
        Ok(out)
    }

    /// Opens a uprobe (`ret`: uretprobe) at `point` for thread `tid` on `cpu` (-1: any),
    /// after `tune` adjusts the attributes.
    pub(crate) fn open_uprobe(
        &self,
        point: &Point,
        ret: bool,
        tid: i32,
        cpu: i32,
        group: RawFd,
        tune: &dyn Fn(&mut Attr),
    ) -> Result<OwnedFd> {
        let pmu = self.pmu.clone().map_err(Error::Unavailable)?;
        crate::perf::privilege().map_err(Error::Unavailable)?;
        let mut a = perf::uprobe_attr(pmu, self.binary.cpath(), point.offset, ret);
        tune(&mut a);
        perf::open(&a, tid, cpu, group).map_err(|e| self.open_error(&point.label, e))
    }

    pub(crate) fn open_error(&self, what: &str, e: io::Error) -> Error {
        match e.raw_os_error() {
            Some(libc::ESRCH) => {
                Error::Target(format!("no process with PID {} (it exited?)", self.pid))
            }
            Some(libc::EACCES) | Some(libc::EPERM) => Error::Unavailable(format!(
                "{what}: perf_event_open refused ({e}): kernel probes need root or CAP_PERFMON, and the target must be yours"
            )),
            _ => Error::io(format!("{what}: perf_event_open"), e),
        }
    }

    /// Whether the target still runs (reaping it when we launched it).
    pub fn state(&self) -> State {
        if self.child {
            let mut status = 0;
            // SAFETY: waits for our own child without blocking.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if r == self.pid {
                let code = if libc::WIFEXITED(status) {
                    libc::WEXITSTATUS(status)
                } else {
                    128 + libc::WTERMSIG(status)
                };
                return State::Exited(Some(code));
            }
            if r < 0 {
                return State::Exited(None);
            }
            return State::Running;
        }
        match proc_state(self.pid) {
            None | Some('Z') | Some('X') => State::Exited(None),
            Some(_) => State::Running,
        }
    }
}

/// Finds `prog` like the shell does (a name without `/` is searched in PATH).
pub fn find_program(prog: &str) -> Result<PathBuf> {
    let found = if prog.contains('/') {
        Some(PathBuf::from(prog))
    } else {
        std::env::var_os("PATH")
            .and_then(|p| std::env::split_paths(&p).map(|d| d.join(prog)).find(|c| c.is_file()))
    };
    let path = found
        .filter(|p| p.is_file())
        .ok_or_else(|| Error::Target(format!("{prog}: no such program")))?;
    path.canonicalize().map_err(|e| Error::Target(format!("{prog}: {e}")))
}

/// A launched program held before `exec` until [`Held::release`].
pub struct Held {
    /// Its process id.
    pub pid: i32,
    gate: Option<OwnedFd>,
}

impl Held {
    /// Lets the program exec and run.
    pub fn release(&mut self) {
        self.gate = None;
    }

    /// Kills the held program (probes could not be inserted).
    pub fn abort(&mut self) {
        // SAFETY: our own child.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            let mut st = 0;
            libc::waitpid(self.pid, &mut st, 0);
        }
    }
}

/// Forks a child that waits on a pipe, then execs `path` with `args` (`args[0]` is
/// `argv[0]`). Probes created for its PID meanwhile are in place at its first
/// instruction: uprobes survive exec and are installed as the new image is mapped.
pub fn launch_held(path: &Path, args: &[String]) -> Result<Held> {
    let cpath = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::Target(format!("{}: a path with a NUL byte", path.display())))?;
    let cargs: Vec<CString> = args
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| Error::Target("an argument with a NUL byte".into()))?;
    let mut argv: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 fills two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(Error::io("pipe", io::Error::last_os_error()));
    }
    // SAFETY: the child only calls async-signal-safe functions before exec.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Error::io("fork", io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: child side: wait for the gate to close, then exec.
        unsafe {
            libc::close(fds[1]);
            let mut b = 0u8;
            while libc::read(fds[0], (&mut b as *mut u8).cast(), 1) < 0 {}
            libc::close(fds[0]);
            libc::execv(cpath.as_ptr(), argv.as_ptr());
            let msg = b"memlens: error: cannot execute the program\n";
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::_exit(127);
        }
    }
    // SAFETY: parent side: the read end is the child's; the write end is the gate.
    unsafe { libc::close(fds[0]) };
    // SAFETY: fds[1] is ours.
    let gate = unsafe { OwnedFd::from_raw_fd(fds[1]) };
    Ok(Held { pid, gate: Some(gate) })
}

impl Target {
    /// The target for a child from [`launch_held`].
    pub fn launched(pid: i32, binary: Binary) -> Result<Target> {
        Target::with_binary(pid, binary, true)
    }
}
