// A small persistent thread pool for the products and sampling of decoding: starting threads per
// call costs tens of microseconds, and a decode step makes over a hundred products. Idle workers
// spin briefly (the next product usually follows within that time), then sleep on a condition.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include "flowrl_native.h"

enum { POOL_MAX_WORKERS = 15 };
// How long an idle worker spins before it sleeps.
static const int64_t SPIN_NS = 5000000;

static struct {
  pthread_mutex_t use;  // one job at a time
  pthread_mutex_t lock; // guards sleeping and the wake-up
  pthread_cond_t wake;
  int workers;
  int sleeping;
  atomic_uint generation;
  atomic_int pending;
  atomic_int next; // the next task to take
  share_fn run;
  void *ctx;
  int tasks;
  int helpers; // workers taking part in the job
} pool = {.use = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

// Tasks go to whoever is free: a thread the system delays (a core shared with the JavaScript
// engine's own threads) takes fewer.
static void take_tasks(void) {
  for (int task; (task = atomic_fetch_add_explicit(&pool.next, 1, memory_order_relaxed)) < pool.tasks;) pool.run(pool.ctx, task, pool.tasks);
}

typedef struct {
  int index; // 1, 2, ...: the caller is 0
  unsigned seen; // the generation before the job the worker was started for
} worker_start;

static void *worker(void *arg) {
  const worker_start start = *(worker_start *)arg;
  free(arg);
  const int index = start.index;
  unsigned seen = start.seen;
  for (;;) {
    unsigned current;
    int64_t spinning_since = 0;
    for (int spins = 0; (current = atomic_load_explicit(&pool.generation, memory_order_acquire)) == seen; spins++) {
      if ((spins & 255) != 255) {
        relax();
        continue;
      }
      if (!spinning_since) spinning_since = now_ns();
      else if (now_ns() - spinning_since > SPIN_NS) {
        pthread_mutex_lock(&pool.lock);
        pool.sleeping++;
        while (atomic_load_explicit(&pool.generation, memory_order_acquire) == seen) pthread_cond_wait(&pool.wake, &pool.lock);
        pool.sleeping--;
        pthread_mutex_unlock(&pool.lock);
      }
    }
    seen = current;
    if (index <= pool.helpers) take_tasks();
    atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_release);
  }
  return NULL;
}

int run_tasks(share_fn run, void *ctx, int tasks, int threads) {
  if (threads > POOL_MAX_WORKERS + 1) threads = POOL_MAX_WORKERS + 1;
  if (threads > tasks) threads = tasks;
  if (threads <= 1 || pthread_mutex_trylock(&pool.use) != 0) {
    for (int t = 0; t < tasks; t++) run(ctx, t, tasks);
    return 1;
  }
  while (pool.workers < threads - 1) {
    worker_start *start = malloc(sizeof *start);
    if (!start) break;
    *start = (worker_start){pool.workers + 1, atomic_load_explicit(&pool.generation, memory_order_relaxed)};
    pthread_t id;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    const int started = pthread_create(&id, &attr, worker, start) == 0;
    pthread_attr_destroy(&attr);
    if (!started) {
      free(start);
      break;
    }
    pool.workers++;
  }
  if (threads > pool.workers + 1) threads = pool.workers + 1;
  pool.run = run;
  pool.ctx = ctx;
  pool.tasks = tasks;
  pool.helpers = threads - 1;
  atomic_store_explicit(&pool.next, 0, memory_order_relaxed);
  if (threads > 1) {
    atomic_store_explicit(&pool.pending, pool.workers, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool.generation, 1, memory_order_release);
    pthread_mutex_lock(&pool.lock);
    if (pool.sleeping) pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
  }
  take_tasks();
  if (threads > 1)
    while (atomic_load_explicit(&pool.pending, memory_order_acquire) > 0) relax();
  pthread_mutex_unlock(&pool.use);
  return threads;
}
