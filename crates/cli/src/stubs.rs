//! Weak fallbacks for the runtime's entry points, linked into every shared library
//! `memlens cc -shared` builds, so that the library also loads in a program built
//! without memlens (it then runs unrecorded: the callbacks do nothing, atomics and
//! `__tsan_mem*` still do their work). In a program built with memlens the
//! executable's own definitions win: it exports every entry point (see
//! `cc::link_flags`), and the dynamic linker looks in the executable first.

use anyhow::{bail, Result};
use std::process::Command;

/// Entry points that only record.
const RECORD_ONLY: &[&str] = &[
    "__tsan_init",
    "__tsan_func_entry",
    "__tsan_func_exit",
    "__tsan_acquire",
    "__tsan_release",
    "__tsan_ignore_thread_begin",
    "__tsan_ignore_thread_end",
    "__tsan_read_range",
    "__tsan_write_range",
    "__tsan_vptr_read",
    "__tsan_vptr_update",
    "__memlens_custom_alloc",
    "__memlens_custom_free",
    "__memlens_masked_read",
    "__memlens_masked_write",
    "__memlens_packed_read",
    "__memlens_packed_write",
    "__memlens_lane_read",
    "__memlens_lane_write",
    "__memlens_loop_run",
    "__memlens_loop_pc",
    "__sanitizer_cov_8bit_counters_init",
    "__sanitizer_cov_bool_flag_init",
    "__sanitizer_cov_pcs_init",
    "__sanitizer_cov_trace_div4",
    "__sanitizer_cov_trace_div8",
    "__sanitizer_cov_trace_gep",
    "__sanitizer_cov_trace_pc",
    "__sanitizer_cov_trace_pc_guard",
    "__sanitizer_cov_trace_pc_guard_init",
    "__sanitizer_cov_trace_pc_indir",
    "__sanitizer_cov_trace_switch",
    "memlens_register_thread",
    "memlens_thread_name",
    "memlens_roi_begin",
    "memlens_roi_end",
    "memlens_trace_on",
    "memlens_trace_off",
];

const ATOMIC_OPS: &[&str] = &[
    "load",
    "store",
    "exchange",
    "fetch_add",
    "fetch_sub",
    "fetch_and",
    "fetch_or",
    "fetch_xor",
    "fetch_nand",
    "compare_exchange_strong",
    "compare_exchange_weak",
    "compare_exchange_val",
];

/// Every entry point a fallback is written for.
pub fn names() -> Vec<String> {
    let mut v: Vec<String> = RECORD_ONLY.iter().map(|s| s.to_string()).collect();
    for n in [1, 2, 4, 8, 16] {
        for kind in ["read", "write"] {
            v.push(format!("__tsan_{kind}{n}"));
            v.push(format!("__tsan_{kind}{n}_pc"));
            v.push(format!("__tsan_volatile_{kind}{n}"));
            if n > 1 {
                v.push(format!("__tsan_unaligned_{kind}{n}"));
            }
            v.push(format!("__sanitizer_cov_{}{n}", if kind == "read" { "load" } else { "store" }));
        }
        if n < 16 {
            v.push(format!("__sanitizer_cov_trace_cmp{n}"));
            v.push(format!("__sanitizer_cov_trace_const_cmp{n}"));
        }
    }
    for bits in [8, 16, 32, 64, 128] {
        for op in ATOMIC_OPS {
            v.push(format!("__tsan_atomic{bits}_{op}"));
        }
    }
    v.extend(
        ["__tsan_atomic_thread_fence", "__tsan_atomic_signal_fence"]
            .iter()
            .chain(&["__tsan_memcpy", "__tsan_memmove", "__tsan_memset"])
            .map(|s| s.to_string()),
    );
    v
}

/// The entry points an executable always takes from the runtime: all but the
/// custom-allocator hooks, whose runtime part also defines malloc (a program with
/// its own malloc must not get it).
pub fn forced() -> Vec<String> {
    names().into_iter().filter(|n| !n.starts_with("__memlens_custom_")).collect()
}

