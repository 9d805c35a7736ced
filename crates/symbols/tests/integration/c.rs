//! C programs compiled with gcc (and clang-22 when present).

use std::process::Command;

use memlens_symbols::{
    module_from_file, Addr, DataKind, DebugSearch, FrameBase, ModuleSymbols, Pc, Symbolizer,
};

use crate::util::{self, compile, line_of, nm, return_addresses, sym, TempDir};

pub const SOURCE: &str = r#"
struct limits { int min; int max; };
struct config { char name[8]; struct limits limits; double ratio; };
struct inner { char a; int b[2]; };
struct stats { long count; int v[8]; struct inner in[3]; };

struct config cfg = { "x", { 1, 2 }, 0.5 };
struct stats stats;
static int arr[16];
int matrix[4][10];
_Thread_local int tls_counter;
_Thread_local struct limits tls_lim = { 3, 4 };

static inline int add_sq(int *p, int x) {
    *p += x * x; /* L_ADD_SQ */
    return *p;
}

__attribute__((noinline)) int touch(int i) { /* L_TOUCH_DEF */
    arr[i & 15] += i; /* L_TOUCH_ARR */
    return add_sq(&stats.in[i % 3].b[1], i); /* L_TOUCH_CALL */
}

int main(int argc, char **argv) {
    static int calls;
    int local_buf[4] = { 0 };
    calls++;
    local_buf[argc & 3] = argc;
    tls_counter += argc;
    tls_lim.max += argc;
    matrix[argc & 3][argc % 10] = 1;
    int r = touch(argc); /* L_MAIN_CALL */
    return r + local_buf[1] + (int)argv[0][0] + cfg.limits.max;
}
"#;

/// Compilers to try: gcc always, clang-22 when installed.
fn compilers() -> Vec<&'static str> {
    let mut c = vec!["gcc"];
    if util::have("clang-22") {
        c.push("clang-22");
    }
    c
}

fn build(dir: &TempDir, cc: &str, flags: &[&str], out: &str) -> std::path::PathBuf {
    compile(dir, cc, "prog.c", SOURCE, flags, out)
}

#[test]
fn code_addresses_at_o0() {
    for cc in compilers() {
        let dir = TempDir::new("c-o0");
        let bin = build(&dir, cc, &["-g", "-O0", "-no-pie", "-fno-pie"], "prog");
        let syms = nm(&bin, false);
        let module = module_from_file(&bin, 0).unwrap();
        assert!(!module.build_id.is_empty(), "{cc}: no build-id");
        let s = Symbolizer::new(&[module]);

        // The function's first instruction (as a return address: +1).
        let touch = sym(&syms, "touch");
        let loc = s.frames(Pc(touch + 1)).expect("touch is in the module");
        let f = loc.innermost().unwrap();
        assert_eq!(f.function.as_deref(), Some("touch"), "{cc}");
        assert!(f.file.as_deref().unwrap().ends_with("/prog.c"), "{cc}: {f}");
        assert!(f.file.as_deref().unwrap().starts_with('/'), "{cc}: {f}");
        assert_eq!(f.line, Some(line_of(SOURCE, "L_TOUCH_DEF")), "{cc}");
        assert_eq!(loc.module_path.as_ref(), bin.to_str().unwrap());

        // A real return address: the call to touch() in main resolves to the call line.
        let rets = return_addresses(&bin, "main", "touch");
        assert_eq!(rets.len(), 1, "{cc}");
        let loc = s.frames(Pc(rets[0])).unwrap();
        assert_eq!(loc.frames.len(), 1, "{cc}: {:?}", loc.frames);
        assert_eq!(loc.frames[0].function.as_deref(), Some("main"), "{cc}");
        assert_eq!(loc.frames[0].line, Some(line_of(SOURCE, "L_MAIN_CALL")), "{cc}");
        assert!(loc.frames[0].column.is_some(), "{cc}");
        // Cached: the same Arc comes back.
        assert!(std::sync::Arc::ptr_eq(&loc, &s.frames(Pc(rets[0])).unwrap()));

        let fs = s.function_symbol(Pc(rets[0])).unwrap();
        assert_eq!(&*fs.name, "main");
        assert_eq!(fs.start, Pc(sym(&syms, "main")));
        assert!(fs.size > 0);

        // Outside every module.
        assert!(s.frames(Pc(0x10)).is_none());
        assert!(s.module_of(Addr(sym(&syms, "stats"))).is_some());
        assert!(s.module_of(Addr(8)).is_none());
    }
}

