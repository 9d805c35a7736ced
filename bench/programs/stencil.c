/* 2D 5-point Jacobi stencil on an n x n grid of doubles, `iters` sweeps.
 * usage: stencil [n] [iters] */
#include <stdio.h>
#include <stdlib.h>
#include "common.h"

int main(int argc, char **argv) {
    long n = arg_long(argc, argv, 1, 1024);
    long iters = arg_long(argc, argv, 2, 60);
    double *u = malloc(sizeof(double) * n * n);
    double *v = malloc(sizeof(double) * n * n);
    uint64_t s = 7;
    for (long i = 0; i < n * n; i++)
        u[i] = v[i] = (double)(rng_next(&s) % 100);
    for (long t = 0; t < iters; t++) {
        for (long i = 1; i < n - 1; i++)
            for (long j = 1; j < n - 1; j++)
                v[i * n + j] = 0.2 * (u[i * n + j] + u[(i - 1) * n + j] + u[(i + 1) * n + j] +
                                      u[i * n + j - 1] + u[i * n + j + 1]);
        double *tmp = u;
        u = v;
        v = tmp;
    }
    double check = 0.0;
    for (long i = 0; i < n * n; i += 3)
        check += u[i];
    printf("stencil n=%ld iters=%ld checksum=%.6e\n", n, iters, check);
    free(u);
    free(v);
    return 0;
}
