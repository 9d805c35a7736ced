//! Names for data addresses: which variable, field, heap block or mapping each
//! access of a trace touched.
//!
//! DWARF names globals and statics (with member paths like `stats.v[3]`),
//! thread-locals (through each thread's recorded thread pointer), and stack
//! variables (through the frame pointer recorded at every function entry). Heap
//! addresses are named after the allocation that contains them: its call site and
//! the offset in the block. What is left is named after the mapping it falls in.
//!
//! The [`Attributor`] follows each thread's stream (function entries and exits,
//! thread start) and answers [`Attributor::attribute`] for every access with an
//! interned [`LabelId`]; each distinct address is resolved through DWARF once.
//!
//! # Brief overview
//! - [`HeapIndex`]: every block of the trace, built in a first pass.
//! - [`Attributor`]: per-access attribution, then [`Attributor::label`] to read names.
//! - [`Label`]: kind, variable (`base`) and member path; [`Label::display`].
//!
//! # Example
//! ```
//! use memlens_format::{Addr, Pc, ThreadId};
//! use memlens_names::{Attributor, HeapIndex, Kind};
//! use memlens_symbols::Symbolizer;
//!
//! let sym = Symbolizer::new(&[]);
//! let mut heap = HeapIndex::default();
//! heap.add_block(ThreadId(0), 0, Addr(0x1000), 64, Pc(0x401234), Vec::new());
//! heap.finish();
//! let mut a = Attributor::new(&sym, heap, None);
//! let id = a.attribute(ThreadId(0), 1, Pc(0x401500), Addr(0x1010));
//! assert_eq!(a.label(id).kind, Kind::Heap);
//! assert_eq!(a.label(id).path, "+16");
//! ```
#![deny(missing_docs)]

mod heap;
mod maps;

pub use heap::{Block, HeapIndex};
pub use maps::{Mapping, Maps};

use memlens_format::{Addr, Event, Pc, ThreadId};
use memlens_symbols::{DataKind, FrameBase, Symbolizer};
use std::collections::HashMap;
use std::sync::Arc;

/// What kind of storage an address is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A global or static variable.
    Global,
    /// A thread-local variable.
    ThreadLocal,
    /// A local variable or parameter of a stack frame.
    Stack,
    /// A heap block.
    Heap,
    /// No variable: named after the mapping it falls in (a thread's stack, a
    /// module's data, anonymous memory).
    Mapping,
    /// Nothing known.
    Unknown,
}

impl Kind {
    /// Lowercase name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Global => "global",
            Kind::ThreadLocal => "tls",
            Kind::Stack => "stack",
            Kind::Heap => "heap",
            Kind::Mapping => "mapping",
            Kind::Unknown => "unknown",
        }
    }

    /// Whether this is a real name (a variable or a heap block), not a fallback.
    pub fn is_named(self) -> bool {
        !matches!(self, Kind::Mapping | Kind::Unknown)
    }
}

/// An interned label.
pub type LabelId = u32;

/// A name for a data address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Label {
    /// Storage kind.
    pub kind: Kind,
    /// The variable (`stats`, `fill::buf`), heap site (`heap(counts.c:37)`) or mapping.
    pub base: Arc<str>,
    /// Member/index path or offset inside it (`.v[3]`, `+16`), may be empty.
    pub path: String,
}

impl Label {
    /// `base` + `path`.
    pub fn display(&self) -> String {
        format!("{}{}", self.base, self.path)
    }

    /// Rolls a path up to its first `depth` components (`.v[3].x` at depth 1 → `.v`);
    /// depth 0 is the whole variable.
    pub fn rolled_up(&self, depth: usize) -> String {
        let mut out = String::new();
        let mut n = 0;
        for (i, c) in self.path.char_indices() {
            if (c == '.' || c == '[' || c == '+') && i > 0 {
                n += 1;
            }
            if n >= depth || (depth == 0) {
                break;
            }
            out.push(c);
        }
        if depth == 0 {
            return self.base.to_string();
        }
        format!("{}{}", self.base, out)
    }
}

#[derive(Default)]
struct ThreadState {
    stack: Option<(u64, u64)>,
    tls: u64,
    frames: Vec<(Pc, u64)>,
}