#[test]
fn inlined_chain_at_o2() {
    for cc in compilers() {
        let dir = TempDir::new("c-o2");
        let bin = build(&dir, cc, &["-g", "-O2", "-no-pie", "-fno-pie"], "prog");
        let syms = nm(&bin, false);
        assert!(!syms.contains_key("add_sq"), "{cc}: add_sq should be inlined");
        let module = module_from_file(&bin, 0).unwrap();
        let ms = ModuleSymbols::load(&module, &DebugSearch::default()).unwrap();
        let touch = ms.functions().iter().find(|f| &*f.name == "touch").unwrap().clone();
        assert_eq!(touch.start, Pc(sym(&syms, "touch")));

        // Some instruction of touch() must come from the inlined add_sq().
        let mut found = None;
        for a in touch.start.0..touch.start.0 + touch.size {
            let loc = ms.frames(Pc(a + 1));
            if loc.frames.len() == 2 && loc.frames[0].function.as_deref() == Some("add_sq") {
                found = Some((a, loc));
                break;
            }
        }
        let (a, loc) = found.unwrap_or_else(|| panic!("{cc}: no inlined frame in touch"));
        let inner = &loc.frames[0];
        let outer = &loc.frames[1];
        let add_sq_lines =
            line_of(SOURCE, "static inline int add_sq")..=line_of(SOURCE, "L_ADD_SQ") + 1;
        assert!(add_sq_lines.contains(&inner.line.unwrap()), "{cc}: {inner}");
        assert_eq!(outer.function.as_deref(), Some("touch"), "{cc}");
        assert_eq!(outer.line, Some(line_of(SOURCE, "L_TOUCH_CALL")), "{cc}: {outer}");

        // Cross-check with binutils addr2line when it is there.
        if util::have("addr2line") {
            let out = util::run(
                Command::new("addr2line").args(["-i", "-f", "-e"]).arg(&bin).arg(format!("{a:#x}")),
            );
            let names: Vec<&str> = out.lines().step_by(2).collect();
            assert_eq!(names, ["add_sq", "touch"], "{cc}");
        }
    }
}

#[test]
fn global_data_names() {
    for cc in compilers() {
        for opt in ["-O0", "-O2"] {
            let dir = TempDir::new("c-data");
            let bin = build(&dir, cc, &["-g", opt, "-no-pie", "-fno-pie"], "prog");
            let syms = nm(&bin, false);
            let s = Symbolizer::new(&[module_from_file(&bin, 0).unwrap()]);
            let name = |a: u64| s.data_name(Addr(a)).map(|n| n.display());

            let stats = sym(&syms, "stats");
            assert_eq!(name(stats).as_deref(), Some("stats.count"), "{cc} {opt}");
            assert_eq!(name(stats + 8 + 3 * 4).as_deref(), Some("stats.v[3]"), "{cc} {opt}");
            assert_eq!(name(stats + 8 + 3 * 4 + 2).as_deref(), Some("stats.v[3]+2"));
            // in[] starts at 40; struct inner is 12 bytes: {char a; pad[3]; int b[2]}.
            assert_eq!(name(stats + 40 + 2 * 12 + 8).as_deref(), Some("stats.in[2].b[1]"));
            assert_eq!(name(stats + 40 + 12 + 1).as_deref(), Some("stats.in[1]+1<pad>"));
            let n = s.data_name(Addr(stats + 40 + 2 * 12 + 8)).unwrap();
            assert_eq!(n.kind, DataKind::Global);
            assert_eq!(&*n.base, "stats");
            assert_eq!(n.path, ".in[2].b[1]");
            assert_eq!(n.offset, 72);
            assert_eq!(n.leaf_type.as_deref(), Some("int"));

            let cfg = sym(&syms, "cfg");
            assert_eq!(name(cfg + 8 + 4).as_deref(), Some("cfg.limits.max"), "{cc} {opt}");
            assert_eq!(name(cfg + 3).as_deref(), Some("cfg.name[3]"));
            assert_eq!(name(cfg + 16).as_deref(), Some("cfg.ratio"));

            let arr = sym(&syms, "arr");
            assert_eq!(name(arr + 7 * 4).as_deref(), Some("arr[7]"), "{cc} {opt}");
            let matrix = sym(&syms, "matrix");
            assert_eq!(name(matrix + (2 * 10 + 5) * 4).as_deref(), Some("matrix[2][5]"));

            // A function-local static, qualified by its function.
            let calls = syms
                .iter()
                .find(|(k, _)| k.contains("calls"))
                .map(|(_, v)| v.0)
                .expect("nm shows calls");
            assert_eq!(name(calls).as_deref(), Some("main::calls"), "{cc} {opt}");

            // Past the end of everything.
            assert_eq!(name(sym(&syms, "_end") + 64), None);
        }
    }
}

