// Enough operations for several index levels: 120 passes over two arrays of 64
// cache lines each, the second one with a stride that changes per pass.
#include <stdio.h>

static int a[1024] __attribute__((aligned(64)));
static long b[512] __attribute__((aligned(64)));

int main(void) {
    long sum = 0;
    for (int p = 0; p < 120; p++) {
        for (int i = 0; i < 1024; i++)
            a[i] += p; // @sweep-a
        for (int i = 0; i < 512; i += 1 + p % 4)
            sum += b[i]; // @read-b
    }
    printf("%ld %d\n", sum, a[7]);
    return 0;
}
