// Calls left by longjmp (leaf ... leaf inside middle), then more calls from the
// frame that called setjmp: names, the viewer's flame chart and the exports must
// nest them alike (e2e export::stacks).
#include <setjmp.h>
#include <stdio.h>

static jmp_buf env;
volatile int sink;

__attribute__((noinline)) static void leaf(int n) {
    sink = n;
    if (n == 0) {
        longjmp(env, 1);
    }
    leaf(n - 1);
    sink++;
}

__attribute__((noinline)) static void middle(int n) {
    sink += n;
    leaf(n);
    sink++;
}

__attribute__((noinline)) static void after(int n) {
    volatile int local[4];
    local[n & 3] = n; // @after-local
    sink += local[n & 3];
}

__attribute__((noinline)) static void outer(void) {
    volatile int tmp[4];
    tmp[1] = 7; // @outer-local
    if (setjmp(env) == 0) {
        middle(3);
    }
    after(1);
    after(2);
    sink += tmp[1];
}

int main(void) {
    outer();
    printf("sink=%d\n", sink);
    return 0;
}
