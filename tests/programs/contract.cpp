// Calls every allocation and synchronisation entry point the two recorders
// interpose (crates/contract's table), a known number of times, for e2e contract.rs.
//
// Allocations: entry point number E (table order) is called REPS times with size
// 1000 + 16 * E, and each block is released by the entry point the table pairs
// it with, so a trace's counts per (kind, size) are exact per entry point.
//
// Synchronisation: for every acquire-like call, the worker stores slot[i] and
// releases; the main thread (told through a pipe, which neither recorder sees)
// takes the object with that call and loads slot[i]. A recorder that misses the
// call puts the load before the store in `dump --merged`.
#include <new>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <malloc.h>
#include <pthread.h>
#include <semaphore.h>
#include <time.h>
#include <unistd.h>

enum { REPS = 3 };

static size_t sz(int e) { return 1000 + 16 * e; }

__attribute__((noinline)) static void use(void *p) {
  asm volatile("" ::"r"(p) : "memory");
  if (p) memset(p, 1, 8);
}

static void allocations() {
  for (int r = 0; r < REPS; r++) {
    void *p;
    p = malloc(sz(0)); use(p); free(p);                                   // malloc, free
    p = calloc(1, sz(1)); use(p); free(p);                                // calloc
    p = malloc(8); use(p); p = realloc(p, sz(2)); use(p); free(p);        // realloc
    p = malloc(8); use(p); p = reallocarray(p, 1, sz(3)); use(p); free(p); // reallocarray
    if (posix_memalign(&p, 64, sz(5)) == 0) { use(p); free(p); }          // posix_memalign
    p = aligned_alloc(64, sz(6)); use(p); free(p);                        // aligned_alloc
    p = memalign(64, sz(7)); use(p); free(p);                             // memalign
    p = valloc(sz(8)); use(p); free(p);                                   // valloc
    p = pvalloc(sz(9)); use(p); free(p);                                  // pvalloc
    const std::align_val_t al{64};
    // operator new variants 10..17, each released by its matching delete
    p = ::operator new(sz(10)); use(p); ::operator delete(p);
    p = ::operator new[](sz(11)); use(p); ::operator delete[](p);
    p = ::operator new(sz(12), std::nothrow); use(p); ::operator delete(p, std::nothrow);
    p = ::operator new[](sz(13), std::nothrow); use(p); ::operator delete[](p, std::nothrow);
    p = ::operator new(sz(14), al); use(p); ::operator delete(p, al);
    p = ::operator new[](sz(15), al); use(p); ::operator delete[](p, al);
    p = ::operator new(sz(16), al, std::nothrow); use(p); ::operator delete(p, al, std::nothrow);
    p = ::operator new[](sz(17), al, std::nothrow); use(p); ::operator delete[](p, al, std::nothrow);
    // the sized deletes
    p = ::operator new(sz(18)); use(p); ::operator delete(p, sz(18));
    p = ::operator new[](sz(19)); use(p); ::operator delete[](p, sz(19));
    p = ::operator new(sz(20), al); use(p); ::operator delete(p, sz(20), al);
    p = ::operator new[](sz(21), al); use(p); ::operator delete[](p, sz(21), al);
  }
}

// ---- synchronisation ----

enum { SLOTS = 18 };
static volatile int slot[SLOTS];
static int to_main[2], to_worker[2];
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER, dummy = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_spinlock_t spin;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static pthread_barrier_t barrier;
static sem_t sem;
static int flag;

static void tell(int fd) { char c = 1; if (write(fd, &c, 1) != 1) abort(); }
static void wait_for(int fd) { char c; if (read(fd, &c, 1) != 1) abort(); }

static struct timespec later() {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_sec += 10;
  return t;
}

// The worker stamps its clock (an interposed lock) before storing, so a store
// follows every stamp the main thread made.
static void produce(int i) {
  pthread_mutex_lock(&dummy);
  pthread_mutex_unlock(&dummy);
  slot[i] = i + 1;
}

static int got;
static void consume(int i) { got += slot[i]; }

