//! The multi-module driver: maps addresses to modules, loads modules on first use and
//! caches per-PC results.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use memlens_format::{Addr, Module, Pc};

use crate::code::{CodeLocation, FunctionSymbol};
use crate::data::DataName;
use crate::dyntls::{is_tls_function, TlsBlock};
use crate::frame::FunctionFrame;
use crate::heaptype::{FrameVerdict, HeapType, TypeSource};
use crate::layout::TypeLayout;
use crate::module::{DebugSearch, ModuleSymbols};
use crate::Error;

/// Symbolizes code and data addresses of a traced process, given its module table.
///
/// Each module's files are read and parsed the first time an address inside it is
/// looked up; each distinct [`Pc`] is resolved once. All methods take `&self`, and the
/// type is `Send + Sync`, so one symbolizer can serve several threads.
pub struct Symbolizer {
    modules: Vec<Module>,
    /// Runtime segment ranges `(start, end, module index)`, sorted by start.
    ranges: Vec<(u64, u64, usize)>,
    loaded: Vec<OnceLock<Result<ModuleSymbols, Error>>>,
    search: DebugSearch,
    pcs: Mutex<HashMap<Pc, Option<Arc<CodeLocation>>>>,
    /// Modules' TLS blocks, for the dynamic loader's TLS allocations.
    tls_blocks: OnceLock<Arc<[TlsBlock]>>,
}

impl std::fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbolizer")
            .field("modules", &self.modules.len())
            .field("search", &self.search)
            .finish_non_exhaustive()
    }
}

impl Symbolizer {
    /// A symbolizer for these modules, looking for separate debug files in the default
    /// places (see [`DebugSearch`]).
    pub fn new(modules: &[Module]) -> Symbolizer {
        Symbolizer::with_search(modules, DebugSearch::default())
    }

    /// A symbolizer with explicit debug-file search directories.
    pub fn with_search(modules: &[Module], search: DebugSearch) -> Symbolizer {
        let mut ranges = Vec::new();
        for (i, m) in modules.iter().enumerate() {
            for s in &m.segments {
                let start = s.vaddr.wrapping_add(m.bias);
                ranges.push((start, start.saturating_add(s.memsz), i));
            }
        }
        ranges.sort_unstable();
        Symbolizer {
            modules: modules.to_vec(),
            ranges,
            loaded: modules.iter().map(|_| OnceLock::new()).collect(),
            search,
            pcs: Mutex::new(HashMap::new()),
            tls_blocks: OnceLock::new(),
        }
    }

    /// The module table.
    pub fn modules(&self) -> &[Module] {
        &self.modules
    }

    fn index_of(&self, a: u64) -> Option<usize> {
        let end = self.ranges.partition_point(|r| r.0 <= a);
        let (_, e, i) = self.ranges[..end].iter().rev().take(4).find(|r| a < r.1).copied()?;
        debug_assert!(a < e);
        Some(i)
    }

    /// The module whose segments contain a data address.
    pub fn module_of(&self, addr: Addr) -> Option<&Module> {
        self.index_of(addr.0).map(|i| &self.modules[i])
    }

    /// Whether any module's segments hold an address in `lo..=hi`.
    pub fn any_module_in(&self, lo: Addr, hi: Addr) -> bool {
        let end = self.ranges.partition_point(|r| r.0 <= hi.0);
        self.ranges[..end].iter().any(|r| r.1 > lo.0)
    }

    /// The module holding the call whose return address is `pc`.
    pub fn module_of_pc(&self, pc: Pc) -> Option<&Module> {
        self.index_of(pc.0.wrapping_sub(1)).map(|i| &self.modules[i])
    }

    fn load(&self, i: usize) -> Result<&ModuleSymbols, Error> {
        let r = self.loaded[i].get_or_init(|| ModuleSymbols::load(&self.modules[i], &self.search));
        r.as_ref().map_err(Clone::clone)
    }

    /// The symbols of the module with this [`Module::id`], loading them if needed. The
    /// error says why a module yields no names (file missing, not ELF, …).
    pub fn module_symbols(&self, module_id: u32) -> Result<&ModuleSymbols, Error> {
        let i = self
            .modules
            .iter()
            .position(|m| m.id == module_id)
            .ok_or(Error::UnknownModule(module_id))?;
        self.load(i)
    }

    fn symbols_at(&self, a: u64) -> Option<&ModuleSymbols> {
        self.load(self.index_of(a)?).ok()
    }

