// Exact-count test program: each marked line makes a fixed number of accesses,
// fixed by the language because the objects are volatile.
#include <stdio.h>
#include <stdlib.h>

#define N 1000

volatile int g;
volatile long arr[16];

struct node {
    long key;
    long val;
};

__attribute__((noinline)) static void fill(void) {
    for (int i = 0; i < N; i++) {
        g = i; // @store-g
    }
}

__attribute__((noinline)) static long sum(void) {
    long s = 0;
    for (int i = 0; i < N; i++) {
        s += g; // @load-g
    }
    for (int i = 0; i < 16; i++) {
        arr[i] = i; // @store-arr
    }
    return s;
}

// Pointers escape through this, so the optimizer cannot drop malloc/free pairs.
void *volatile sink;

__attribute__((noinline)) static void allocs(void) {
    void *p[10];
    for (int i = 0; i < 10; i++) {
        p[i] = malloc(100); // @malloc
        sink = p[i];
    }
    for (int i = 0; i < 10; i++) {
        free(p[i]);
    }
    struct node *n = calloc(4, sizeof(struct node)); // @calloc
    sink = n;
    volatile struct node *vn = n;
    vn[2].val = 7; // @store-field
    n = realloc(n, 8 * sizeof(struct node)); // @realloc
    sink = n;
    free(n);
}

int main(int argc, char **argv) {
    (void)argv;
    fill();
    long s = sum();
    allocs();
    printf("sum=%ld argc=%d\n", s, argc);
    return argc == 3 ? 3 : 0;
}
