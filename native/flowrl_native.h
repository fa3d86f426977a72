// Declarations shared by the addon's sources (flowrl_blas.c is the N-API glue).
#ifndef FLOWRL_NATIVE_H
#define FLOWRL_NATIVE_H
#include <stdint.h>

// A function compiled for each of these, the best picked at load (its loops vectorise at the
// machine's width); GCC on x86-64 Linux only (it needs ifunc).
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define VECTOR_CLONES
#endif

// e^x for loops the compiler vectorises (libm's expf does not vectorise): relative error ~2e-7,
// clamped where e^x leaves the normal floats. Compiled without trapping semantics, as must be any
// function it is inlined into (GCC inlines only between functions of the same options).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif
static inline float fast_expf(float x) {
  // Branch-free so loops over it vectorise: clamp, round to nearest with the 1.5 * 2^23 trick,
  // a degree-7 polynomial on the remainder, and 2^n built in the exponent bits.
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
  const float r = x - n * 0.693145752f - n * 1.42860677e-6f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  union { uint32_t u; float f; } scale = {.u = (uint32_t)((int32_t)n + 127) << 23};
  return p * scale.f;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
typedef void (*sgemm_fn)(int order, int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                         const float *B, int ldb, float beta, float *C, int ldc);

// ---- pool.c: persistent threads that run the tasks of one job beside the caller.
// run(ctx, task, tasks) for every task < tasks, on up to `threads` threads; returns the threads
// used. Another caller already using the pool gets its tasks run inline.
typedef void (*share_fn)(void *ctx, int task, int tasks);
int run_tasks(share_fn run, void *ctx, int tasks, int threads);
// Whether other processes keep part of the machine busy (the last 200 ms window: at least half a
// core makes it shared, under a quarter idle again), and how many cores they used (may be NULL).
// FLOWRL_OVERSUBSCRIBE=on or off, or machine_load_mode(1 or 0), fixes the answer; -1 measures.
int machine_shared(double *others_cores);
void machine_load_mode(int mode);
// Products (oneDNN's, the heap's sgemm calls) run in parts for a shared machine, since the process started.
void count_parted_product(void);
long parted_products(void);

// ---- frozen.c: products with a frozen W [N, K] (float32 or bfloat16 bits), outside the wasm heap.
// The instruction set the small-row kernels use: "avx512", "avx2" or "generic" (none).
const char *frozen_isa(void);
// Caps it at `cap` (one of those names; the machine's level when higher or unknown); returns the level now in use.
const char *frozen_cap_isa(const char *cap);
// A LoRA adapter on a product's output columns [column, column + width): A [K, rank], B [rank, width].
typedef struct {
  const float *A, *B;
  int rank, width, column;
} lora_term;
// Y[M, N] = X[M, K] W^T, plus each adapter's ((X A) * scale) B in its columns, over `threads`
// threads; blas may be NULL (compiled loops). bf16_x (with a bfloat16 W): X rounded to bfloat16
// first (the adapters still see it whole). 0, or -1 out of memory.
int frozen_forward(int M, int64_t N, int K, const float *x, const void *w, int bf16, int bf16_x, float *y, sgemm_fn blas, int blas_threads, int threads,
                   const lora_term *lora, int lora_count, float lora_scale);
// Y[M, K] = X[M, N] W, bf16_x as above. 0, or -1 out of memory.
int frozen_backward(int M, int64_t N, int K, const float *x, const void *w, int bf16, int bf16_x, float *y, sgemm_fn blas, int threads);

// ---- onednn.c: bfloat16 products through oneDNN, where it runs them on bfloat16 instructions.
// Whether it can (*ok), and what it is or why not; loads it on the first call.
const char *onednn_status(int *ok);
// Turns its use off (0) or back on; it is on unless FLOWRL_ONEDNN=off.
void onednn_enable(int on);
// forward: Y[M, N] = X[M, K] W[N, K]^T; backward: Y[M, K] = X[M, N] W. X and W bfloat16 bits, Y
// float32, on up to `threads` threads. 0, or -1 (then nothing is promised about Y).
// On a shared machine (machine_shared) it runs in slices of Y's columns, one oneDNN thread each.
int onednn_bf16_product(int backward, int M, int64_t N, int K, const uint16_t *x, const uint16_t *w, float *y, int threads);


// ---- layer-passes.c, on up to `threads` threads each.
// SwiGLU over n elements: forward out = silu(gate) up; backward (dy given) out = d gate, d_up = d up.
void swiglu(int backward, int64_t n, const float *gate, const float *up, const float *dy, float *out, float *d_up, int threads);
// RMSNorm of x [rows, width] with weight [width] into out (no gradient).
void rms_norm(int64_t rows, int64_t width, const float *x, const float *weight, float *out, double eps, int threads);

// ---- sampling.c: one token per row from logits (temperature, optional top-p), as generate.ts's sampleToken.
typedef struct {
  const float *logits;   // [rows, V]
  int64_t V;
  int rows;
  double inv_temperature;
  double top_p;          // >= 1: off
  const double *uniforms; // one draw in [0, 1) per row; NaN skips the row
  int32_t *tokens;        // out
  double *log_probs;      // out: log-softmax(logits / T) of the token
  double *kept_log_mass;  // out: log of the softmax share top-p kept (0 without it)
} sample_job;
// 0, -1 out of memory, or -2 non-finite logits (NaN or infinite) in a row.
int sample_rows(const sample_job *job, int threads);

// ---- attention.c: one decode step's attention over a preallocated KV cache.
typedef struct {
  int batch, heads, kv_heads, head_dim, capacity, past;
  const float *qkv;      // [batch, (heads + 2 kv_heads) * head_dim]: q | k | v of the new token
  const float *cos, *sin; // the same shape: rotary tables (the query's carry 1/sqrt(head_dim); v's are 1 and 0)
  const float *bias;     // [batch, heads / kv_heads, capacity]: the mask's additive bias
  float *keys, *values;  // [batch, kv_heads, capacity, head_dim]: written at `past`
  float *out;            // [batch, heads * head_dim]
} decode_attention_job;
// Rows split over up to `threads` threads. 0, or -1 out of memory.
int decode_attention(const decode_attention_job *job, int threads);

#endif
