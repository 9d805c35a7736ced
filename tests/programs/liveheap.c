/* A long-running program for the live `heap` probe (crates/cli/tests/e2e/live_mem.rs).
 * Prints "ready PID", then reads one command per line on stdin and answers each with
 * one line "done ...":
 *   o K   K malloc(100) at site O (kept in old[])      fo   free every old[] block
 *   a K   K malloc(100) at site A                      fa K free the last K A blocks
 *   b K   K calloc(4, 250) (1000 bytes) at site B      fb K free the last K B blocks
 *   g     realloc the last A block to 5000 bytes at site C
 *   t N   N times malloc(64) + free, timed: "done t NS_PER_PAIR"
 *   p K   8 threads at once each malloc(100) K times at site P and free every other
 *         block right after the next one is allocated: 8 × K/2 blocks stay, leaked
 *   q     exit 0 (blocks still held stay allocated). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX 4096

static void *old[MAX], *as[MAX], *bs[MAX], *sink;
static int nold, na, nb;

__attribute__((noinline)) static void alloc_old(int k) {
    for (int i = 0; i < k; i++)
        old[nold++] = malloc(100); // @heap-o
}

__attribute__((noinline)) static void alloc_a(int k) {
    for (int i = 0; i < k; i++)
        as[na++] = malloc(100); // @heap-a
}

__attribute__((noinline)) static void alloc_b(int k) {
    for (int i = 0; i < k; i++)
        bs[nb++] = calloc(4, 250); // @heap-b
}

__attribute__((noinline)) static void grow_last_a(void) {
    as[na - 1] = realloc(as[na - 1], 5000); // @heap-c
}

#define THREADS 8
static void *kept[THREADS][MAX];
static long per_thread;

static void *par(void *arg) {
    void **mine = kept[(long)arg];
    for (long i = 0; i < per_thread; i++) {
        mine[i] = malloc(100); // @heap-p
        if (i % 2 == 1)
            free(mine[i - 1]);
    }
    return NULL;
}

__attribute__((noinline)) static long churn(long n) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) {
        void *p = malloc(64); // @heap-t
        *(volatile char *)p = 1;
        free(p);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ns = (t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec);
    return n ? ns / n : 0;
}

int main(void) {
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    char cmd[16];
    long k = 0;
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        k = 0;
        if (sscanf(line, "%15s %ld", cmd, &k) < 1)
            continue;
        if (!strcmp(cmd, "o"))
            alloc_old((int)k);
        else if (!strcmp(cmd, "fo"))
            while (nold)
                free(old[--nold]);
        else if (!strcmp(cmd, "a"))
            alloc_a((int)k);
        else if (!strcmp(cmd, "fa"))
            for (long i = 0; i < k && na; i++)
                free(as[--na]);
        else if (!strcmp(cmd, "b"))
            alloc_b((int)k);
        else if (!strcmp(cmd, "fb"))
            for (long i = 0; i < k && nb; i++)
                free(bs[--nb]);
        else if (!strcmp(cmd, "g"))
            grow_last_a();
        else if (!strcmp(cmd, "p")) {
            pthread_t th[THREADS];
            per_thread = k < MAX ? k : MAX;
            for (long i = 0; i < THREADS; i++)
                pthread_create(&th[i], NULL, par, (void *)i);
            for (long i = 0; i < THREADS; i++)
                pthread_join(th[i], NULL);
        } else if (!strcmp(cmd, "t"))
            k = churn(k);
        else if (!strcmp(cmd, "q"))
            return 0;
        printf("done %s %ld\n", cmd, k);
        fflush(stdout);
    }
    return 0;
}
