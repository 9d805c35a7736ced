/* Parallel naming: three threads, each with several chunks of events, touching a
 * heap block, a stack array of their own (through a callee, so frames come and go
 * across chunk boundaries) and a global.  Every count is known. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 3
#define N 50000
#define ROUNDS 20000

long shared_sum[THREADS];

__attribute__((noinline)) void fill(long *dst, long n, long v) {
    for (long i = 0; i < n; i++)
        dst[i] = v + i; /* fill-store */
}

__attribute__((noinline)) long local_work(long id) {
    long buf[8];
    long s = 0;
    for (long r = 0; r < ROUNDS; r++) {
        fill(buf, 8, r + id);
        /* volatile: both compilers otherwise fold the load into fill's known result */
        s += ((volatile long *)buf)[r & 7]; /* stack-load */
    }
    return s;
}

void *worker(void *arg) {
    long id = (long)arg;
    long *blk = malloc(N * sizeof(long)); /* heap-alloc */
    fill(blk, N, id);
    long s = 0;
    for (long i = 0; i < N; i++)
        s += blk[i]; /* heap-load */
    shared_sum[id] = s + local_work(id); /* global-store */
    free(blk);
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    long total = 0;
    for (long i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        total += shared_sum[i];
    }
    printf("total=%ld\n", total);
    return 0;
}
