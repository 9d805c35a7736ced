// Vector, masked, gather and string instructions, one per line, for --dbi against
// valgrind lackey (inline asm: the exact instructions, whatever the compiler).
// Build: gcc -O2 -mavx2 -g -no-pie.
#include <stdio.h>
#define N 2000
int a[N * 8] __attribute__((aligned(32))), c[N * 8] __attribute__((aligned(32)));
double d[N];
char s1[4096], s2[4096];

__attribute__((noinline)) void vectors(void) {
    for (int i = 0; i < N; i++) {
        __asm__ volatile("vmovdqu (%0), %%ymm0" : : "r"(&a[i * 8]) : "xmm0"); // @y-load
        __asm__ volatile("vmovdqu %%ymm0, (%0)" : : "r"(&c[i * 8]) : "memory"); // @y-store
        __asm__ volatile("movdqu (%0), %%xmm1" : : "r"(&a[i * 8]) : "xmm1"); // @x-load
        __asm__ volatile("vinserti128 $1, (%0), %%ymm2, %%ymm2" : : "r"(&a[i * 8]) : "xmm2"); // @x-insert
    }
}

// One scalar load per element of a contiguous array: never merged into pairs.
__attribute__((noinline)) double scalars(void) {
    double s = 0;
    for (int i = 0; i < N; i++)
        __asm__ volatile("addsd (%1), %0" : "+x"(s) : "r"(&d[i])); // @addsd
    return s;
}

__attribute__((noinline)) void masked(void) {
    static const int m[8] = {-1, -1, -1, 0, 0, 0, 0, -1};
    __asm__ volatile("vmovdqu (%0), %%ymm3" : : "r"(m) : "xmm3");
    for (int i = 0; i < 100; i++) {
        __asm__ volatile("vpmaskmovd (%0), %%ymm3, %%ymm4" : : "r"(&a[i * 8]) : "xmm4"); // @mask-load
        __asm__ volatile("vpmaskmovd %%ymm4, %%ymm3, (%0)" : : "r"(&c[i * 8]) : "memory"); // @mask-store
    }
}

__attribute__((noinline)) void gather(void) {
    static const int idx[8] = {0, 3, 6, 9, 12, 15, 18, 21};
    __asm__ volatile("vmovdqu (%0), %%ymm5" : : "r"(idx) : "xmm5");
    for (int i = 0; i < 100; i++)
        __asm__ volatile("vpcmpeqd %%ymm6, %%ymm6, %%ymm6\n vpgatherdd %%ymm6, (%0,%%ymm5,4), %%ymm7" : : "r"(&a[i * 8]) : "xmm6", "xmm7"); // @gather
}

__attribute__((noinline)) void strings(void) {
    for (int i = 0; i < 10; i++) {
        __asm__ volatile("rep movsb" : : "D"(s2), "S"(s1), "c"(1000) : "memory"); // @rep-movsb
        __asm__ volatile("rep stosq" : : "D"(s2), "a"(0), "c"(100) : "memory"); // @rep-stosq
    }
}

int main(void) {
    vectors();
    printf("%g\n", scalars());
    masked();
    gather();
    strings();
    return 0;
}
