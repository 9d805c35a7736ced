// Naming test: C heap blocks typed from the allocating source line.
#include <stdio.h>
#include <stdlib.h>

struct rec {
    long id;
    int field;
    int flags;
};
struct pair {
    int a;
    int b;
};

void *volatile sink;

__attribute__((noinline)) struct rec *make_recs(int n) {
    struct rec *r = malloc(n * sizeof(struct rec)); // @rec-alloc
    sink = r;
    volatile struct rec *v = r;
    for (int i = 0; i < n; i++) v[i].field = i; // @rec-field
    return r;
}

__attribute__((noinline)) struct pair *make_pairs(int n) {
    struct pair *p;
    p = calloc(n, sizeof *p); // @pair-alloc
    sink = p;
    volatile struct pair *v = p;
    for (int i = 0; i < n; i++) v[i].b = i; // @pair-b
    return p;
}

int main(int argc, char **argv) {
    (void)argv;
    int n = argc + 2; /* 3 */
    struct rec *r = make_recs(n);
    struct pair *p = make_pairs(4);
    // Two types on one line: the block stays untyped.
    struct pair *q = malloc(sizeof(struct rec)); // @ambiguous
    sink = q;
    volatile struct pair *vq = q;
    vq[1].a = 5; // @ambiguous-store
    // Not a multiple of the type's size: untyped.
    struct rec *h = malloc(20); // @odd-size
    sink = h;
    volatile struct rec *vh = h;
    vh->field = 6;
    // A header before other data (32 bytes, two recs' worth): untyped.
    struct rec *hd = malloc(sizeof(struct rec) + 16); // @header
    sink = hd;
    volatile struct rec *vhd = hd;
    vhd[1].field = 7;
    // A scalar pointer alone does not type a block (allocator wrappers).
    long *words = malloc(32); // @scalar
    sink = words;
    volatile long *vw = words;
    vw[2] = 8;
    long s = 0;
    volatile struct rec *vr = r;
    for (int i = 0; i < n; i++) s += vr[i].field;
    volatile struct pair *vp = p;
    for (int i = 0; i < 4; i++) s += vp[i].b;
    printf("%ld %d %d %d %ld\n", s, vq[1].a, vh->field, vhd[1].field, vw[2]);
    free(r);
    free(p);
    free(q);
    free(h);
    free(hd);
    free(words);
    return 0;
}
