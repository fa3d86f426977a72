// A decoder layer's passes outside its products, on the wasm heap and the pool's threads: SwiGLU,
// silu(gate) * up, and its gradient in one pass each (as tfjs ops the backward is eight passes over
// [tokens, 4864] at the 0.5B's shape, on one thread: 2.3 s of a 26 s update, timed by kernel in
// `bench --rl-step`), and RMSNorm without a gradient (3-4 ms a call at [768, 896] in JavaScript).
#include <math.h>
#include <stdint.h>
#include "flowrl_native.h"

// Elements per task: large enough that a task's hand-off is noise, small enough to share 2-16 cores.
enum { CHUNK = 1 << 15 };

typedef struct {
  int64_t n;
  const float *gate, *up, *dy;
  float *out, *d_up;
} swiglu_job;

// As fast_expf is compiled (so it inlines here).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif
VECTOR_CLONES static void forward_range(const swiglu_job *job, int64_t from, int64_t to) {
  const float *g = job->gate, *u = job->up;
  float *y = job->out;
  for (int64_t i = from; i < to; i++) {
    const float s = 1.0f / (1.0f + fast_expf(-g[i]));
    // A NaN gate stays NaN (fast_expf's clamps would make it a number).
    y[i] = (g[i] == g[i] ? g[i] * s : g[i]) * u[i];
  }
}

// d gate = dy up s (1 + gate (1 - s)), d up = dy gate s, with s = sigmoid(gate).
VECTOR_CLONES static void backward_range(const swiglu_job *job, int64_t from, int64_t to) {
  const float *g = job->gate, *u = job->up, *dy = job->dy;
  float *dg = job->out, *du = job->d_up;
  for (int64_t i = from; i < to; i++) {
    const float s = g[i] == g[i] ? 1.0f / (1.0f + fast_expf(-g[i])) : g[i];
    const float dys = dy[i] * s;
    dg[i] = dys * u[i] * (1.0f + g[i] * (1.0f - s));
    du[i] = dys * g[i];
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

static void forward_task(void *arg, int task, int tasks) {
  const swiglu_job *job = arg;
  (void)tasks;
  const int64_t from = (int64_t)task * CHUNK, to = from + CHUNK < job->n ? from + CHUNK : job->n;
  forward_range(job, from, to);
}

static void backward_task(void *arg, int task, int tasks) {
  const swiglu_job *job = arg;
  (void)tasks;
  const int64_t from = (int64_t)task * CHUNK, to = from + CHUNK < job->n ? from + CHUNK : job->n;
  backward_range(job, from, to);
}

void swiglu(int backward, int64_t n, const float *gate, const float *up, const float *dy, float *out, float *d_up, int threads) {
  const swiglu_job job = {n, gate, up, dy, out, d_up};
  run_tasks(backward ? backward_task : forward_task, (void *)&job, (int)((n + CHUNK - 1) / CHUNK), threads);
}

typedef struct {
  int64_t rows, width;
  const float *x, *weight;
  float *out;
  double eps;
} norm_job;

// out = x / sqrt(mean(x^2) + eps) * weight per row, in double as the JavaScript kernel it replaces
// (engine/fused.ts) computes it.
VECTOR_CLONES static void norm_row(const norm_job *job, int64_t r) {
  const int64_t H = job->width;
  const float *x = job->x + r * H, *w = job->weight;
  float *out = job->out + r * H;
  // Eight partial sums, so the loop vectorises without reordering a sum.
  double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0}, squares = 0;
  int64_t h = 0;
  for (; h + 8 <= H; h += 8)
    for (int k = 0; k < 8; k++) lanes[k] += (double)x[h + k] * x[h + k];
  for (; h < H; h++) squares += (double)x[h] * x[h];
  for (int k = 0; k < 8; k++) squares += lanes[k];
  const double scale = 1 / sqrt(squares / H + job->eps);
  for (h = 0; h < H; h++) out[h] = (float)(x[h] * scale * w[h]);
}

static void norm_task(void *arg, int task, int tasks) {
  const norm_job *job = arg;
  for (int64_t r = job->rows * task / tasks; r < job->rows * (task + 1) / tasks; r++) norm_row(job, r);
}

void rms_norm(int64_t rows, int64_t width, const float *x, const float *weight, float *out, double eps, int threads) {
  const norm_job job = {rows, width, x, weight, out, eps};
  // Rows of a decode step are too few to share.
  const int64_t tasks = rows * width < CHUNK ? 1 : rows < 4 * threads ? rows : 4 * threads;
  run_tasks(norm_task, (void *)&job, (int)tasks, threads);
}
