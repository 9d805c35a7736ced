// Prints its ignored signals (SigIgn of /proc/self/status), stores N times, says
// "ready", then waits up to 10 s to be stopped by a signal; prints "survived" if
// none came. A traced run must stop exactly as an untraced one.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define N 1000

volatile int g;

int main(void) {
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "SigIgn:", 7) == 0)
            fputs(line, stdout);
    if (f)
        fclose(f);
    for (int i = 0; i < N; i++)
        g = i; // @store-g
    printf("ready\n");
    fflush(stdout);
    for (int i = 0; i < 200; i++)
        usleep(50000);
    printf("survived\n");
    return 0;
}
