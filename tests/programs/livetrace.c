/* A program for the live `trace` probe (crates/cli/tests/e2e/live_trace.rs).
 * Prints "ready PID", then reads one command per line on stdin and answers each
 * with one line "done CMD N":
 *   w N   call work(0) N times: each call makes exactly 8 loads and 8 stores of
 *         grid[] (4 in work, 4 in touch, which only work calls)
 *   r D   call work(D) once: D + 1 nested (recursive) calls
 *   o N   call other() N times: 8 loads and 8 stores of noise[], outside work
 *   m N   2 threads, each calling work(0) N times and other() N times
 *   q     exit 0
 * The arrays are volatile so every access the source makes is one event. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

volatile int grid[64];
volatile int noise[64];

__attribute__((noinline)) static void touch(int i) {
    grid[i] = grid[i + 1] + 1; // @touch
    grid[i + 2] = grid[i + 3] + 1;
    grid[i + 4] = grid[i + 5] + 1;
    grid[i + 6] = grid[i + 7] + 1;
}

__attribute__((noinline)) void work(int depth) {
    grid[0] = grid[1] + 1; // @work
    grid[2] = grid[3] + 1;
    grid[4] = grid[5] + 1;
    grid[6] = grid[7] + 1;
    touch(16);
    if (depth > 0)
        work(depth - 1);
}

__attribute__((noinline)) void other(void) {
    for (int i = 0; i < 8; i++)
        noise[i] = noise[i + 8] + 1; // @other
}

static long per_thread;

static void *par(void *arg) {
    (void)arg;
    for (long i = 0; i < per_thread; i++) {
        work(0);
        other();
    }
    return NULL;
}

int main(void) {
    char line[128];
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready %d\n", (int)getpid());
    while (fgets(line, sizeof line, stdin)) {
        char cmd = line[0];
        long n = strlen(line) > 2 ? atol(line + 2) : 0;
        if (cmd == 'q')
            break;
        if (cmd == 'w')
            for (long i = 0; i < n; i++)
                work(0);
        else if (cmd == 'r')
            work((int)n);
        else if (cmd == 'o')
            for (long i = 0; i < n; i++)
                other();
        else if (cmd == 'm') {
            pthread_t t[2];
            per_thread = n;
            for (int i = 0; i < 2; i++)
                pthread_create(&t[i], NULL, par, NULL);
            for (int i = 0; i < 2; i++)
                pthread_join(t[i], NULL);
        }
        printf("done %c %ld\n", cmd, n);
    }
    return 0;
}
