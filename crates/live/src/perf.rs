//! perf_event_open: the attribute struct, uprobes, counters and the mmap ring buffer.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicU64, Ordering};

pub(crate) const TYPE_HARDWARE: u32 = 0;
pub(crate) const TYPE_SOFTWARE: u32 = 1;

pub(crate) const SAMPLE_TID: u64 = 1 << 1;
pub(crate) const SAMPLE_TIME: u64 = 1 << 2;
pub(crate) const SAMPLE_READ: u64 = 1 << 4;
pub(crate) const SAMPLE_IDENTIFIER: u64 = 1 << 16;
pub(crate) const FORMAT_GROUP: u64 = 1 << 3;

pub(crate) const FLAG_DISABLED: u64 = 1 << 0;
pub(crate) const FLAG_INHERIT: u64 = 1 << 1;
pub(crate) const FLAG_USE_CLOCKID: u64 = 1 << 25;

const IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
const IOC_ID: libc::c_ulong = 0x8008_2407;

const RECORD_LOST: u32 = 2;
const RECORD_SAMPLE: u32 = 9;

/// `struct perf_event_attr` up to `config3` (PERF_ATTR_SIZE_VER8).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct Attr {
    pub type_: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved2: u16,
    pub aux_sample_size: u32,
    pub reserved3: u32,
    pub sig_data: u64,
    pub config3: u64,
}

impl Attr {
    pub(crate) fn new(type_: u32, config: u64) -> Attr {
        Attr { type_, size: std::mem::size_of::<Attr>() as u32, config, ..Attr::default() }
    }
}

/// The `uprobe` PMU's type number (never hard-coded: it differs between kernels).
pub fn uprobe_type() -> io::Result<u32> {
    let s = std::fs::read_to_string("/sys/bus/event_source/devices/uprobe/type")?;
    s.trim().parse().map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad uprobe type"))
}

/// A uprobe (or uretprobe) attribute on `path` at file offset `offset`; `path` must
/// outlive the `open` call.
pub(crate) fn uprobe_attr(pmu: u32, path: &CString, offset: u64, ret: bool) -> Attr {
    let mut a = Attr::new(pmu, u64::from(ret));
    a.config1 = path.as_ptr() as u64;
    a.config2 = offset;
    a
}

pub(crate) fn open(attr: &Attr, pid: i32, cpu: i32, group: RawFd) -> io::Result<OwnedFd> {
    const FD_CLOEXEC: libc::c_ulong = 8;
    // SAFETY: attr is a valid perf_event_attr of the size it declares.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const Attr,
            pid as libc::c_long,
            cpu as libc::c_long,
            group as libc::c_long,
            FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

pub(crate) fn read_count(fd: &OwnedFd) -> u64 {
    let mut v = 0u64;
    // SAFETY: reads 8 bytes into v.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    if n == 8 {
        v
    } else {
        0
    }
}

pub(crate) fn event_id(fd: &OwnedFd) -> io::Result<u64> {
    let mut id = 0u64;
    // SAFETY: PERF_EVENT_IOC_ID writes one u64.
    if unsafe { libc::ioctl(fd.as_raw_fd(), IOC_ID, &mut id as *mut u64) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(id)
}

pub(crate) fn set_output(fd: &OwnedFd, to: &OwnedFd) -> io::Result<()> {
    // SAFETY: both are perf event descriptors.
    if unsafe { libc::ioctl(fd.as_raw_fd(), IOC_SET_OUTPUT, to.as_raw_fd()) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The CPUs that are online (`/sys/devices/system/cpu/online`, e.g. `0-3,6`).
pub(crate) fn online_cpus() -> Vec<i32> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<i32>().ok()),
        }
    }
    if out.is_empty() {
        out.push(0);
    }
    out
}

/// One sample: the event's id, the thread, the time, and the group's values when
/// PERF_SAMPLE_READ with PERF_FORMAT_GROUP was asked for.
#[derive(Clone, Debug)]
pub(crate) struct Sample {
    pub id: u64,
    pub tid: u32,
    pub time: u64,
    pub values: Vec<u64>,
}

/// A perf mmap ring buffer (one metadata page and `2^n` data pages).
pub(crate) struct Ring {
    base: *mut u8,
    len: usize,
    page: usize,
    read_group: bool,
}

