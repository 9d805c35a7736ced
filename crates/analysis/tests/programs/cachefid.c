/* Cache-simulation fidelity program: data accesses dominate.
 * Built by tests/integration/cachegrind.rs with gcc -O2 -fno-tree-vectorize and run
 * under cachegrind; the test replays the same address stream through memlens'
 * simulator and compares the per-function miss counts. Keep the loops and the
 * generator in sync with the test. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define N_STRIDE (1u << 20) /* doubles: 8 MiB */
#define STRIDE 2            /* every other double: 16-byte stride */
#define PASSES 3
#define T 512               /* transpose: 512 x 512 doubles, 2 MiB each */
#define N_RAND (1u << 19)   /* doubles: 4 MiB */
#define RAND_STEPS 1000000

__attribute__((noinline)) void init(double *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        a[i] = (double)i;
}

__attribute__((noinline)) double kernel_stride(const double *a) {
    double s = 0;
    for (int p = 0; p < PASSES; p++)
        for (size_t i = 0; i < N_STRIDE; i += STRIDE)
            s += a[i];
    return s;
}

__attribute__((noinline)) void kernel_transpose(double *restrict b, const double *restrict a) {
    for (size_t i = 0; i < T; i++)
        for (size_t j = 0; j < T; j++)
            b[j * T + i] = a[i * T + j];
}

__attribute__((noinline)) double kernel_random(const double *a) {
    uint64_t x = 42;
    double s = 0;
    for (long k = 0; k < RAND_STEPS; k++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        s += a[(x >> 33) % N_RAND];
    }
    return s;
}

int main(void) {
    double *a = aligned_alloc(4096, N_STRIDE * sizeof(double));
    double *ta = aligned_alloc(4096, T * T * sizeof(double));
    double *tb = aligned_alloc(4096, T * T * sizeof(double));
    double *r = aligned_alloc(4096, N_RAND * sizeof(double));
    if (!a || !ta || !tb || !r)
        return 1;
    printf("a=%p ta=%p tb=%p r=%p\n", (void *)a, (void *)ta, (void *)tb, (void *)r);
    fflush(stdout);
    init(a, N_STRIDE);
    init(ta, T * T);
    init(tb, T * T);
    init(r, N_RAND);
    double s = kernel_stride(a);
    kernel_transpose(tb, ta);
    s += tb[7];
    s += kernel_random(r);
    printf("sum=%f\n", s);
    return 0;
}
