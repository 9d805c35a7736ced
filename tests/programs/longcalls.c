// One thread, calls open across many chunks (record with MEMLENS_BUFFER_KB=64):
// the viewer's call tree of a range late in the run starts from the calls open
// there, which the chunks before it only show as entries and exits.
#include <stdio.h>

#if defined(__clang__)
#define NOIPA __attribute__((noinline))
#else
#define NOIPA __attribute__((noipa))
#endif

static volatile long a[256];

NOIPA long leaf(int n) {
    long s = 0;
    for (int i = 0; i < n; i++)
        s += a[i];
    return s;
}

NOIPA long mid(int k) {
    long s = 0;
    for (int j = 0; j < k; j++) {
        s += leaf(256);
        a[j & 255] = s;
    }
    return s;
}

NOIPA long outer(int rounds) {
    long s = 0;
    for (int r = 0; r < rounds; r++)
        s += mid(40);
    return s;
}

int main(void) {
    long s = outer(60);
    s += mid(30);
    printf("%ld\n", s);
    return 0;
}
