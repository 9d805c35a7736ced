/* Top-down merge sort of n pseudo-random ints, then a qsort of a copy (libc's
 * qsort is not instrumented, but its comparator calls are).  usage: sort [n] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"

static void merge_sort(int *a, int *tmp, long lo, long hi) {
    if (hi - lo < 2)
        return;
    if (hi - lo <= 16) { /* insertion sort for small runs */
        for (long i = lo + 1; i < hi; i++) {
            int x = a[i];
            long j = i - 1;
            while (j >= lo && a[j] > x) {
                a[j + 1] = a[j];
                j--;
            }
            a[j + 1] = x;
        }
        return;
    }
    long mid = lo + (hi - lo) / 2;
    merge_sort(a, tmp, lo, mid);
    merge_sort(a, tmp, mid, hi);
    long i = lo, j = mid, k = lo;
    while (i < mid && j < hi)
        tmp[k++] = (a[j] < a[i]) ? a[j++] : a[i++];
    while (i < mid)
        tmp[k++] = a[i++];
    while (j < hi)
        tmp[k++] = a[j++];
    for (k = lo; k < hi; k++)
        a[k] = tmp[k];
}

static int cmp_int(const void *x, const void *y) {
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv) {
    long n = arg_long(argc, argv, 1, 2000000);
    int *a = malloc(sizeof(int) * n);
    int *b = malloc(sizeof(int) * n);
    int *tmp = malloc(sizeof(int) * n);
    uint64_t s = 2024;
    for (long i = 0; i < n; i++)
        a[i] = b[i] = (int)(rng_next(&s) >> 33);
    merge_sort(a, tmp, 0, n);
    qsort(b, (size_t)n, sizeof(int), cmp_int);
    long bad = 0;
    unsigned long check = 0;
    for (long i = 0; i < n; i++) {
        bad += (i > 0 && a[i - 1] > a[i]) + (a[i] != b[i]);
        check = check * 31 + (unsigned)a[i];
    }
    printf("sort n=%ld unsorted=%ld checksum=%lu\n", n, bad, check);
    free(a);
    free(b);
    free(tmp);
    return bad != 0;
}
