//! Names for data addresses: which variable, field, heap block or mapping each
//! access of a trace touched.
//!
//! DWARF names globals and statics (with member paths like `stats.v[3]`),
//! thread-locals of the executable and of the shared libraries loaded at start-up
//! (through each thread's recorded thread pointer), and stack variables (through the
//! frame pointer recorded at every function entry, and location lists at `-O2`).
//! Heap addresses are named after the element type of their block when its
//! allocation says it (`Node.next`, `Point[3].y`: clang's allocation-site type,
//! `std::allocator<T>`, Rust's `Box<T>`/`Vec<T>`), else after the allocation's call
//! site and the offset in the block. What is left is named after the mapping it
//! falls in.
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
use memlens_symbols::{DataKind, FrameBase, HeapType, Symbolizer};
use std::collections::HashMap;
use std::sync::Arc;

/// A hash map with a fast, non-cryptographic hasher: attribution looks up every
/// access in a few of these.
pub type FastMap<K, V> = HashMap<K, V, rustc_hash::FxBuildHasher>;

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
    /// For a heap block whose element type is known (and which is then named after
    /// the type: `Node.next`, `Point[3].y`), its allocation site (`heap(x.cpp:9 main)`).
    pub site: Option<Arc<str>>,
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

#[derive(Clone, Copy)]
struct OpenFrame {
    /// Entry pc.
    pc: Pc,
    /// Frame pointer after the prologue, 0 if unknown.
    rbp: u64,
    /// Start of the function symbol, 0 if unknown.
    func: u64,
    /// Return address into the caller.
    call_site: Pc,
}

#[derive(Default)]
struct ThreadState {
    stack: Option<(u64, u64)>,
    tls: u64,
    /// Open frames, outermost first.
    frames: Vec<OpenFrame>,
}

/// Attributes accesses to labels. Feed it every event of a stream in order with
/// [`Attributor::observe`] (it follows function frames), and ask for accesses with
/// [`Attributor::attribute`].
pub struct Attributor<'s> {
    sym: &'s Symbolizer,
    heap: HeapIndex,
    maps: Option<Maps>,
    threads: FastMap<ThreadId, ThreadState>,
    labels: Vec<Label>,
    ids: FastMap<Label, LabelId>,
    global_cache: FastMap<u64, Option<LabelId>>,
    stack_cache: FastMap<(Pc, u64, i64, Pc), LabelId>,
    heap_ids: FastMap<(usize, u64), LabelId>,
    fn_starts: FastMap<Pc, u64>,
    heap_sites: FastMap<usize, (Arc<str>, Option<HeapType>)>,
    heap_types: FastMap<(Pc, Vec<Pc>), Option<HeapType>>,
    site_namer: Option<Box<dyn Fn(Pc) -> String + 's>>,
    /// Static TLS blocks of the modules loaded at start-up: (module id, offset below
    /// the thread pointer, size).
    static_tls: Vec<(u32, u64, u64)>,
}

