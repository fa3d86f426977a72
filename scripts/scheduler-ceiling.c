// What the scheduler gives a perfectly divisible job: THREADS threads take 20-microsecond units of
// arithmetic from a shared counter, JOB units at a time, the calling thread waiting for each job's
// last unit before the next starts (as a product waits for its slowest part). Run it idle and beside
// a busy process to see the most any split of the work could get (docs/performance.md, "One core busy").
//   gcc -O2 -pthread -o /tmp/scheduler-ceiling scripts/scheduler-ceiling.c
//   /tmp/scheduler-ceiling THREADS JOB [UNITS]     # UNITS defaults to 100000 (about 3.6 s on one core)
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static atomic_long claimed, finished, job_end;
static volatile double sink;

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void unit(void) {
  double a = 1;
  for (int i = 0; i < 20000; i++) a = a * 1.0000001 + 1e-9;
  sink = a;
}

// Takes units below `end` until none is left; a late thread takes nothing from the next job.
static long work(long end) {
  long taken = 0;
  for (long i = atomic_load(&claimed); i < end;) {
    if (!atomic_compare_exchange_weak(&claimed, &i, i + 1)) continue;
    unit();
    atomic_fetch_add(&finished, 1);
    taken++;
    i = atomic_load(&claimed);
  }
  return taken;
}

static void *helper(void *taken) {
  long seen = 0;
  for (;;) {
    long end;
    while ((end = atomic_load(&job_end)) == seen) sched_yield();
    if (end < 0) return NULL;
    seen = end;
    *(long *)taken += work(end);
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: scheduler-ceiling THREADS JOB [UNITS]\n");
    return 2;
  }
  const int threads = atoi(argv[1]);
  const long job = atol(argv[2]), units = argc > 3 ? atol(argv[3]) : 100000;
  if (threads < 1 || threads > 64 || job < 1 || units < job) {
    fprintf(stderr, "scheduler-ceiling: THREADS 1-64, JOB >= 1, UNITS >= JOB\n");
    return 2;
  }
  pthread_t helpers[64];
  long taken[64] = {0};
  for (int i = 1; i < threads; i++) pthread_create(&helpers[i], NULL, helper, &taken[i]);
  const double start = seconds();
  for (long end = job; end <= units; end += job) {
    atomic_store(&job_end, end);
    taken[0] += work(end);
    while (atomic_load(&finished) < end) sched_yield();
  }
  const double elapsed = seconds() - start;
  atomic_store(&job_end, -1);
  for (int i = 1; i < threads; i++) pthread_join(helpers[i], NULL);
  printf("threads %d, jobs of %ld units: %.3f s, the calling thread took %.0f %% of the units\n", threads, job, elapsed,
         100.0 * taken[0] / (double)(units / job * job));
  return 0;
}
