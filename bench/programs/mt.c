/* Multi-threaded: 4 pthreads, each sweeping its own private array, and every
 * few elements updating shared state: a mutex-protected histogram and an
 * atomic counter.  usage: mt [elements-per-thread] [passes] */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include "common.h"

#define THREADS 4
#define BUCKETS 64

static long n, passes;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long histogram[BUCKETS];
static atomic_long events;
static long results[THREADS];

static void *worker(void *arg) {
    long id = (long)arg;
    int *priv = malloc(sizeof(int) * n);
    uint64_t s = 1000 + (uint64_t)id;
    for (long i = 0; i < n; i++)
        priv[i] = (int)(rng_next(&s) % 1000);
    long local = 0;
    for (long p = 0; p < passes; p++) {
        for (long i = 1; i < n; i++) {
            priv[i] = (priv[i] + priv[i - 1] * 3 + (int)p) % 1000;
            local += priv[i];
            if ((i & 1023) == 0) {
                pthread_mutex_lock(&lock);
                histogram[priv[i] % BUCKETS]++;
                pthread_mutex_unlock(&lock);
            }
            if ((i & 63) == 0)
                atomic_fetch_add_explicit(&events, 1, memory_order_relaxed);
        }
    }
    results[id] = local;
    free(priv);
    return NULL;
}

int main(int argc, char **argv) {
    n = arg_long(argc, argv, 1, 1000000);
    passes = arg_long(argc, argv, 2, 20);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    long total = 0;
    for (long i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        total += results[i];
    }
    long h = 0;
    for (int b = 0; b < BUCKETS; b++)
        h = h * 7 + histogram[b];
    printf("mt threads=%d n=%ld passes=%ld events=%ld checksum=%ld\n", THREADS, n, passes,
           atomic_load(&events), total ^ h);
    return 0;
}
