// Stores N times, then dereferences NULL: the trace must keep the stores.
#include <stdio.h>

#define N 5000

volatile int g;

int main(void) {
    for (int i = 0; i < N; i++) {
        g = i; // @store-g
    }
    printf("about to crash\n");
    fflush(stdout);
    volatile int *p = (int *)0;
    *p = 1;
    return 0;
}
