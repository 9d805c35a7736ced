/* A helper inlined at the very start of main (-O2): the call tree and the flame
 * chart must still call the frame main, and the helper's accesses belong to it. */
#include <stdlib.h>

static long table[64];

static inline long arg_long(int argc, char **argv, int i, long dflt) {
    return argc > i ? strtol(argv[i], NULL, 10) : dflt;
}

__attribute__((noinline)) long work(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) {
        table[i & 63] += i;
        s += table[(i * 7) & 63];
    }
    return s;
}

int main(int argc, char **argv) {
    long n = arg_long(argc, argv, 1, 1000);
    return (int)(work(n) & 1);
}
