/* Growth over time for the live `heap` probe (crates/cli/tests/e2e/live_mem.rs,
 * live_gui.rs): one site grows in steps the test drives, another allocates and
 * frees in balance. Prints "ready PID", then reads one command per line on stdin
 * and answers each with one line "done CMD N":
 *   g K   K × malloc(10000) at site G, kept (N: G's bytes now)
 *   b K   K times malloc(64) + free at site B (N: K)
 *   f     free every G block (N: the blocks freed)
 *   q     exit 0 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX 4096

static void *grown[MAX];
static int ngrown;

__attribute__((noinline)) static void grow(long k) {
    for (long i = 0; i < k && ngrown < MAX; i++) {
        grown[ngrown] = malloc(10000); // @grow-g
        memset(grown[ngrown++], 1, 10000);
    }
}

__attribute__((noinline)) static void balanced(long k) {
    for (long i = 0; i < k; i++) {
        void *p = malloc(64); // @grow-b
        *(volatile char *)p = 1;
        free(p);
    }
}

int main(void) {
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    char line[64], cmd[16];
    while (fgets(line, sizeof line, stdin)) {
        long k = 0;
        if (sscanf(line, "%15s %ld", cmd, &k) < 1)
            continue;
        if (!strcmp(cmd, "g")) {
            grow(k);
            k = ngrown * 10000L;
        } else if (!strcmp(cmd, "b"))
            balanced(k);
        else if (!strcmp(cmd, "f")) {
            k = ngrown;
            while (ngrown)
                free(grown[--ngrown]);
        } else if (!strcmp(cmd, "q"))
            return 0;
        printf("done %s %ld\n", cmd, k);
        fflush(stdout);
    }
    return 0;
}
