/* Thread scaling: T threads share a fixed total of work (N accesses in all), each
 * on its own array with a data-dependent walk, so every thread is busy the whole
 * time and the recording's cost per access can be compared across thread counts
 * on the same machine (bench/threads-scale.sh).
 * usage: scale THREADS TOTAL_ACCESSES */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "common.h"

enum { WORDS = 1 << 14 }; /* 128 KiB per thread: in L2, so memory is not the limit */

struct work {
    long steps;
    uint64_t seed;
    uint64_t sum;
};

static void *run(void *p) {
    struct work *w = p;
    uint64_t *a = malloc(WORDS * sizeof *a);
    uint64_t s = w->seed, sum = 0;
    for (long i = 0; i < WORDS; i++) a[i] = rng_next(&s);
    /* one load and one store per step */
    uint64_t j = s % WORDS;
    for (long i = 0; i < w->steps; i++) {
        uint64_t v = a[j];
        a[(j + 1) & (WORDS - 1)] = v + i;
        sum += v;
        j = (v ^ (uint64_t)i) & (WORDS - 1);
    }
    free(a);
    w->sum = sum;
    return NULL;
}

int main(int argc, char **argv) {
    long threads = arg_long(argc, argv, 1, 4);
    long total = arg_long(argc, argv, 2, 100000000);
    if (threads < 1 || threads > 1024 || total < 2) {
        fprintf(stderr, "usage: scale THREADS(1-1024) TOTAL_ACCESSES\n");
        return 2;
    }
    pthread_t *t = calloc(threads, sizeof *t);
    struct work *w = calloc(threads, sizeof *w);
    for (long i = 0; i < threads; i++) {
        w[i].steps = total / 2 / threads;
        w[i].seed = 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1);
        pthread_create(&t[i], NULL, run, &w[i]);
    }
    uint64_t sum = 0;
    for (long i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        sum += w[i].sum;
    }
    printf("scale threads=%ld total=%ld sum=%llu\n", threads, total, (unsigned long long)sum);
    free(t);
    free(w);
    return 0;
}
