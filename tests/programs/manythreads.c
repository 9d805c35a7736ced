// 1000 threads alive at once, each storing once: the runtime must cope.
#include <pthread.h>
#include <stdio.h>

#define THREADS 1000

volatile int slot[THREADS];
static pthread_barrier_t barrier;

static void *worker(void *arg) {
    long id = (long)arg;
    slot[id] = 1; // @store
    pthread_barrier_wait(&barrier);
    return NULL;
}

int main(void) {
    static pthread_t t[THREADS];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_barrier_init(&barrier, NULL, THREADS + 1);
    int started = 0;
    for (long i = 0; i < THREADS; i++) {
        if (pthread_create(&t[i], &attr, worker, (void *)i) == 0) started++;
    }
    pthread_barrier_wait(&barrier);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    printf("started=%d\n", started);
    return 0;
}
