// Viewer test program: two functions touch two cache-aligned arrays at known lines,
// so the memory map has exactly 4 + 16 cache-line rows and the flame chart exactly
// these functions.
#include <stdint.h>

#define NA 64  /* ints: 256 bytes = 4 lines */
#define NB 128 /* longs: 1024 bytes = 16 lines */

volatile int a[NA] __attribute__((aligned(64)));
volatile long b[NB] __attribute__((aligned(64)));

__attribute__((noinline)) static void fill_a(void) {
    for (int i = 0; i < NA; i++) {
        a[i] = i; // @store-a
    }
}

__attribute__((noinline)) static long sum_b(void) {
    long s = 0;
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < NB; i++) {
            s += b[i]; // @load-b
        }
    }
    return s;
}

int main(void) {
    fill_a();
    return (int)(sum_b() & 1);
}
