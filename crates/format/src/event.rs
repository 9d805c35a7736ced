//! Decoded events: the expanded form that consumers see.
//!
//! The compact wire form lives in [`crate::codec`]; this is what a reader yields.

use crate::types::{Addr, Pc, ThreadId};
use std::fmt;

/// Direction of a memory access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessKind {
    /// A load.
    Read,
    /// A store.
    Write,
}

/// A `#[repr(u8)]` enum of the wire format, one row per variant with its wire value
/// and its name in dumps; `from_u8` and `name` are made from the same rows.
macro_rules! wire_enum {
    ($(#[$m:meta])* pub enum $name:ident {
        $($(#[$vm:meta])* $v:ident = $n:literal => $s:literal,)*
    }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum $name {
            $($(#[$vm])* $v = $n,)*
        }

        impl $name {
            /// Decodes the wire value.
            pub fn from_u8(v: u8) -> Option<$name> {
                match v {
                    $($n => Some($name::$v),)*
                    _ => None,
                }
            }

            /// Short lowercase name used in dumps.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$v => $s,)*
                }
            }
        }
    };
}

wire_enum! {
    /// The read-modify-write operation of an atomic RMW event.
    pub enum RmwOp {
        /// `atomic_exchange`.
        Exchange = 0 => "xchg",
        /// `atomic_fetch_add`.
        FetchAdd = 1 => "add",
        /// `atomic_fetch_sub`.
        FetchSub = 2 => "sub",
        /// `atomic_fetch_and`.
        FetchAnd = 3 => "and",
        /// `atomic_fetch_or`.
        FetchOr = 4 => "or",
        /// `atomic_fetch_xor`.
        FetchXor = 5 => "xor",
        /// `atomic_fetch_nand`.
        FetchNand = 6 => "nand",
        /// A compare-exchange that stored.
        Cas = 7 => "cas",
        /// A compare-exchange that failed: a load only.
        CasFailed = 8 => "cas-fail",
    }
}

impl RmwOp {
    /// Whether the operation wrote memory.
    pub fn stores(self) -> bool {
        self != RmwOp::CasFailed
    }
}

wire_enum! {
    /// Which allocation function produced a block.
    pub enum AllocKind {
        /// `malloc`.
        Malloc = 0 => "malloc",
        /// `calloc`.
        Calloc = 1 => "calloc",
        /// `realloc` (the new block).
        Realloc = 2 => "realloc",
        /// `posix_memalign`, `aligned_alloc`, `memalign`, `valloc`, `pvalloc`.
        Aligned = 3 => "aligned",
        /// C++ `operator new` (any variant but array).
        New = 4 => "new",
        /// C++ `operator new[]`.
        NewArray = 5 => "new[]",
        /// An allocator from a user definition file (`alloc.in`).
        Custom = 6 => "custom",
        /// `mmap` of anonymous memory (reserved for later producers).
        Mmap = 7 => "mmap",
    }
}

wire_enum! {
    /// Which deallocation function released a block.
    pub enum FreeKind {
        /// `free` (and the old block of `realloc`).
        Free = 0 => "free",
        /// C++ `operator delete`.
        Delete = 1 => "delete",
        /// C++ `operator delete[]`.
        DeleteArray = 2 => "delete[]",
        /// A user-defined deallocator.
        Custom = 3 => "custom",
        /// `munmap` (reserved).
        Munmap = 4 => "munmap",
    }
}

/// One decoded event of a thread's stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A load or store of 1, 2, 4, 8 or 16 bytes (plain, volatile or atomic).
    Access {
        /// Code address of the access.
        pc: Pc,
        /// First byte accessed.
        addr: Addr,
        /// Bytes accessed.
        size: u8,
        /// Load or store.
        kind: AccessKind,
        /// An atomic load or store.
        atomic: bool,
        /// The value read or written, when recorded with `--values`.
        value: Option<u64>,
    },
    /// A range read or written at once (memcpy, memset, aggregate copies, odd sizes).
    Range {
        /// Code address.
        pc: Pc,
        /// First byte.
        addr: Addr,
        /// Length in bytes.
        len: u64,
        /// Load or store.
        kind: AccessKind,
    },
    /// An atomic read-modify-write performed by the runtime (one load and one store,
    /// or one load when a compare-exchange failed).
    Rmw {
        /// Code address.
        pc: Pc,
        /// Target.
        addr: Addr,
        /// Operand size in bytes.
        size: u8,
        /// The operation.
        op: RmwOp,
        /// Value before the operation, when recorded with `--values`.
        value: Option<u64>,
    },
    /// A memory fence.
    Fence {
        /// Code address.
        pc: Pc,
        /// C11 memory order (0 relaxed .. 5 seq_cst).
        order: u8,
    },
    /// Function entry.
    FuncEnter {
        /// An address inside the entered function (its instrumented prologue).
        pc: Pc,
        /// The caller's return address.
        call_site: Pc,
        /// Frame pointer after the prologue (canonical frame address - 16), 0 if unknown.
        frame: Addr,
    },
    /// Function exit (also synthesised for frames skipped by longjmp or unwinding).
    FuncExit {
        /// An address inside the exited function, 0 when synthesised.
        pc: Pc,
    },
    /// A call of a function listed with `memlens record --trace-calls`, at its entry.
    Call {
        /// The function's entry address (its symbol), not a return address.
        func: Pc,
        /// Stack pointer at the entry (it points at the return address).
        sp: Addr,
        /// The first three integer arguments (rdi, rsi, rdx), whatever the prototype.
        args: [u64; 3],
    },
    /// The return of a [`Event::Call`]ed function.
    Return {
        /// The function's entry address.
        func: Pc,
        /// Stack pointer at the `ret` (equal to the call's).
        sp: Addr,
        /// The integer return value (rax).
        value: u64,
    },
    /// A block was allocated.
    Alloc {
        /// Call site of the allocation function.
        pc: Pc,
        /// The block.
        addr: Addr,
        /// Requested size in bytes.
        size: u64,
        /// Allocation function.
        kind: AllocKind,
        /// Return addresses of the callers, innermost first (the frame-pointer walk).
        stack: Vec<Pc>,
    },
    /// A block was resized (counts as a free of `old` and an allocation of `new`).
    Realloc {
        /// Call site.
        pc: Pc,
        /// The old block (0 when realloc acted as malloc).
        old: Addr,
        /// The new block (0 when realloc acted as free).
        new: Addr,
        /// New size.
        size: u64,
        /// Callers, innermost first.
        stack: Vec<Pc>,
    },
    /// A block was released.
    Free {
        /// Call site.
        pc: Pc,
        /// The block.
        addr: Addr,
        /// Deallocation function.
        kind: FreeKind,
    },
    /// First event of every stream.
    ThreadStart {
        /// Kernel thread id.
        os_tid: u32,
        /// The creating thread, when known.
        parent: Option<ThreadId>,
        /// Thread name at start (`comm`).
        name: String,
        /// Lowest address of the thread's stack (0 if unknown).
        stack_lo: Addr,
        /// One past the highest address of the thread's stack (0 if unknown).
        stack_hi: Addr,
        /// The thread pointer (`%fs` base), which locates its static TLS block.
        tls: Addr,
    },
    /// Last event of a stream whose thread ended normally.
    ThreadExit,
    /// The thread named itself (pthread_setname_np or `memlens_thread_name`).
    ThreadName(String),
    /// `memlens_register_thread(id)`.
    RegisterThread(i64),
    /// Region of interest begins (`true`) or ends (`false`).
    Roi(bool),
    /// `memlens_trace_on` (`true`) or `memlens_trace_off` (`false`).
    Tracing(bool),
    /// The process forked; the child records into its own trace.
    Fork {
        /// Child pid.
        child_pid: u32,
    },
    /// The process is about to exec.
    Exec,
    /// An ordering timestamp for the events that follow.
    Clock(u64),
    /// The runtime could not record this many events of this thread here.
    Dropped(u64),
    /// A fatal signal arrived.
    Signal(i32),
    /// Wall-clock stamp: CLOCK_MONOTONIC nanoseconds when the thread reached this
    /// point (the metadata option `clock_offset` turns it into Unix time).
    Time(u64),
}

impl Event {
    /// Loads and stores this event counts as: an RMW is one of each, a failed CAS a load.
    #[inline]
    pub fn loads_stores(&self) -> (u64, u64) {
        match self {
            Event::Access { kind: AccessKind::Read, .. }
            | Event::Range { kind: AccessKind::Read, .. } => (1, 0),
            Event::Access { kind: AccessKind::Write, .. }
            | Event::Range { kind: AccessKind::Write, .. } => (0, 1),
            Event::Rmw { op, .. } => (1, u64::from(op.stores())),
            _ => (0, 0),
        }
    }

    /// Bytes read and written.
    #[inline]
    pub fn bytes_read_written(&self) -> (u64, u64) {
        match *self {
            Event::Access { size, kind: AccessKind::Read, .. } => (u64::from(size), 0),
            Event::Access { size, kind: AccessKind::Write, .. } => (0, u64::from(size)),
            Event::Range { len, kind: AccessKind::Read, .. } => (len, 0),
            Event::Range { len, kind: AccessKind::Write, .. } => (0, len),
            Event::Rmw { size, op, .. } => {
                (u64::from(size), if op.stores() { u64::from(size) } else { 0 })
            }
            _ => (0, 0),
        }
    }

    /// The code address of the event, if it has one.
    pub fn pc(&self) -> Option<Pc> {
        match *self {
            Event::Access { pc, .. }
            | Event::Range { pc, .. }
            | Event::Rmw { pc, .. }
            | Event::Fence { pc, .. }
            | Event::FuncEnter { pc, .. }
            | Event::FuncExit { pc }
            | Event::Alloc { pc, .. }
            | Event::Realloc { pc, .. }
            | Event::Free { pc, .. } => Some(pc),
            _ => None,
        }
    }

    /// Whether this is a memory access (access, range or RMW).
    pub fn is_access(&self) -> bool {
        matches!(self, Event::Access { .. } | Event::Range { .. } | Event::Rmw { .. })
    }
}

fn rw(kind: AccessKind) -> &'static str {
    match kind {
        AccessKind::Read => "R",
        AccessKind::Write => "W",
    }
}

