/* A live block over the old starts of 200 dead blocks that each reached past
 * where it is written: a small block pushes each big one 32 bytes further up,
 * then the small ones are freed and the big block after them begins below all
 * those old starts (fast bins off, so the freed space coalesces). */
#include <malloc.h>
#include <stdlib.h>

int main(void) {
    mallopt(M_MXFAST, 0);
    // use up the free holes small blocks would be taken from
    static char *pad[4096];
    for (int i = 0; i < 4096; i++)
        pad[i] = malloc(16);
    char *keep[200];
    for (int r = 0; r < 200; r++) {
        keep[r] = malloc(16); // @small
        char *big = malloc(60000); // @old
        big[59000] = 1; // @old-store
        free(big);
    }
    long sum = 0;
    for (int r = 0; r < 200; r++) {
        sum += keep[r][0];
        free(keep[r]);
    }
    char *last = malloc(60000); // @last
    for (int i = 0; i < 100; i++)
        last[59000 - i] = (char)i; // @last-store
    free(last);
    for (int i = 0; i < 4096; i++)
        free(pad[i]);
    return (int)(sum & 1);
}
