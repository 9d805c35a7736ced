/* A thread that blocks where the runtime cannot see it, right after an access:
 * under `--order atomic` it still holds that line's lock while it sleeps (usleep is
 * not interposed), and the main thread, which then reads the same variable, must
 * take the lock over after its wait instead of waiting for the sleeper. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static volatile long x;

static void *sleeper(void *arg) {
    (void)arg;
    x = 1;
    usleep(1500 * 1000);
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, sleeper, NULL);
    usleep(300 * 1000);
    long v = x;
    pthread_join(t, NULL);
    printf("x %ld\n", v);
    return 0;
}
