// Scale test: N accesses over a 4 MiB array in sweeps and random gathers, across
// several functions, so the map, the flame chart and the index all get work.
#include <stdlib.h>
#define LEN (1 << 19) /* longs: 4 MiB */
long arr[LEN];
__attribute__((noinline)) long sweep(int stride) {
    long s = 0;
    for (int i = 0; i < LEN; i += stride) s += arr[i];
    return s;
}
__attribute__((noinline)) void update(unsigned seed, int n) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        arr[seed % LEN] += i;
    }
}
int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 10;
    long s = 0;
    for (long r = 0; r < rounds; r++) {
        s += sweep(1);
        s += sweep(8);
        update((unsigned)r, 1 << 18);
    }
    return (int)(s & 1);
}
