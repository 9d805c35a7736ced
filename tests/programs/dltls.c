// Naming test: thread-locals of a library loaded with dlopen (dynamic TLS).
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static void (*touch)(long);

static void *worker(void *arg) {
    (void)arg;
    touch(2);
    touch(3);
    return NULL;
}

int main(int argc, char **argv) {
    (void)argc;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    touch = (void (*)(long))dlsym(h, "lib_tls_touch");
    touch(1);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    puts("ok");
    return 0;
}
