/* Allocation churn: a pool of `slots` live objects; each step frees a random
 * one and allocates a new one of a skewed random size (16 B .. 64 KiB), writes
 * its header and tail, and sometimes reallocs it.  usage: alloc [steps] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"

#define SLOTS 4096

struct obj {
    size_t size;
    uint64_t tag;
    unsigned char data[];
};

static size_t pick_size(uint64_t *s) {
    uint64_t r = rng_next(s);
    switch (r & 7) {
    case 0: case 1: case 2: case 3: return 16 + (r >> 8) % 48;   /* small */
    case 4: case 5: return 64 + (r >> 8) % 448;                 /* medium */
    case 6: return 512 + (r >> 8) % 3584;                      /* large */
    default: return 4096 + (r >> 8) % 61440;                    /* big */
    }
}

static struct obj *make(size_t size, uint64_t tag) {
    struct obj *o = malloc(sizeof(struct obj) + size);
    o->size = size;
    o->tag = tag;
    o->data[0] = (unsigned char)tag;
    o->data[size - 1] = (unsigned char)(tag >> 8);
    for (size_t i = 0; i < size && i < 64; i += 8)
        o->data[i] = (unsigned char)i;
    return o;
}

int main(int argc, char **argv) {
    long steps = arg_long(argc, argv, 1, 2000000);
    struct obj **pool = calloc(SLOTS, sizeof(struct obj *));
    uint64_t s = 31337, check = 0;
    for (long i = 0; i < SLOTS; i++)
        pool[i] = make(pick_size(&s), (uint64_t)i);
    for (long i = 0; i < steps; i++) {
        uint64_t r = rng_next(&s);
        long k = (long)(r % SLOTS);
        struct obj *o = pool[k];
        check += o->tag + o->data[0] + o->data[o->size - 1];
        if ((r >> 20) % 16 == 0) { /* grow in place or move */
            size_t ns = o->size + 1 + (r >> 32) % 256;
            o = realloc(o, sizeof(struct obj) + ns);
            o->size = ns;
            o->data[ns - 1] = 1;
            pool[k] = o;
        } else {
            free(o);
            pool[k] = make(pick_size(&s), (uint64_t)i);
        }
    }
    for (long i = 0; i < SLOTS; i++) {
        check += pool[i]->size;
        free(pool[i]);
    }
    free(pool);
    printf("alloc steps=%ld checksum=%llu\n", steps, (unsigned long long)check);
    return 0;
}
