// Loops of every shape memlens's pass records as runs (crates/rt/src/loops.rs),
// and some it must leave alone. tests: crates/cli/tests/e2e/loops.rs, which
// records it with runs on and off and compares the two event for event, and
// checks the marked lines' bytes against what the code does.
//
// usage: loops N THREADS   (N elements, THREADS threads running the same loops)
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct particle {
    float x, y, z;
    int id;
};

static long n;
static volatile long sink;
static volatile unsigned zero; // keeps constants out of the loops' bounds

// noinline: each loop is its own function, so the trip count is not folded away
__attribute__((noinline)) static double sum(const double *a, long len) {
    double s = 0;
    for (long i = 0; i < len; i++)
        s += a[i]; // @sum
    return s;
}

__attribute__((noinline)) static void scale(double *dst, const double *src, long len, double k) {
    for (long i = 0; i < len; i++)
        dst[i] = k * src[i]; // @scale
}

// Backwards, stride -2.
__attribute__((noinline)) static void back(int *a, long len) {
    for (long i = len - 1; i >= 0; i -= 2)
        a[i] += 1; // @back
}

// A loop-invariant address read and written every iteration (*acc may alias a).
__attribute__((noinline)) static void accumulate(long *acc, const long *a, long len) {
    for (long i = 0; i < len; i++)
        *acc += a[i]; // @accumulate
}

// A field of an array of structs (stride 16).
__attribute__((noinline)) static void fields(struct particle *p, long len) {
    for (long i = 0; i < len; i++)
        p[i].y = p[i].x + 1.0f; // @fields
}

// Bytes and halves.
__attribute__((noinline)) static void narrow(uint8_t *b, uint16_t *h, long len) {
    for (long i = 0; i < len; i++)
        h[i] = (uint16_t)(b[i] * 3); // @narrow
}

// In place: each iteration reads what the previous one wrote.
__attribute__((noinline)) static void prefix(long *a, long len) {
    for (long i = 1; i < len; i++)
        a[i] += a[i - 1]; // @prefix
}

// Unsigned trip count that wraps the index type's range (i != end).
__attribute__((noinline)) static void wrap(char *c, unsigned from, unsigned to) {
    for (unsigned i = from; i != to; i++)
        *c++ = (char)i; // @wrap
}

// Early exits: a search (the exit before the latch) and an insertion sort's shift,
// which stops at the array's start or at a smaller element (two exits, the last
// iteration leaving after its load).
__attribute__((noinline)) static long find(const long *a, long len, long x) {
    long i = 0;
    while (i < len && a[i] != x) // @find
        i++;
    return i;
}

__attribute__((noinline)) static void insertion(int *a, long len) {
    for (long i = 1; i < len; i++) {
        int x = a[i];
        long j = i - 1;
        while (j >= 0 && a[j] > x) {
            a[j + 1] = a[j]; // @shift
            j--;
        }
        a[j + 1] = x;
    }
}

// An exit by a switch.
__attribute__((noinline)) static long upto(const long *a, long len) {
    long s = 0;
    for (long i = 0; i < len; i++) {
        switch (a[i] & 3) { // @upto
        case 0:
        case 1:
            s += a[i] >> 2;
            break;
        case 2:
            s ^= 5;
            break;
        default:
            return s;
        }
    }
    return s;
}

// Not a run: where it stores depends on the data.
__attribute__((noinline)) static long branchy(long *out, const long *a, long len) {
    long k = 0;
    for (long i = 0; i < len; i++)
        if (a[i] % 3 == 0)
            out[k++] = a[i]; // @branchy
    return k;
}

// A loop over a global array (filled by main before the threads start).
static long table[512];
__attribute__((noinline)) static long total(void) {
    long t = 0;
    for (long i = 0; i < 512; i++)
        t += table[i]; // @table
    return t;
}

// A loop in an inlined function, twice.
static inline void fill(int *a, long len, int v) {
    for (long i = 0; i < len; i++)
        a[i] = v; // @fill
}

struct work {
    long len;
    double *d, *e;
    int *ia;
    long *la, acc;
    struct particle *p;
    uint8_t *b;
    uint16_t *h;
    char c[1024];
};

static void *run(void *arg) {
    struct work *w = arg;
    long len = w->len;
    for (long i = 0; i < len; i++) {
        w->d[i] = (double)i;
        w->la[i] = i;
        w->b[i] = (uint8_t)i;
        w->p[i].x = (float)i;
    }
    // trip counts 0, 1, 2, 3, 4 and len
    long trips[] = {0, 1, 2, 3, 4, len};
    double s = 0;
    for (int t = 0; t < 6; t++)
        s += sum(w->d, trips[t]);
    scale(w->e, w->d, len, 0.5);
    back(w->ia, len);
    accumulate(&w->acc, w->la, len);
    fields(w->p, len);
    narrow(w->b, w->h, len);
    prefix(w->la, len);
    wrap(w->c, 4294967290u + zero, 6u + zero);
    s += (double)branchy(w->e ? (long *)w->e : 0, w->la, len);
    sink = find(w->la, len, w->la[len / 3]) + find(w->la, len, -1) + upto(w->la, len);
    for (long i = 0; i < len && i < 300; i++)
        w->ia[i] = (int)((i * 7919) % 301);
    insertion(w->ia, len < 300 ? len : 300);
    fill(w->ia, len, 7);
    fill(w->ia, len / 2, 9);
    sink = (long)s + w->acc + total();
    return NULL;
}

int main(int argc, char **argv) {
    n = argc > 1 ? atol(argv[1]) : 1000;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    pthread_t tid[16];
    struct work w[16];
    if (threads < 1 || threads > 16)
        return 2;
    for (int t = 0; t < threads; t++) {
        w[t].len = n;
        w[t].d = calloc(n, sizeof(double));
        w[t].e = calloc(n, sizeof(double));
        w[t].ia = calloc(n, sizeof(int));
        w[t].la = calloc(n, sizeof(long));
        w[t].p = calloc(n, sizeof(struct particle));
        w[t].b = calloc(n, 1);
        w[t].h = calloc(n, 2);
        w[t].acc = 0;
        if (!w[t].d || !w[t].e || !w[t].ia || !w[t].la || !w[t].p || !w[t].b || !w[t].h)
            return 3;
    }
    for (long i = 0; i < 512; i++)
        table[i] = 3 * i;
    for (int t = 0; t < threads; t++)
        pthread_create(&tid[t], NULL, run, &w[t]);
    for (int t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    printf("loops n=%ld threads=%d sink=%ld\n", n, threads, (long)sink);
    return 0;
}
