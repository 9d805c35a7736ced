// Soak: T threads, each until `stop` or K iterations: a seq_cst fetch_add on
// `acnt`, a compare-exchange loop on `ccnt`, a mutex-protected `mcnt = mcnt + 1`,
// a relaxed store of its progress into `prog[t]`; every 64 iterations it sends
// SIGUSR1 to its neighbour, and thread 0 forks a child that counts to 100 and
// exits. Prints the counters' addresses and final values, the number of children
// that failed. Usage: soak T K SECS.
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXT 128

static long acnt, ccnt, mcnt;
static long prog[MAXT];
static int stop;
static long forks, failed_children;
static volatile long child_cnt;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t start, done;
static pthread_t th[MAXT];
static int T;
static long K;

// Traced: its events come between the interrupted thread's (and may come between
// a store's callback and the store). No atomics: an atomic here could wait for
// the stripe lock the interrupted atomic of the same thread holds.
static __thread long tsigs;
static void on_usr1(int sig) {
    (void)sig;
    tsigs = tsigs + 1;
}

static void fork_child(void) {
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; i < 100; i++)
            child_cnt = child_cnt + 1;
        _exit(child_cnt == 100 ? 0 : 1);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        __atomic_fetch_add(&failed_children, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&forks, 1, __ATOMIC_RELAXED);
}

static void *worker(void *arg) {
    int t = (int)(long)arg;
    pthread_barrier_wait(&start); // every th[] is set before the first signal
    for (long i = 0; i < K && !__atomic_load_n(&stop, __ATOMIC_RELAXED); i++) {
        __atomic_fetch_add(&acnt, 1, __ATOMIC_SEQ_CST);
        long c = __atomic_load_n(&ccnt, __ATOMIC_RELAXED);
        while (!__atomic_compare_exchange_n(&ccnt, &c, c + 1, 1, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED))
            ;
        pthread_mutex_lock(&mu);
        mcnt = mcnt + 1;
        pthread_mutex_unlock(&mu);
        __atomic_store_n(&prog[t], i + 1, __ATOMIC_RELAXED);
        if (i % 64 == 63) {
            pthread_kill(th[(t + 1) % T], SIGUSR1);
            if (t == 0)
                fork_child();
        }
    }
    pthread_barrier_wait(&done);
    return NULL;
}

int main(int argc, char **argv) {
    T = argc > 1 ? atoi(argv[1]) : 64;
    K = argc > 2 ? atol(argv[2]) : 300;
    int secs = argc > 3 ? atoi(argv[3]) : 60;
    if (T < 1 || T > MAXT)
        return 2;
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    pthread_barrier_init(&start, NULL, T);
    pthread_barrier_init(&done, NULL, T + 1);
    printf("addr %lu %lu %lu %lu\n", (unsigned long)&acnt, (unsigned long)&ccnt,
           (unsigned long)&mcnt, (unsigned long)&prog[0]);
    fflush(stdout);
    for (int t = 0; t < T; t++)
        pthread_create(&th[t], NULL, worker, (void *)(long)t);
    // the workers stop at K iterations or after `secs`, whichever comes first
    for (int s = 0; s < secs * 10; s++) {
        int left = 0;
        for (int t = 0; t < T; t++)
            left += __atomic_load_n(&prog[t], __ATOMIC_RELAXED) < K;
        if (!left)
            break;
        usleep(100000);
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    pthread_barrier_wait(&done);
    for (int t = 0; t < T; t++)
        pthread_join(th[t], NULL);
    printf("final %ld %ld %ld\n", acnt, ccnt, mcnt);
    for (int t = 0; t < T; t++)
        printf("prog %d %ld\n", t, prog[t]);
    printf("forks %ld failed %ld\n", forks, failed_children);
    return 0;
}