#[test]
fn thread_locals_and_stack() {
    for cc in compilers() {
        let dir = TempDir::new("c-tls");
        let bin = build(&dir, cc, &["-g", "-O0", "-no-pie", "-fno-pie"], "prog");
        let syms = nm(&bin, false);
        let mut module = module_from_file(&bin, 0).unwrap();
        module.id = 7;
        let s = Symbolizer::new(&[module]);
        let ms = s.module_symbols(7).unwrap();
        assert!(ms.tls_segment().is_some());

        // For TLS symbols nm prints the offset in the TLS block.
        let lim = sym(&syms, "tls_lim");
        let n = s.tls_data_name(7, lim + 4).unwrap();
        assert_eq!(n.kind, DataKind::ThreadLocal);
        assert_eq!(n.display(), "tls_lim.max", "{cc}");
        let tl = ms.thread_locals();
        assert!(tl.iter().any(|t| &*t.name == "tls_counter"
            && t.offset == sym(&syms, "tls_counter")
            && t.size == 4));

        // Frame-base-relative locals of main.
        let ret = return_addresses(&bin, "main", "touch")[0];
        let frame = s.function_frame(Pc(ret)).expect("frame of main");
        assert_eq!(&*frame.name, "main");
        assert_ne!(frame.frame_base, FrameBase::Unknown, "{cc}");
        let buf = frame.locals.iter().find(|v| &*v.name == "local_buf").expect("local_buf");
        assert_eq!(buf.size, Some(16));
        let n = frame.name_at(Pc(ret), buf.frame_offset + 8).unwrap();
        assert_eq!(n.kind, DataKind::Stack);
        assert_eq!(n.display(), "local_buf[2]");
        assert!(frame.locals.iter().any(|v| &*v.name == "argc" && v.is_parameter));
        assert!(s.module_symbols(8).is_err());
    }
}

#[test]
fn filters_and_pie_bias() {
    let dir = TempDir::new("c-pie");
    let bin = build(&dir, "gcc", &["-g", "-O1", "-fPIE", "-pie"], "prog");
    let syms = nm(&bin, false);
    let bias = 0x5555_5555_0000;
    let module = module_from_file(&bin, bias).unwrap();
    let s = Symbolizer::new(&[module]);

    let touch = sym(&syms, "touch") + bias;
    let loc = s.frames(Pc(touch + 1)).unwrap();
    assert_eq!(loc.frames.last().unwrap().function.as_deref(), Some("touch"));
    assert_eq!(s.data_name(Addr(sym(&syms, "arr") + bias + 28)).unwrap().display(), "arr[7]");

    let ms = s.module_symbols(0).unwrap();
    let found = ms.functions_matching(&memlens_symbols::Glob::new("tou?h").unwrap());
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].start, Pc(touch));
    assert!(ms.functions_matching(&memlens_symbols::Glob::new("*").unwrap()).len() > 3);
    assert!(ms.functions_matching(&memlens_symbols::Glob::new("nonexistent*").unwrap()).is_empty());

    let ranges = ms.source_file_ranges(&memlens_symbols::Glob::new("prog.c").unwrap()).unwrap();
    assert!(!ranges.is_empty());
    assert!(ranges.iter().any(|r| r.contains_return_address(Pc(touch + 1))));
    assert!(ranges.iter().all(|r| r.start.0 >= bias && r.start < r.end));
    assert_eq!(
        ranges,
        ms.source_file_ranges(&memlens_symbols::Glob::new("*/prog.c").unwrap()).unwrap()
    );
    assert!(ms
        .source_file_ranges(&memlens_symbols::Glob::new("other.c").unwrap())
        .unwrap()
        .is_empty());
    let static_vars = ms.static_variables();
    assert!(static_vars.iter().any(|v| &*v.name == "cfg" && v.size == 24));
}

