// Shared library with thread-locals, reached through __tls_get_addr.
__thread long lib_tls[4];
__thread int lib_tls_count;

void lib_tls_touch(long v) {
    volatile long *p = lib_tls;
    p[2] = v; // @lib-tls
    volatile int *c = &lib_tls_count;
    *c = *c + 1; // @lib-tls-count
}
