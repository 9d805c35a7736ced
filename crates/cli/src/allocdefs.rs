//! Custom allocators from a DINAMITE `alloc.in` file.
//!
//! Each line is `name numIdx sizeIdx addrIdx` (0-based argument indices, -1 for
//! none; `#` starts a comment). At link time `memlens cc` wraps each named function
//! with `-Wl,--wrap=name` and a generated assembly wrapper that calls the real
//! function, then tells the runtime what it allocated: the return value, or, when
//! `addrIdx` is set, the pointer the allocator stored through that out-parameter.
//! The wrappers support functions whose arguments are all integers or pointers in
//! registers (six at most), and `--wrap` only sees calls from other object files.
//! The file comes from `MEMLENS_ALLOC_DEFS`.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

/// One allocator definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocDef {
    /// Function name (as linked).
    pub name: String,
    /// Index of the element-count argument, -1 for none (count 1).
    pub num_idx: i64,
    /// Index of the size argument.
    pub size_idx: i64,
    /// Index of the out-parameter receiving the pointer, -1: the return value.
    pub addr_idx: i64,
}

/// Parses `alloc.in` text.
pub fn parse(text: &str) -> Result<Vec<AllocDef>> {
    let mut defs = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 4 {
            bail!(
                "alloc definitions line {}: expected `name numIdx sizeIdx addrIdx`, got `{line}`",
                n + 1
            );
        }
        let idx = |s: &str| -> Result<i64> {
            let v: i64 = s.parse().with_context(|| {
                format!("alloc definitions line {}: `{s}` is not an argument index", n + 1)
            })?;
            if !(-1..=5).contains(&v) {
                bail!("alloc definitions line {}: index {v} out of range (-1..5: arguments must be in registers)", n + 1);
            }
            Ok(v)
        };
        let name = f[0].trim_start_matches('!').to_string();
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '$') {
            bail!("alloc definitions line {}: `{}` is not a symbol name", n + 1, f[0]);
        }
        defs.push(AllocDef {
            name,
            num_idx: idx(f[1])?,
            size_idx: idx(f[2])?,
            addr_idx: idx(f[3])?,
        });
    }
    Ok(defs)
}

/// Assembly for the wrappers (AT&T syntax, x86-64 SysV).
pub fn wrappers_asm(defs: &[AllocDef]) -> String {
    let mut s = String::from("\t.text\n");
    for d in defs {
        let n = &d.name;
        s += &format!(
            "\t.globl __wrap_{n}\n\t.type __wrap_{n},@function\n__wrap_{n}:\n\
             \tpushq %rbp\n\tmovq %rsp, %rbp\n\tsubq $64, %rsp\n\
             \tmovq %rdi, 0(%rsp)\n\tmovq %rsi, 8(%rsp)\n\tmovq %rdx, 16(%rsp)\n\
             \tmovq %rcx, 24(%rsp)\n\tmovq %r8, 32(%rsp)\n\tmovq %r9, 40(%rsp)\n\
             \tcall __real_{n}\n\tmovq %rax, 48(%rsp)\n\
             \tmovq ${num}, %rdi\n\tmovq ${size}, %rsi\n\tmovq ${addr}, %rdx\n\
             \tleaq 0(%rsp), %rcx\n\tmovq %rax, %r8\n\tmovq 8(%rbp), %r9\n\
             \tcall __memlens_custom_alloc\n\
             \tmovq 48(%rsp), %rax\n\tleave\n\tret\n\t.size __wrap_{n}, .-__wrap_{n}\n",
            num = d.num_idx,
            size = d.size_idx,
            addr = d.addr_idx,
        );
    }
    s += "\t.section .note.GNU-stack,\"\",@progbits\n";
    s
}

/// Extra link arguments for the wrappers (empty without `MEMLENS_ALLOC_DEFS`).
pub struct LinkWrappers {
    /// Arguments to append to the link.
    pub args: Vec<String>,
    _dir: Option<crate::cc::TempDir>,
}

/// Builds the wrapper object for `MEMLENS_ALLOC_DEFS`, if set.
pub fn link_wrappers(cc: &str) -> Result<LinkWrappers> {
    let Some(path) = std::env::var_os("MEMLENS_ALLOC_DEFS") else {
        return Ok(LinkWrappers { args: Vec::new(), _dir: None });
    };
    let text = crate::files::read_text(
        Path::new(&path),
        "MEMLENS_ALLOC_DEFS file",
        crate::files::LIST_CAP,
    )?;
    let defs = parse(&text)?;
    if defs.is_empty() {
        return Ok(LinkWrappers { args: Vec::new(), _dir: None });
    }
    let dir = crate::cc::TempDir::new()?;
    let src = dir.path.join("memlens_alloc_wrappers.s");
    let obj = dir.path.join("memlens_alloc_wrappers.o");
    std::fs::write(&src, wrappers_asm(&defs))?;
    let st = Command::new(cc).arg("-c").arg(&src).arg("-o").arg(&obj).status()?;
    if !st.success() {
        bail!("assembling the custom allocator wrappers failed");
    }
    let mut args = vec![obj.display().to_string()];
    for d in &defs {
        args.push(format!("-Wl,--wrap={}", d.name));
    }
    Ok(LinkWrappers { args, _dir: Some(dir) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dinamite_file() {
        let t = "# comment\n__wt_calloc 1 2 3\nmalloc -1 0 -1\n!__wt_calloc_def -1 -1 2 # x\n";
        let d = parse(t).unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!(
            d[0],
            AllocDef { name: "__wt_calloc".into(), num_idx: 1, size_idx: 2, addr_idx: 3 }
        );
        assert_eq!(d[2].name, "__wt_calloc_def");
        assert!(parse("x 1 2").is_err());
        assert!(parse("x 1 2 9").is_err());
    }
}
