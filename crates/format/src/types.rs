//! Newtypes shared by every memlens crate, and the module map.

use std::fmt;

/// A data address in the traced process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Addr(pub u64);

/// A code address in the traced process (a return address of an instrumentation
/// callback, i.e. the instruction after the call in the instrumented code).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pc(pub u64);

/// A memlens thread index: 0 for the first thread that recorded anything, then in
/// order of first event. One event stream per thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ThreadId(pub u32);

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}
impl fmt::Display for Pc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}
impl fmt::Display for ThreadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "T{}", self.0)
    }
}

/// One loadable segment of a module, in the module's own (file) virtual addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// `p_vaddr` of the PT_LOAD header.
    pub vaddr: u64,
    /// `p_memsz` of the PT_LOAD header.
    pub memsz: u64,
    /// `p_flags` (PF_X = 1, PF_W = 2, PF_R = 4).
    pub flags: u32,
}

/// An executable or shared object mapped into the traced process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// Index in the trace's module table.
    pub id: u32,
    /// Path as the dynamic loader saw it (absolute for the main executable).
    pub path: String,
    /// GNU build-id note, empty when the module has none.
    pub build_id: Vec<u8>,
    /// Load bias: runtime address = file virtual address + bias.
    pub bias: u64,
    /// PT_LOAD segments.
    pub segments: Vec<Segment>,
}

impl Module {
    /// Whether a runtime address falls in one of this module's segments.
    pub fn contains(&self, addr: u64) -> bool {
        let Some(rel) = addr.checked_sub(self.bias) else { return false };
        self.segments.iter().any(|s| rel >= s.vaddr && rel - s.vaddr < s.memsz)
    }

    /// The runtime address translated to the module's file virtual address.
    pub fn file_addr(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.bias)
    }

    /// The build-id as lowercase hex.
    pub fn build_id_hex(&self) -> String {
        self.build_id.iter().map(|b| format!("{b:02x}")).collect()
    }
}
