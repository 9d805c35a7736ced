// Many chunks per thread: `report` and `analyze counts` decode chunks on every
// core, and the counts must still be exact. Volatile arrays fix the access counts.
#include <pthread.h>
#include <stdio.h>

#define N 600000

static volatile long data[2][N];

__attribute__((noinline)) static long work(volatile long *a) {
    for (long i = 0; i < N; i++) {
        a[i] = i; // @store
    }
    long s = 0;
    for (long i = 0; i < N; i++) {
        s += a[(i * 7919) % N]; // @load
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
