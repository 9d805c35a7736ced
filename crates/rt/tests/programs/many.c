/* Many threads (argv[1], default 1000) in waves of 100, each storing 10 times. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
volatile int slots[1000];
static void *work(void *arg) {
    long t = (long)arg;
    for (int i = 0; i < 10; i++) slots[t % 1000] = i;
    return 0;
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    pthread_t th[100];
    for (int base = 0; base < n; base += 100) {
        int k = n - base < 100 ? n - base : 100;
        for (int t = 0; t < k; t++) pthread_create(&th[t], 0, work, (void *)(long)(base + t));
        for (int t = 0; t < k; t++) pthread_join(th[t], 0);
    }
    printf("threads=%d\n", n);
    return 0;
}
