/* Two scopes' arrays that stack colouring may lay in one slot, each filled by
 * the same callee through a pointer, from two call sites, many times: a stack
 * address's name depends on the frame that owns it and on where it called out. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) void fill(volatile int *p, int n, int v) {
    for (int i = 0; i < n; i++)
        p[i] = v + i;
}

__attribute__((noinline)) int sum(volatile int *p, int n) {
    int s = 0;
    for (int i = 0; i < n; i++)
        s += p[i];
    return s;
}

__attribute__((noinline)) int twice(int k) {
    int t = 0;
    {
        volatile int first[8];
        fill(first, 8, k);
        t += sum(first, 8);
    }
    {
        volatile int second[8];
        fill(second, 8, 2 * k);
        t += sum(second, 8);
    }
    return t;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 1000;
    long total = 0;
    for (int r = 0; r < rounds; r++)
        total += twice(r);
    printf("total=%ld\n", total);
    return 0;
}
