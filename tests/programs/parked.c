/* Threads that wait, for the skew bound: `parked FAST ITERS`.
 * A waiter thread records a little (a partly filled buffer), then sleeps in
 * pthread_cond_wait until the end; the main thread sleeps in pthread_join. FAST
 * threads meanwhile each do ITERS atomic increments of a shared counter plus a
 * plain store, so their Lamport clocks race ahead and their buffers fill again and
 * again. Neither sleeper runs, so neither can hand its buffer over: the recorder
 * must do it for them, or a merge reading the file in order holds back everything
 * the fast threads wrote until the sleepers' first chunks land at the end.
 * Prints the counter and what the waiter saw. */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t counter;
static uint64_t iters;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int go;
static volatile int waiting;
static uint64_t before[256], after;

static void *fast(void *p) {
    uint64_t *v = p;
    for (uint64_t i = 0; i < iters; i++) {
        __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
        *v = i;
    }
    return NULL;
}

static void *waiter(void *p) {
    (void)p;
    for (int i = 0; i < 256; i++)
        before[i] = i;
    pthread_mutex_lock(&m);
    waiting = 1;
    while (!go)
        pthread_cond_wait(&c, &m);
    after = __atomic_load_n(&counter, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&m);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: parked FAST ITERS\n");
        return 2;
    }
    int n = atoi(argv[1]);
    iters = strtoull(argv[2], NULL, 10);
    pthread_t w;
    pthread_create(&w, NULL, waiter, NULL);
    /* the waiter first, so that it sleeps while the others run even on a loaded
       machine (it has the mutex until its wait gives it up) */
    while (!waiting)
        sched_yield();
    pthread_mutex_lock(&m);
    pthread_mutex_unlock(&m);
    pthread_t *t = calloc(n, sizeof *t);
    uint64_t *vals = calloc(8 * n, sizeof *vals);
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, fast, &vals[8 * i]);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    pthread_mutex_lock(&m);
    go = 1;
    pthread_cond_signal(&c);
    pthread_mutex_unlock(&m);
    pthread_join(w, NULL);
    printf("counter %lu\nafter %lu\n", (unsigned long)counter, (unsigned long)after);
    return 0;
}
