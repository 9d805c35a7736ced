// Stores N times, then recurses without end: the stack overflow must leave a
// trace that holds the stores (the crash handler runs on an alternate stack).
#include <stdio.h>

#define N 5000

volatile int g;

__attribute__((noinline)) int down(int n) {
    volatile char pad[512];
    pad[n & 511] = (char)n;
    return down(n + 1) + pad[(n * 7) & 511];
}

int main(void) {
    for (int i = 0; i < N; i++)
        g = i; // @store-g
    printf("recursing\n");
    fflush(stdout);
    return down(0);
}
