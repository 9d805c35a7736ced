// C++ allocations for the live `heap` probe (crates/cli/tests/e2e/live_mem.rs): waits
// for one line on stdin (the probe is in), then grows a std::vector to 1000 ints
// (libstdc++'s growth, inlined into main: charged to the push_back line) and allocates
// one object with new; prints "done CAPACITY" and exits, leaking both.
#include <cstdio>
#include <vector>

struct Obj {
    long v[5];
};

std::vector<int> *keep;
Obj *obj;

int main() {
    char line[8];
    if (!std::fgets(line, sizeof line, stdin))
        return 1;
    keep = new std::vector<int>(); // @cxx-vec
    for (int i = 0; i < 1000; i++)
        keep->push_back(i); // @cxx-push
    obj = new Obj(); // @cxx-new
    std::printf("done %zu\n", keep->capacity());
    return 0;
}
