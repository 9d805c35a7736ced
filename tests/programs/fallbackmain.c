/* Calls fallbacklib.c's bump(); built with plain gcc or with memlens cc. */
#include <stdio.h>

long bump(int n);

int main(void) {
    printf("%ld\n", bump(10));
    return 0;
}
