// SwiGLU, silu(gate) * up, and its gradient in one pass each over the wasm heap. As tfjs ops the
// backward is eight passes (sigmoid, five products, a sum and a difference) over [tokens, 4864] at
// the 0.5B's shape, on one thread: 2.3 s of a 26 s update (measured by kernel in `bench --rl-step`).
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "flowrl_native.h"

// Elements per task: large enough that a task's hand-off is noise, small enough to share 2-16 cores.
enum { CHUNK = 1 << 15 };

// e^x in float32 with a Cody-Waite reduction and a degree-6 polynomial (within 2 ulp of expf),
// written so the loops below vectorise; libm's expf does not. x is clamped where e^x leaves the
// normal floats, so sigmoid's 1 / (1 + e^-x) reaches 0 and 1 as float32 does.
static inline float exp_approx(float x) {
  x = x > 88.3f ? 88.3f : x;
  x = x < -87.3f ? -87.3f : x;
  // Round to nearest by adding and taking away 1.5 * 2^23 (vectorises where roundf may not).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  union { uint32_t u; float f; } scale = {.u = (uint32_t)((int32_t)n + 127) << 23};
  return p * scale.f;
}

typedef struct {
  int64_t n;
  const float *gate, *up, *dy;
  float *out, *d_up;
} swiglu_job;

VECTOR_CLONES static void forward_range(const swiglu_job *job, int64_t from, int64_t to) {
  const float *g = job->gate, *u = job->up;
  float *y = job->out;
  for (int64_t i = from; i < to; i++) {
    const float s = 1.0f / (1.0f + exp_approx(-g[i]));
    // A NaN gate stays NaN (the clamps above would make it a number).
    y[i] = (g[i] == g[i] ? g[i] * s : g[i]) * u[i];
  }
}

// d gate = dy up s (1 + gate (1 - s)), d up = dy gate s, with s = sigmoid(gate).
VECTOR_CLONES static void backward_range(const swiglu_job *job, int64_t from, int64_t to) {
  const float *g = job->gate, *u = job->up, *dy = job->dy;
  float *dg = job->out, *du = job->d_up;
  for (int64_t i = from; i < to; i++) {
    const float s = g[i] == g[i] ? 1.0f / (1.0f + exp_approx(-g[i])) : g[i];
    const float dys = dy[i] * s;
    dg[i] = dys * u[i] * (1.0f + g[i] * (1.0f - s));
    du[i] = dys * g[i];
  }
}

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
  const int64_t tasks = (n + CHUNK - 1) / CHUNK;
  const share_fn run = backward ? backward_task : forward_task;
  if (threads > 1 && tasks > 1) run_tasks(run, (void *)&job, (int)tasks, threads);
  else
    for (int64_t t = 0; t < tasks; t++) run((void *)&job, (int)t, (int)tasks);
}
