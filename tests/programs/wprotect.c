// Write-fault dirty tracking, as garbage collectors do it: a store to a
// read-only page faults, the SIGSEGV handler (traced: it counts the fault) makes
// the page writable, and the store runs again. With --values the store must be
// recorded with the value it wrote (42), not the page's old contents.
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static long *page;
static long faults;

static void on_fault(int sig, siginfo_t *si, void *ctx) {
    (void)sig;
    (void)ctx;
    faults = faults + 1; // @store-faults
    long ps = sysconf(_SC_PAGESIZE);
    mprotect((void *)((unsigned long)si->si_addr & ~(unsigned long)(ps - 1)), ps,
             PROT_READ | PROT_WRITE);
}

int main(void) {
    long ps = sysconf(_SC_PAGESIZE);
    page = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    page[0] = 7; // @store-init
    mprotect(page, ps, PROT_READ);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    struct sigaction back;
    sigaction(SIGSEGV, NULL, &back);
    page[0] = 42; // @store-page
    printf("page %lu value %ld faults %ld own-handler %d\n", (unsigned long)page, page[0], faults,
           back.sa_sigaction == on_fault && (back.sa_flags & SA_SIGINFO) != 0);
    return 0;
}
