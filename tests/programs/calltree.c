// The viewer's call tree and heap over time: a tree builder with nested calls
// (main → build → make_node → malloc), recursion, a sum, frees and one leak.
// Three rounds of growing trees: the heap peaks in the last (511 nodes); `keep`
// is never freed (a leak at exit).
#include <stdlib.h>

#if defined(__clang__)
#define NOIPA __attribute__((noinline))
#else
#define NOIPA __attribute__((noipa))
#endif

struct node {
    struct node *l, *r;
    long v;
};

NOIPA struct node *make_node(long v) {
    struct node *n = malloc(sizeof *n); // @alloc-node
    n->l = n->r = 0;
    n->v = v;
    return n;
}

NOIPA struct node *build(int depth, long v) {
    struct node *n = make_node(v);
    if (depth > 0) {
        n->l = build(depth - 1, 2 * v);
        n->r = build(depth - 1, 2 * v + 1);
    }
    return n;
}

NOIPA long sum(const struct node *n) {
    if (!n)
        return 0;
    return n->v + sum(n->l) + sum(n->r);
}

NOIPA void free_tree(struct node *n) {
    if (!n)
        return;
    free_tree(n->l);
    free_tree(n->r);
    free(n);
}

long *keep;

NOIPA void leak(long total) {
    keep = malloc(100 * sizeof(long)); // @alloc-leak
    for (int i = 0; i < 100; i++)
        keep[i] = total + i;
}

int main(void) {
    long total = 0;
    for (int round = 0; round < 3; round++) {
        struct node *t = build(6 + round, 1);
        total += sum(t);
        free_tree(t);
    }
    leak(total);
    return keep[99] == total + 99 ? 0 : 1;
}
