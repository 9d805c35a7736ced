// Naming test: C++ heap blocks typed from the allocating source line, where the
// DWARF has no allocation type (gcc never records one; clang's is lost on calls
// that may throw under ThreadSanitizer).
#include <cstdio>
#include <memory>
#include <new>

namespace geo {
struct Point {
    int x;
    int y;
};
} // namespace geo

struct Node {
    long key;
    Node *next;
};
struct Other {
    long a;
    long b;
};
struct Big {
    long a, b, c;
    Big() {} // leaves the members alone: only the test's accesses touch them
};

void *volatile sink;

__attribute__((noinline)) geo::Point *make_points(int n) {
    using geo::Point;
    Point *p = new Point[n]; // @new-points
    sink = p;
    return p;
}

__attribute__((noinline)) Node *make_node(long key) {
    Node *n = new (std::nothrow) Node; // @new-node
    sink = n;
    volatile Node *v = n;
    v->key = key;
    v->next = nullptr;
    return n;
}

__attribute__((noinline)) void *make_either(bool node) {
    void *r = node ? static_cast<void *>(new Node) : static_cast<void *>(new Other); // @either
    sink = r;
    return r;
}

int main(int argc, char **) {
    geo::Point *p = make_points(8);
    volatile geo::Point *vp = p;
    for (int i = 0; i < 8; i++) vp[i].y = i; // @point-y
    long s = 0;
    for (int i = 0; i < 8; i++) s += vp[i].y;
    Node *n = make_node(7);
    volatile Node *vn = n;
    s += vn->key;
    volatile long *e = static_cast<long *>(make_either(argc > 0));
    e[1] = 3; // @either-store
    s += e[1];
    // `new _Tp(...)` inside std::make_unique: `_Tp` is its template parameter.
    auto big = std::make_unique<Big>(); // @make-unique
    volatile Big *vb = big.get();
    vb->c = 4;
    s += vb->c;
    std::printf("%ld\n", s);
    delete[] p;
    delete n;
    return 0;
}