/// The C source of the fallbacks (compiled without instrumentation).
fn source() -> String {
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdint.h>\n#include <string.h>\n\
         #define W __attribute__((weak, visibility(\"default\")))\n\
         #define SC __ATOMIC_SEQ_CST\n\
         typedef unsigned __int128 u128;\n\
         W void *__tsan_memcpy(void *d, const void *s, size_t n) { return memcpy(d, s, n); }\n\
         W void *__tsan_memmove(void *d, const void *s, size_t n) { return memmove(d, s, n); }\n\
         W void *__tsan_memset(void *d, int v, size_t n) { return memset(d, v, n); }\n\
         W void __tsan_atomic_thread_fence(int mo) { (void)mo; __atomic_thread_fence(SC); }\n\
         W void __tsan_atomic_signal_fence(int mo) { (void)mo; __atomic_signal_fence(SC); }\n\
         static u128 cas16(volatile u128 *a, u128 c, u128 v) { return __sync_val_compare_and_swap(a, c, v); }\n\
         W unsigned char __memlens_runs_off;\n",
    );
    let special = ["__tsan_atomic", "__tsan_mem"];
    for n in names() {
        if !special.iter().any(|s| n.starts_with(s)) {
            c.push_str(&format!("W void {n}(void) {{}}\n"));
        }
    }
    for (bits, t) in [(8, "uint8_t"), (16, "uint16_t"), (32, "uint32_t"), (64, "uint64_t")] {
        let p = format!("W {t} __tsan_atomic{bits}_");
        let a = format!("volatile {t} *a");
        c.push_str(&format!(
            "{p}load(const {a}, int mo) {{ (void)mo; return __atomic_load_n(a, SC); }}\n"
        ));
        c.push_str(&format!(
            "W void __tsan_atomic{bits}_store({a}, {t} v, int mo) {{ (void)mo; __atomic_store_n(a, v, SC); }}\n"
        ));
        c.push_str(&format!(
            "{p}exchange({a}, {t} v, int mo) {{ (void)mo; return __atomic_exchange_n(a, v, SC); }}\n"
        ));
        for op in ["add", "sub", "and", "or", "xor", "nand"] {
            c.push_str(&format!(
                "{p}fetch_{op}({a}, {t} v, int mo) {{ (void)mo; return __atomic_fetch_{op}(a, v, SC); }}\n"
            ));
        }
        for (kind, weak) in [("strong", 0), ("weak", 1)] {
            c.push_str(&format!(
                "W int __tsan_atomic{bits}_compare_exchange_{kind}({a}, {t} *c, {t} v, int mo, int fmo) {{ (void)mo; (void)fmo; return __atomic_compare_exchange_n(a, c, v, {weak}, SC, SC); }}\n"
            ));
        }
        c.push_str(&format!(
            "{p}compare_exchange_val({a}, {t} c, {t} v, int mo, int fmo) {{ (void)mo; (void)fmo; __atomic_compare_exchange_n(a, &c, v, 0, SC, SC); return c; }}\n"
        ));
    }
    // 16-byte atomics: cmpxchg16b (-mcx16), which gcc inlines only as __sync.
    let p = "W u128 __tsan_atomic128_";
    let a = "volatile u128 *a";
    c.push_str(&format!(
        "{p}load(const {a}, int mo) {{ (void)mo; return cas16((volatile u128 *)a, 0, 0); }}\n"
    ));
    for (op, expr) in [
        ("exchange", "v"),
        ("fetch_add", "o + v"),
        ("fetch_sub", "o - v"),
        ("fetch_and", "o & v"),
        ("fetch_or", "o | v"),
        ("fetch_xor", "o ^ v"),
        ("fetch_nand", "~(o & v)"),
    ] {
        c.push_str(&format!(
            "{p}{op}({a}, u128 v, int mo) {{ (void)mo; u128 o = *a, n; while ((n = cas16(a, o, {expr})) != o) o = n; return o; }}\n"
        ));
    }
    c.push_str(&format!(
        "W void __tsan_atomic128_store({a}, u128 v, int mo) {{ __tsan_atomic128_exchange(a, v, mo); }}\n"
    ));
    for kind in ["strong", "weak"] {
        c.push_str(&format!(
            "W int __tsan_atomic128_compare_exchange_{kind}({a}, u128 *c, u128 v, int mo, int fmo) {{ (void)mo; (void)fmo; u128 o = cas16(a, *c, v); if (o == *c) return 1; *c = o; return 0; }}\n"
        ));
    }
    c.push_str(&format!(
        "{p}compare_exchange_val({a}, u128 c, u128 v, int mo, int fmo) {{ (void)mo; (void)fmo; return cas16(a, c, v); }}\n"
    ));
    c
}

/// For a `-shared` link: compiles the fallbacks with `cc` and appends the object to
/// `link_args`; the returned directory holds it until the link is done. Not with
/// `-Bsymbolic*` or a version script (`local: *;` hides them), which would bind the
/// library's calls to its own fallbacks and leave it unrecorded everywhere.
pub fn for_shared_link(
    cc: &str,
    args: &[String],
    link_args: &mut Vec<String>,
) -> Result<Option<crate::cc::TempDir>> {
    if args.iter().any(|a| a.contains("-Bsymbolic") || a.contains("version-script")) {
        crate::cc::note("this -shared link binds symbols locally (-Bsymbolic or a version script), so the library gets no fallbacks for memlens's entry points: it loads only in programs built with memlens");
        return Ok(None);
    }
    let dir = crate::cc::TempDir::new()?;
    let src = dir.path.join("memlens_fallbacks.c");
    let obj = dir.path.join("memlens_fallbacks.o");
    std::fs::write(&src, source())?;
    let out = Command::new(cc)
        .args(["-x", "c", "-O2", "-fPIC", "-mcx16", "-w", "-c"])
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .output()?;
    if !out.status.success() {
        bail!(
            "compiling memlens's fallback entry points for this shared library with {cc} failed: {}",
            String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or("")
        );
    }
    link_args.push(obj.display().to_string());
    Ok(Some(dir))
}
