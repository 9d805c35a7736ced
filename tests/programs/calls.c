// Function entry/exit stays balanced across recursion and longjmp.
#include <setjmp.h>
#include <stdio.h>

static jmp_buf env;
volatile int depth_seen;

__attribute__((noinline)) static int fib(int n) {
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

__attribute__((noinline)) static void deep(int n) {
    depth_seen = n;
    if (n == 0) {
        longjmp(env, 1);
    }
    deep(n - 1);
}

int main(void) {
    int f = fib(10);
    if (setjmp(env) == 0) {
        deep(5);
    }
    printf("fib=%d depth=%d\n", f, depth_seen);
    return 0;
}
