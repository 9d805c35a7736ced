//! Thread-locals of libraries loaded with `dlopen` (dynamic TLS).
//!
//! glibc gives such a module's thread-locals a block per thread on first use:
//! `__tls_get_addr` calls the dynamic loader's `malloc` (which the recorder sees as
//! an allocation) for exactly the module's `PT_TLS` memory size. A heap block
//! allocated inside the loader, in a function whose name says TLS
//! (`tls_get_addr_tail`, `allocate_dtv_entry`, `_dl_allocate_tls`), whose size is
//! the TLS size of exactly one module, is that module's block in the allocating
//! thread; offsets in it name the module's thread-local variables.

use std::sync::Arc;

use crate::layout::TypeLayout;

/// One module's thread-local variables, laid out as in its TLS block.
#[derive(Clone, Debug)]
pub struct TlsBlock {
    /// The module ([`Module::id`](crate::Module::id)).
    pub module_id: u32,
    /// The block's size (`PT_TLS` `p_memsz`).
    pub size: u64,
    /// (name, offset, size, layout) of each variable, by offset.
    pub(crate) vars: Arc<[TlsVar]>,
}

/// A thread-local variable in a [`TlsBlock`].
#[derive(Clone, Debug)]
pub(crate) struct TlsVar {
    pub name: Arc<str>,
    pub offset: u64,
    pub size: u64,
    pub layout: Option<Arc<TypeLayout>>,
}

impl TlsBlock {
    /// The variable and member path at `offset` in the block (`lib_tls`, `[2]`).
    pub fn name(&self, offset: u64) -> Option<(Arc<str>, String)> {
        let end = self.vars.partition_point(|v| v.offset <= offset);
        let v =
            self.vars[..end].iter().rev().take(4).find(|v| offset < v.offset + v.size.max(1))?;
        let rel = offset - v.offset;
        let path = match &v.layout {
            Some(l) => l.describe(rel).path,
            None if rel > 0 => format!("+{rel}"),
            None => String::new(),
        };
        Some((v.name.clone(), path))
    }
}

/// Whether a module path is the dynamic loader (`/lib64/ld-linux-x86-64.so.2`).
pub(crate) fn is_loader(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    base.starts_with("ld-linux") || base.starts_with("ld.so") || base.starts_with("ld64.so")
}

/// Whether a loader function name is part of TLS allocation.
pub(crate) fn is_tls_function(name: &str) -> bool {
    name.contains("tls") || name.contains("dtv")
}
