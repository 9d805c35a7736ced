//! Sampling uprobes for the `timer` and `perf` modules: every hit of every point is a
//! sample (`sample_period = 1`) with the thread and a CLOCK_MONOTONIC time, and with
//! `counters` the values of a counter group read at that hit. Events are opened per
//! thread and CPU with `inherit` (the kernel refuses to mmap an inherited per-thread
//! event on any CPU); all events of one CPU write into that CPU's ring.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::locate::Point;
use crate::perf::{self, Attr, Ring, Sample};
use crate::target::Target;
use crate::{Error, Result};

const RING_PAGES: usize = 256;

pub(crate) struct Sampler {
    rings: Vec<Ring>,
    fds: Vec<OwnedFd>,
    /// Event id → index of its point.
    roles: HashMap<u64, usize>,
    buf: Vec<Sample>,
    /// Samples the kernel dropped (ring full).
    pub lost: u64,
}

impl Drop for Sampler {
    fn drop(&mut self) {
        perf::close_all(std::mem::take(&mut self.fds));
    }
}

impl Sampler {
    /// `points`: (point, return probe). `counters`: (type, config) of counters read at
    /// every hit; their values follow the points' in [`Sample::values`].
    pub(crate) fn open(
        target: &Target,
        points: &[(Point, bool)],
        counters: &[(u32, u64, &str)],
    ) -> Result<Sampler> {
        let mut s = Sampler {
            rings: Vec::new(),
            fds: Vec::new(),
            roles: HashMap::new(),
            buf: Vec::new(),
            lost: 0,
        };
        let tids = target.tids()?;
        let grouped = !counters.is_empty();
        for &cpu in target.cpus() {
            let mut owner: Option<usize> = None;
            for &tid in &tids {
                let mut leader = -1;
                for (i, (p, ret)) in points.iter().enumerate() {
                    let group = if grouped { leader } else { -1 };
                    let fd = target.open_uprobe(p, *ret, tid, cpu, group, &|a: &mut Attr| {
                        a.sample_period = 1;
                        a.sample_type =
                            perf::SAMPLE_IDENTIFIER | perf::SAMPLE_TID | perf::SAMPLE_TIME;
                        if grouped {
                            a.sample_type |= perf::SAMPLE_READ;
                            a.read_format = perf::FORMAT_GROUP;
                        }
                        a.flags = perf::FLAG_INHERIT | perf::FLAG_USE_CLOCKID;
                        a.clockid = libc::CLOCK_MONOTONIC;
                    })?;
                    if grouped && i == 0 {
                        leader = fd.as_raw_fd();
                    }
                    let id = perf::event_id(&fd).map_err(|e| Error::io("PERF_EVENT_IOC_ID", e))?;
                    s.roles.insert(id, i);
                    match owner {
                        None => {
                            s.rings.push(
                                Ring::new(&fd, RING_PAGES, grouped)
                                    .map_err(|e| Error::io("mmap of the perf ring buffer", e))?,
                            );
                            owner = Some(s.fds.len());
                        }
                        Some(o) => perf::set_output(&fd, &s.fds[o])
                            .map_err(|e| Error::io("PERF_EVENT_IOC_SET_OUTPUT", e))?,
                    }
                    s.fds.push(fd);
                }
                for &(ty, config, name) in counters {
                    let mut a = Attr::new(ty, config);
                    // Group members must share the leader's clock.
                    a.flags = perf::FLAG_INHERIT | perf::FLAG_USE_CLOCKID;
                    a.clockid = libc::CLOCK_MONOTONIC;
                    let fd = perf::open(&a, tid, cpu, leader)
                        .map_err(|e| target.open_error(&format!("counter {name}"), e))?;
                    s.fds.push(fd);
                }
            }
        }
        Ok(s)
    }

    /// Every new sample with its point index, in time order.
    pub(crate) fn drain(&mut self) -> Vec<(usize, Sample)> {
        self.buf.clear();
        for r in &mut self.rings {
            self.lost += r.drain(&mut self.buf);
        }
        let mut out: Vec<(usize, Sample)> =
            self.buf.drain(..).filter_map(|s| self.roles.get(&s.id).map(|&i| (i, s))).collect();
        out.sort_by_key(|(_, s)| s.time);
        out
    }
}
