/* N stores, then a write through a null pointer. */
#include <stdio.h>
volatile int g;
int *volatile nowhere;
int main(void) {
    for (int i = 0; i < 5000; i++) g = i;
    printf("g_addr=%p\n", (void *)&g);
    fflush(stdout);
    *nowhere = 1;
    return 0;
}
