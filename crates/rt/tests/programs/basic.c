/* Volatile loads and stores of a global, known mallocs, a libc copy, ROI/values
 * annotations. Prints the addresses the test checks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "memlens.h"

#define N 1000
volatile int g;
char src[64] = "hello, memlens", dst[64];
void *volatile keep[10];

__attribute__((noinline)) static void copy(size_t n) { memcpy(dst, src, n); }

int main(int argc, char **argv) {
    (void)argv;
    for (int i = 0; i < N; i++) g = g + i;
    for (int i = 0; i < 10; i++) keep[i] = malloc(1000 + i);
    for (int i = 0; i < 10; i++) free(keep[i]);
    copy(20 + argc);
    memlens_roi_begin();
    for (int i = 0; i < 7; i++) g = i * 3;
    memlens_roi_end();
    memlens_thread_name("main-thread");
    printf("g=%d g_addr=%p src=%p dst=%p len=%zu\n", g, (void *)&g, (void *)src, (void *)dst,
           strlen(dst));
    return 3;
}
