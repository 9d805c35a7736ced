// Per-thread counters: packed into one cache line (false sharing), or padded to
// a line each (none) when built with -DPADDED.
#include <pthread.h>
#include <stdio.h>

#define THREADS 4
#define N 20000

#ifdef PADDED
struct counter {
    volatile long value;
    char pad[64 - sizeof(long)];
} __attribute__((aligned(64)));
#else
struct counter {
    volatile long value;
};
#endif

struct counter counters[THREADS] __attribute__((aligned(64)));

// Each worker returns its own count, so no other thread reads its counter.
static void *worker(void *arg) {
    long id = (long)arg;
    for (int i = 0; i < N; i++) {
        counters[id].value++; // @bump
    }
    return (void *)counters[id].value;
}

int main(void) {
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    long sum = 0;
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        sum += (long)r;
    }
    printf("sum=%ld\n", sum);
    return 0;
}
