/* Every class of memory access a compiler can leave in an optimised program,
 * one marked line each (`// @name`), for the fidelity tests
 * (crates/cli/tests/e2e/fidelity.rs): memlens cc with clang and gcc at -O0, -O2
 * and -O3 -march=x86-64-v3 must record the bytes each line really reads and
 * writes, the same as --dbi sees in a plain build of this file.
 * Usage: fidelity [avx512]  (the AVX-512 part runs only when asked and supported) */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 1024
#define REPS 1000

int in_data[N];
float fa[N], fb[N], fc[N];
int idx[N];
int gout[N];
struct big { long v[12]; } gsrc, gdst;
struct bits { unsigned a : 3, b : 7, c : 22; } gbits[64];
long double gld[64];
__int128 gi128[64];
static const int table[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
volatile int sink;

__attribute__((noinline)) int local_array(const int *in) {
  int a[256];
  for (int i = 0; i < 256; i++)
    a[i] = in[i] * 3; // @local_fill
  int s = 0;
  for (int k = 0; k < REPS; k++)
    s += a[(k * 7) & 255]; // @local_read
  return s;
}

struct pt { int x, y, z, w; };
__attribute__((noinline)) int local_struct(const int *in) {
  struct pt p[8];
  for (int i = 0; i < 8; i++) {
    p[i].x = in[i]; // @struct_x
    p[i].w = in[i + 8]; // @struct_w
  }
  int s = 0;
  for (int k = 0; k < 100; k++)
    s += p[k & 7].x - p[(k + 3) & 7].w; // @struct_read
  return s;
}

__attribute__((noinline)) void struct_copy(void) {
  gdst = gsrc; // @struct_copy
}

__attribute__((noinline)) int local_memcpy(const int *in) {
  char buf[64], buf2[64];
  memset(buf, 1, sizeof buf); // @local_memset
  memcpy(buf2, in, sizeof buf2); // @local_memcpy
  int s = 0;
  for (int i = 0; i < 64; i += 16)
    s += buf[i] + buf2[i]; // @local_memcpy_read
  return s;
}

__attribute__((noinline)) void vadd(void) {
  for (int i = 0; i < N; i++)
    fc[i] = fa[i] + fb[i]; // @vadd
}

__attribute__((noinline, target("avx2"))) void masked(void) {
  __m256i m = _mm256_setr_epi32(-1, -1, 0, -1, 0, 0, -1, -1);
  for (int i = 0; i < N; i += 8) {
    __m256 v = _mm256_maskload_ps(&fa[i], m); // @maskload
    _mm256_maskstore_ps(&fc[i], m, v); // @maskstore
  }
}

__attribute__((noinline, target("avx2"))) void gather(void) {
  for (int i = 0; i < N; i += 8) {
    __m256i ix = _mm256_loadu_si256((const __m256i *)&idx[i]); // @gather_idx
    __m256i g = _mm256_i32gather_epi32(in_data, ix, 4); // @gather
    _mm256_storeu_si256((__m256i *)&gout[i], g); // @gather_store
  }
}

__attribute__((noinline)) unsigned bitfields(void) {
  unsigned s = 0;
  for (int i = 0; i < 64; i++) {
    gbits[idx[i] & 63].b = i; // @bitfield_store
    s += gbits[idx[i + 1] & 63].c; // @bitfield_load
  }
  return s;
}

__attribute__((noinline)) long double longdouble(void) {
  long double s = 0;
  for (int i = 0; i < 64; i++)
    s += gld[i]; // @long_double
  return s;
}

__attribute__((noinline)) void int128(void) {
  for (int i = 1; i < 64; i++)
    gi128[i] = gi128[i - 1] * 3 + 1; // @int128
}

__attribute__((noinline)) int constant_table(void) {
  int s = 0;
  for (int i = 0; i < 256; i++)
    s += table[(i * 5) & 15]; // @const_table
  return s;
}

__attribute__((noinline, target("avx512f"))) void avx512(void) {
  for (int i = 0; i < N; i += 16) {
    __m512 v = _mm512_loadu_ps(&fa[i]); // @avx512_load
    _mm512_mask_storeu_ps(&fc[i], (__mmask16)0x0f0f, v); // @avx512_mask_store
  }
}

int main(int argc, char **argv) {
  for (int i = 0; i < N; i++) {
    in_data[i] = i;
    fa[i] = (float)i;
    fb[i] = 2.0f * i;
    idx[i] = (i * 37) % N;
  }
  long s = local_array(in_data);
  s += local_struct(in_data);
  struct_copy();
  s += local_memcpy(in_data);
  vadd();
  masked();
  gather();
  s += bitfields();
  s += (long)longdouble();
  int128();
  s += constant_table();
  if (argc > 1 && strcmp(argv[1], "avx512") == 0 && __builtin_cpu_supports("avx512f"))
    avx512();
  sink = (int)s;
  printf("%ld %d %f\n", s, gout[5], (double)fc[9]);
  return 0;
}
