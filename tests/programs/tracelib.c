/* Calls the listed functions of libtraced.so with integer arguments. */
#include <stdio.h>
#include <stdlib.h>

long lib_mix(long a, long b, long c);
long lib_sum(long n);

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 3;
    long m = lib_mix(n, n + 1, -n);
    long s = lib_sum(n);
    printf("mix %ld sum %ld\n", m, s);
    return 0;
}
