// A small program with memory hotspots, for the memlens quick start:
// a column-order matrix walk (cache-unfriendly), a linked list, and a shared
// counter updated by several threads.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define N 256
#define NODES 4096
#define THREADS 4

static double matrix[N][N];
static atomic_long hits;

struct node {
    struct node *next;
    long value;
};

static double column_sum(void) {
    double s = 0;
    for (int j = 0; j < N; j++)
        for (int i = 0; i < N; i++)
            s += matrix[i][j]; // strided: one cache line per access
    return s;
}

static long list_walk(struct node *head) {
    long s = 0;
    for (struct node *n = head; n; n = n->next) s += n->value;
    return s;
}

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 10000; i++) atomic_fetch_add(&hits, 1);
    return NULL;
}

int main(void) {
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) matrix[i][j] = i + j;
    struct node *head = NULL;
    for (int i = 0; i < NODES; i++) {
        struct node *n = malloc(sizeof *n);
        n->value = i;
        n->next = head;
        head = n;
    }
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    printf("column sum %.0f, list sum %ld, hits %ld\n", column_sum(), list_walk(head),
           atomic_load(&hits));
    while (head) {
        struct node *n = head->next;
        free(head);
        head = n;
    }
    return 0;
}
