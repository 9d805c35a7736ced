/* Frames left by longjmp, and a thread that ends with pthread_exit deep inside. */
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>

static jmp_buf env;
volatile int sink;

__attribute__((noinline)) static void leaf(int d) {
    sink = d;
    if (d == 0) longjmp(env, 1);
    leaf(d - 1);
    sink = d;
}

__attribute__((noinline)) static int jump_from(int depth) {
    if (setjmp(env) == 0) {
        leaf(depth);
        return 0;
    }
    return 1;
}

__attribute__((noinline)) static void deep_exit(int d) {
    sink = d;
    if (d == 0) pthread_exit(0);
    deep_exit(d - 1);
}

static void *thread_main(void *arg) {
    (void)arg;
    jump_from(5);
    deep_exit(4);
    return 0;
}

int main(void) {
    int r = 0;
    for (int i = 0; i < 3; i++) r += jump_from(3 + i);
    pthread_t t;
    pthread_create(&t, 0, thread_main, 0);
    pthread_join(t, 0);
    printf("jumps=%d\n", r);
    return 0;
}
