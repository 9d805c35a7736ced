/* A user allocator reported through __memlens_custom_alloc/free (what the
 * driver's alloc.in wrappers call), and two functions for MEMLENS_FILTER. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

void __memlens_custom_alloc(int64_t num_idx, int64_t size_idx, int64_t addr_idx,
                            const uint64_t *args6, uint64_t retval, uint64_t pc);
void __memlens_custom_free(const uint64_t *args6, int64_t addr_idx, uint64_t pc);

volatile int hot_var, cold_var;

__attribute__((noinline)) void hot(void) {
    for (int i = 0; i < 100; i++) hot_var = i;
}

__attribute__((noinline)) void cold(void) {
    for (int i = 0; i < 100; i++) cold_var = i;
}

int main(void) {
    void *p = calloc(3, 16);
    uint64_t args[6] = {3, 16, 0, 0, 0, 0};
    __memlens_custom_alloc(0, 1, -1, args, (uint64_t)p, 0x1234);
    uint64_t fargs[6] = {(uint64_t)p, 0, 0, 0, 0, 0};
    __memlens_custom_free(fargs, 0, 0x5678);
    free(p);
    hot();
    cold();
    printf("p=%p hot=%p cold=%p\n", p, (void *)&hot_var, (void *)&cold_var);
    return 0;
}
