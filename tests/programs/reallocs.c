// realloc in each of its roles, counted as memcheck counts them: realloc(NULL, n)
// allocates, realloc(p, n) allocates and frees, realloc(p, 0) frees. No stdio, so
// libc makes no allocation of its own.
#include <stdlib.h>

// Through a volatile so the compiler cannot turn realloc(NULL, n) into malloc(n).
void *volatile null_ptr;
void *volatile sink;

int main(void) {
    void *p[100];
    for (int i = 0; i < 100; i++)
        p[i] = realloc(null_ptr, 16 + i); // @realloc-null
    for (int i = 0; i < 100; i++)
        p[i] = realloc(p[i], 4096 + i); // @realloc-grow
    for (int i = 0; i < 50; i++)
        sink = realloc(p[i], 0); // @realloc-zero
    for (int i = 50; i < 100; i++)
        free(p[i]);
    return 0;
}
