/* Shared helpers for the memlens benchmark programs: a fixed-seed PRNG and
 * argument parsing. Every program takes its problem size on the command line
 * and prints a checksum, so the work cannot be optimised away and the
 * instrumented build can be checked against the native one. */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H
#include <stdint.h>
#include <stdlib.h>

static inline uint64_t rng_next(uint64_t *s) {
    /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static inline long arg_long(int argc, char **argv, int i, long dflt) {
    return argc > i ? strtol(argv[i], NULL, 10) : dflt;
}
#endif
