// The diff of two traces (e2e view_diff.rs): `diffprog N EXTRA`. The globals are
// volatile, so every marked line makes an exact number of accesses:
// - scan(N): N rounds over `table` (64 longs), 64·N loads at @scan-load;
// - fixed(): the same in every run, 32 stores (@fixed-store) and 32 loads
//   (@fixed-load) of `fixed_buf`;
// - extra(): only when EXTRA is 1, 16 stores into `extra_buf` (@extra-store);
// - heap(N, EXTRA): no loads or stores, only allocations: a block of 100·N bytes,
//   freed (@heap-scan), and one of 1000 bytes leaked when EXTRA is 1, else one of
//   24 bytes freed (@heap-extra).
#include <stdio.h>
#include <stdlib.h>

#if defined(__clang__)
#define NOIPA __attribute__((noinline))
#else
#define NOIPA __attribute__((noipa))
#endif

volatile long table[64];
volatile long fixed_buf[32];
volatile long extra_buf[16];

NOIPA long scan(int n) {
    long s = 0;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < 64; i++)
            s += table[i]; // @scan-load
    return s;
}

NOIPA long fixed(void) {
    long s = 0;
    for (int i = 0; i < 32; i++)
        fixed_buf[i] = i; // @fixed-store
    for (int i = 0; i < 32; i++)
        s += fixed_buf[i]; // @fixed-load
    return s;
}

NOIPA void extra(void) {
    for (int i = 0; i < 16; i++)
        extra_buf[i] = i; // @extra-store
}

// The blocks escape (an empty asm that may read memory through the pointer), so
// no compiler drops a malloc.
NOIPA void sink(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

NOIPA void heap(int n, int x) {
    char *h = malloc(100 * (size_t)n); // @heap-scan
    sink(h);
    free(h);
    char *l = malloc(x ? 1000 : 24); // @heap-extra
    sink(l);
    if (!x)
        free(l);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    int x = argc > 2 ? atoi(argv[2]) : 0;
    long s = scan(n) + fixed();
    if (x)
        extra();
    heap(n, x);
    printf("%ld\n", s);
    return 0;
}
