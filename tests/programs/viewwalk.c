// Viewer index test program: two threads, one after the other, walk a 64 KiB array
// with different strides, so cache lines enter and leave the working set; a memset
// writes a range over 64 lines and some loads cross a line boundary.
#include <pthread.h>
#include <string.h>

static char buf[1 << 16] __attribute__((aligned(64)));
static volatile long sink;

static void *walk(void *arg) {
    long step = (long)arg;
    for (long i = 0; i < 4000; i++) {
        long k = (i * step) % (long)(sizeof buf - 16);
        if (i % 5 == 0)
            ((volatile char *)buf)[k] = (char)i;
        else
            sink += *(volatile long *)(buf + (k & ~3L)); // crosses a line when k%64 > 56
    }
    return 0;
}

int main(void) {
    memset(buf, 1, 4096);
    walk((void *)577);
    pthread_t t;
    pthread_create(&t, 0, walk, (void *)4099);
    pthread_join(t, 0);
    return 0;
}
