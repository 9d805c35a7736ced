// Takes every descriptor it can (dup2 onto 3..20 and onto the top 128 below its
// RLIMIT_NOFILE), counts the open ones, closes them all (closefrom, close_range or
// a close loop, by argv[2]), counts again, then writes "ok" to its file argv[1].
// The trace descriptor must stay out of its way: same output traced or not, a
// 2-byte file, and the trace keeps both store loops.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define N 1000

volatile int g;

static int open_fds(int top) {
    int n = 0;
    for (int fd = 3; fd < top; fd++)
        if (fcntl(fd, F_GETFD) != -1)
            n++;
    return n;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    int top = rl.rlim_cur > 65536 ? 65536 : (int)rl.rlim_cur;
    for (int i = 0; i < N; i++)
        g = i; // @store-before
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        perror("open");
        return 1;
    }
    int taken = 0;
    for (int t = 3; t < top; t++) {
        if (t != fd && (t <= 20 || t >= top - 128)) {
            if (dup2(fd, t) != t) {
                perror("dup2");
                return 1;
            }
            taken++;
        }
    }
    printf("dup2 %d, open %d\n", taken, open_fds(top));
    if (strcmp(argv[2], "closefrom") == 0)
        closefrom(3);
    else if (strcmp(argv[2], "close_range") == 0)
        close_range(3, ~0U, 0);
    else
        for (int t = 3; t < top; t++)
            close(t);
    printf("after %s: open %d\n", argv[2], open_fds(top));
    int again = open(argv[1], O_WRONLY | O_APPEND);
    printf("reopened as %d\n", again);
    if (write(again, "ok", 2) != 2)
        return 1;
    close(again);
    for (int i = 0; i < N; i++)
        g = i; // @store-after
    return 0;
}
