// Exceptions through instrumented frames, virtual calls, new/delete, std::thread.
#include <atomic>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <vector>

struct Base {
    virtual int f() { return 1; }
    virtual ~Base() {}
};
struct Derived : Base {
    int f() override { return 2; }
};

std::atomic<long> hits;
int *volatile keep;

__attribute__((noinline)) int thrower(int d) {
    if (d == 0) throw std::runtime_error("boom");
    return thrower(d - 1) + 1;
}

__attribute__((noinline)) int catcher(int d) {
    try {
        return thrower(d);
    } catch (const std::exception &) {
        return -1;
    }
}

int main(int argc, char **) {
    std::vector<std::thread> ts;
    for (int i = 0; i < 2; i++)
        ts.emplace_back([] {
            for (int k = 0; k < 1000; k++) hits.fetch_add(1);
            catcher(4);
        });
    for (auto &t : ts) t.join();
    int r = 0;
    for (int i = 0; i < 3; i++) r += catcher(3 + i);
    Base *b = argc > 5 ? new Base : new Derived;
    r += b->f();
    delete b;
    keep = new int[123];
    keep[5] = r;
    r += keep[5];
    delete[] keep;
    std::printf("r=%d hits=%ld\n", r, hits.load());
    return 0;
}
