/* Short loops the runtime records as runs (a few bytes standing for hundreds of
 * events), plain stores and memcpy pairs (two ranges in one buffer write): a
 * thread's time stamps must still come at least every 4,096 events. */
#include <string.h>

static long a[512];
static char src[64], dst[64];

int main(int argc, char **argv) {
    (void)argv;
    long t = 0;
    for (int r = 0; r < 3000; r++) {
        for (int i = 0; i < 300; i++)
            a[i] += r; // @run
        memcpy(dst, src + (r & 7), (size_t)(r & 15) + argc); // @copy
        t += a[r & 511];
    }
    return (int)(t & 1) + dst[3];
}
