/* 4 threads: 100000 atomic_fetch_add each on one counter, 1000 successful CAS
 * increments each on another, and plain stores into a private row. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#define T 4
#define N 100000
#define M 1000
_Atomic long counter;
_Atomic int cas_counter;
int data[T][256];

static void *work(void *arg) {
    long t = (long)arg;
    for (int i = 0; i < N; i++) atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed);
    for (int i = 0; i < M; i++) {
        int v = atomic_load(&cas_counter);
        while (!atomic_compare_exchange_weak(&cas_counter, &v, v + 1)) {
        }
    }
    for (int i = 0; i < 256; i++) data[t][i] = i;
    return 0;
}

int main(void) {
    pthread_t th[T];
    for (long t = 0; t < T; t++) pthread_create(&th[t], 0, work, (void *)t);
    for (int t = 0; t < T; t++) pthread_join(th[t], 0);
    printf("counter=%ld cas=%d counter_addr=%p cas_addr=%p\n", atomic_load(&counter),
           atomic_load(&cas_counter), (void *)&counter, (void *)&cas_counter);
    return 0;
}
