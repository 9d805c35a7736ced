/* Stores, then execs argv[1] (if given); on failure, more stores and exit 7. */
#include <stdio.h>
#include <unistd.h>
volatile int g;
int main(int argc, char **argv) {
    for (int i = 0; i < 100; i++) g = i;
    if (argc > 1) {
        execv(argv[1], argv + 1);
        for (int i = 0; i < 50; i++) g = i;
        printf("exec failed\n");
        return 7;
    }
    return 0;
}
