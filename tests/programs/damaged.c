// Several chunks per thread (recorded with MEMLENS_BUFFER_KB=64) for the damaged
// and cut trace tests: volatile arrays fix the access counts.
#include <pthread.h>
#include <stdio.h>

#define N 40000

static volatile long data[2][N];

__attribute__((noinline)) static long work(volatile long *a) {
    for (long i = 0; i < N; i++) {
        a[i] = i;
    }
    long s = 0;
    for (long i = 0; i < N; i++) {
        s += a[(i * 7919) % N];
    }
    return s;
}

static void *worker(void *arg) {
    return (void *)work(data[(long)arg]);
}

int main(void) {
    pthread_t t[2];
    for (long k = 0; k < 2; k++) {
        pthread_create(&t[k], NULL, worker, (void *)k);
    }
    long sum = 0;
    for (int k = 0; k < 2; k++) {
        void *r;
        pthread_join(t[k], &r);
        sum += (long)r;
    }
    printf("sum=%ld\n", sum);
    return 0;
}
