// Stores N times, then writes to a pipe nobody reads: SIGPIPE (default action:
// terminate) must leave a finished trace with the stores, like SIGSEGV does.
#include <stdio.h>
#include <unistd.h>

#define N 3000

volatile int g;

int main(void) {
    for (int i = 0; i < N; i++)
        g = i; // @store-g
    int p[2];
    if (pipe(p) != 0)
        return 1;
    close(p[0]);
    printf("writing\n");
    fflush(stdout);
    (void)write(p[1], "x", 1);
    printf("survived\n");
    return 0;
}
