// Four threads bump one field of a shared stats struct; each also works on a
// private array. The shared field must rank first in the sharing analysis.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#define THREADS 4
#define N 20000

struct stats {
    long pad_before[4];
    atomic_long hits;
    long misses;
};

struct stats stats;
long priv[THREADS][64];

static void *worker(void *arg) {
    long id = (long)arg;
    volatile long *mine = priv[id];
    for (int i = 0; i < N; i++) {
        atomic_fetch_add_explicit(&stats.hits, 1, memory_order_relaxed); // @hits
        mine[i & 63] += i;
    }
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    printf("hits=%ld\n", atomic_load(&stats.hits));
    return 0;
}
