/* Pointer chasing: a singly linked list whose nodes are linked in a shuffled
 * order, traversed `rounds` times.  usage: llist [nodes] [rounds] */
#include <stdio.h>
#include <stdlib.h>
#include "common.h"

struct node {
    struct node *next;
    long value;
    long pad[2];
};

int main(int argc, char **argv) {
    long n = arg_long(argc, argv, 1, 200000);
    long rounds = arg_long(argc, argv, 2, 100);
    struct node *pool = malloc(sizeof(struct node) * n);
    long *order = malloc(sizeof(long) * n);
    uint64_t s = 12345;
    for (long i = 0; i < n; i++) {
        order[i] = i;
        pool[i].value = (long)(rng_next(&s) % 1000);
    }
    for (long i = n - 1; i > 0; i--) { /* Fisher-Yates */
        long j = (long)(rng_next(&s) % (uint64_t)(i + 1));
        long t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (long i = 0; i < n - 1; i++)
        pool[order[i]].next = &pool[order[i + 1]];
    pool[order[n - 1]].next = NULL;
    struct node *head = &pool[order[0]];
    long sum = 0;
    for (long r = 0; r < rounds; r++)
        for (struct node *p = head; p; p = p->next)
            sum += p->value ^ r;
    printf("llist n=%ld rounds=%ld checksum=%ld\n", n, rounds, sum);
    free(order);
    free(pool);
    return 0;
}
