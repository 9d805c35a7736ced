/* Port of atomic-memory-trace's src/inc.cpp and src/inc_cas.cpp, plus a
 * mutex-protected plain counter: `inc MODE THREADS TOTAL`, MODE = add | cas | mutex.
 * Prints `counter <address>` then one line per thread:
 * `thread <i>\t<increments>\t<even>\t<failed CAS>`. */
#include <memlens.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct counter_w {
    uint64_t counter;
    char padding[56];
};

static struct counter_w *shared;
static pthread_barrier_t bar;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t stop;
static int mode;

struct res {
    long id;
    uint64_t count, even, fails;
};

static uint64_t inc_with_cas(uint64_t *c, uint64_t *fails) {
    uint64_t orig = __atomic_load_n(c, __ATOMIC_RELAXED);
    uint64_t prev;
    while ((prev = __sync_val_compare_and_swap(c, orig, orig + 1)) != orig) {
        ++*fails;
        orig = prev;
    }
    return orig;
}

static void *worker(void *p) {
    struct res *r = p;
    memlens_register_thread(r->id);
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
    uint64_t old;
    do {
        if (mode == 0) {
            old = __sync_fetch_and_add(&shared->counter, 1);
        } else if (mode == 1) {
            old = inc_with_cas(&shared->counter, &r->fails);
        } else {
            pthread_mutex_lock(&mu);
            old = shared->counter;
            shared->counter = old + 1;
            pthread_mutex_unlock(&mu);
        }
        if (old % 2 == 0)
            ++r->even;
        ++r->count;
    } while (old < stop);
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: inc add|cas|mutex THREADS TOTAL\n");
        return 2;
    }
    mode = !strcmp(argv[1], "add") ? 0 : !strcmp(argv[1], "cas") ? 1 : 2;
    int n = atoi(argv[2]);
    uint64_t total = strtoull(argv[3], NULL, 10);
    stop = total - n;
    shared = calloc(1, sizeof *shared);
    pthread_barrier_init(&bar, NULL, n + 1);
    pthread_t *t = calloc(n, sizeof *t);
    struct res *rs = calloc(n, sizeof *rs);
    for (int i = 0; i < n; i++) {
        rs[i].id = i;
        pthread_create(&t[i], NULL, worker, &rs[i]);
    }
    pthread_barrier_wait(&bar);
    memlens_roi_begin();
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
    memlens_roi_end();
    pthread_barrier_wait(&bar);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    if (shared->counter != total) {
        fprintf(stderr, "counter %lu != %lu\n", (unsigned long)shared->counter,
                (unsigned long)total);
        return 1;
    }
    printf("counter %lu\n", (unsigned long)(uintptr_t)&shared->counter);
    for (int i = 0; i < n; i++)
        printf("thread %d\t%lu\t%lu\t%lu\n", i, (unsigned long)rs[i].count,
               (unsigned long)rs[i].even, (unsigned long)rs[i].fails);
    return 0;
}
