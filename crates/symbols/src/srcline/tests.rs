use super::lex::{statement, strip_comments};
use super::parse::*;

fn ty(tag: bool, name: &str, stars: u8) -> Cand {
    Cand::Type(Spelled { tag, builtin: false, name: name.into(), stars })
}
fn var(name: &str, deref: u8) -> Cand {
    Cand::Var { name: name.into(), deref }
}

#[test]
fn new_expressions() {
    let c = candidates("    Node *n = new Node; // x");
    assert_eq!(c.news, vec![ty(false, "Node", 0)]);
    assert_eq!(candidates("p = new ns::Point[8];").news, vec![ty(false, "ns::Point", 0)]);
    assert_eq!(candidates("p = new (std::nothrow) Node(1, 2);").news, vec![ty(false, "Node", 0)]);
    assert_eq!(
        candidates("auto *v = new std::vector<int>{};").news,
        vec![ty(false, "std::vector<int>", 0)]
    );
    let b = candidates("q = new unsigned long[4];");
    assert_eq!(
        b.news,
        vec![Cand::Type(Spelled {
            tag: false,
            builtin: true,
            name: "unsigned long".into(),
            stars: 0
        })]
    );
    assert_eq!(candidates("x = Foo::new(3);").news, vec![]);
    assert_eq!(candidates("void *operator new(size_t n);").news, vec![]);
    assert_eq!(candidates("s = f ? (void *)new A : (void *)new B;").news.len(), 2);
}

#[test]
fn sizeof_casts_and_assignments() {
    let c = candidates("struct rec *r = malloc(n * sizeof(struct rec)); // @rec");
    assert_eq!(c.sizes, vec![ty(true, "rec", 0)]);
    assert_eq!(c.weak, vec![var("r", 1)]);
    let c = candidates("p = calloc(n, sizeof *p);");
    assert_eq!(c.sizes, vec![var("p", 1)]);
    assert_eq!(c.weak, vec![var("p", 1)]);
    assert_eq!(candidates("x = malloc(sizeof(p[0]) * 3)").sizes, vec![var("p", 1)]);
    assert_eq!(candidates("x = malloc(sizeof(Node))").sizes, vec![Cand::TypeOrVar("Node".into())]);
    assert_eq!(candidates("x = malloc(sizeof(s->len))").sizes, vec![Cand::Opaque]);
    assert_eq!(candidates("o = malloc(sizeof(struct obj) + n)").sizes, vec![Cand::Opaque]);
    assert_eq!(candidates("o = malloc(n - sizeof *o)").sizes, vec![Cand::Opaque]);
    assert_eq!(candidates("o = malloc(n * sizeof *o)").sizes, vec![var("o", 1)]);
    assert_eq!(candidates("x = malloc(sizeof(char *) * 3)").sizes.len(), 1);
    let c = candidates("v->items = (struct item *)malloc(k);");
    assert_eq!(c.weak, vec![ty(true, "item", 0)]);
    let c = candidates("*pp = static_cast<Node *>(malloc(16));");
    assert_eq!(c.weak, vec![var("pp", 2), ty(false, "Node", 0)]);
    assert_eq!(candidates("if (a == b) f(x = 1);").weak, vec![]);
    assert_eq!(candidates("s.p = malloc(4);").weak, vec![]);
    assert_eq!(
        candidates("int *a = malloc(4), *b = malloc(8);").weak,
        vec![var("a", 1), var("b", 1)]
    );
    // an arithmetic group is not a cast
    assert_eq!(candidates("x = (a * b) + c(d);").weak, vec![var("x", 1)]);
}

#[test]
fn statements_span_lines() {
    let lines: Vec<String> =
        ["int x;", "struct rec *r =", "    malloc(n *", "           sizeof(struct rec));", "y();"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    let s = statement(&lines, 3).unwrap();
    assert!(s.contains("struct rec *r") && s.contains("sizeof(struct rec)"), "{s}");
    assert!(!s.contains("y()"), "{s}");
    assert_eq!(statement(&lines, 9), None);
    assert_eq!(strip_comments("a /* b */ c // d"), "a   c ");
}

#[test]
fn builtins_are_canonical() {
    assert_eq!(builtin(&["long", "unsigned", "int"]).unwrap().0, "unsigned long");
    assert_eq!(builtin(&["long"]).unwrap(), ("long".into(), Some(8)));
    assert_eq!(builtin(&["long", "long", "int"]).unwrap().0, "long long");
    assert_eq!(builtin(&["char"]).unwrap().0, "char");
    assert!(builtin(&["float", "int"]).is_none());
}
