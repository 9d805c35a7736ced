// Runs for a few seconds so `memlens analyze --follow` sees the trace grow: four
// workers bump a shared counter and their private arrays in rounds, sleeping a
// millisecond between rounds. argv[1]: rounds (default 1500).
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define THREADS 4
#define N 200

static int rounds = 1500;

struct stats {
    atomic_long hits;
    long pad[7];
};

struct stats stats;
long priv[THREADS][256];

static void *worker(void *arg) {
    long id = (long)arg;
    volatile long *mine = priv[id];
    struct timespec ms = {0, 1000000};
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < N; i++) {
            atomic_fetch_add_explicit(&stats.hits, 1, memory_order_relaxed); // @hits
            mine[i & 255] += i; // @private
        }
        nanosleep(&ms, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) rounds = atoi(argv[1]);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    printf("hits=%ld\n", atomic_load(&stats.hits));
    return 0;
}
