// A custom allocator in its own object file (link-time wrapping sees calls
// between objects): one returns the block through an out-parameter, one like calloc.
#include <stdlib.h>

int pool_get(void **out, unsigned long size) {
    *out = malloc(size);
    return *out ? 0 : -1;
}

void *pool_array(unsigned long n, unsigned long size) {
    return calloc(n, size);
}
