/* memlens sql tests: globals, a struct, heap blocks and two threads, no atomics
   (an RMW is one row of `accesses` but a load and a store in `report`). */
#include <pthread.h>
#include <stdlib.h>

long counts[64] __attribute__((aligned(64)));
struct stats { long hits; long misses; double v[8]; } stats;
static long *heap_a;

__attribute__((noinline)) static void *worker(void *arg) {
    long k = (long)arg;
    for (int i = 0; i < 1000; i++)
        counts[(i + k) % 64] += i; // @work
    return 0;
}

int main(void) {
    heap_a = malloc(256 * sizeof(long));
    for (int i = 0; i < 256; i++)
        heap_a[i] = i; // @fill
    for (int i = 0; i < 300; i++) {
        stats.hits += heap_a[i % 256]; // @hits
        stats.v[i % 8] = stats.hits;
    }
    pthread_t t;
    pthread_create(&t, 0, worker, (void *)7);
    worker((void *)3);
    pthread_join(t, 0);
    long s = stats.hits + stats.misses;
    free(heap_a);
    return s == 42;
}