impl<'s> Attributor<'s> {
    /// An attributor over a trace's symbols, heap blocks and memory map.
    pub fn new(sym: &'s Symbolizer, heap: HeapIndex, maps: Option<Maps>) -> Attributor<'s> {
        let static_tls = static_tls_layout(sym);
        Attributor {
            sym,
            heap,
            maps,
            threads: FastMap::default(),
            labels: Vec::new(),
            ids: FastMap::default(),
            global_cache: FastMap::default(),
            stack_cache: FastMap::default(),
            heap_ids: FastMap::default(),
            fn_starts: FastMap::default(),
            heap_sites: FastMap::default(),
            heap_types: FastMap::default(),
            site_namer: None,
            static_tls,
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
            Event::FuncEnter { pc, frame, call_site } => {
                let f = self.function_start(*pc);
                let t = self.threads.entry(thread).or_default();
                // Frames left by longjmp or unwinding without an exit: drop those
                // whose frame lies below (inside) the new one's.
                while t.frames.last().is_some_and(|o| o.rbp != 0 && frame.0 != 0 && o.rbp < frame.0)
                {
                    t.frames.pop();
                }
                t.frames.push(OpenFrame { pc: *pc, rbp: frame.0, func: f, call_site: *call_site });
            }
            Event::FuncExit { pc } => {
                let f = if pc.0 == 0 { 0 } else { self.function_start(*pc) };
                if let Some(t) = self.threads.get_mut(&thread) {
                    // An exit closes the innermost frame of its function; an exit that
                    // matches no open frame (instrumentation that reports exits of
                    // functions whose entries it did not) is ignored, so that the
                    // frames of the callers stay known.
                    if f == 0 {
                        t.frames.pop();
                    } else if let Some(i) = t.frames.iter().rposition(|o| o.func == f) {
                        t.frames.truncate(i);
                    }
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
            // Each (block, offset) is named once.
            if let Some(&id) = self.heap_ids.get(&(bi, off)) {
                return id;
            }
            let l = self.heap_label(bi, off);
            let id = self.intern(l);
            self.heap_ids.insert((bi, off), id);
            return id;
        }
        let l = self.mapping(addr);
        self.intern(l)
    }

    /// Start of the function symbol holding `pc` (0 when unknown), cached per pc.
    fn function_start(&mut self, pc: Pc) -> u64 {
        let sym = self.sym;
        *self
            .fn_starts
            .entry(pc)
            .or_insert_with(|| sym.function_symbol(Pc(pc.0 + 1)).map_or(0, |f| f.start.0))
    }

    /// Names offset `off` of heap block `bi`: after its element type when the
    /// allocation's call chain gives one, else after its site and the offset.
    fn heap_label(&mut self, bi: usize, off: u64) -> Label {
        if !self.heap_sites.contains_key(&bi) {
            let b = &self.heap.blocks()[bi];
            let (site, stack) = (b.site, b.stack.clone());
            let s = match &self.site_namer {
                Some(f) => f(site),
                None => format!("{site}"),
            };
            let base: Arc<str> = format!("heap({s})").into();
            let sym = self.sym;
            let ty = self
                .heap_types
                .entry((site, stack))
                .or_insert_with_key(|(site, stack)| sym.heap_type(*site, stack))
                .clone();
            self.heap_sites.insert(bi, (base, ty));
        }
        let (base, ty) = &self.heap_sites[&bi];
        let b = &self.heap.blocks()[bi];
        match ty {
            Some(t) => {
                let esz = t.layout.size().unwrap_or(1).max(1);
                let path = if b.end - b.start <= esz {
                    t.layout.describe(off).path
                } else {
                    format!("[{}]{}", off / esz, t.layout.describe(off % esz).path)
                };
                Label { kind: Kind::Heap, base: t.name.clone(), path, site: Some(base.clone()) }
            }
            None => {
                Label { kind: Kind::Heap, base: base.clone(), path: format!("+{off}"), site: None }
            }
        }
    }

    fn global(&mut self, addr: Addr) -> Option<LabelId> {
        // Heap and stack addresses are in no module: skip the cache for them.
        self.sym.module_of(addr)?;
        if let Some(&c) = self.global_cache.get(&addr.0) {
            return c;
        }
        let id = self.sym.data_name(addr).filter(|d| d.kind == DataKind::Global).map(|d| {
            self.intern(Label {
                kind: Kind::Global,
                base: d.base.clone(),
                path: d.path,
                site: None,
            })
        });
        self.global_cache.insert(addr.0, id);
        id
    }

    fn tls(&mut self, thread: ThreadId, addr: Addr) -> Option<LabelId> {
        let tp = self.threads.get(&thread)?.tls;
        if tp == 0 || addr.0 >= tp {
            return None;
        }
        let below = tp - addr.0;
        let &(module, off, _) =
            self.static_tls.iter().find(|&&(_, off, size)| below <= off && below > off - size)?;
        let d = self.sym.tls_data_name(module, off - below)?;
        Some(self.intern(Label {
            kind: Kind::ThreadLocal,
            base: d.base.clone(),
            path: d.path,
            site: None,
        }))
    }

    fn stack(&mut self, thread: ThreadId, pc: Pc, addr: Addr) -> Option<LabelId> {
        let t = self.threads.get(&thread)?;
        let (lo, hi) = t.stack?;
        if addr.0 < lo || addr.0 >= hi {
            return None;
        }
        // The owner is the innermost frame whose CFA lies above the address.
        let i = t.frames.iter().rposition(|o| o.rbp != 0 && o.rbp + 16 > addr.0)?;
        let (fpc, rbp) = (t.frames[i].pc, t.frames[i].rbp);
        // Where the owning function is when the access happens: the access itself, or
        // the call it is in (the next frame's return address), for locations that
        // depend on the pc (location lists).
        let callee_site = t.frames.get(i + 1).map(|o| o.call_site);
        let cfa = rbp + 16;
        let key = (fpc, cfa, addr.0 as i64 - cfa as i64, pc);
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
                let at = if f.ranges.iter().any(|r| r.contains_return_address(pc)) {
                    pc
                } else {
                    callee_site.unwrap_or(fpc)
                };
                let named = base.and_then(|b| f.name_at(at, addr.0.wrapping_sub(b) as i64));
                match named {
                    Some(d) => Label {
                        kind: Kind::Stack,
                        base: format!("{}::{}", f.name, d.base).into(),
                        path: d.path,
                        site: None,
                    },
                    None => Label {
                        kind: Kind::Stack,
                        base: format!("{}::<frame>", f.name).into(),
                        path: format!("[cfa{}]", addr.0 as i64 - cfa as i64),
                        site: None,
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
                    site: None,
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
                return Label { kind: Kind::Mapping, base, path: String::new(), site: None };
            }
        }
        if let Some(m) = self.sym.module_of(addr) {
            let file = m.path.rsplit('/').next().unwrap_or(&m.path);
            return Label {
                kind: Kind::Mapping,
                base: format!("[{file}]").into(),
                path: String::new(),
                site: None,
            };
        }
        if let Some(maps) = &self.maps {
            if let Some(m) = maps.find(addr) {
                return Label {
                    kind: Kind::Mapping,
                    base: m.label().into(),
                    path: String::new(),
                    site: None,
                };
            }
        }
        Label { kind: Kind::Unknown, base: "[unknown]".into(), path: String::new(), site: None }
    }
}

/// Where glibc puts the TLS blocks of the modules loaded at start-up (x86-64,
/// variant II: below the thread pointer), replaying `_dl_determine_tlsoffset` over the
/// modules with a `PT_TLS` segment in load order (the executable first). Shared
/// libraries' thread-locals live there too, reached through `__tls_get_addr`.
fn static_tls_layout(sym: &Symbolizer) -> Vec<(u32, u64, u64)> {
    let mut out = Vec::new();
    let (mut offset, mut freetop, mut freebottom) = (0u64, 0u64, 0u64);
    for m in sym.modules() {
        // Only ELF objects of the process (not the vdso or anonymous entries).
        if !m.path.starts_with('/') {
            continue;
        }
        let Some(t) = sym.module_symbols(m.id).ok().and_then(|s| s.tls_segment()) else {
            continue;
        };
        let align = t.align.max(1);
        let size = t.mem_size;
        let firstbyte = (t.vaddr & (align - 1)).wrapping_neg() & (align - 1);
        let round = |x: u64| x.div_ceil(align) * align;
        if freebottom - freetop >= size {
            let off = round((freetop + size).wrapping_sub(firstbyte)) + firstbyte;
            if off <= freebottom {
                freetop = off;
                out.push((m.id, off, size));
                continue;
            }
        }
        let off = round((offset + size).wrapping_sub(firstbyte)) + firstbyte;
        if off > offset + size + (freebottom - freetop) {
            freetop = offset;
            freebottom = off - size;
        }
        offset = off;
        out.push((m.id, off, size));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollups() {
        let l =
            Label { kind: Kind::Global, base: "stats".into(), path: ".v[3].x".into(), site: None };
        assert_eq!(l.display(), "stats.v[3].x");
        assert_eq!(l.rolled_up(0), "stats");
        assert_eq!(l.rolled_up(1), "stats.v");
        assert_eq!(l.rolled_up(2), "stats.v[3]");
        assert_eq!(l.rolled_up(9), "stats.v[3].x");
    }
}
