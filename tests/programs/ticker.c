/* A long-running program for the live GUI tests (crates/cli/tests/e2e/live_gui.rs):
 * calls tick() about every millisecond until killed; prints "ready PID" first. */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static volatile long total;

__attribute__((noipa)) void tick(long i) {
    total += i; // @tick
}

int main(void) {
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    struct timespec ms = {0, 1000000};
    for (long i = 0;; i++) {
        tick(i); // @start
        nanosleep(&ms, NULL); // @stop
    }
}
