// Naming test: thread-locals of the executable and of a shared library, in the
// main thread and in a second thread.
#include <pthread.h>
#include <stdio.h>

__thread long exe_tls[2];
void lib_tls_touch(long v);

static void *worker(void *arg) {
    (void)arg;
    volatile long *e = exe_tls;
    e[1] = 4; // @exe-tls-thread
    lib_tls_touch(2);
    lib_tls_touch(3);
    return NULL;
}

int main(void) {
    volatile long *e = exe_tls;
    e[1] = 1; // @exe-tls
    lib_tls_touch(1);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    printf("%ld\n", exe_tls[1]);
    return 0;
}
