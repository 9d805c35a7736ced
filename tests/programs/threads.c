// Four workers each store N times into their own slot and bump a shared atomic.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#define THREADS 4
#define N 1000

volatile long slots[THREADS][8];
atomic_long counter;

static void *worker(void *arg) {
    long id = (long)arg;
    for (int i = 0; i < N; i++) {
        slots[id][0] = i; // @store-slot
        atomic_fetch_add(&counter, 1); // @rmw
    }
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) {
        pthread_create(&t[i], NULL, worker, (void *)i);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
    }
    printf("counter=%ld\n", atomic_load(&counter));
    return 0;
}
