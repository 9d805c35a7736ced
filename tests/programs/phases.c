// The viewer's call tree of a time range: two phases, f() then g(), each with a
// known number of accesses (f: NF loads, g: NG stores; volatile, so -O2 keeps
// every one), and one store in main between them.
#if defined(__clang__)
#define NOIPA __attribute__((noinline))
#else
#define NOIPA __attribute__((noipa))
#endif

#define NF 3000
#define NG 2000

static long a[NF];
static long b[NG];
volatile long sink;

NOIPA long f(const volatile long *p, int n) {
    long s = 0;
    for (int i = 0; i < n; i++)
        s += p[i]; // @f-load
    return s;
}

NOIPA void g(volatile long *p, int n) {
    for (int i = 0; i < n; i++)
        p[i] = i; // @g-store
}

int main(void) {
    sink = f(a, NF); // @main-store
    g(b, NG);
    return 0;
}
