/* Two workers that provably run at the same time: each waits until both have
 * started, then does K stores in lockstep with the other (it never gets more than
 * W iterations ahead), then waits until both are done. So neither can do its
 * work before or after the other's: their work's time ranges overlap. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>

#define K 100000
#define W 1000

static atomic_int started;
static atomic_long progress[2];
static long data[2][4096];

static void *worker(void *arg) {
    long me = (long)arg, other = 1 - me;
    pthread_setname_np(pthread_self(), me ? "worker-b" : "worker-a");
    atomic_fetch_add(&started, 1);
    while (atomic_load(&started) < 2)
        sched_yield();
    for (long i = 0; i < K; i++) {
        data[me][i & 4095] = i; // @work
        if ((i & 63) == 0) {
            atomic_store(&progress[me], i);
            while (atomic_load(&progress[other]) + W < i)
                sched_yield();
        }
    }
    atomic_store(&progress[me], K + W);
    return 0;
}

int main(void) {
    pthread_t t[2];
    for (long i = 0; i < 2; i++)
        pthread_create(&t[i], 0, worker, (void *)i);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], 0);
    printf("%ld\n", data[0][7] + data[1][7]);
    return 0;
}
