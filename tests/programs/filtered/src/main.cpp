// Built from tests/programs/filtered (as `src/main.cpp`) for the filter tests.
#include <cstdio>
#include <vector>
int work(const int *a, int n);
static int table[256];
static long outside(const std::vector<int> &v);
int main(int argc, char **argv) {
    (void)argv;
    std::vector<int> v(1000, argc); // @fill
    long s = 0;
    for (int r = 0; r < 10; r++)
        for (int i = 0; i < 1000; i++) s += v[i] * table[i % 256]; // @main_loop
    s += work(table, 256);
    s += outside(v);
    printf("%ld\n", s);
    return 0;
}
#include "../lib/outside.h"
