/* The recorder's per-access encoding, measured apart from memlens (issue 24):
 * the vectorised 5-point stencil of bench/programs/stencil.c, written with SSE2
 * intrinsics so that every 16-byte load and store is one event, as `memlens cc`
 * records it. Each event is encoded as the runtime's fast path does (a tag, the
 * pc delta as a varint, the address delta against the pc's prediction slot as a
 * varint into a side buffer, the busy mark, the class counter) into a buffer
 * that is reset when full, with no writer thread and no compression.
 *   MODE 0: the encoding inlined at every access (what an LLVM pass could emit);
 *   MODE 1: the same encoding behind a call (what the TSan ABI gives today);
 *   MODE 2: a bare 8-byte store per access (a floor for any inline scheme).
 * bench/encode-proto.sh builds and times the three. usage: stencil_encode [n] [iters] */
#ifndef MODE
#define MODE 0
#endif
#if MODE == 1
#define ACC_ATTR __attribute__((noinline))
#else
#define ACC_ATTR static inline __attribute__((always_inline))
#endif
#include <emmintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include "../programs/common.h"
#define SLOTS 1024
struct ts { uint32_t count[4]; uint64_t last[SLOTS]; uint64_t prev_pc; uint8_t *side; uint64_t pos, limit; };
static __thread struct ts T;
static uint8_t *opbuf, *sidebuf; static volatile uint8_t watch_on;
__attribute__((noinline)) static void slow(uint8_t tag, uint64_t addr) {
  if (!opbuf) { opbuf = malloc(1<<16); sidebuf = malloc(1<<17); }
  T.pos = (uint64_t)opbuf; T.limit = (uint64_t)opbuf + (1<<16) - 32; T.side = sidebuf;
  (void)tag; (void)addr;
}
static inline __attribute__((always_inline)) uint8_t *put(uint8_t *p, uint64_t v) {
  while (v >= 0x80) { *p++ = (uint8_t)v | 0x80; v >>= 7; }
  *p++ = (uint8_t)v; return p;
}
#if MODE == 2
ACC_ATTR void acc(uint8_t tag, const void *a) {
  struct ts *t = &T;
  uint64_t p = t->pos;
  if (__builtin_expect(p >= t->limit, 0)) { slow(tag, (uint64_t)a); return; }
  *(uint64_t *)p = (uint64_t)a;
  t->pos = p + 8;
}
#else
ACC_ATTR void acc(uint8_t tag, const void *a) {
  uint64_t addr = (uint64_t)a, pc;
#if MODE == 1
  pc = (uint64_t)__builtin_return_address(0); /* the call's return address, as the runtime records */
#else
  __asm__ volatile("lea 0(%%rip), %0" : "=r"(pc)); /* this access's own address */
#endif
  if (__builtin_expect(watch_on, 0)) { slow(tag, addr); return; }
  struct ts *t = &T;
  uint64_t p = t->pos;
  if (__builtin_expect(p >= t->limit, 0)) { slow(tag, addr); return; }
  __atomic_store_n(&t->pos, p | (1ull<<63), __ATOMIC_RELAXED);
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  uint8_t *q = (uint8_t *)p; *q = tag;
  int64_t d = (int64_t)(pc - t->prev_pc); t->prev_pc = pc;
  q = put(q + 1, (uint64_t)((d << 1) ^ (d >> 63)));
  uint64_t *s = &t->last[(pc * 0x9e3779b97f4a7c15ull) >> 54];
  int64_t e = (int64_t)(addr - *s); *s = addr;
  t->side = put(t->side, (uint64_t)((e << 1) ^ (e >> 63)));
  t->count[tag & 1]++;
  __atomic_store_n(&t->pos, (uint64_t)q, __ATOMIC_RELEASE);
}
#endif
int main(int argc, char **argv) {
    long n = arg_long(argc, argv, 1, 1024);
    long iters = arg_long(argc, argv, 2, 60);
    double *u = malloc(sizeof(double) * n * n);
    double *v = malloc(sizeof(double) * n * n);
    uint64_t s = 7;
    for (long i = 0; i < n * n; i++)
        u[i] = v[i] = (double)(rng_next(&s) % 100);
    for (long t = 0; t < iters; t++) {
        for (long i = 1; i < n - 1; i++) {
            long j = 1;
            for (; j + 2 <= n - 1; j += 2) {
                double *c = &u[i*n+j];
                acc(4, c); __m128d a = _mm_loadu_pd(c);
                acc(4, c - n); a = _mm_add_pd(a, _mm_loadu_pd(c - n));
                acc(4, c + n); a = _mm_add_pd(a, _mm_loadu_pd(c + n));
                acc(4, c - 1); a = _mm_add_pd(a, _mm_loadu_pd(c - 1));
                acc(4, c + 1); a = _mm_add_pd(a, _mm_loadu_pd(c + 1));
                acc(0x14, &v[i*n+j]); _mm_storeu_pd(&v[i*n+j], _mm_mul_pd(a, _mm_set1_pd(0.2)));
            }
            for (; j < n - 1; j++) {
                acc(3, &u[i*n+j]); acc(3, &v[i*n+j]);
                v[i * n + j] = 0.2 * (u[i * n + j] + u[(i - 1) * n + j] + u[(i + 1) * n + j] + u[i * n + j - 1] + u[i * n + j + 1]);
            }
        }
        double *tmp = u; u = v; v = tmp;
    }
    double check = 0.0;
    for (long i = 0; i < n * n; i += 3) check += u[i];
    printf("stencil n=%ld iters=%ld checksum=%.6e\n", n, iters, check);
    return 0;
}
