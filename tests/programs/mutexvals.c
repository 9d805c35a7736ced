// T threads each add 1 to a shared counter K times under a mutex, yielding after
// each unlock. With --values every recorded store to the counter must hold the
// value that store wrote: replayed in the merged order they are 1, 2, ..., T*K.
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long counter;
static int K;

static void *run(void *arg) {
    (void)arg;
    for (int i = 0; i < K; i++) {
        pthread_mutex_lock(&mu);
        counter = counter + 1; // @store-counter
        pthread_mutex_unlock(&mu);
        sched_yield();
    }
    return NULL;
}

int main(int argc, char **argv) {
    int t = argc > 1 ? atoi(argv[1]) : 8;
    K = argc > 2 ? atoi(argv[2]) : 2000;
    pthread_t th[64];
    if (t > 64)
        t = 64;
    printf("counter %lu\n", (unsigned long)&counter);
    for (int i = 0; i < t; i++)
        pthread_create(&th[i], NULL, run, NULL);
    for (int i = 0; i < t; i++)
        pthread_join(th[i], NULL);
    printf("final %ld\n", counter);
    return 0;
}
