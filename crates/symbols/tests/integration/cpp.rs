//! C++ programs compiled with g++ (and clang++-22 when present).

use memlens_symbols::{module_from_file, Addr, Pc, Symbolizer};

use crate::util::{self, compile, line_of, nm, return_addresses, sym, TempDir};

const SOURCE: &str = r#"
namespace ns {
struct Foo {
    int v[4];
    static int count;
    __attribute__((noinline)) int bar(int i);
};
int Foo::count;
int glob_in_ns[10];

int Foo::bar(int i) { /* L_BAR */
    count++;
    glob_in_ns[i % 10] = i;
    return v[i & 3] += i;
}

namespace {
long hidden[3];
}
long *hidden_ptr() { return hidden; }
}

ns::Foo foo;

template <typename T> __attribute__((noinline)) T twice(T x) { return x + x; }

int main(int argc, char **) {
    int r = foo.bar(argc); /* L_MAIN_CALL */
    return r + twice(argc) + (int)*ns::hidden_ptr();
}
"#;

fn compilers() -> Vec<&'static str> {
    let mut c = Vec::new();
    if util::have("g++") {
        c.push("g++");
    }
    if util::have("clang++-22") {
        c.push("clang++-22");
    }
    c
}

#[test]
fn cpp_names() {
    for cxx in compilers() {
        for (opt, dwarf) in [("-O0", "-gdwarf-5"), ("-O2", "-gdwarf-5"), ("-O0", "-gdwarf-4")] {
            let dir = TempDir::new("cpp");
            let flags = ["-g", dwarf, opt, "-no-pie", "-fno-pie"];
            let bin = compile(&dir, cxx, "prog.cc", SOURCE, &flags, "prog");
            let opt = format!("{opt} {dwarf}");
            let opt = opt.as_str();
            let syms = nm(&bin, false);
            let s = Symbolizer::new(&[module_from_file(&bin, 0).unwrap()]);

            let bar = sym(&syms, "_ZN2ns3Foo3barEi");
            let loc = s.frames(Pc(bar + 1)).unwrap();
            let f = loc.innermost().unwrap();
            assert_eq!(f.function.as_deref(), Some("ns::Foo::bar(int)"), "{cxx} {opt}");
            assert!(f.file.as_deref().unwrap().ends_with("/prog.cc"));
            // Optimized code may start directly with the body's first statement.
            let body = line_of(SOURCE, "L_BAR")..=line_of(SOURCE, "L_BAR") + 3;
            assert!(body.contains(&f.line.unwrap()), "{cxx} {opt}: {f}");
            let fs = s.function_symbol(Pc(bar + 1)).unwrap();
            assert_eq!(&*fs.name, "ns::Foo::bar(int)");
            assert_eq!(&*fs.raw_name, "_ZN2ns3Foo3barEi");

            let twice = sym(&syms, "_Z5twiceIiET_S0_");
            let loc = s.frames(Pc(twice + 1)).unwrap();
            assert_eq!(loc.innermost().unwrap().function.as_deref(), Some("int twice<int>(int)"));

            if opt.starts_with("-O0") {
                let rets = return_addresses(&bin, "main", "_ZN2ns3Foo3barEi");
                let rets = if rets.is_empty() {
                    // objdump may print demangled names.
                    return_addresses(&bin, "main", "ns::Foo::bar(int)")
                } else {
                    rets
                };
                let loc = s.frames(Pc(rets[0])).unwrap();
                assert_eq!(loc.frames[0].function.as_deref(), Some("main"));
                assert_eq!(loc.frames[0].line, Some(line_of(SOURCE, "L_MAIN_CALL")));
            }

            let ms = s.module_symbols(0).unwrap();
            let m = ms.functions_matching(&memlens_symbols::Glob::new("ns::Foo::*").unwrap());
            assert!(m.iter().any(|f| f.start == Pc(bar)), "{cxx} {opt}");
            assert!(!ms
                .functions_matching(&memlens_symbols::Glob::new("ns::Foo::bar").unwrap())
                .is_empty());
            assert!(!ms
                .functions_matching(&memlens_symbols::Glob::new("_ZN2ns*").unwrap())
                .is_empty());

            let name = |a: u64| s.data_name(Addr(a)).map(|n| n.display());
            let count = sym(&syms, "_ZN2ns3Foo5countE");
            assert_eq!(name(count).as_deref(), Some("ns::Foo::count"), "{cxx} {opt}");
            let glob = sym(&syms, "_ZN2ns10glob_in_nsE");
            assert_eq!(name(glob + 12).as_deref(), Some("ns::glob_in_ns[3]"), "{cxx} {opt}");
            let foo = sym(&syms, "foo");
            assert_eq!(name(foo + 8).as_deref(), Some("foo.v[2]"), "{cxx} {opt}");
            let hidden = syms
                .iter()
                .find(|(k, _)| k.contains("6hidden"))
                .map(|(_, v)| v.0)
                .expect("nm shows hidden");
            assert_eq!(
                name(hidden + 8).as_deref(),
                Some("ns::(anonymous namespace)::hidden[1]"),
                "{cxx} {opt}"
            );
        }
    }
}
