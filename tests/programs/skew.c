/* One slow thread among fast ones, for the skew bound: `skew FAST ITERS`.
 * FAST threads each do ITERS atomic increments of a shared counter plus a plain
 * store (their Lamport clocks race ahead). Meanwhile the main thread, until every
 * fast thread has raised its `done` flag, does a plain store and reads the flags:
 * it records little, and it never synchronises with the others (the flags are plain
 * volatile accesses) until it joins them, so nothing but the recorder's skew bound
 * moves its clock. All of them share one CPU and yield it often (the fast threads
 * every 1000 increments, the main thread every round), so they take turns and none
 * waits long to run: a thread that does not run cannot hand its buffer over.
 * Prints the counter and how many rounds the main thread did. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>

static uint64_t counter;
static uint64_t iters;

struct slot {
    uint64_t v;
    volatile int done;
    char padding[52];
};

static void *fast(void *p) {
    struct slot *s = p;
    for (uint64_t i = 0; i < iters; i++) {
        __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
        s->v = i;
        if (i % 1000 == 0)
            sched_yield();
    }
    s->done = 1;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: skew FAST ITERS\n");
        return 2;
    }
    int n = atoi(argv[1]);
    iters = strtoull(argv[2], NULL, 10);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one);
    sched_setaffinity(0, sizeof one, &one);
    pthread_t *t = calloc(n, sizeof *t);
    struct slot *slots = calloc(n + 1, sizeof *slots);
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, fast, &slots[i]);
    long rounds = 0;
    for (int running = n; running > 0; rounds++) {
        slots[n].v = rounds;
        running = 0;
        for (int i = 0; i < n; i++)
            running += !slots[i].done;
        sched_yield();
    }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("counter %lu\nrounds %ld\n", (unsigned long)counter, rounds);
    return 0;
}
