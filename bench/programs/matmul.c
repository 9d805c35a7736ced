/* Dense matrix multiply, i-j-k order, doubles: C = A * B.  usage: matmul [n] */
#include <stdio.h>
#include <stdlib.h>
#include "common.h"

int main(int argc, char **argv) {
    long n = arg_long(argc, argv, 1, 700);
    double *a = malloc(sizeof(double) * n * n);
    double *b = malloc(sizeof(double) * n * n);
    double *c = malloc(sizeof(double) * n * n);
    uint64_t s = 42;
    for (long i = 0; i < n * n; i++) {
        a[i] = (double)(rng_next(&s) % 1000) / 100.0;
        b[i] = (double)(rng_next(&s) % 1000) / 100.0;
    }
    for (long i = 0; i < n; i++)
        for (long j = 0; j < n; j++) {
            double sum = 0.0;
            for (long k = 0; k < n; k++)
                sum += a[i * n + k] * b[k * n + j];
            c[i * n + j] = sum;
        }
    double check = 0.0;
    for (long i = 0; i < n * n; i++)
        check += c[i] * (double)(i % 7 + 1);
    printf("matmul n=%ld checksum=%.6e\n", n, check);
    free(a);
    free(b);
    free(c);
    return 0;
}