// SAFETY: the mapping is owned by the ring and only touched through &mut self.
unsafe impl Send for Ring {}

impl Ring {
    pub(crate) fn new(fd: &OwnedFd, data_pages: usize, read_group: bool) -> io::Result<Ring> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = page * (1 + data_pages);
        // SAFETY: maps the event's buffer; checked for MAP_FAILED below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Ring { base: base.cast(), len, page, read_group })
    }

    /// Takes every complete record out of the buffer; returns the number of samples
    /// the kernel reported lost.
    pub(crate) fn drain(&mut self, out: &mut Vec<Sample>) -> u64 {
        // SAFETY: offsets 1024/1032 are data_head/data_tail of perf_event_mmap_page.
        let (head_p, tail_p) = unsafe {
            (
                &*(self.base.add(1024) as *const AtomicU64),
                &*(self.base.add(1032) as *const AtomicU64),
            )
        };
        let head = head_p.load(Ordering::Acquire);
        let mut tail = tail_p.load(Ordering::Relaxed);
        let size = (self.len - self.page) as u64;
        // SAFETY: the data area follows the first page.
        let data = unsafe { std::slice::from_raw_parts(self.base.add(self.page), size as usize) };
        let mut lost = 0;
        let mut rec = Vec::new();
        while tail < head {
            rec.clear();
            let at = |off: u64| data[(off % size) as usize];
            let hdr: Vec<u8> = (0..8).map(|i| at(tail + i)).collect();
            let ty = u32::from_ne_bytes(hdr[0..4].try_into().unwrap_or_default());
            let len = u64::from(u16::from_ne_bytes([hdr[6], hdr[7]]));
            if len < 8 {
                break;
            }
            rec.extend((0..len).map(|i| at(tail + i)));
            tail += len;
            let u = |i: usize| -> u64 {
                rec.get(i..i + 8)
                    .map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap_or_default()))
            };
            match ty {
                RECORD_SAMPLE => {
                    // IDENTIFIER, TID (pid, tid), TIME, then READ {nr, values[nr]}.
                    let tid = (u(16) >> 32) as u32;
                    let mut values = Vec::new();
                    if self.read_group {
                        let nr = u(32) as usize;
                        values.extend((0..nr.min(64)).map(|k| u(40 + 8 * k)));
                    }
                    out.push(Sample { id: u(8), tid, time: u(24), values });
                }
                RECORD_LOST => lost += u(16),
                _ => {}
            }
        }
        fence(Ordering::Release);
        tail_p.store(tail, Ordering::Release);
        lost
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps what new() mapped.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Whether this process may create uprobes on other processes: root, CAP_PERFMON or
/// CAP_SYS_ADMIN. `Err` says why not.
pub fn privilege() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return Ok(());
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    const CAP_SYS_ADMIN: u64 = 21;
    const CAP_PERFMON: u64 = 38;
    if eff & (1 << CAP_PERFMON | 1 << CAP_SYS_ADMIN) != 0 {
        return Ok(());
    }
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".into());
    Err(format!(
        "kernel probes need root or CAP_PERFMON (perf_event_paranoid is {paranoid}): run memlens as root or `setcap cap_perfmon+ep` it"
    ))
}

/// Whether the machine has a hardware PMU; `Err` gives the reason it has none.
pub fn hardware_pmu() -> Result<(), String> {
    let a = Attr::new(TYPE_HARDWARE, 0);
    let mut a = a;
    a.flags = FLAG_DISABLED;
    match open(&a, 0, -1, -1) {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("no hardware PMU on this machine (perf_event_open(cycles): {e})")),
    }
}

/// Closes many perf descriptors at once. Closing a uprobe event waits for an RCU grace
/// period (tens of ms on a busy machine); closed from parallel threads the waits
/// overlap, so removing a probe with many events stays fast.
pub(crate) fn close_all(fds: Vec<OwnedFd>) {
    close_in_parallel(fds);
}

/// Drops `items` from up to 64 threads at once.
pub(crate) fn close_in_parallel<T: Send>(items: Vec<T>) {
    if items.len() <= 1 {
        return;
    }
    let per = items.len().div_ceil(64);
    let mut it = items.into_iter();
    std::thread::scope(|s| loop {
        let chunk: Vec<T> = it.by_ref().take(per).collect();
        if chunk.is_empty() {
            break;
        }
        s.spawn(move || drop(chunk));
    });
}
