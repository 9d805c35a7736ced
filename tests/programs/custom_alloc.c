// Uses the custom allocators of custom_alloc_lib.c; built with MEMLENS_ALLOC_DEFS.
#include <stdio.h>
#include <stdlib.h>

int pool_get(void **out, unsigned long size);
void *pool_array(unsigned long n, unsigned long size);

volatile long g;

int main(void) {
    void *p = NULL;
    int rc = pool_get(&p, 48); // @pool-get
    long *a = pool_array(5, 16); // @pool-array
    for (int i = 0; i < 3; i++) {
        g = i; // @values
    }
    printf("rc=%d %d\n", rc, p != NULL && a != NULL);
    free(p);
    free(a);
    return 0;
}
