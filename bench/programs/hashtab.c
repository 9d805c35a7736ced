/* Open-addressing hash table (linear probing) of 64-bit keys: `n` inserts,
 * then 4n lookups, half of them misses.  usage: hashtab [n] */
#include <stdio.h>
#include <stdlib.h>
#include "common.h"

struct slot {
    uint64_t key; /* 0 = empty */
    uint64_t value;
};

static uint64_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

int main(int argc, char **argv) {
    long n = arg_long(argc, argv, 1, 1000000);
    uint64_t cap = 1;
    while (cap < (uint64_t)n * 2)
        cap <<= 1;
    struct slot *t = calloc(cap, sizeof(struct slot));
    uint64_t s = 99;
    for (long i = 0; i < n; i++) {
        uint64_t k = (rng_next(&s) | 1);
        uint64_t h = hash(k) & (cap - 1);
        while (t[h].key && t[h].key != k)
            h = (h + 1) & (cap - 1);
        t[h].key = k;
        t[h].value = (uint64_t)i;
    }
    uint64_t s2 = 99, miss = 555, found = 0, sum = 0;
    for (long i = 0; i < 4 * n; i++) {
        uint64_t k = (i & 1) ? (rng_next(&miss) & ~1ULL) : (rng_next(&s2) | 1);
        if ((i & 1) == 0 && (i / 2) % n == n - 1)
            s2 = 99; /* restart the key sequence */
        uint64_t h = hash(k) & (cap - 1);
        while (t[h].key) {
            if (t[h].key == k) {
                found++;
                sum += t[h].value;
                break;
            }
            h = (h + 1) & (cap - 1);
        }
    }
    printf("hashtab n=%ld found=%llu checksum=%llu\n", n, (unsigned long long)found,
           (unsigned long long)sum);
    free(t);
    return 0;
}