/// The raw text form used by `memlens dump` before names are added.
impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Access { pc, addr, size, kind, atomic, value } => {
                write!(f, "{}{} {addr} {size} pc={pc}", if *atomic { "A" } else { "" }, rw(*kind))?;
                if let Some(v) = value {
                    write!(f, " value={v:#x}")?;
                }
                Ok(())
            }
            Event::Range { pc, addr, len, kind } => {
                write!(f, "{}range {addr} {len} pc={pc}", rw(*kind))
            }
            Event::Rmw { pc, addr, size, op, value } => {
                write!(f, "RMW.{} {addr} {size} pc={pc}", op.name())?;
                if let Some(v) = value {
                    write!(f, " old={v:#x}")?;
                }
                Ok(())
            }
            Event::Fence { pc, order } => write!(f, "fence {order} pc={pc}"),
            Event::FuncEnter { pc, call_site, frame } => {
                write!(f, "enter pc={pc} from={call_site} frame={frame}")
            }
            Event::FuncExit { pc } => write!(f, "exit pc={pc}"),
            Event::Call { func, sp, args } => {
                write!(f, "call {func} sp={sp} args={} {} {}", args[0], args[1], args[2])
            }
            Event::Return { func, sp, value } => write!(f, "return {func} sp={sp} value={value}"),
            Event::Alloc { pc, addr, size, kind, stack } => {
                write!(f, "alloc.{} {addr} {size} pc={pc} stack=[", kind.name())?;
                write_stack(f, stack)
            }
            Event::Realloc { pc, old, new, size, stack } => {
                write!(f, "realloc {old} -> {new} {size} pc={pc} stack=[")?;
                write_stack(f, stack)
            }
            Event::Free { pc, addr, kind } => write!(f, "free.{} {addr} pc={pc}", kind.name()),
            Event::ThreadStart { os_tid, parent, name, stack_lo, stack_hi, tls } => {
                write!(
                    f,
                    "thread-start tid={os_tid} name={name:?} stack={stack_lo}..{stack_hi} tls={tls}"
                )?;
                if let Some(p) = parent {
                    write!(f, " parent={p}")?;
                }
                Ok(())
            }
            Event::ThreadExit => f.write_str("thread-exit"),
            Event::ThreadName(n) => write!(f, "thread-name {n:?}"),
            Event::RegisterThread(id) => write!(f, "register-thread {id}"),
            Event::Roi(true) => f.write_str("roi-begin"),
            Event::Roi(false) => f.write_str("roi-end"),
            Event::Tracing(on) => write!(f, "tracing {}", if *on { "on" } else { "off" }),
            Event::Fork { child_pid } => write!(f, "fork child={child_pid}"),
            Event::Exec => f.write_str("exec"),
            Event::Clock(t) => write!(f, "clock {t}"),
            Event::Dropped(n) => write!(f, "dropped {n}"),
            Event::Signal(s) => write!(f, "signal {s}"),
            Event::Time(ns) => write!(f, "time {ns}"),
        }
    }
}

fn write_stack(f: &mut fmt::Formatter<'_>, stack: &[Pc]) -> fmt::Result {
    for (i, pc) in stack.iter().enumerate() {
        if i > 0 {
            f.write_str(" ")?;
        }
        write!(f, "{pc}")?;
    }
    f.write_str("]")
}
