/* A shared library (built with `memlens cc -shared`) whose functions
 * `record --trace-calls` traces: calls.rs `functions_of_shared_libraries_are_traced`. */
long lib_mix(long a, long b, long c) { return a * 100 + b * 10 + c; }

long lib_sum(long n) {
    long s = 0;
    for (long i = 1; i <= n; i++)
        s += i;
    return s;
}
