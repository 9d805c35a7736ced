//! A Rust program compiled with rustc.

use memlens_symbols::{module_from_file, Addr, Pc, Symbolizer};

use crate::util::{self, compile, line_of, nm, TempDir};

const SOURCE: &str = r#"
pub struct Pair {
    pub a: u32,
    pub b: [u16; 4],
}

static mut COUNTER: u64 = 0;
static TABLE: [u32; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
static PAIR: Pair = Pair { a: 1, b: [2, 3, 4, 5] };

#[inline(never)]
fn work(i: usize) -> u32 { // L_WORK
    unsafe { COUNTER += 1 };
    TABLE[i % 8] + PAIR.b[i % 4] as u32
}

fn main() {
    let n = std::env::args().count();
    std::process::exit(work(n) as i32 - 1);
}
"#;

#[test]
fn rust_names() {
    if !util::have("rustc") {
        eprintln!("rustc not found; skipping");
        return;
    }
    let dir = TempDir::new("rust");
    let bin = compile(&dir, "rustc", "prog.rs", SOURCE, &["-g", "-C", "opt-level=0"], "prog");
    // nm -C demangles Rust names (legacy and v0) without the hash.
    let syms = nm(&bin, true);
    let find = |name: &str| {
        syms.get(name)
            .map(|v| v.0)
            .or_else(|| {
                syms.iter().find(|(k, _)| k.starts_with(&format!("{name}::h"))).map(|(_, v)| v.0)
            })
            .unwrap_or_else(|| panic!("{name} not in nm -C output"))
    };
    // Rust binaries are PIE: with bias 0, runtime addresses are file addresses.
    let s = Symbolizer::new(&[module_from_file(&bin, 0).unwrap()]);

    let work = find("prog::work");
    let loc = s.frames(Pc(work + 1)).unwrap();
    let f = loc.innermost().unwrap();
    assert_eq!(f.function.as_deref(), Some("prog::work"));
    assert!(f.file.as_deref().unwrap().ends_with("/prog.rs"), "{f}");
    assert_eq!(f.line, Some(line_of(SOURCE, "L_WORK")));
    assert_eq!(&*s.function_symbol(Pc(work + 1)).unwrap().name, "prog::work");

    let name = |a: u64| s.data_name(Addr(a)).map(|n| n.display());
    assert_eq!(name(find("prog::TABLE") + 12).as_deref(), Some("prog::TABLE[3]"));
    assert_eq!(name(find("prog::COUNTER")).as_deref(), Some("prog::COUNTER"));
    let pair = find("prog::PAIR");
    // Rust reorders fields: locate `b` through the name rather than assuming offsets.
    let names: Vec<String> = (0..12).filter_map(|o| name(pair + o)).collect();
    assert!(names.contains(&"prog::PAIR.a".to_owned()), "{names:?}");
    assert!(names.contains(&"prog::PAIR.b[3]".to_owned()), "{names:?}");

    let ms = s.module_symbols(0).unwrap();
    assert!(ms
        .functions_matching(&memlens_symbols::Glob::new("prog::*").unwrap())
        .iter()
        .any(|f| &*f.name == "prog::work"));
    assert!(!ms
        .source_file_ranges(&memlens_symbols::Glob::new("prog.rs").unwrap())
        .unwrap()
        .is_empty());
}
