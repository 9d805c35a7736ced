// Tail calls (step and hop jump to each other) under --dbi: the call stack the
// namer rebuilds must stay as deep as the program's, whatever the input size.
#include <stdio.h>
#include <stdlib.h>
volatile long sink;
__attribute__((noinline)) long leaf(long x) { sink = x; return x + 1; }
__attribute__((noinline)) long step(long x);
__attribute__((noinline)) long hop(long x) { sink = x; return step(x + 1); }
__attribute__((noinline)) long step(long x) { if (x & 1) return hop(x); return leaf(x); }
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000, s = 0;
    for (long i = 0; i < n; i++) s += step(i);
    printf("%ld\n", s);
    return 0;
}
