// C++: new/delete of every flavour, virtual calls, an exception through frames.
#include <cstdio>
#include <new>
#include <stdexcept>
#include <vector>

struct Shape {
    virtual ~Shape() {}
    virtual long area() const = 0;
};

struct Rect : Shape {
    long w, h;
    Rect(long w, long h) : w(w), h(h) {}
    long area() const override { return w * h; }
};

__attribute__((noinline)) static long thrower(int n) {
    if (n == 0) throw std::runtime_error("boom");
    return thrower(n - 1) + 1;
}

// Pointers escape through this, so the optimizer cannot drop new/delete pairs.
void *volatile sink;

int main() {
    long total = 0;
    for (int i = 0; i < 8; i++) {
        Shape *s = new Rect(i, 2); // @new
        sink = s;
        total += s->area();
        delete s;
    }
    int *a = new int[32]; // @new-array
    sink = a;
    a[3] = 5;
    total += a[3];
    delete[] a;
    int *q = new (std::nothrow) int(4); // @new-nothrow
    sink = q;
    total += *q;
    delete q;
    std::vector<long> v;
    for (int i = 0; i < 100; i++) v.push_back(i);
    total += v[50];
    try {
        thrower(4);
    } catch (const std::exception &e) {
        total += 1;
    }
    std::printf("total=%ld\n", total);
    return 0;
}
