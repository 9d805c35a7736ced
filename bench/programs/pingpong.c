/* Two threads hand a turn back and forth through one int: each spins on an
 * acquire load until it is its turn, then stores the other's. The latency case of
 * the ordering runtime (docs/PERFORMANCE.md, "Ordering cost").
 * usage: pingpong [rounds] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static int turn;
static long rounds;
static void *player(void *p) {
    int me = (int)(long)p;
    for (long i = 0; i < rounds; i++) {
        while (__atomic_load_n(&turn, __ATOMIC_ACQUIRE) != me)
            ;
        __atomic_store_n(&turn, 1 - me, __ATOMIC_RELEASE);
    }
    return NULL;
}
int main(int argc, char **argv) {
    rounds = argc > 1 ? atol(argv[1]) : 100000;
    pthread_t a, b;
    pthread_create(&a, NULL, player, (void *)0);
    pthread_create(&b, NULL, player, (void *)1);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("turn=%d\n", turn);
    return 0;
}