#[test]
fn separate_debug_files() {
    let dir = TempDir::new("c-split");
    let bin = build(&dir, "gcc", &["-g", "-O0", "-no-pie", "-fno-pie"], "prog");
    let syms = nm(&bin, false);
    let touch = sym(&syms, "touch");
    let stats = sym(&syms, "stats");

    // .gnu_debuglink to a file in a `.debug/` subdirectory.
    std::fs::create_dir(dir.join(".debug")).unwrap();
    let dbg = dir.join(".debug/prog.debug");
    util::run(Command::new("objcopy").arg("--only-keep-debug").arg(&bin).arg(&dbg));
    let linked = dir.join("linked");
    util::run(Command::new("objcopy").arg("--strip-debug").arg(&bin).arg(&linked));
    util::run(
        Command::new("objcopy").arg(format!("--add-gnu-debuglink={}", dbg.display())).arg(&linked),
    );
    let ms = ModuleSymbols::load(&module_from_file(&linked, 0).unwrap(), &DebugSearch::default())
        .unwrap();
    assert_eq!(ms.debug_path(), Some(dbg.as_path()));
    assert!(ms.has_dwarf());
    let loc = ms.frames(Pc(touch + 1));
    assert_eq!(loc.frames[0].line, Some(line_of(SOURCE, "L_TOUCH_DEF")));
    assert_eq!(ms.data_name(Addr(stats + 20)).unwrap().display(), "stats.v[3]");

    // Build-id lookup in a private debug directory, for a fully stripped binary.
    let stripped = dir.join("stripped");
    util::run(Command::new("strip").arg("--strip-all").arg(&bin).arg("-o").arg(&stripped));
    let module = module_from_file(&stripped, 0).unwrap();
    let hex = module.build_id_hex();
    let debug_dir = dir.join("debug");
    let id_dir = debug_dir.join(".build-id").join(&hex[..2]);
    std::fs::create_dir_all(&id_dir).unwrap();
    std::fs::copy(&dbg, id_dir.join(format!("{}.debug", &hex[2..]))).unwrap();
    let search = DebugSearch { debug_dirs: vec![debug_dir.clone()] };
    let s = Symbolizer::with_search(std::slice::from_ref(&module), search.clone());
    let loc = s.frames(Pc(touch + 1)).unwrap();
    assert_eq!(loc.frames[0].function.as_deref(), Some("touch"));
    assert_eq!(loc.frames[0].line, Some(line_of(SOURCE, "L_TOUCH_DEF")));
    // The debug file's .symtab stands in for the stripped one.
    assert_eq!(&*s.function_symbol(Pc(touch + 1)).unwrap().name, "touch");

    // Without the debug directory: the stripped binary has only .dynsym, so no name.
    let s =
        Symbolizer::with_search(std::slice::from_ref(&module), DebugSearch { debug_dirs: vec![] });
    assert!(s.frames(Pc(touch + 1)).unwrap().frames.is_empty());

    // The module file is gone, but its build-id debug file is enough.
    std::fs::remove_file(&stripped).unwrap();
    let s = Symbolizer::with_search(&[module], search);
    assert_eq!(s.frames(Pc(touch + 1)).unwrap().frames[0].function.as_deref(), Some("touch"));
}

#[test]
fn symtab_fallback_without_dwarf() {
    let dir = TempDir::new("c-nodwarf");
    let bin = build(&dir, "gcc", &["-O0", "-no-pie", "-fno-pie"], "prog");
    let syms = nm(&bin, false);
    let s = Symbolizer::new(&[module_from_file(&bin, 0).unwrap()]);
    assert!(!s.module_symbols(0).unwrap().has_dwarf());
    let touch = sym(&syms, "touch");
    let loc = s.frames(Pc(touch + 5)).unwrap();
    assert_eq!(loc.frames.len(), 1);
    assert_eq!(loc.frames[0].function.as_deref(), Some("touch"));
    assert_eq!(loc.frames[0].file, None);
    // Data symbols still name variables, with byte offsets.
    let stats = sym(&syms, "stats");
    assert_eq!(s.data_name(Addr(stats)).unwrap().display(), "stats");
    assert_eq!(s.data_name(Addr(stats + 20)).unwrap().display(), "stats+20");
}

#[test]
fn missing_module_file() {
    let module = memlens_symbols::Module {
        id: 3,
        path: "/nonexistent/memlens/module.so".into(),
        build_id: vec![],
        bias: 0x1000,
        segments: vec![memlens_symbols::Segment { vaddr: 0, memsz: 0x1000, flags: 5 }],
    };
    let s = Symbolizer::new(&[module]);
    let loc = s.frames(Pc(0x1100)).unwrap();
    assert_eq!(loc.module_id, 3);
    assert!(loc.frames.is_empty());
    assert!(s.data_name(Addr(0x1100)).is_none());
    let err = s.module_symbols(3).unwrap_err();
    assert!(err.to_string().starts_with("cannot read /nonexistent"), "{err}");
}

#[test]
fn compressed_debug_sections() {
    let dir = TempDir::new("c-gz");
    let bin = build(&dir, "gcc", &["-g", "-gz=zlib", "-O0", "-no-pie", "-fno-pie"], "prog");
    let sections = util::run(Command::new("readelf").arg("-S").arg("-W").arg(&bin));
    assert!(sections.lines().any(|l| l.contains(".debug_info") && l.contains(" C ")), "{sections}");
    let syms = nm(&bin, false);
    let s = Symbolizer::new(&[module_from_file(&bin, 0).unwrap()]);
    let loc = s.frames(Pc(sym(&syms, "touch") + 1)).unwrap();
    assert_eq!(loc.frames[0].line, Some(line_of(SOURCE, "L_TOUCH_DEF")));
    assert_eq!(s.data_name(Addr(sym(&syms, "cfg") + 12)).unwrap().display(), "cfg.limits.max");
}
