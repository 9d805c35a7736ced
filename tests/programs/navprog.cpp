// The viewer's navigation test (view_ux.rs): two functions of the program and
// std::vector's own (header) functions, which the library filter hides.
#include <vector>

long table[256];

__attribute__((noinline)) void fill_table(int n) {
    for (int i = 0; i < n; i++) table[i] = i; // @fill-store
}

__attribute__((noinline)) long sum_table(const std::vector<long> &v) {
    long s = 0;
    for (long x : v) s += table[x & 255]; // @sum-load
    return s;
}

int main() {
    fill_table(256);
    std::vector<long> v;
    for (int i = 0; i < 64; i++) v.push_back(i);
    return sum_table(v) == 0 ? 1 : 0;
}
