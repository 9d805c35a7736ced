/* Function call tracing (`memlens record --trace-calls`): known arguments and
 * return values. `traced N` calls add3(i, 2*i, -i) and fib(i) for i < N from a
 * second thread, recursion included; fib's calls nest; mul is listed too but is
 * only reached through a tail call from tail_mul, which is also listed. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long add3(long a, long b, long c) { return a + b + c; }

__attribute__((noinline)) unsigned long fib(unsigned long n) {
    if (n < 2)
        return n;
    /* Through a volatile, so no compiler turns the second call into a loop. */
    volatile unsigned long r = fib(n - 1) + fib(n - 2);
    return r;
}

__attribute__((noinline)) long mul(long a, long b) { return a * b; }

/* Calls mul last: compilers turn it into a jump at -O2. */
__attribute__((noinline)) long tail_mul(long a, long b) { return mul(a + 1, b); }

/* Not listed: never traced. */
__attribute__((noinline)) long untraced(long a) { return a * 3; }

static int n;

static void *worker(void *arg) {
    (void)arg;
    long s = 0;
    for (int i = 0; i < n; i++)
        s += add3(i, 2 * i, -i) + (long)fib((unsigned long)i) + untraced(i);
    s += tail_mul(6, 7);
    printf("sum %ld\n", s);
    return NULL;
}

int main(int argc, char **argv) {
    n = argc > 1 ? atoi(argv[1]) : 3;
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    return 0;
}
