//! Heap element types read from the allocating source line, for blocks whose DWARF
//! gives none: gcc's `new T` (gcc records no allocation type), clang's `new T` whose
//! heap-alloc-site type ThreadSanitizer's invoke rewriting dropped, and C's
//! `malloc(n * sizeof(struct T))`.
//!
//! The allocation's call site is known exactly (its return address); the line the
//! DWARF gives it is read from the source file the DWARF names, and the allocation
//! expressions on it are recognised: `new T`, `new T[n]`, `new T(...)`,
//! `new (std::nothrow) T`, `sizeof(T)`, `sizeof(struct T)`, `sizeof *p`,
//! `sizeof(p[0])`, casts `(T *)malloc(...)` and `static_cast<T *>(...)`, and the
//! pointer the result is assigned to (`T *p = malloc(...)`, `p = calloc(...)`), whose
//! declared type comes from the allocating function's DWARF. `T` is resolved in
//! the function's scope first (its template parameters, its class and namespaces, its
//! compilation unit), then as a unique name in the module. A line is used only when
//! every expression on it resolves and all name the same type; the caller also checks
//! that the block's size is a multiple of the type's.

mod lex;
mod parse;
mod resolve;
mod types;

pub(crate) use crate::dwarf::is_c_family;
pub(crate) use lex::statement;
pub(crate) use parse::candidates;
pub(crate) use resolve::Context;
pub(crate) use types::TypeIndex;

#[cfg(test)]
mod tests;
