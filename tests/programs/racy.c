/* A data race on purpose: `racy THREADS TOTAL` — THREADS threads each do TOTAL/THREADS
 * plain (volatile, non-atomic) `counter++` on one shared counter, so increments get
 * lost. Prints `counter <address>`, `final <value>` and one line per thread:
 * `thread <i>\t<increments>\t<even>\t0`, where <even> counts the loads that saw an
 * even value. Under `--order atomic` the merged trace's loads and stores of the
 * counter, replayed in order, must give the same final value and per-thread counts. */
#include <memlens.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct counter_w {
    uint64_t counter;
    char padding[56];
};

static struct counter_w *shared;
static pthread_barrier_t bar;
static uint64_t per;

struct res {
    long id;
    uint64_t count, even;
    char padding[40];
};

static void *worker(void *p) {
    struct res *r = p;
    volatile uint64_t *c = &shared->counter;
    memlens_register_thread(r->id);
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
    uint64_t even = 0;
    for (uint64_t i = 0; i < per; i++) {
        uint64_t v = *c;
        *c = v + 1;
        even += (v % 2 == 0);
    }
    r->count = per;
    r->even = even;
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: racy THREADS TOTAL\n");
        return 2;
    }
    int n = atoi(argv[1]);
    if (n < 1)
        return 2;
    per = strtoull(argv[2], NULL, 10) / (uint64_t)n;
    shared = calloc(1, sizeof *shared);
    pthread_barrier_init(&bar, NULL, n + 1);
    pthread_t *t = calloc(n, sizeof *t);
    struct res *rs = calloc(n, sizeof *rs);
    for (int i = 0; i < n; i++) {
        rs[i].id = i;
        pthread_create(&t[i], NULL, worker, &rs[i]);
    }
    pthread_barrier_wait(&bar);
    memlens_roi_begin();
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
    memlens_roi_end();
    pthread_barrier_wait(&bar);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("counter %lu\n", (unsigned long)(uintptr_t)&shared->counter);
    printf("final %lu\n", (unsigned long)shared->counter);
    for (int i = 0; i < n; i++)
        printf("thread %d\t%lu\t%lu\t0\n", i, (unsigned long)rs[i].count,
               (unsigned long)rs[i].even);
    return 0;
}
