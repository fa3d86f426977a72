// Sampling one token per row from a batch of logits, the arithmetic of generate.ts's sampleToken
// (float64 probabilities, the same draw) without its cost: a 150k-token vocabulary took 2.6 ms a
// row in JavaScript. Temperature and top-p here; top-k and greedy stay in JavaScript.
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include "flowrl_native.h"

// Tokens whose probability is at least this share of the total are the first candidates for top-p
// (generate.ts's NUCLEUS_CANDIDATE_SHARE).
static const double NUCLEUS_CANDIDATE_SHARE = 1e-6;
// Fewer logits than this are sampled on the calling thread.
static const int64_t SPLIT_MIN_VALUES = 1 << 16;

typedef struct {
  double p;
  int32_t id;
} candidate;

// Most probable first, ties by position.
static int by_probability(const void *a, const void *b) {
  const candidate *x = a, *y = b;
  if (x->p != y->p) return x->p < y->p ? 1 : -1;
  return (x->id > y->id) - (x->id < y->id);
}

typedef struct {
  const sample_job *job;
  atomic_int failed;
} sample_run;

// The nucleus: the shortest prefix of `order` (sorted) whose mass reaches `needed`; returns its size.
static int64_t nucleus(const candidate *order, int64_t count, double needed, double *mass) {
  int64_t size = 0;
  *mass = 0;
  while (size < count && *mass < needed) *mass += order[size++].p;
  return size;
}

// sample_row's failures (sample_rows returns the first one met).
enum { SAMPLE_NO_MEMORY = -1, SAMPLE_NOT_FINITE = -2 };

static int sample_row(const sample_job *job, int r, double *probs, candidate **order, int64_t *capacity) {
  const int64_t V = job->V;
  const float *z = job->logits + (size_t)r * V;
  const double invT = job->inv_temperature;
  double max = -INFINITY;
  for (int64_t j = 0; j < V; j++) {
    const double v = (double)z[j] * invT;
    if (v > max) max = v;
  }
  double total = 0;
  for (int64_t j = 0; j < V; j++) total += probs[j] = exp((double)z[j] * invT - max);
  // NaN or infinite logits (diverged weights) leave nothing to draw from: every comparison below
  // would be false and the nucleus empty.
  if (!isfinite(max) || !isfinite(total) || !(total > 0)) return SAMPLE_NOT_FINITE;
  int32_t token = (int32_t)(V - 1);
  double kept = 0;
  if (job->top_p >= 1) {
    double u = job->uniforms[r] * total;
    for (int64_t j = 0; j < V; j++) {
      u -= probs[j];
      if (u <= 0) {
        token = (int32_t)j;
        break;
      }
    }
  } else {
    // As sampleToken: sort the candidates above a tiny share; everything only when they fall short.
    const double bound = total * NUCLEUS_CANDIDATE_SHARE, needed = job->top_p * total;
    int64_t count = 0;
    for (int64_t j = 0; j < V; j++) count += probs[j] >= bound;
    for (int pass = 0; pass < 2; pass++) {
      const int64_t wanted = pass ? V : count;
      if (wanted > *capacity) {
        candidate *grown = realloc(*order, sizeof(candidate) * (size_t)wanted);
        if (!grown) return SAMPLE_NO_MEMORY;
        *order = grown;
        *capacity = wanted;
      }
      int64_t n = 0;
      for (int64_t j = 0; j < V; j++)
        if (pass || probs[j] >= bound) (*order)[n++] = (candidate){probs[j], (int32_t)j};
      qsort(*order, (size_t)n, sizeof(candidate), by_probability);
      double mass;
      int64_t size = nucleus(*order, n, needed, &mass);
      if (mass < needed && !pass) continue;
      if (n < 1) return SAMPLE_NOT_FINITE;
      if (size < 1) size = 1;
      double nucleus_mass = 0;
      for (int64_t i = 0; i < size; i++) nucleus_mass += (*order)[i].p;
      kept = log(nucleus_mass / total);
      double u = job->uniforms[r] * mass;
      token = (*order)[size - 1].id;
      for (int64_t i = 0; i < size; i++) {
        u -= (*order)[i].p;
        if (u <= 0) {
          token = (*order)[i].id;
          break;
        }
      }
      break;
    }
  }
  job->tokens[r] = token;
  job->log_probs[r] = ((double)z[token] * invT - max) - log(total);
  job->kept_log_mass[r] = kept;
  return 0;
}

static void sample_task(void *arg, int task, int tasks) {
  sample_run *run = arg;
  const sample_job *job = run->job;
  const int r0 = job->rows * task / tasks, r1 = job->rows * (task + 1) / tasks;
  if (r1 <= r0) return;
  double *probs = malloc(sizeof(double) * (size_t)job->V);
  candidate *order = NULL;
  int64_t capacity = 0;
  int failed = probs ? 0 : SAMPLE_NO_MEMORY;
  for (int r = r0; r < r1 && !failed; r++)
    if (!isnan(job->uniforms[r])) failed = sample_row(job, r, probs, &order, &capacity);
  free(order);
  free(probs);
  if (failed) {
    int none = 0;
    atomic_compare_exchange_strong(&run->failed, &none, failed);
  }
}

int sample_rows(const sample_job *job, int threads) {
  sample_run run = {.job = job};
  atomic_init(&run.failed, 0);
  // Small vocabularies are not worth a hand-off to another thread.
  if (threads > 1 && (int64_t)job->rows * job->V >= SPLIT_MIN_VALUES) run_tasks(sample_task, &run, job->rows, threads);
  else sample_task(&run, 0, 1);
  return atomic_load(&run.failed);
}
