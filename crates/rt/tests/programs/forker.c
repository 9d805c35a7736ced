/* The child stores 500 times and exits 0; the parent 300 times, then waits. */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
volatile int g;
int main(void) {
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; i < 500; i++) g = i;
        return 0;
    }
    for (int i = 0; i < 300; i++) g = i;
    int st = 0;
    waitpid(pid, &st, 0);
    printf("g_addr=%p child=%d status=%d\n", (void *)&g, (int)pid, WEXITSTATUS(st));
    return 0;
}
