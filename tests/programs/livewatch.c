/* A long-running program for the live `watch` probe (crates/cli/tests/e2e/live_mem.rs).
 * Prints "ready PID", then reads one command per line on stdin and answers each with
 * one line "done CMD ...":
 *   r N M K  thread A stores 1..N to cfg.limit, then (after it ended) thread B stores
 *            1000+1..1000+M and loads it K times: "done r TID_A TID_B SUM_OF_LOADS"
 *   c K      the main thread increments counter K times: "done c COUNTER"
 *   h K      hist[i % 4]++ for i < K: "done h HIST2"
 *   x K      K atomic fetch-adds of hits, one atomic load: "done x HITS"
 *   t K      K increments of counter, timed: "done t NS_PER_INCREMENT"
 *   q        exit 0. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct config {
    long before;
    int limit;
    int after;
};

struct config cfg;
int counter;
int hist[4];
int hits;

__attribute__((noinline)) void set_a(int v) {
    cfg.limit = v; // @watch-a
    cfg.after = v; // a neighbouring member, not watched
}

__attribute__((noinline)) void set_b(int v) {
    cfg.limit = v; // @watch-b
}

/* the barrier keeps the call impure: the compiler must not call it once for K */
__attribute__((noinline)) int get_limit(void) {
    __asm__ volatile("" ::: "memory");
    return cfg.limit; // @watch-load
}

__attribute__((noinline)) void bump(void) {
    counter++; // @watch-counter
}

static long n, m, k, sum;
static int tid_a, tid_b;

static void *thread_a(void *arg) {
    (void)arg;
    tid_a = (int)syscall(SYS_gettid);
    for (long i = 1; i <= n; i++)
        set_a((int)i);
    return NULL;
}

static void *thread_b(void *arg) {
    (void)arg;
    tid_b = (int)syscall(SYS_gettid);
    for (long i = 1; i <= m; i++)
        set_b((int)(1000 + i));
    for (long i = 0; i < k; i++)
        sum += get_limit();
    return NULL;
}

int main(void) {
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    char line[128], cmd[16];
    while (fgets(line, sizeof line, stdin)) {
        long a = 0, b = 0, c = 0;
        if (sscanf(line, "%15s %ld %ld %ld", cmd, &a, &b, &c) < 1)
            continue;
        if (!strcmp(cmd, "r")) {
            pthread_t t;
            n = a, m = b, k = c, sum = 0;
            pthread_create(&t, NULL, thread_a, NULL);
            pthread_join(t, NULL);
            pthread_create(&t, NULL, thread_b, NULL);
            pthread_join(t, NULL);
            printf("done r %d %d %ld\n", tid_a, tid_b, sum);
        } else if (!strcmp(cmd, "c")) {
            for (long i = 0; i < a; i++)
                bump();
            printf("done c %d\n", counter); // @watch-print
        } else if (!strcmp(cmd, "h")) {
            for (long i = 0; i < a; i++)
                hist[i % 4]++; // @watch-hist
            printf("done h %d\n", hist[2]); // @watch-hist-print
        } else if (!strcmp(cmd, "x")) {
            for (long i = 0; i < a; i++)
                __atomic_fetch_add(&hits, 1, __ATOMIC_RELAXED); // @watch-rmw
            printf("done x %d\n", __atomic_load_n(&hits, __ATOMIC_ACQUIRE)); // @watch-aload
        } else if (!strcmp(cmd, "t")) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (long i = 0; i < a; i++)
                bump();
            clock_gettime(CLOCK_MONOTONIC, &t1);
            long ns = (t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec);
            printf("done t %ld\n", a ? ns / a : 0);
        } else if (!strcmp(cmd, "q")) {
            return 0;
        }
        fflush(stdout);
    }
    return 0;
}
