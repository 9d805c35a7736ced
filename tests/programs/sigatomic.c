// The main thread adds 1 to `x` with atomics until it has handled N SIGUSR1s,
// which a second thread keeps sending; the handler adds 1 to `x` too (atomics are
// async-signal-safe). Traced, it must finish like the untraced program, with
// x = its own additions + the signals handled.
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#define N 300

static long x;
static long handled;
static int done;
static pthread_t main_thread;

static void on_usr1(int sig) {
    (void)sig;
    __atomic_fetch_add(&x, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&handled, 1, __ATOMIC_RELAXED);
}

static void *pester(void *arg) {
    (void)arg;
    while (!__atomic_load_n(&done, __ATOMIC_RELAXED))
        pthread_kill(main_thread, SIGUSR1);
    return NULL;
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    main_thread = pthread_self();
    pthread_t t;
    pthread_create(&t, NULL, pester, NULL);
    long n = 0;
    while (__atomic_load_n(&handled, __ATOMIC_RELAXED) < N) {
        __atomic_fetch_add(&x, 1, __ATOMIC_SEQ_CST);
        n++;
    }
    __atomic_store_n(&done, 1, __ATOMIC_RELAXED);
    pthread_join(t, NULL);
    long h = __atomic_load_n(&handled, __ATOMIC_RELAXED);
    printf("%s\n", x == n + h ? "ok" : "lost");
    return 0;
}
