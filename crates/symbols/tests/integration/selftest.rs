//! Symbolizing this test binary itself, at its real load address.

use memlens_symbols::{module_from_file, Addr, DebugSearch, ModuleSymbols, Pc, Symbolizer};

static SELF_TABLE: [u64; 4] = [1, 2, 3, 4];

#[inline(never)]
fn marker_function(x: u64) -> u64 {
    std::hint::black_box(x) * 3 // L_MARKER
}

#[test]
fn self_symbolization() {
    let exe = std::env::current_exe().unwrap();
    // Find the load bias from a function whose runtime address we know.
    let file_module = module_from_file(&exe, 0).unwrap();
    let ms = ModuleSymbols::load(&file_module, &DebugSearch::default()).unwrap();
    let marker = ms.functions_matching(&memlens_symbols::Glob::new("*::marker_function").unwrap());
    assert_eq!(marker.len(), 1, "{marker:?}");
    let runtime = marker_function as *const () as u64;
    let bias = runtime - marker[0].start.0;
    assert_eq!(marker_function(1), 3);

    let start = std::time::Instant::now();
    let s = Symbolizer::new(&[module_from_file(&exe, bias).unwrap()]);
    let loc = s.frames(Pc(runtime + 1)).unwrap();
    let f = loc.innermost().unwrap();
    assert_eq!(f.function.as_deref(), Some("integration::selftest::marker_function"));
    assert!(f.file.as_deref().unwrap().ends_with("selftest.rs"), "{f}");

    eprintln!("self-symbolization: load + frames: {:?}", start.elapsed());
    let table = SELF_TABLE.as_ptr() as u64;
    let n = s.data_name(Addr(table + 16)).unwrap();
    assert_eq!(n.display(), "integration::selftest::SELF_TABLE[2]");
    // Loading, indexing and two lookups over a full Rust test binary stay fast.
    let elapsed = start.elapsed();
    eprintln!("self-symbolization: load + frames + data index: {elapsed:?}");
    assert!(elapsed.as_secs() < 20, "{elapsed:?}");

    // Many distinct PCs: every byte of the first few hundred functions.
    let ms = s.module_symbols(0).unwrap();
    let start = std::time::Instant::now();
    let mut n = 0;
    for f in ms.functions().iter().take(300) {
        for pc in (f.start.0 + 1..=f.start.0 + f.size).step_by(3) {
            n += usize::from(s.frames(Pc(pc)).is_some_and(|l| !l.frames.is_empty()));
        }
    }
    eprintln!("{n} pcs symbolized in {:?}", start.elapsed());
    assert!(n > 0);
}
