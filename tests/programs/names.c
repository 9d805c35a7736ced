// Naming test: every kind of storage, each touched a known number of times.
#include <stdio.h>
#include <stdlib.h>

struct limits {
    int min;
    int max;
};
struct cfg {
    int mode;
    struct limits limits;
};
struct stats {
    long hits;
    long v[8];
};
struct item {
    int key;
    double weight;
};

struct stats stats;
struct cfg cfg;
static int table[32];
__thread long tls_counter;
extern int lib_value[4];
void lib_touch(void);

__attribute__((noinline)) void fill_local(void) {
    volatile int buf[16];
    for (int i = 0; i < 16; i++) {
        buf[i] = i; // @stack
    }
    buf[3] = 7; // @stack3
}

int main(void) {
    volatile struct stats *s = &stats;
    volatile struct cfg *c = &cfg;
    volatile int *t = table;
    for (int i = 0; i < 5; i++) {
        s->v[3] = i; // @field
    }
    c->limits.max = 10; // @nested
    t[7] = 1; // @array
    struct item *items = malloc(10 * sizeof *items); // @heap-alloc
    volatile struct item *vi = items;
    vi[4].weight = 2.0; // @heap-store
    volatile long *tp = &tls_counter;
    *tp = 3; // @tls
    fill_local();
    volatile int *lv = lib_value;
    lv[2] = 3; // @lib
    lib_touch();
    free(items);
    printf("%ld %d %d\n", stats.v[3], cfg.limits.max, lib_value[2]);
    return 0;
}
