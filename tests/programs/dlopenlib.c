/* Opens libtraced.so (argv[1]) with dlopen and calls lib_sum(1..n) and lib_mix once:
 * calls.rs `functions_of_dlopened_libraries_are_traced` lists only lib_sum. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    long (*sum)(long) = (long (*)(long))dlsym(h, "lib_sum");
    long (*mix)(long, long, long) = (long (*)(long, long, long))dlsym(h, "lib_mix");
    long n = atol(argv[2]), total = 0;
    for (long i = 1; i <= n; i++)
        total += sum(i);
    printf("total %ld mix %ld\n", total, mix(1, 2, 3));
    return 0;
}
