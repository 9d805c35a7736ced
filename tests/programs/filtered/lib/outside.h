// Code outside src/: --files 'src/*.cpp' leaves its accesses out.
__attribute__((noinline)) static long outside(const std::vector<int> &v) {
    long s = 0;
    for (int x : v) s += x; // @outside
    return s;
}
