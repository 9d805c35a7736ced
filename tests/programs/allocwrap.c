// Allocation wrappers (`--alloc-fn`, e2e analysis.rs and view_diff.rs):
// `allocwrap N`. Every block comes through xmalloc, which calls malloc; xcalloc
// calls xmalloc. Without --alloc-fn every site is xmalloc's malloc line; with
// `--alloc-fn 'x*alloc'` the sites are the callers:
// - small(N): N blocks of 16 bytes (a struct pair) through xmalloc (@small), two
//   stores into each (fields a and b), freed;
// - big(): 3 blocks of 1000 bytes through xcalloc (@big), the last one leaked;
// - direct(): one block of 50 bytes from malloc itself (@direct), freed.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__clang__)
#define NOIPA __attribute__((noinline))
#else
#define NOIPA __attribute__((noipa))
#endif

NOIPA void sink(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

NOIPA void *xmalloc(size_t n) {
    void *p = malloc(n); // @xmalloc
    if (!p)
        abort();
    sink(p);
    return p;
}

NOIPA void *xcalloc(size_t n) {
    void *p = xmalloc(n);
    memset(p, 0, n);
    sink(p);
    return p;
}

struct pair {
    long a, b;
};

NOIPA void small(int n) {
    for (int i = 0; i < n; i++) {
        struct pair *p = xmalloc(sizeof *p); // @small
        p->a = i;                            // @small-a
        p->b = -i;
        sink(p);
        free(p);
    }
}

// The block kept lives in a volatile global, so no compiler moves its free past
// the next allocation (at most two blocks live: a peak of 2000 bytes).
void *volatile keep;

NOIPA void big(void) {
    for (int i = 0; i < 3; i++) {
        void *p = xcalloc(1000); // @big
        if (keep)
            free(keep);
        keep = p;
    }
}

NOIPA void direct(void) {
    void *p = malloc(50); // @direct
    sink(p);
    free(p);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    small(n);
    big();
    direct();
    printf("done\n");
    return 0;
}
