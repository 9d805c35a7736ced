//! `ModuleSymbols::line_addresses`: where execution enters a source line (live probes
//! place `FILE:LINE` uprobes there).

use crate::util::*;
use memlens_symbols::{module_from_file, DebugSearch, ModuleSymbols};

const SOURCE: &str = "__attribute__((noipa)) long work(long x)
{
    long y = x * x;
    return y + 1;
}

int main(int argc, char **argv) { (void)argv; return (int)work(argc); }
";

#[test]
fn line_entries_follow_the_row_that_owns_each_address() {
    if !have("gcc") {
        assert!(std::env::var_os("CI").is_none(), "gcc is required in CI");
        return;
    }
    let dir = TempDir::new("lines");
    let exe = compile(&dir, "gcc", "prog.c", SOURCE, &["-O1", "-g"], "prog");
    let work = sym(&nm(&exe, false), "work");
    let syms =
        ModuleSymbols::load(&module_from_file(&exe, 0).unwrap(), &DebugSearch::default()).unwrap();
    let at =
        |line| syms.line_addresses("prog.c", line).unwrap().iter().map(|p| p.0).collect::<Vec<_>>();
    // gcc -O1 gives lines 1, 3 and 4 rows at the entry (location views); line 3 owns
    // the first instruction, line 4 starts after it, line 1 has no instruction.
    assert_eq!(at(3), vec![work]);
    let four = at(4);
    assert_eq!(four.len(), 1);
    assert!(four[0] > work && four[0] < work + 16, "{four:x?}");
    assert_eq!(at(1), Vec::<u64>::new());
    assert!(at(6).is_empty(), "a blank line has no code");
    assert_eq!(at(7).len(), 1);
    assert!(syms.line_addresses("other.c", 3).unwrap().is_empty());
}
