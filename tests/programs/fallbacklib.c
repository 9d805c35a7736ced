/* A shared library built with `memlens cc -shared`, loaded by a program built
 * without memlens (its weak fallbacks run: atomics and memset still work) and by
 * one built with memlens (recorded): builds.rs `shared_libraries_load_without_memlens`. */
#include <stdatomic.h>
#include <string.h>

static _Atomic long counter;
static long table[1024];

long bump(int n) {
    char buf[64];
    long s = 0;
    for (int i = 0; i < n; i++)
        atomic_fetch_add(&counter, 2); // @rmw
    memset(buf, 1, sizeof buf);
    for (int i = 0; i < 64; i++)
        s += ((volatile char *)buf)[i];
    // a loop recorded as a run: its runtime entry and switch are weak fallbacks too
    table[n & 1023] = n; // (so the table is not constant zeros, outside what is summed)
    for (int i = 0; i < n && n < 1024; i++)
        s += table[i]; // @run
    return atomic_load(&counter) + s;
}
