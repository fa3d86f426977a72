// A small persistent thread pool for the products and sampling of decoding: starting threads per
// call costs tens of microseconds, and a decode step makes over a hundred products.
//
// On a shared machine a worker may not get a core for milliseconds (the scheduler's time slice), so
// nothing here waits for a worker that has not started a task: tasks go to whoever is running (the
// caller too), and a job ends when its tasks are done, not when every worker has checked in. Idle
// workers spin briefly (the next product usually follows within that time), yielding the core as
// they go, then sleep on a condition.
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <unistd.h>
#include "flowrl_native.h"

enum { POOL_MAX_WORKERS = 15 };
// How long an idle worker spins (yielding) before it sleeps.
static const int64_t SPIN_NS = 2000000;
// `next` between jobs: any task number taken from it is past the end of every job.
static const int CLOSED = INT_MAX / 2;

static struct {
  pthread_mutex_t use;  // one job at a time
  pthread_mutex_t lock; // guards sleeping and the wake-up
  pthread_cond_t wake;
  int workers;
  int sleeping;
  atomic_uint generation; // one more for every job
  atomic_int next;        // the next task to take; CLOSED between jobs
  atomic_int tasks;
  atomic_int done;   // tasks of this job finished
  atomic_int inside; // workers between taking their first task number and their last
  atomic_int helpers; // workers asked to take part (1..helpers)
  share_fn run; // written before `next` opens, read only by whoever took a task
  void *ctx;
} pool = {.use = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER, .next = INT_MAX / 2};

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

// Takes tasks until none is left. The task count is read after the number is taken: a number taken
// from an open job was handed out after that job's fields were written (acquire on `next`);
// sequentially consistent, so a worker that entered after the caller saw `inside` empty reads `next` closed.
static void take_tasks(void) {
  for (;;) {
    const int task = atomic_fetch_add_explicit(&pool.next, 1, memory_order_seq_cst);
    const int tasks = atomic_load_explicit(&pool.tasks, memory_order_relaxed);
    if (task >= tasks) return;
    pool.run(pool.ctx, task, tasks);
    atomic_fetch_add_explicit(&pool.done, 1, memory_order_release);
  }
}

// Waits for `*word` to differ from `value`: spins a little, then gives the core to whoever else wants
// it (a worker holding a task may share this core) between looks.
static void wait_while_equal(atomic_int *word, int value) {
  for (int spins = 0; atomic_load_explicit(word, memory_order_acquire) == value; spins++) {
    if (spins < 64) relax();
    else sched_yield();
  }
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
      if ((spins & 63) != 63) {
        relax();
        continue;
      }
      // A busy machine's other threads get the core while nothing is pending here.
      sched_yield();
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
    if (index > atomic_load_explicit(&pool.helpers, memory_order_relaxed)) continue;
    atomic_fetch_add_explicit(&pool.inside, 1, memory_order_seq_cst);
    take_tasks();
    atomic_fetch_sub_explicit(&pool.inside, 1, memory_order_release);
  }
  return NULL;
}

int run_tasks(share_fn run, void *ctx, int tasks, int threads) {
  // Beside other busy processes, twice the threads get a larger share of the cores; tasks go to
  // whoever runs, so a thread waiting for a core holds up only the task it has started.
  if (threads > 1 && machine_shared(NULL)) threads *= 2;
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
  // A worker late from the last job may still be inside, about to find `next` closed: the fields it
  // may read are rewritten only once it has left.
  for (int spins = 0; atomic_load_explicit(&pool.inside, memory_order_seq_cst) > 0; spins++) {
    if (spins < 64) relax();
    else sched_yield();
  }
  pool.run = run;
  pool.ctx = ctx;
  atomic_store_explicit(&pool.tasks, tasks, memory_order_relaxed);
  atomic_store_explicit(&pool.done, 0, memory_order_relaxed);
  atomic_store_explicit(&pool.helpers, threads - 1, memory_order_relaxed);
  atomic_store_explicit(&pool.next, 0, memory_order_release);
  if (threads > 1) {
    atomic_fetch_add_explicit(&pool.generation, 1, memory_order_release);
    pthread_mutex_lock(&pool.lock);
    if (pool.sleeping) pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
  }
  take_tasks();
  // Only tasks already taken are waited for: a worker that never got a core took none.
  for (int finished; (finished = atomic_load_explicit(&pool.done, memory_order_acquire)) < tasks;) wait_while_equal(&pool.done, finished);
  atomic_store_explicit(&pool.next, CLOSED, memory_order_seq_cst);
  pthread_mutex_unlock(&pool.use);
  return threads;
}

// ---- Other processes' load. Linux gives each runnable thread an equal share of the cores, so
// beside a busy process a product's two threads get 4/3 of a core and wait for the one that shares
// (docs/performance.md, "One core busy"); more threads than cores, taking work as they run, get more.

// Sampled at most this often; a window this long holds 20 ticks a core of /proc/stat.
static const int64_t LOAD_WINDOW_NS = 200000000;
// Others' cores that make a machine shared, and the fewer that make it idle again: beside our extra
// threads a busy process gets under half a core, so one threshold would flip back and forth.
static const int SHARED_FROM_MILLI = 500, IDLE_BELOW_MILLI = 250;

static struct {
  pthread_mutex_t lock;
  int64_t since;       // wall clock of the window's start (0: none yet)
  double machine, own; // busy seconds of the machine and of this process at its start
  atomic_int others_milli;
  atomic_int shared;
  atomic_int mode; // -1 auto, 0 never shared, 1 always (FLOWRL_OVERSUBSCRIBE=off|on; tests)
} load = {.lock = PTHREAD_MUTEX_INITIALIZER, .mode = -2};