// One step per acquire-like entry point: the worker's part, then the main thread's.
static void *worker(void *) {
  for (int i = 0; i < 11; i++) {
    wait_for(to_worker[0]);
    switch (i) {
    case 0: case 1: case 2:  // mutex lock / trylock / timedlock
      pthread_mutex_lock(&m); produce(i); pthread_mutex_unlock(&m); break;
    case 3: case 4: case 5: case 6: case 7: case 8:  // rwlock read and write, plain/try/timed
      pthread_rwlock_wrlock(&rw); produce(i); pthread_rwlock_unlock(&rw); break;
    case 9: case 10:  // spin lock / trylock
      pthread_spin_lock(&spin); produce(i); pthread_spin_unlock(&spin); break;
    }
    tell(to_main[1]);
  }
  // semaphores: wait / trywait / timedwait
  for (int i = 11; i < 14; i++) {
    wait_for(to_worker[0]);
    produce(i);
    sem_post(&sem);
    tell(to_main[1]);
  }
  // condition variables: wait + signal, timedwait + broadcast
  for (int i = 14; i < 16; i++) {
    wait_for(to_worker[0]);
    pthread_mutex_lock(&m);
    produce(i);
    flag = 1;
    if (i == 14) pthread_cond_signal(&cond); else pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&m);
  }
  produce(16);
  pthread_barrier_wait(&barrier);
  produce(17);
  return nullptr;
}

int main() {
  allocations();
  if (pipe(to_main) || pipe(to_worker)) return 1;
  pthread_spin_init(&spin, 0);
  sem_init(&sem, 0, 0);
  pthread_barrier_init(&barrier, nullptr, 2);
  pthread_t t;
  pthread_create(&t, nullptr, worker, nullptr);
  struct timespec ts;
  for (int i = 0; i < 11; i++) {
    tell(to_worker[1]);
    wait_for(to_main[0]);
    switch (i) {
    case 0: pthread_mutex_lock(&m); consume(i); pthread_mutex_unlock(&m); break;
    case 1: if (pthread_mutex_trylock(&m)) abort(); consume(i); pthread_mutex_unlock(&m); break;
    case 2: ts = later(); if (pthread_mutex_timedlock(&m, &ts)) abort(); consume(i);
      pthread_mutex_unlock(&m); break;
    case 3: pthread_rwlock_rdlock(&rw); consume(i); pthread_rwlock_unlock(&rw); break;
    case 4: if (pthread_rwlock_tryrdlock(&rw)) abort(); consume(i); pthread_rwlock_unlock(&rw); break;
    case 5: ts = later(); if (pthread_rwlock_timedrdlock(&rw, &ts)) abort(); consume(i);
      pthread_rwlock_unlock(&rw); break;
    case 6: pthread_rwlock_wrlock(&rw); consume(i); pthread_rwlock_unlock(&rw); break;
    case 7: if (pthread_rwlock_trywrlock(&rw)) abort(); consume(i); pthread_rwlock_unlock(&rw); break;
    case 8: ts = later(); if (pthread_rwlock_timedwrlock(&rw, &ts)) abort(); consume(i);
      pthread_rwlock_unlock(&rw); break;
    case 9: pthread_spin_lock(&spin); consume(i); pthread_spin_unlock(&spin); break;
    case 10: if (pthread_spin_trylock(&spin)) abort(); consume(i); pthread_spin_unlock(&spin); break;
    }
  }
  for (int i = 11; i < 14; i++) {
    tell(to_worker[1]);
    wait_for(to_main[0]);
    if (i == 11) sem_wait(&sem);
    if (i == 12 && sem_trywait(&sem)) abort();
    if (i == 13) { ts = later(); if (sem_timedwait(&sem, &ts)) abort(); }
    consume(i);
  }
  for (int i = 14; i < 16; i++) {
    pthread_mutex_lock(&m);
    flag = 0;
    tell(to_worker[1]);
    while (!flag) {
      if (i == 14) pthread_cond_wait(&cond, &m);
      else { ts = later(); pthread_cond_timedwait(&cond, &m, &ts); }
    }
    consume(i);
    pthread_mutex_unlock(&m);
  }
  pthread_barrier_wait(&barrier);
  consume(16);
  pthread_join(t, nullptr);
  consume(17);
  printf("slots %p %d\n", (void *)slot, got);
  return 0;
}
