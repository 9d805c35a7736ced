// A thread hammers an atomic counter while the main thread forks: the stripe of
// the counter is nearly always held at the fork. Each child updates the same
// counter once more and exits; it must neither hang nor take the stripe over.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static atomic_long counter;
static atomic_int stop;

static void *spin(void *arg) {
    (void)arg;
    while (!atomic_load(&stop))
        atomic_fetch_add(&counter, 1);
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, spin, NULL);
    while (atomic_load(&counter) < 1000)
        ;
    int ok = 0;
    for (int i = 0; i < 5; i++) {
        fflush(stdout);
        pid_t p = fork();
        if (p == 0) {
            atomic_fetch_add(&counter, 1); // @child-rmw
            exit(0);
        }
        int st = 1;
        waitpid(p, &st, 0);
        ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    printf("children=%d\n", ok);
    return 0;
}
