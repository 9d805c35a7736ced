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
mod par;

pub use heap::{Block, HeapIndex};
pub use maps::{Mapping, Maps};
pub use par::{
    attribute_trace, attribute_trace_auto, attribute_trace_serial, Attribution, LabelCounts,
    SiteNamer,
};

use memlens_format::{Addr, Event, Pc, ThreadId};
use memlens_symbols::{DataKind, FrameBase, HeapType, Symbolizer, TypeSource};
use std::collections::HashMap;
use std::sync::Arc;

/// Why a trace could not be attributed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] memlens_format::Error),
}

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OpenFrame {
    /// Entry pc.
    pub(crate) pc: Pc,
    /// Frame pointer after the prologue, 0 if unknown.
    pub(crate) rbp: u64,
    /// Start of the function symbol, 0 if unknown.
    pub(crate) func: u64,
    /// Return address into the caller.
    pub(crate) call_site: Pc,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ThreadState {
    pub(crate) stack: Option<(u64, u64)>,
    pub(crate) tls: u64,
    /// Open frames, outermost first.
    pub(crate) frames: Vec<OpenFrame>,
    /// A frame with a frame pointer was ever open: without one (`--dbi` traces) no
    /// frame owns a stack address, and [`ThreadState::owner`] need not scan them all
    /// for each stack access.
    pub(crate) framed: bool,
}

impl ThreadState {
    /// A `ThreadStart` event.
    pub(crate) fn start(&mut self, stack_lo: u64, stack_hi: u64, tls: u64) {
        if stack_hi > stack_lo {
            self.stack = Some((stack_lo, stack_hi));
        }
        self.tls = tls;
    }

    /// A function entry.
    pub(crate) fn enter(&mut self, f: OpenFrame) {
        // Frames left by longjmp or unwinding without an exit: drop those
        // whose frame lies below (inside) the new one's.
        while self.frames.last().is_some_and(|o| o.rbp != 0 && f.rbp != 0 && o.rbp < f.rbp) {
            self.frames.pop();
        }
        self.framed |= f.rbp != 0;
        self.frames.push(f);
    }

    /// A function exit of the function starting at `func` (0: unknown).
    pub(crate) fn exit(&mut self, func: u64) {
        // An exit closes the innermost frame of its function; an exit that
        // matches no open frame (instrumentation that reports exits of
        // functions whose entries it did not) is ignored, so that the
        // frames of the callers stay known.
        if func == 0 {
            self.frames.pop();
        } else if let Some(i) = self.frames.iter().rposition(|o| o.func == func) {
            self.frames.truncate(i);
        }
    }

    /// Whether `addr` is in this thread's stack.
    #[inline]
    pub(crate) fn in_stack(&self, addr: u64) -> bool {
        self.stack.is_some_and(|(lo, hi)| addr >= lo && addr < hi)
    }

    /// The frame owning stack address `addr`: the innermost one whose CFA lies above it.
    #[inline]
    pub(crate) fn owner(&self, addr: u64) -> Option<usize> {
        if !self.framed {
            return None;
        }
        self.frames.iter().rposition(|o| o.rbp != 0 && o.rbp + 16 > addr)
    }
}

/// Start of the function symbol holding `pc` (0 when unknown).
pub(crate) fn function_start(sym: &Symbolizer, pc: Pc) -> u64 {
    sym.function_symbol(Pc(pc.0 + 1)).map_or(0, |f| f.start.0)
}

/// The global variable (and member path) at `addr`, if `addr` is in one.
pub(crate) fn global_label(sym: &Symbolizer, addr: Addr) -> Option<Label> {
    sym.data_name(addr).filter(|d| d.kind == DataKind::Global).map(|d| Label {
        kind: Kind::Global,
        base: d.base.clone(),
        path: d.path,
        site: None,
    })
}

/// Names stack address `addr` in the frame of the function entered at `fpc` whose
/// frame pointer is `rbp`, accessed by code at `pc`; `callee_site` is the return
/// address of the next inner frame, if any. The name depends on `fpc`, `addr - cfa`,
/// `pc` and `callee_site` only, which is what callers cache it by.
pub(crate) fn stack_label(
    sym: &Symbolizer,
    fpc: Pc,
    rbp: u64,
    pc: Pc,
    callee_site: Option<Pc>,
    addr: Addr,
) -> Label {
    let cfa = rbp + 16;
    // The accessing pc decides lexical scopes when it is in the owning function.
    match &sym.function_frame(fpc) {
        Some(f) => {
            let base = match f.frame_base {
                FrameBase::Cfa => Some(cfa),
                FrameBase::Register(6) => Some(rbp),
                FrameBase::RegisterOffset(6, o) => Some(rbp.wrapping_add(o as u64)),
                _ => None,
            };
            // Where the owning function is when the access happens: the access itself,
            // or the call it is in (the next frame's return address), for locations
            // that depend on the pc (location lists).
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
            let name = sym
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
    }
}

/// The thread-local at `addr` for a thread whose thread pointer is `tp`.
pub(crate) fn tls_label(
    sym: &Symbolizer,
    static_tls: &[(u32, u64, u64)],
    tp: u64,
    addr: Addr,
) -> Option<Label> {
    if tp == 0 || addr.0 >= tp {
        return None;
    }
    let below = tp - addr.0;
    let &(module, off, _) =
        static_tls.iter().find(|&&(_, off, size)| below <= off && below > off - size)?;
    let d = sym.tls_data_name(module, off - below)?;
    Some(Label { kind: Kind::ThreadLocal, base: d.base.clone(), path: d.path, site: None })
}

/// The mapping `addr` falls in: the first of `stacks` (thread, stack range) holding
/// it, else a module, else the recorded memory map.
pub(crate) fn mapping_label(
    stacks: impl IntoIterator<Item = (ThreadId, Option<(u64, u64)>)>,
    sym: &Symbolizer,
    maps: Option<&Maps>,
    addr: Addr,
) -> Label {
    for (t, st) in stacks {
        if st.is_some_and(|(lo, hi)| addr.0 >= lo && addr.0 < hi) {
            let base = format!("[stack of T{}]", t.0).into();
            return Label { kind: Kind::Mapping, base, path: String::new(), site: None };
        }
    }
    if let Some(m) = sym.module_of(addr) {
        let file = m.path.rsplit('/').next().unwrap_or(&m.path);
        return Label {
            kind: Kind::Mapping,
            base: format!("[{file}]").into(),
            path: String::new(),
            site: None,
        };
    }
    if let Some(m) = maps.and_then(|maps| maps.find(addr)) {
        return Label {
            kind: Kind::Mapping,
            base: m.label().into(),
            path: String::new(),
            site: None,
        };
    }
    Label { kind: Kind::Unknown, base: "[unknown]".into(), path: String::new(), site: None }
}

/// `heap(SITE)` for an allocation call site.
pub(crate) fn heap_base(site_namer: Option<&(dyn Fn(Pc) -> String + '_)>, site: Pc) -> Arc<str> {
    let s = match site_namer {
        Some(f) => f(site),
        None => format!("{site}"),
    };
    format!("heap({s})").into()
}

/// How a block's element type applies to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum HeapShape {
    /// One object: `Type.member`.
    Single,
    /// An array: `Type[i].member`.
    Array,
    /// No type, or a type read from the source line that the block's size does not
    /// fit (`malloc(sizeof(struct T) + n)`): `heap(site)+off`.
    Untyped,
    /// A `dlopen`ed module's thread-local block (the dynamic loader's allocation of
    /// its TLS size): named as that thread-local variable. The index of the module's
    /// block among the candidates ([`TypeSource::DynamicTls`]).
    DynamicTls(u32),
}

/// How a block of element type `ty` is named (see [`HeapShape`]).
pub(crate) fn heap_single(ty: &Option<HeapType>, b: &Block) -> HeapShape {
    let size = b.end - b.start;
    match ty {
        Some(t) if t.tls_block(size).is_some() => {
            HeapShape::DynamicTls(t.tls_block(size).unwrap_or(0) as u32)
        }
        Some(t) if t.fits(size) => {
            if size <= t.layout.size().unwrap_or(1).max(1) {
                HeapShape::Single
            } else {
                HeapShape::Array
            }
        }
        _ => HeapShape::Untyped,
    }
}

/// Names offset `off` of a block allocated at a site named `base`: after its element
/// type when known, else after the site and the offset.
pub(crate) fn heap_label(
    base: &Arc<str>,
    ty: &Option<HeapType>,
    shape: HeapShape,
    off: u64,
) -> Label {
    if let (HeapShape::DynamicTls(i), Some(t)) = (shape, ty) {
        let named = match &t.source {
            TypeSource::DynamicTls(blocks) => blocks.get(i as usize).and_then(|b| b.name(off)),
            _ => None,
        };
        if let Some((base, path)) = named {
            return Label { kind: Kind::ThreadLocal, base, path, site: None };
        }
    }
    match ty.as_ref().filter(|_| matches!(shape, HeapShape::Single | HeapShape::Array)) {
        Some(t) => {
            let esz = t.layout.size().unwrap_or(1).max(1);
            let path = if shape == HeapShape::Single {
                t.layout.describe(off).path
            } else {
                format!("[{}]{}", off / esz, t.layout.describe(off % esz).path)
            };
            Label { kind: Kind::Heap, base: t.name.clone(), path, site: Some(base.clone()) }
        }
        None => Label { kind: Kind::Heap, base: base.clone(), path: format!("+{off}"), site: None },
    }
}

/// Asks the CPU to bring `p`'s cache line in.
#[inline(always)]
pub(crate) fn prefetch<T>(p: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults and `p` is a valid reference.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (p as *const T).cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Labels by id, each distinct label once. The labels are kept once, in the
/// vector; the table holds ids (millions of heap fields: no second copy of each name).
#[derive(Default)]
pub(crate) struct Interner {
    pub(crate) labels: Vec<Label>,
    ids: hashbrown::HashTable<LabelId>,
    /// [`Granularity::Variable`]: labels lose their member/index path.
    pub(crate) coarse: bool,
}

/// How finely accesses are told apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Granularity {
    /// Every field and array element its own label (`stats.v[3]`, `Point[5].y`).
    #[default]
    Field,
    /// Whole variables (`stats`, `Point`): a label has no path. Much cheaper on
    /// large arrays, which have a label per element otherwise.
    Variable,
}

impl Interner {
    fn hash(l: &Label) -> u64 {
        use std::hash::BuildHasher;
        rustc_hash::FxBuildHasher.hash_one(l)
    }

    /// The id of `l`, new if it was not seen before.
    pub(crate) fn intern(&mut self, mut l: Label) -> LabelId {
        if self.coarse {
            l.path.clear();
        }
        let h = Self::hash(&l);
        let labels = &self.labels;
        if let Some(&id) = self.ids.find(h, |&id| labels[id as usize] == l) {
            return id;
        }
        let id = self.labels.len() as LabelId;
        self.labels.push(l);
        let labels = &self.labels;
        self.ids.insert_unique(h, id, |&id| Self::hash(&labels[id as usize]));
        id
    }

    pub(crate) fn get(&self, id: LabelId) -> &Label {
        &self.labels[id as usize]
    }
}

/// Attributes accesses to labels. Feed it every event of a stream in order with
/// [`Attributor::observe`] (it follows function frames), and ask for accesses with
/// [`Attributor::attribute`].
pub struct Attributor<'s> {
    sym: &'s Symbolizer,
    heap: HeapIndex,
    maps: Option<Maps>,
    threads: FastMap<ThreadId, ThreadState>,
    labels: Interner,
    global_cache: FastMap<u64, Option<LabelId>>,
    stack_cache: FastMap<(Pc, i64, Pc, Pc), LabelId>,
    last_block: heap::LastBlock,
    block_labels: BlockLabels,
    heap_ids: FastMap<(usize, u64), LabelId>,
    /// Labels of large blocks' offsets, one segment per block: a table instead of
    /// `heap_ids` for the blocks that hold millions of distinct fields.
    heap_dense: DenseTable,
    /// Direct-mapped: (page, whether it lies in a module).
    module_pages: ModulePages,
    /// Per block: its segment in `heap_dense` (`u32::MAX`: none yet).
    block_seg: Vec<u32>,
    fn_starts: FastMap<Pc, u64>,
    heap_sites: FastMap<usize, (Arc<str>, Option<HeapType>)>,
    heap_types: FastMap<(Pc, Vec<Pc>), Option<HeapType>>,
    site_namer: Option<Box<dyn Fn(Pc) -> String + 's>>,
    /// Static TLS blocks of the modules loaded at start-up: (module id, offset below
    /// the thread pointer, size).
    static_tls: Vec<(u32, u64, u64)>,
    /// Writable module segments where most globals are, each with a lazily filled
    /// label per byte address: one array load instead of a hash probe per access.
    dense: DenseTable,
    /// [`Granularity::Variable`]: built at the first heap lookup.
    coarse_heap: Option<par::CoarseHeap>,
    /// Per key of `coarse_heap`: the label id (`UNSEEN`: none yet).
    region_ids: Vec<LabelId>,
}

/// Label per byte address of the modules' writable segments, in pages allocated on
/// first touch (segments include the runtime's large buffers, never touched by the
/// program).
pub(crate) struct DenseTable {
    segs: Vec<DenseSeg>,
    /// Pages of labels, handed out to segments as they are touched.
    pool: Vec<u32>,
    /// The segment hit last.
    last: usize,
}

struct DenseSeg {
    range: std::ops::Range<u64>,
    /// Per page: its offset in the pool, or `NO_PAGE`.
    dir: Vec<u32>,
}

const DENSE_PAGE_BITS: u32 = 12;
const DENSE_PAGE_MASK: u64 = (1 << DENSE_PAGE_BITS) - 1;
const NO_PAGE: u32 = u32::MAX;
/// Heap blocks from this size on get a dense label table.
pub(crate) const BIG_BLOCK: u64 = 4096;
const MODULE_PAGES: usize = 1024;
/// Segments up to this size get a dense table.
const DENSE_MAX: u64 = 1 << 32;

impl DenseTable {
    pub(crate) fn new(sym: &Symbolizer) -> DenseTable {
        let segs = sym
            .modules()
            .iter()
            .flat_map(|m| {
                m.segments
                    .iter()
                    .filter(|s| s.flags & 2 != 0 && s.memsz > 0 && s.memsz <= DENSE_MAX)
                    .map(move |s| {
                        let a = s.vaddr.wrapping_add(m.bias);
                        a..a.saturating_add(s.memsz)
                    })
            })
            .map(|range| {
                let pages = ((range.end - range.start) >> DENSE_PAGE_BITS) + 1;
                DenseSeg { range, dir: vec![NO_PAGE; pages as usize] }
            })
            .collect();
        DenseTable { segs, pool: Vec::new(), last: 0 }
    }

    /// A table without segments, for [`DenseTable::add`].
    pub(crate) fn empty() -> DenseTable {
        DenseTable { segs: Vec::new(), pool: Vec::new(), last: 0 }
    }

    /// A segment for offsets `0..len`; its index.
    pub(crate) fn add(&mut self, len: u64) -> usize {
        let pages = (len >> DENSE_PAGE_BITS) + 1;
        self.segs.push(DenseSeg { range: 0..len, dir: vec![NO_PAGE; pages as usize] });
        self.segs.len() - 1
    }

    /// The entry of offset `at` of segment `k`.
    #[inline]
    pub(crate) fn get_in(&self, k: usize, at: u64) -> u32 {
        let page = self.segs[k].dir[(at >> DENSE_PAGE_BITS) as usize];
        if page == NO_PAGE {
            return UNSEEN;
        }
        self.pool[page as usize + (at & DENSE_PAGE_MASK) as usize]
    }

    /// `None` when `a` is in no writable segment, else where its entry is and the
    /// entry (`UNSEEN`, `NOT_GLOBAL` or a label id).
    #[inline]
    pub(crate) fn get(&mut self, a: u64) -> Option<(usize, u64, u32)> {
        let k = if self.segs.get(self.last).is_some_and(|d| d.range.contains(&a)) {
            self.last
        } else {
            let k = self.segs.iter().position(|d| d.range.contains(&a))?;
            self.last = k;
            k
        };
        let at = a - self.segs[k].range.start;
        let page = self.segs[k].dir[(at >> DENSE_PAGE_BITS) as usize];
        if page == NO_PAGE {
            return Some((k, at, UNSEEN));
        }
        Some((k, at, self.pool[page as usize + (at & DENSE_PAGE_MASK) as usize]))
    }

    /// Prefetches the entry of `a`, if it has one: the next accesses of a batch
    /// are looked up while the current ones are counted.
    #[inline]
    pub(crate) fn prefetch(&self, a: u64) {
        let Some(d) = self.segs.get(self.last).filter(|d| d.range.contains(&a)) else {
            return;
        };
        let at = a - d.range.start;
        let page = d.dir[(at >> DENSE_PAGE_BITS) as usize];
        if page != NO_PAGE {
            prefetch(&self.pool[page as usize + (at & DENSE_PAGE_MASK) as usize]);
        }
    }

    /// Sets the entry `get` found.
    pub(crate) fn set(&mut self, k: usize, at: u64, id: u32) {
        let p = (at >> DENSE_PAGE_BITS) as usize;
        if self.segs[k].dir[p] == NO_PAGE {
            self.segs[k].dir[p] = self.pool.len() as u32;
            self.pool.resize(self.pool.len() + (1 << DENSE_PAGE_BITS), UNSEEN);
        }
        let page = self.segs[k].dir[p] as usize;
        self.pool[page + (at & DENSE_PAGE_MASK) as usize] = id;
    }
}

/// Whether an address lies in a module, cached per page when the whole page
/// answers alike (a module may end mid-page): heap accesses ask on nearly every
/// access or cache miss.
pub(crate) struct ModulePages(Vec<(u64, bool)>);

impl Default for ModulePages {
    fn default() -> Self {
        ModulePages(vec![(u64::MAX, false); MODULE_PAGES])
    }
}

impl ModulePages {
    #[inline]
    pub(crate) fn contains(&mut self, sym: &Symbolizer, addr: Addr) -> bool {
        let page = addr.0 >> 12;
        let slot = (page as usize) & (MODULE_PAGES - 1);
        let (p, inside) = self.0[slot];
        if p == page {
            return inside;
        }
        let first = sym.module_of(Addr(page << 12)).is_some();
        let last = sym.module_of(Addr((page << 12) | 0xfff)).is_some();
        if first != last {
            return sym.module_of(addr).is_some();
        }
        self.0[slot] = (page, first);
        first
    }
}

/// [`Granularity::Variable`]: one label per heap block, named at its first access,
/// unless its bytes have names of their own (a dynamic TLS block).
#[derive(Default)]
pub(crate) struct BlockLabels(Vec<LabelId>);

impl BlockLabels {
    /// Block `bi`'s label (`Some(None)`: its bytes are named apart), `None` before
    /// it is named.
    #[inline]
    pub(crate) fn get(&self, bi: usize) -> Option<Option<LabelId>> {
        match self.0.get(bi) {
            None | Some(&UNSEEN) => None,
            Some(&NOT_GLOBAL) => Some(None),
            Some(&id) => Some(Some(id)),
        }
    }

    /// Names block `bi` (one of `blocks`) after `l`, its label at some offset.
    pub(crate) fn set(
        &mut self,
        bi: usize,
        blocks: usize,
        l: Label,
        labels: &mut Interner,
    ) -> Option<LabelId> {
        if self.0.len() <= bi {
            self.0.resize(blocks.max(bi + 1), UNSEEN);
        }
        let id = if l.kind == Kind::Heap { labels.intern(l) } else { NOT_GLOBAL };
        self.0[bi] = id;
        (id != NOT_GLOBAL).then_some(id)
    }
}

/// Dense global tables: not looked up yet, and not a global variable.
pub(crate) const UNSEEN: u32 = u32::MAX;
pub(crate) const NOT_GLOBAL: u32 = u32::MAX - 1;

impl<'s> Attributor<'s> {
    /// An attributor over a trace's symbols, heap blocks and memory map.
    pub fn new(sym: &'s Symbolizer, heap: HeapIndex, maps: Option<Maps>) -> Attributor<'s> {
        let static_tls = static_tls_layout(sym);
        Attributor {
            sym,
            heap,
            maps,
            threads: FastMap::default(),
            labels: Interner::default(),
            global_cache: FastMap::default(),
            stack_cache: FastMap::default(),
            block_labels: BlockLabels::default(),
            last_block: heap::LastBlock::default(),
            heap_ids: FastMap::default(),
            heap_dense: DenseTable::empty(),
            module_pages: ModulePages::default(),
            block_seg: Vec::new(),
            fn_starts: FastMap::default(),
            heap_sites: FastMap::default(),
            heap_types: FastMap::default(),
            site_namer: None,
            static_tls,
            dense: DenseTable::new(sym),
            coarse_heap: None,
            region_ids: Vec::new(),
        }
    }

    /// How heap blocks are named: given the allocation's call site, a string such as
    /// `counts.c:37 allocs`. Without it the site is shown as an address.
    pub fn set_site_namer(&mut self, f: impl Fn(Pc) -> String + 's) {
        self.site_namer = Some(Box::new(f));
    }

    fn intern(&mut self, l: Label) -> LabelId {
        self.labels.intern(l)
    }

    /// Sets how finely accesses are told apart (before the first one).
    pub fn set_granularity(&mut self, g: Granularity) {
        self.labels.coarse = g == Granularity::Variable;
    }

    /// The label behind an id.
    pub fn label(&self, id: LabelId) -> &Label {
        self.labels.get(id)
    }

    /// Every label so far.
    pub fn labels(&self) -> &[Label] {
        &self.labels.labels
    }

    /// Follows thread and function events.
    pub fn observe(&mut self, thread: ThreadId, ev: &Event) {
        match ev {
            Event::ThreadStart { stack_lo, stack_hi, tls, .. } => {
                self.threads.entry(thread).or_default().start(stack_lo.0, stack_hi.0, tls.0);
            }
            Event::FuncEnter { pc, frame, call_site } => {
                let func = self.function_start(*pc);
                let f = OpenFrame { pc: *pc, rbp: frame.0, func, call_site: *call_site };
                self.threads.entry(thread).or_default().enter(f);
            }
            Event::FuncExit { pc } => {
                let f = if pc.0 == 0 { 0 } else { self.function_start(*pc) };
                if let Some(t) = self.threads.get_mut(&thread) {
                    t.exit(f);
                }
            }
            _ => {}
        }
    }

    /// The label of the data at `addr`, accessed by code at `pc` on `thread` as
    /// the thread's event number `index`.
    pub fn attribute(&mut self, thread: ThreadId, index: u64, pc: Pc, addr: Addr) -> LabelId {
        let dense = self.global(addr);
        if let Ok(Some(id)) = dense {
            return id;
        }
        // A stack address is in no module: the (cheaper) stack test may go first.
        if let Some(id) = self.stack(thread, pc, addr) {
            return id;
        }
        if dense.is_err() {
            if let Some(id) = self.global_slow(addr) {
                return id;
            }
        }
        if let Some(id) = self.tls(thread, addr) {
            return id;
        }
        if self.labels.coarse {
            if let Some(id) = self.region(addr) {
                return id;
            }
        }
        if let (Some((bi, off)), _) = self.last_block.find(&self.heap, addr, thread, index, false) {
            if self.labels.coarse {
                if let Some(id) = self.block_id(bi, off) {
                    return id;
                }
            }
            // Each (block, offset) is named once.
            let b = &self.heap.blocks()[bi];
            if b.end - b.start >= BIG_BLOCK {
                return self.big_block(bi, off);
            }
            if let Some(&id) = self.heap_ids.get(&(bi, off)) {
                return id;
            }
            let l = self.heap_label(bi, off);
            let id = self.intern(l);
            self.heap_ids.insert((bi, off), id);
            return id;
        }
        let l = mapping_label(
            self.threads.iter().map(|(t, s)| (*t, s.stack)),
            self.sym,
            self.maps.as_ref(),
            addr,
        );
        self.intern(l)
    }

    /// [`Granularity::Variable`]: the name of `addr` if it lies where every heap block
    /// ever there has the same whole-block name (see `heap::Regions`).
    fn region(&mut self, addr: Addr) -> Option<LabelId> {
        if self.coarse_heap.is_none() {
            let namer = self.site_namer.as_deref();
            let classes = par::HeapClasses::new(&self.heap, self.sym, namer);
            self.coarse_heap = Some(par::CoarseHeap::new(&self.heap, &classes));
        }
        let ch = self.coarse_heap.as_ref()?;
        Some(ch.find(addr.0, &mut self.region_ids, &mut self.labels)?.2)
    }

    /// [`Granularity::Variable`]: one label for all of block `bi` (named at its
    /// first access, at `off`); `None` for a block whose bytes have different
    /// names (a dynamic TLS block).
    #[inline]
    fn block_id(&mut self, bi: usize, off: u64) -> Option<LabelId> {
        if let Some(id) = self.block_labels.get(bi) {
            return id;
        }
        let l = self.heap_label(bi, off);
        self.block_labels.set(bi, self.heap.blocks().len(), l, &mut self.labels)
    }

    #[inline]
    fn big_block(&mut self, bi: usize, off: u64) -> LabelId {
        let k = match self.block_seg.get(bi) {
            Some(&k) if k != u32::MAX => k as usize,
            _ => {
                if self.block_seg.len() <= bi {
                    self.block_seg.resize(self.heap.blocks().len().max(bi + 1), u32::MAX);
                }
                let b = &self.heap.blocks()[bi];
                let k = self.heap_dense.add(b.end - b.start);
                self.block_seg[bi] = k as u32;
                k
            }
        };
        let id = self.heap_dense.get_in(k, off);
        if id != UNSEEN {
            return id;
        }
        let l = self.heap_label(bi, off);
        let id = self.intern(l);
        self.heap_dense.set(k, off, id);
        id
    }

    /// Prefetches what naming an access to `addr` will read first.
    #[inline]
    pub fn prefetch(&self, addr: Addr) {
        self.dense.prefetch(addr.0);
    }

    /// Every label so far, by id, for the caller to keep.
    pub fn into_labels(self) -> Vec<Label> {
        self.labels.labels
    }

    /// Start of the function symbol holding `pc` (0 when unknown), cached per pc.
    fn function_start(&mut self, pc: Pc) -> u64 {
        let sym = self.sym;
        *self.fn_starts.entry(pc).or_insert_with(|| function_start(sym, pc))
    }

    /// Names offset `off` of heap block `bi`: after its element type when the
    /// allocation's call chain gives one, else after its site and the offset.
    fn heap_label(&mut self, bi: usize, off: u64) -> Label {
        if !self.heap_sites.contains_key(&bi) {
            let b = &self.heap.blocks()[bi];
            let (site, stack) = (b.site, b.stack.clone());
            let base = heap_base(self.site_namer.as_deref(), site);
            let sym = self.sym;
            let ty = self
                .heap_types
                .entry((site, stack))
                .or_insert_with_key(|(site, stack)| sym.heap_type(*site, stack))
                .clone();
            self.heap_sites.insert(bi, (base, ty));
        }
        let (base, ty) = &self.heap_sites[&bi];
        let single = heap_single(ty, &self.heap.blocks()[bi]);
        heap_label(base, ty, single, off)
    }

    /// The global at `addr` if it lies in a writable segment: `Err(())` when it does
    /// not, `Ok(None)` when it does but names no variable.
    #[inline]
    fn global(&mut self, addr: Addr) -> Result<Option<LabelId>, ()> {
        let (k, at, mut id) = self.dense.get(addr.0).ok_or(())?;
        if id == UNSEEN {
            id = global_label(self.sym, addr).map_or(NOT_GLOBAL, |l| self.intern(l));
            self.dense.set(k, at, id);
        }
        Ok((id != NOT_GLOBAL).then_some(id))
    }

    fn global_slow(&mut self, addr: Addr) -> Option<LabelId> {
        // Heap and stack addresses are in no module: skip the cache for them.
        if !self.module_pages.contains(self.sym, addr) {
            return None;
        }
        if let Some(&c) = self.global_cache.get(&addr.0) {
            return c;
        }
        let id = global_label(self.sym, addr).map(|l| self.intern(l));
        self.global_cache.insert(addr.0, id);
        id
    }

    fn tls(&mut self, thread: ThreadId, addr: Addr) -> Option<LabelId> {
        let tp = self.threads.get(&thread)?.tls;
        let l = tls_label(self.sym, &self.static_tls, tp, addr)?;
        Some(self.intern(l))
    }

    fn stack(&mut self, thread: ThreadId, pc: Pc, addr: Addr) -> Option<LabelId> {
        let t = self.threads.get(&thread)?;
        if !t.in_stack(addr.0) {
            return None;
        }
        let i = t.owner(addr.0)?;
        let (fpc, rbp) = (t.frames[i].pc, t.frames[i].rbp);
        let callee_site = t.frames.get(i + 1).map(|o| o.call_site);
        let key = (fpc, addr.0 as i64 - (rbp + 16) as i64, pc, callee_site.unwrap_or(Pc(0)));
        if let Some(&id) = self.stack_cache.get(&key) {
            return Some(id);
        }
        let l = stack_label(self.sym, fpc, rbp, pc, callee_site, addr);
        let id = self.intern(l);
        self.stack_cache.insert(key, id);
        Some(id)
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
