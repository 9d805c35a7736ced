// Naming test: stack locals at -O2, where clang describes them with location
// lists and DW_OP_piece (a volatile array split into one slot per element).
#include <stdio.h>

__attribute__((noinline)) int fill_local(int n) {
    volatile int buf[16];
    for (int i = 0; i < 16; i++) buf[i] = i * n; // @fill
    buf[3] = 7;                                  // @buf3
    int s = 0;
    for (int i = 0; i < 16; i++) s += buf[i]; // @sum
    return s;
}

struct pair {
    long a, b;
};

// Reads a caller's local through a pointer: the access is named in the caller's frame.
__attribute__((noinline)) long use(struct pair *p) {
    return p->a + p->b; // @use
}

__attribute__((noinline)) long pass_struct(long x) {
    struct pair p = {x, x + 1};
    long r = use(&p);
    p.b = r;
    return use(&p);
}

int main(int argc, char **argv) {
    (void)argv;
    printf("%d %ld\n", fill_local(argc), pass_struct(argc));
    return 0;
}
