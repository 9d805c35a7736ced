/* A worker that never returns while main exits: its partial buffer must be written. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
volatile long g;
static void *spin(void *arg) {
    (void)arg;
    for (;;) g++;
    return 0;
}
int main(void) {
    pthread_t t;
    pthread_create(&t, 0, spin, 0);
    while (g < 100000) usleep(1000);
    printf("g_addr=%p\n", (void *)&g);
    return 0;
}
