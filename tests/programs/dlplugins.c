/* Opens the plugins argv[1] and argv[2] (dlplugin.c) with dlopen and calls, with
 * n = argv[3]: plugin_step(i, k, 7) and plugin_untraced(i) for i < n in plugin k;
 * plugin 0 is then closed, opened again and called once more, plugin_step(n, 0, 7).
 * calls.rs `listed_functions_of_dlopened_libraries_are_found_by_name`. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef long (*step_fn)(long, long, long);
typedef long (*untraced_fn)(long);

static void *open_plugin(const char *path, step_fn *step, untraced_fn *untraced) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        exit(1);
    }
    *step = (step_fn)dlsym(h, "plugin_step");
    *untraced = (untraced_fn)dlsym(h, "plugin_untraced");
    if (!*step || !*untraced) {
        fprintf(stderr, "%s\n", dlerror());
        exit(1);
    }
    return h;
}

int main(int argc, char **argv) {
    if (argc < 4)
        return 2;
    long n = atol(argv[3]), total = 0;
    step_fn step;
    untraced_fn untraced;
    for (long k = 0; k < 2; k++) {
        void *h = open_plugin(argv[1 + k], &step, &untraced);
        for (long i = 0; i < n; i++)
            total += step(i, k, 7) + untraced(i);
        if (k == 0) {
            dlclose(h);
            h = open_plugin(argv[1], &step, &untraced);
            total += step(n, 0, 7);
        }
    }
    printf("total %ld\n", total);
    return 0;
}
