// Balanced-tree workload: std::map<uint64_t, uint64_t> with n random inserts,
// 2n lookups (half misses), then n/2 erases and an in-order walk.
// usage: tree [n]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>

static uint64_t rng_next(uint64_t &x) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return x * 0x2545F4914F6CDD1DULL;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 300000;
    std::map<uint64_t, uint64_t> m;
    uint64_t s = 77;
    for (long i = 0; i < n; i++)
        m[rng_next(s) | 1] = (uint64_t)i;
    uint64_t s2 = 77, miss = 1234, found = 0, sum = 0;
    for (long i = 0; i < 2 * n; i++) {
        uint64_t k = (i & 1) ? (rng_next(miss) & ~1ULL) : (rng_next(s2) | 1);
        auto it = m.find(k);
        if (it != m.end()) {
            found++;
            sum += it->second;
        }
    }
    uint64_t s3 = 77;
    for (long i = 0; i < n / 2; i++)
        m.erase(rng_next(s3) | 1);
    uint64_t walk = 0;
    for (const auto &kv : m)
        walk = walk * 31 + kv.second;
    std::printf("tree n=%ld found=%llu size=%zu checksum=%llu\n", n, (unsigned long long)found,
                m.size(), (unsigned long long)(sum ^ walk));
    return 0;
}