// Every core's busy time since boot in seconds (steal, a hypervisor's, left out); -1 without /proc.
static double machine_busy_seconds(void) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return -1;
  unsigned long long user, nice, system, idle, iowait, irq, softirq;
  const int read = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &system, &idle, &iowait, &irq, &softirq);
  fclose(f);
  return read == 7 ? (double)(user + nice + system + irq + softirq) / (double)sysconf(_SC_CLK_TCK) : -1;
}

static double own_busy_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int oversubscribe_mode(void) {
  int mode = atomic_load(&load.mode);
  if (mode != -2) return mode;
  const char *v = getenv("FLOWRL_OVERSUBSCRIBE");
  mode = v && strcmp(v, "off") == 0 ? 0 : v && strcmp(v, "on") == 0 ? 1 : -1;
  int unset = -2;
  atomic_compare_exchange_strong(&load.mode, &unset, mode);
  return atomic_load(&load.mode);
}

void machine_load_mode(int mode) {
  atomic_store(&load.mode, mode < 0 ? -1 : mode > 0 ? 1 : 0);
}

// With autogroups (where the kernel has them on: /proc/sys/kernel/sched_autogroup_enabled) each
// session's threads share the session's part of the cores: a busy process of another session keeps
// its part whatever this one's threads, and extra threads only wait more (the 0.5B step beside one
// took 268 s with them, 224 s without). So there only this session's other processes count: their
// CPU time, each followed from one window to the next.
enum { SESSION_PROCESSES = 256 };
static struct {
  int pids[SESSION_PROCESSES];
  unsigned long long ticks[SESSION_PROCESSES];
  int count, valid;
} session_seen;

static int autogroups_on(void) {
  static int on = -1;
  if (on < 0) {
    FILE *f = fopen("/proc/sys/kernel/sched_autogroup_enabled", "r");
    int value = 0;
    on = f && fscanf(f, "%d", &value) == 1 && value == 1;
    if (f) fclose(f);
  }
  return on;
}

// CPU seconds this session's other processes used since the last call (-1: none to compare with yet).
static double session_others_seconds(void) {
  const pid_t self = getpid(), session = getsid(0);
  DIR *dir = opendir("/proc");
  if (!dir) return -1;
  int pids[SESSION_PROCESSES], count = 0;
  unsigned long long ticks[SESSION_PROCESSES], used = 0;
  for (struct dirent *e; (e = readdir(dir)) && count < SESSION_PROCESSES;) {
    const int pid = atoi(e->d_name);
    if (pid <= 0 || pid == self) continue;
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    const size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = 0;
    // After the command's closing parenthesis: state ppid pgrp session ... utime (14th) stime (15th).
    const char *rest = strrchr(line, ')');
    int sid;
    unsigned long long utime, stime;
    if (!rest || sscanf(rest + 2, "%*c %*d %*d %d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &sid, &utime, &stime) != 3 || sid != session) continue;
    pids[count] = pid;
    ticks[count] = utime + stime;
    for (int i = 0; i < session_seen.count; i++)
      if (session_seen.pids[i] == pid && ticks[count] >= session_seen.ticks[i]) used += ticks[count] - session_seen.ticks[i];
    count++;
  }
  closedir(dir);
  const int compared = session_seen.valid;
  memcpy(session_seen.pids, pids, sizeof(int) * (size_t)count);
  memcpy(session_seen.ticks, ticks, sizeof(unsigned long long) * (size_t)count);
  session_seen.count = count;
  session_seen.valid = 1;
  return compared ? (double)used / (double)sysconf(_SC_CLK_TCK) : -1;
}

// Ends the window when it is long enough (one caller at a time; the others read the last result).
static void sample_load(void) {
  if (pthread_mutex_trylock(&load.lock) != 0) return;
  const int64_t now = now_ns();
  if (!load.since || now - load.since >= LOAD_WINDOW_NS) {
    const double machine = machine_busy_seconds(), own = own_busy_seconds();
    if (machine < 0) {
      load.since = now;
    } else {
      if (load.since) {
        const double seconds = (double)(now - load.since) * 1e-9;
        double others = (machine - load.machine - (own - load.own)) / seconds;
        // Only a busy machine is worth reading every process for.
        if (autogroups_on() && others * 1000 >= IDLE_BELOW_MILLI) {
          const double session = session_others_seconds();
          others = session < 0 ? -1 : session / seconds;
        } else {
          session_seen.valid = 0;
        }
        if (others >= 0) {
          const int milli = (int)(others * 1000 + 0.5);
          atomic_store(&load.others_milli, milli);
          if (milli >= SHARED_FROM_MILLI) atomic_store(&load.shared, 1);
          else if (milli < IDLE_BELOW_MILLI) atomic_store(&load.shared, 0);
        }
      }
      load.since = now;
      load.machine = machine;
      load.own = own;
    }
  }
  pthread_mutex_unlock(&load.lock);
}

int machine_shared(double *others_cores) {
  const int mode = oversubscribe_mode();
  if (mode != 0) sample_load();
  if (others_cores) *others_cores = atomic_load(&load.others_milli) / 1000.0;
  return mode >= 0 ? mode : atomic_load(&load.shared);
}

static atomic_long parted;

void count_parted_product(void) {
  atomic_fetch_add_explicit(&parted, 1, memory_order_relaxed);
}

long parted_products(void) {
  return atomic_load_explicit(&parted, memory_order_relaxed);
}
