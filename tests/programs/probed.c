/* A long-running program for live probes (crates/cli/tests/e2e/live_probes.rs).
 * `probed N`: prints "ready PID", then each SIGUSR1 runs exactly N calls of work()
 * and one rec(4) (5 nested calls) in the main thread, each SIGUSR2 has each of 8
 * threads (created at start) run N calls of work(); after each phase one line. SIGHUP
 * ends it. `probed --once N`: N calls of work() and rec(4), one line, exit 0.
 * `probed --fork N`: a forked child makes N calls of work(), forks a grandchild
 * that makes 3N and exits, then execs `probed --once N`; the parent waits for it, makes 2N calls, one line, and ends with _exit(0). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 8

/* noipa: gcc must neither inline nor drop the calls. */
__attribute__((noipa)) long work(long x) {
    long y = x * x; // @probe-line
    return y + 1; // @probe-ret
}

__attribute__((noipa)) long rec(int d) {
    volatile int guard = d;
    if (guard == 0)
        return 1;
    long r = rec(guard - 1);
    __asm__ volatile("" ::: "memory");
    return r + 1;
}

static long n_calls;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int gen, done;
static long totals[THREADS];

static void *worker(void *arg) {
    long me = (long)arg;
    int seen = 0;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (gen == seen)
            pthread_cond_wait(&cv, &mu);
        seen = gen;
        pthread_mutex_unlock(&mu);
        long t = 0;
        for (long i = 0; i < n_calls; i++)
            t += work(i);
        pthread_mutex_lock(&mu);
        totals[me] = t;
        done++;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "--once") == 0) {
        long n = atol(argv[2]), t = 0;
        for (long i = 0; i < n; i++)
            t += work(i);
        t += rec(4);
        printf("once %ld\n", t);
        return 0;
    }
    if (argc > 2 && strcmp(argv[1], "--fork") == 0) {
        long n = atol(argv[2]), t = 0;
        fflush(stdout);
        pid_t c = fork();
        if (c == 0) {
            for (long i = 0; i < n; i++)
                t += work(i);
            /* a grandchild that ends with exit(): its runtime must not send its
               values on the parent's connection */
            pid_t g = fork();
            if (g == 0) {
                for (long i = 0; i < 3 * n; i++)
                    t += work(i);
                exit(t == 42);
            }
            waitpid(g, NULL, 0);
            char *args[] = {argv[0], "--once", argv[2], NULL};
            execv("/proc/self/exe", args);
            _exit(127);
        }
        int st = 0;
        waitpid(c, &st, 0);
        for (long i = 0; i < 2 * n; i++)
            t += work(i);
        printf("parent %ld child %d\n", t, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        fflush(stdout);
        /* no exit handlers: the collector's last values are what it read, never
           what a child of ours said at its exit */
        usleep(300000);
        _exit(0);
    }
    n_calls = argc > 1 ? atol(argv[1]) : 1000;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t th[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&th[i], NULL, worker, (void *)i);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    for (int phase = 1;; phase++) {
        int sig;
        sigwait(&set, &sig);
        if (sig == SIGHUP) {
            printf("bye\n");
            return 0;
        }
        long t = 0;
        if (sig == SIGUSR1) {
            for (long i = 0; i < n_calls; i++)
                t += work(i);
            t += rec(4);
        } else {
            pthread_mutex_lock(&mu);
            gen++;
            pthread_cond_broadcast(&cv);
            while (done < THREADS * gen)
                pthread_cond_wait(&cv, &mu);
            for (int i = 0; i < THREADS; i++)
                t += totals[i];
            pthread_mutex_unlock(&mu);
        }
        printf("phase %d %s %ld\n", phase, sig == SIGUSR1 ? "main" : "threads", t);
        fflush(stdout);
    }
}