    /// The source frames of the call whose return address is `pc`, innermost first.
    ///
    /// `None` when `pc` is in no module. A module that cannot be loaded gives a location
    /// with no frames.
    pub fn frames(&self, pc: Pc) -> Option<Arc<CodeLocation>> {
        if let Some(hit) = self.pcs.lock().unwrap_or_else(|e| e.into_inner()).get(&pc) {
            return hit.clone();
        }
        let loc = self.index_of(pc.0.wrapping_sub(1)).map(|i| {
            Arc::new(match self.load(i) {
                Ok(syms) => syms.frames(pc),
                Err(_) => {
                    let m = &self.modules[i];
                    CodeLocation {
                        module_id: m.id,
                        module_path: m.path.as_str().into(),
                        frames: Vec::new(),
                    }
                }
            })
        });
        self.pcs.lock().unwrap_or_else(|e| e.into_inner()).insert(pc, loc.clone());
        loc
    }

    /// The ELF function symbol containing the call whose return address is `pc`.
    pub fn function_symbol(&self, pc: Pc) -> Option<&FunctionSymbol> {
        self.symbols_at(pc.0.wrapping_sub(1))?.function_symbol(pc)
    }

    /// Names a data address inside a static variable of some module.
    pub fn data_name(&self, addr: Addr) -> Option<DataName> {
        self.symbols_at(addr.0)?.data_name(addr)
    }

    /// Names the byte at `offset` in the thread-local block of module `module_id`.
    pub fn tls_data_name(&self, module_id: u32, offset: u64) -> Option<DataName> {
        self.module_symbols(module_id).ok()?.tls_data_name(offset)
    }

    /// The frame description of the function containing return address `pc`.
    pub fn function_frame(&self, pc: Pc) -> Option<Arc<FunctionFrame>> {
        self.symbols_at(pc.0.wrapping_sub(1))?.function_frame(pc)
    }

    /// The type of the objects in a heap block allocated by the call returning to
    /// `site`, whose callers' return addresses are `stack` (innermost first).
    ///
    /// Sources, most reliable first ([`HeapType::source`]):
    /// 1. clang's `DW_AT_LLVM_alloc_type` on the call site (`new T`);
    /// 2. the frames of the call chain, innermost first: the type parameter of an
    ///    allocator class (`std::allocator<T>`, `__new_allocator<T>`, Rust's `Box<T>`
    ///    and `RawVec<T>`) gives the type, library frames (std, alloc, core) are looked
    ///    through, and the first user frame ends this search;
    /// 3. the C or C++ source line of the call (`new T`, `sizeof(struct T)`,
    ///    `T *p = malloc(...)`), when every allocation expression on it names the same
    ///    type. Such a type fits a block only if [`HeapType::fits`] its size.
    ///
    /// A block the dynamic loader allocates for a `dlopen`ed module's thread-locals
    /// gets a [`TypeSource::DynamicTls`] type instead.
    pub fn heap_type(&self, site: Pc, stack: &[Pc]) -> Option<HeapType> {
        if let Some(t) = self.dynamic_tls(site) {
            return Some(t);
        }
        let syms = self.symbols_at(site.0.wrapping_sub(1))?;
        if let Some(t) = syms.alloc_site_type(site) {
            return Some(t);
        }
        if let Some(t) = self.allocator_type(site, stack) {
            return Some(t);
        }
        syms.source_line_type(site)
    }

    /// The loader's TLS allocation at `site`: every module's TLS block (but the
    /// executable's, always static) as candidates.
    fn dynamic_tls(&self, site: Pc) -> Option<HeapType> {
        let m = self.module_of_pc(site)?;
        if !crate::dyntls::is_loader(&m.path) {
            return None;
        }
        let in_tls = self.frames(site).is_some_and(|loc| {
            loc.frames.iter().any(|f| f.function.as_deref().is_some_and(is_tls_function))
        }) || self.function_symbol(site).is_some_and(|f| is_tls_function(&f.name));
        if !in_tls {
            return None;
        }
        let blocks = self.tls_blocks.get_or_init(|| {
            let mut out = Vec::new();
            for m in self.modules.iter().skip(1) {
                let Ok(syms) = self.module_symbols(m.id) else { continue };
                let Some(seg) = syms.tls_segment().filter(|s| s.mem_size > 0) else { continue };
                out.push(TlsBlock {
                    module_id: m.id,
                    size: seg.mem_size,
                    vars: syms.tls_vars().into(),
                });
            }
            out.into()
        });
        Some(HeapType {
            name: "[dynamic TLS]".into(),
            layout: Arc::new(TypeLayout::scalar_named("[dynamic TLS]", 1)),
            source: TypeSource::DynamicTls(blocks.clone()),
        })
    }

    fn allocator_type(&self, site: Pc, stack: &[Pc]) -> Option<HeapType> {
        for pc in std::iter::once(site).chain(stack.iter().copied()).take(16) {
            match self.symbols_at(pc.0.wrapping_sub(1))?.allocator_frames(pc) {
                FrameVerdict::Found(t) => return Some(t),
                FrameVerdict::Stop => return None,
                FrameVerdict::Continue => {}
            }
        }
        None
    }
}