/// Attributes accesses to labels. Feed it every event of a stream in order with
/// [`Attributor::observe`] (it follows function frames), and ask for accesses with
/// [`Attributor::attribute`].
pub struct Attributor<'s> {
    sym: &'s Symbolizer,
    heap: HeapIndex,
    maps: Option<Maps>,
    threads: HashMap<ThreadId, ThreadState>,
    labels: Vec<Label>,
    ids: HashMap<Label, LabelId>,
    global_cache: HashMap<u64, Option<LabelId>>,
    stack_cache: HashMap<(Pc, u64, i64), LabelId>,
    heap_sites: HashMap<usize, Arc<str>>,
    site_namer: Option<Box<dyn Fn(Pc) -> String + 's>>,
    exe_tls: Option<(u32, u64)>,
}

impl<'s> Attributor<'s> {
    /// An attributor over a trace's symbols, heap blocks and memory map.
    pub fn new(sym: &'s Symbolizer, heap: HeapIndex, maps: Option<Maps>) -> Attributor<'s> {
        // The executable's static TLS block sits just below the thread pointer
        // (x86-64 TLS variant II), rounded up to its alignment.
        let exe_tls = sym.modules().first().and_then(|m| {
            let t = sym.module_symbols(m.id).ok()?.tls_segment()?;
            let align = t.align.max(1);
            Some((m.id, t.mem_size.div_ceil(align) * align))
        });
        Attributor {
            sym,
            heap,
            maps,
            threads: HashMap::new(),
            labels: Vec::new(),
            ids: HashMap::new(),
            global_cache: HashMap::new(),
            stack_cache: HashMap::new(),
            heap_sites: HashMap::new(),
            site_namer: None,
            exe_tls,
        }
    }

    /// How heap blocks are named: given the allocation's call site, a string such as
    /// `counts.c:37 allocs`. Without it the site is shown as an address.
    pub fn set_site_namer(&mut self, f: impl Fn(Pc) -> String + 's) {
        self.site_namer = Some(Box::new(f));
    }

    fn intern(&mut self, l: Label) -> LabelId {
        if let Some(&id) = self.ids.get(&l) {
            return id;
        }
        let id = self.labels.len() as LabelId;
        self.labels.push(l.clone());
        self.ids.insert(l, id);
        id
    }

    /// The label behind an id.
    pub fn label(&self, id: LabelId) -> &Label {
        &self.labels[id as usize]
    }

    /// Every label so far.
    pub fn labels(&self) -> &[Label] {
        &self.labels
    }

    /// Follows thread and function events.
    pub fn observe(&mut self, thread: ThreadId, ev: &Event) {
        match ev {
            Event::ThreadStart { stack_lo, stack_hi, tls, .. } => {
                let t = self.threads.entry(thread).or_default();
                if stack_hi.0 > stack_lo.0 {
                    t.stack = Some((stack_lo.0, stack_hi.0));
                }
                t.tls = tls.0;
            }
            Event::FuncEnter { pc, frame, .. } => {
                let t = self.threads.entry(thread).or_default();
                // Frames left by longjmp or unwinding without an exit: drop those
                // whose frame lies below (inside) the new one's.
                while t.frames.last().is_some_and(|&(_, f)| f != 0 && frame.0 != 0 && f < frame.0) {
                    t.frames.pop();
                }
                t.frames.push((*pc, frame.0));
            }
            Event::FuncExit { .. } => {
                if let Some(t) = self.threads.get_mut(&thread) {
                    t.frames.pop();
                }
            }
            _ => {}
        }
    }

    /// The label of the data at `addr`, accessed by code at `pc` on `thread` as
    /// the thread's event number `index`.
    pub fn attribute(&mut self, thread: ThreadId, index: u64, pc: Pc, addr: Addr) -> LabelId {
        if let Some(id) = self.global(addr) {
            return id;
        }
        if let Some(id) = self.stack(thread, pc, addr) {
            return id;
        }
        if let Some(id) = self.tls(thread, addr) {
            return id;
        }
        if let Some((bi, off)) = self.heap.find(addr, thread, index) {
            let base = match self.heap_sites.get(&bi) {
                Some(b) => b.clone(),
                None => {
                    let site = self.heap.blocks()[bi].site;
                    let s = match &self.site_namer {
                        Some(f) => f(site),
                        None => format!("{site}"),
                    };
                    let b: Arc<str> = format!("heap({s})").into();
                    self.heap_sites.insert(bi, b.clone());
                    b
                }
            };
            return self.intern(Label { kind: Kind::Heap, base, path: format!("+{off}") });
        }
        let l = self.mapping(addr);
        self.intern(l)
    }

    fn global(&mut self, addr: Addr) -> Option<LabelId> {
        if let Some(&c) = self.global_cache.get(&addr.0) {
            return c;
        }
        let id =
            self.sym.data_name(addr).filter(|d| d.kind == DataKind::Global).map(|d| {
                self.intern(Label { kind: Kind::Global, base: d.base.clone(), path: d.path })
            });
        self.global_cache.insert(addr.0, id);
        id
    }

    fn tls(&mut self, thread: ThreadId, addr: Addr) -> Option<LabelId> {
        let (module, size) = self.exe_tls?;
        let tp = self.threads.get(&thread)?.tls;
        if tp == 0 || addr.0 >= tp || addr.0 < tp.wrapping_sub(size) {
            return None;
        }
        let off = addr.0 - (tp - size);
        let d = self.sym.tls_data_name(module, off)?;
        Some(self.intern(Label { kind: Kind::ThreadLocal, base: d.base.clone(), path: d.path }))
    }

    fn stack(&mut self, thread: ThreadId, pc: Pc, addr: Addr) -> Option<LabelId> {
        let t = self.threads.get(&thread)?;
        let (lo, hi) = t.stack?;
        if addr.0 < lo || addr.0 >= hi {
            return None;
        }
        // The owner is the innermost frame whose CFA lies above the address.
        let (fpc, rbp) = *t.frames.iter().rev().find(|&&(_, rbp)| rbp != 0 && rbp + 16 > addr.0)?;
        let cfa = rbp + 16;
        let key = (fpc, cfa, addr.0 as i64 - cfa as i64);
        if let Some(&id) = self.stack_cache.get(&key) {
            return Some(id);
        }
        // The accessing pc decides lexical scopes when it is in the owning function.
        let frame = self.sym.function_frame(fpc);
        let label = match &frame {
            Some(f) => {
                let base = match f.frame_base {
                    FrameBase::Cfa => Some(cfa),
                    FrameBase::Register(6) => Some(rbp),
                    FrameBase::RegisterOffset(6, o) => Some(rbp.wrapping_add(o as u64)),
                    _ => None,
                };
                let at =
                    if f.ranges.iter().any(|r| r.contains_return_address(pc)) { pc } else { fpc };
                let named = base.and_then(|b| f.name_at(at, addr.0.wrapping_sub(b) as i64));
                match named {
                    Some(d) => Label {
                        kind: Kind::Stack,
                        base: format!("{}::{}", f.name, d.base).into(),
                        path: d.path,
                    },
                    None => Label {
                        kind: Kind::Stack,
                        base: format!("{}::<frame>", f.name).into(),
                        path: format!("[cfa{}]", addr.0 as i64 - cfa as i64),
                    },
                }
            }
            None => {
                let name = self
                    .sym
                    .function_symbol(fpc)
                    .map(|f| f.name.to_string())
                    .unwrap_or_else(|| format!("{fpc}"));
                Label {
                    kind: Kind::Stack,
                    base: format!("{name}::<frame>").into(),
                    path: format!("[cfa{}]", addr.0 as i64 - cfa as i64),
                }
            }
        };
        let id = self.intern(label);
        self.stack_cache.insert(key, id);
        Some(id)
    }

    fn mapping(&self, addr: Addr) -> Label {
        for (t, st) in &self.threads {
            if st.stack.is_some_and(|(lo, hi)| addr.0 >= lo && addr.0 < hi) {
                let base = format!("[stack of T{}]", t.0).into();
                return Label { kind: Kind::Mapping, base, path: String::new() };
            }
        }
        if let Some(m) = self.sym.module_of(addr) {
            let file = m.path.rsplit('/').next().unwrap_or(&m.path);
            return Label {
                kind: Kind::Mapping,
                base: format!("[{file}]").into(),
                path: String::new(),
            };
        }
        if let Some(maps) = &self.maps {
            if let Some(m) = maps.find(addr) {
                return Label { kind: Kind::Mapping, base: m.label().into(), path: String::new() };
            }
        }
        Label { kind: Kind::Unknown, base: "[unknown]".into(), path: String::new() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollups() {
        let l = Label { kind: Kind::Global, base: "stats".into(), path: ".v[3].x".into() };
        assert_eq!(l.display(), "stats.v[3].x");
        assert_eq!(l.rolled_up(0), "stats");
        assert_eq!(l.rolled_up(1), "stats.v");
        assert_eq!(l.rolled_up(2), "stats.v[3]");
        assert_eq!(l.rolled_up(9), "stats.v[3].x");
    }
}
