// The parent and a forked child each record their own stores.
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

volatile int g;

int main(void) {
    for (int i = 0; i < 100; i++) g = i; // @parent-store
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        for (int i = 0; i < 200; i++) g = i; // @child-store
        _exit(0);
    }
    int st = 0;
    waitpid(p, &st, 0);
    printf("child=%d\n", WEXITSTATUS(st));
    return 0;
}
