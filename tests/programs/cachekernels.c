// Data-access kernels for comparing memlens's cache simulator with cachegrind:
// a strided sweep over an array larger than the caches, and a cyclic walk over
// K lines (exact reuse distance K-1).
#include <stdio.h>
#include <stdlib.h>

#define BIG (4 << 20) // longs: 32 MiB
#define LINE_LONGS 8
#define K 100

__attribute__((noinline)) long stride_sweep(const long *a, int reps) {
    long s = 0;
    for (int r = 0; r < reps; r++)
        for (long i = 0; i < BIG; i += LINE_LONGS) s += a[i];
    return s;
}

__attribute__((noinline)) long cyclic(const long *a, int rounds) {
    long s = 0;
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < K; i++) s += a[i * LINE_LONGS];
    return s;
}

int main(void) {
    long *a = aligned_alloc(64, BIG * sizeof(long));
    for (long i = 0; i < BIG; i += LINE_LONGS) a[i] = i;
    long s = stride_sweep(a, 2) + cyclic(a, 50);
    printf("%ld\n", s);
    free(a);
    return 0;
}
