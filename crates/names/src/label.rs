//! The name of one data address of each kind: global, stack local, thread-local,
//! heap block offset or mapping, and the per-thread frame state stack names need.

use crate::heap::Block;
use crate::{Kind, Label, Maps};
use memlens_format::callstack::discard;
use memlens_format::{Addr, CallStack, Pc, StackFrame, ThreadId};
use memlens_symbols::{DataKind, FrameBase, HeapType, Symbolizer, TypeSource};
use std::sync::Arc;

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

impl StackFrame for OpenFrame {
    fn frame_pointer(&self) -> u64 {
        self.rbp
    }
    fn function(&self) -> u64 {
        self.func
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ThreadState {
    pub(crate) stack: Option<(u64, u64)>,
    pub(crate) tls: u64,
    /// Open frames, outermost first.
    pub(crate) frames: CallStack<OpenFrame>,
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

    /// A function entry (frames left by longjmp close: [`CallStack`]).
    pub(crate) fn enter(&mut self, f: OpenFrame) {
        self.framed |= f.rbp != 0;
        self.frames.enter(f, discard);
    }

    /// A function exit of the function starting at `func` (0: unknown).
    pub(crate) fn exit(&mut self, func: u64) {
        self.frames.exit(func, discard);
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
        self.frames.frames().iter().rposition(|o| o.rbp != 0 && o.rbp + 16 > addr)
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
pub(crate) fn heap_base(
    site_namer: Option<&(dyn Fn(Pc) -> String + Sync + '_)>,
    site: Pc,
) -> Arc<str> {
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

/// Where glibc puts the TLS blocks of the modules loaded at start-up (x86-64,
/// variant II: below the thread pointer), replaying `_dl_determine_tlsoffset` over the
/// modules with a `PT_TLS` segment in load order (the executable first). Shared
/// libraries' thread-locals live there too, reached through `__tls_get_addr`.
pub(crate) fn static_tls_layout(sym: &Symbolizer) -> Vec<(u32, u64, u64)> {
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
