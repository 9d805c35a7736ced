/* Sums the bytes of argv[1]: loads of the argument strings, which the kernel
   places at the top of the main thread's stack (e2e names::). */
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    const char *p = argv[1];
    long s = 0;
    int c;
    while ((c = *p++) != 0)
        s += c;
    printf("%ld\n", s);
    return 0;
}
