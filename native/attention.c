// One decode step's attention (one new token per row) for every row and head, on the wasm heap:
// rotary embedding of the new query and key, the key and value written into a preallocated KV
// cache, scores against every cached key plus the mask's bias, softmax, and the weighted values.
// In tensor ops this was a dozen kernels per layer, each paying tfjs's fixed cost per op.
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include "flowrl_native.h"

// x * cos + rotate_half(x) * sin over one head (rotate_half(x) = [-x[d/2:], x[:d/2]]).
static void rotate(const float *x, const float *c, const float *s, float *out, int d) {
  const int half = d / 2;
  for (int j = 0; j < half; j++) out[j] = x[j] * c[j] + -x[j + half] * s[j];
  for (int j = half; j < d; j++) out[j] = x[j] * c[j] + x[j - half] * s[j];
}

typedef struct {
  const decode_attention_job *job;
  atomic_int failed;
} attention_run;

// Row b of the batch: its new key and value into the cache, then every query head.
VECTOR_CLONES static int attend_row(const decode_attention_job *job, int b, float *scratch) {
  const int H = job->heads, KV = job->kv_heads, d = job->head_dim, cap = job->capacity, past = job->past;
  const int C = H + 2 * KV, groups = H / KV, keys = past + 1;
  float *scores = scratch, *q = scratch + keys;
  const size_t row = (size_t)b * C * d;
  const float *x = job->qkv + row, *c = job->cos + row, *s = job->sin + row;
  for (int g = 0; g < KV; g++) {
    const size_t slot = (((size_t)b * KV + g) * cap + past) * d;
    rotate(x + (size_t)(H + g) * d, c + (size_t)(H + g) * d, s + (size_t)(H + g) * d, job->keys + slot, d);
    rotate(x + (size_t)(H + KV + g) * d, c + (size_t)(H + KV + g) * d, s + (size_t)(H + KV + g) * d, job->values + slot, d);
  }
  // The mask's bias is the same for every query head of a row.
  const float *bias = job->bias + (size_t)b * groups * cap;
  for (int h = 0; h < H; h++) {
    const int g = h / groups;
    const float *K = job->keys + ((size_t)b * KV + g) * cap * d, *V = job->values + ((size_t)b * KV + g) * cap * d;
    rotate(x + (size_t)h * d, c + (size_t)h * d, s + (size_t)h * d, q, d);
    float max = -INFINITY;
    for (int t = 0; t < keys; t++) {
      // Eight partial sums, so the compiler vectorises the dot product without reassociating.
      float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      const float *k = K + (size_t)t * d;
      int j = 0;
      for (; j + 8 <= d; j += 8)
        for (int l = 0; l < 8; l++) part[l] += q[j + l] * k[j + l];
      float dot = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
      for (; j < d; j++) dot += q[j] * k[j];
      scores[t] = dot + bias[t];
      if (scores[t] > max) max = scores[t];
    }
    float total = 0;
    for (int t = 0; t < keys; t++) total += scores[t] = expf(scores[t] - max);
    float *out = job->out + ((size_t)b * H + h) * d;
    for (int j = 0; j < d; j++) out[j] = 0;
    for (int t = 0; t < keys; t++) {
      const float p = scores[t] / total;
      for (int j = 0; j < d; j++) out[j] += p * V[(size_t)t * d + j];
    }
  }
  return 0;
}

static void attend_rows(void *arg, int task, int tasks) {
  attention_run *run = arg;
  const decode_attention_job *job = run->job;
  const int b0 = job->batch * task / tasks, b1 = job->batch * (task + 1) / tasks;
  if (b1 <= b0) return;
  float *scratch = malloc(sizeof(float) * (size_t)(job->past + 1 + job->head_dim));
  if (!scratch) {
    atomic_store(&run->failed, 1);
    return;
  }
  for (int b = b0; b < b1; b++) attend_row(job, b, scratch);
  free(scratch);
}

int decode_attention(const decode_attention_job *job, int threads) {
  attention_run run = {.job = job};
  atomic_init(&run.failed, 0);
  if (threads > 1) run_tasks(attend_rows, &run, job->batch, threads);
  else attend_rows(&run, 0, 1);
  return atomic_load(&run.failed) ? -1 : 0;
}
