// Products with a frozen W [N, K] stored row-major outside the wasm heap (a LoRA base), float32 or
// bfloat16 bits:  forward Y[M, N] = X[M, K] W^T,  backward Y[M, K] = X[M, N] W.
// Decoding multiplies a few rows by every weight, so it is bound by reading W: a BLAS call at
// M = 8 reads it at a third of the memory's speed here. Few rows go through kernels written for
// that (AVX-512 or AVX2, chosen at run time): each streams a few rows of W, converted from bfloat16
// in registers, against every row of X, and prefetches the rows it reads next (the hardware
// prefetcher alone left them at 12 GB/s of 29). Many rows (a prefill) go to the BLAS, bfloat16
// converted a panel at a time. Forward products split W's rows over the pool's threads.
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "flowrl_native.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FLOWRL_X86 1
#include <immintrin.h>
#endif

enum {
  // Floats of W converted from bfloat16 per BLAS call: 1 MiB stays in cache; from BF16_WIDE_ROWS
  // rows of X on, 16 MiB, since the BLAS packs X again for every call (at down_proj's K = 4864 a
  // 1 MiB panel is 53 rows of W, and the product ran at 0.5-0.6 of float32's rate; measured).
  BF16_PANEL_FLOATS = 1 << 18,
  BF16_WIDE_PANEL_FLOATS = 1 << 22,
  BF16_WIDE_ROWS = 256,
  // Below this many weights a product stays on one thread.
  SPLIT_MIN_WORK = 1 << 16,
  // A split product's tasks: up to this many per thread, of at least TASK_MIN_ROWS rows of W.
  TASKS_PER_THREAD = 8,
  TASK_MIN_ROWS = 64,
  // float32 W rows ahead that the small-row kernels prefetch (twice as many bfloat16 rows: the
  // same bytes); 2 to 12 measured alike, 1 slower, none at a third of the speed.
  PREFETCH_ROWS = 4,
  // W rows kept in cache while every chunk of X's rows passes over them.
  ROW_BLOCK = 16,
  // From this many rows of bfloat16 activations on, oneDNN's bfloat16 matmul beat the small-row
  // kernels at the 0.5B's shapes (2 threads: 16 rows 1.5-2.3x, 32 rows 1.5-2.5x; 8 rows 0.8-1.2x).
  ONEDNN_MIN_ROWS = 16,
};

typedef enum { ISA_GENERIC, ISA_AVX2, ISA_AVX512 } isa_level;
// Y[m, n] = sum_k X[m, k] W[n, k] for n in [n0, n1) (Y's rows ldy apart).
typedef void (*rows_kernel)(int bf16, int K, const float *x, const void *w, int64_t n0, int64_t n1, float *y, int64_t ldy);

// ---- AVX-512: three W rows against up to 8 rows of X (24 accumulators; fewer loads of X per
// multiply than two rows), then pairs and a last row; K in steps of 16.
#ifdef FLOWRL_X86
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define AVX2 __attribute__((target("avx2,fma")))

static inline AVX512 __attribute__((always_inline)) __m512 w16(const void *w, int bf16, int64_t at, __mmask16 mask) {
  if (bf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, (const uint16_t *)w + at)), 16));
  return _mm512_maskz_loadu_ps(mask, (const float *)w + at);
}

static inline AVX512 __attribute__((always_inline)) void prefetch_rows(const void *w, int bf16, int64_t row, int64_t k, int K) {
  const size_t size = bf16 ? 2 : 4;
  const char *p = (const char *)w + ((size_t)(row + (bf16 ? 2 * PREFETCH_ROWS : PREFETCH_ROWS)) * K + k) * size;
  _mm_prefetch(p, _MM_HINT_T0);
  _mm_prefetch(p + (size_t)K * size, _MM_HINT_T0);
}

// The body of a kernel: `bf16` is a constant where it is expanded, so each type compiles apart.
// Loops over X's rows are unrolled so the accumulators stay in registers (without it GCC kept the
// arrays on the stack and stored every accumulator each step: batch-32 products at 150 GFLOP/s, 222 with).
#define AVX512_ROWS(MR)                                                                                                 \
    int64_t n = n0;                                                                                                        \
    for (; n + 3 <= n1; n += 3) {                                                                                          \
      __m512 a[MR], b[MR], c[MR];                                                                                          \
      _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++) a[m] = b[m] = c[m] = _mm512_setzero_ps();                                               \
      for (int k = 0; k < K; k += 16) {                                                                                    \
        const __mmask16 mask = K - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (K - k)) - 1);                          \
        const __m512 w0 = w16(w, bf16, n * K + k, mask), w1 = w16(w, bf16, (n + 1) * K + k, mask);                         \
        const __m512 w2 = w16(w, bf16, (n + 2) * K + k, mask);                                                             \
        prefetch_rows(w, bf16, n, k, K);                                                                                   \
        prefetch_rows(w, bf16, n + 2, k, K);                                                                               \
        _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++) {                                                                                     \
          const __m512 xv = _mm512_maskz_loadu_ps(mask, x + (size_t)m * K + k);                                            \
          a[m] = _mm512_fmadd_ps(w0, xv, a[m]);                                                                            \
          b[m] = _mm512_fmadd_ps(w1, xv, b[m]);                                                                            \
          c[m] = _mm512_fmadd_ps(w2, xv, c[m]);                                                                            \
        }                                                                                                                  \
      }                                                                                                                    \
      _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++) {                                                                                       \
        y[m * ldy + n] = _mm512_reduce_add_ps(a[m]);                                                                       \
        y[m * ldy + n + 1] = _mm512_reduce_add_ps(b[m]);                                                                   \
        y[m * ldy + n + 2] = _mm512_reduce_add_ps(c[m]);                                                                   \
      }                                                                                                                    \
    }                                                                                                                      \
    for (; n + 2 <= n1; n += 2) {                                                                                          \
      __m512 a[MR], b[MR];                                                                                                 \
      _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++) a[m] = b[m] = _mm512_setzero_ps();                                                      \
      for (int k = 0; k < K; k += 16) {                                                                                    \
        const __mmask16 mask = K - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (K - k)) - 1);                          \
        const __m512 w0 = w16(w, bf16, n * K + k, mask), w1 = w16(w, bf16, (n + 1) * K + k, mask);                         \
        prefetch_rows(w, bf16, n, k, K);                                                                   \
        _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++) {                                                                                     \
          const __m512 xv = _mm512_maskz_loadu_ps(mask, x + (size_t)m * K + k);                                            \
          a[m] = _mm512_fmadd_ps(w0, xv, a[m]);                                                                            \
          b[m] = _mm512_fmadd_ps(w1, xv, b[m]);                                                                            \
        }                                                                                                                  \
      }                                                                                                                    \
      _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++) {                                                                                       \
        y[m * ldy + n] = _mm512_reduce_add_ps(a[m]);                                                                       \
        y[m * ldy + n + 1] = _mm512_reduce_add_ps(b[m]);                                                                   \
      }                                                                                                                    \
    }                                                                                                                      \
    if (n < n1) {                                                                                                          \
      __m512 a[MR];                                                                                                        \
      _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++) a[m] = _mm512_setzero_ps();                                                             \
      for (int k = 0; k < K; k += 16) {                                                                                    \
        const __mmask16 mask = K - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (K - k)) - 1);                          \
        const __m512 w0 = w16(w, bf16, n * K + k, mask);                                                                   \
        _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++) a[m] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(mask, x + (size_t)m * K + k), a[m]); \
      }                                                                                                                    \
      _Pragma("GCC unroll 8") for (int m = 0; m < MR; m++) y[m * ldy + n] = _mm512_reduce_add_ps(a[m]);                                            \
    }

#define AVX512_KERNEL(MR)                                                                                               \
  static AVX512 void avx512_rows_##MR(int is_bf16, int K, const float *x, const void *w, int64_t n0, int64_t n1, float *y, int64_t ldy) { \
    if (is_bf16) {                                                                                                      \
      const int bf16 = 1;                                                                                               \
      AVX512_ROWS(MR)                                                                                                   \
    } else {                                                                                                            \
      const int bf16 = 0;                                                                                               \
      AVX512_ROWS(MR)                                                                                                   \
    }                                                                                                                   \
  }
AVX512_KERNEL(1)
AVX512_KERNEL(2)
AVX512_KERNEL(3)
AVX512_KERNEL(4)
AVX512_KERNEL(5)
AVX512_KERNEL(6)
AVX512_KERNEL(7)
AVX512_KERNEL(8)
static const rows_kernel avx512_kernels[9] = {NULL, avx512_rows_1, avx512_rows_2, avx512_rows_3, avx512_rows_4,
                                              avx512_rows_5, avx512_rows_6, avx512_rows_7, avx512_rows_8};

// ---- AVX2: two W rows against up to 4 rows of X (8 accumulators), K in steps of 8, a scalar tail.
static inline AVX2 __attribute__((always_inline)) __m256 w8(const void *w, int bf16, int64_t at) {
  if (bf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + at))), 16));
  return _mm256_loadu_ps((const float *)w + at);
}

static inline AVX2 __attribute__((always_inline)) float w1(const void *w, int bf16, int64_t at) {
  if (!bf16) return ((const float *)w)[at];
  union { uint32_t u; float f; } v = {.u = (uint32_t)((const uint16_t *)w)[at] << 16};
  return v.f;
}

static inline AVX2 __attribute__((always_inline)) float sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#define AVX2_KERNEL(MR)                                                                                                   \
  static AVX2 void avx2_rows_##MR(int bf16, int K, const float *x, const void *w, int64_t n0, int64_t n1, float *y, int64_t ldy) { \
    const size_t size = bf16 ? 2 : 4;                                                                                     \
    for (int64_t n = n0; n < n1; n += 2) {                                                                                \
      const int pair = n + 1 < n1;                                                                                        \
      const int64_t second = pair ? n + 1 : n;                                                                            \
      __m256 a[MR], b[MR];                                                                                                \
      _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++) a[m] = b[m] = _mm256_setzero_ps();                                                     \
      int k = 0;                                                                                                          \
      for (; k + 8 <= K; k += 8) {                                                                                        \
        const __m256 w0 = w8(w, bf16, n * K + k), w1v = w8(w, bf16, second * K + k);                                      \
        if ((k & 15) == 0) {                                                                                              \
          const char *p = (const char *)w + ((size_t)(n + (bf16 ? 2 * PREFETCH_ROWS : PREFETCH_ROWS)) * K + k) * size;                                 \
          _mm_prefetch(p, _MM_HINT_T0);                                                                                   \
          _mm_prefetch(p + (size_t)K * size, _MM_HINT_T0);                                                               \
        }                                                                                                                 \
        _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++) {                                                                                    \
          const __m256 xv = _mm256_loadu_ps(x + (size_t)m * K + k);                                                       \
          a[m] = _mm256_fmadd_ps(w0, xv, a[m]);                                                                           \
          b[m] = _mm256_fmadd_ps(w1v, xv, b[m]);                                                                          \
        }                                                                                                                 \
      }                                                                                                                   \
      _Pragma("GCC unroll 4") for (int m = 0; m < MR; m++) {                                                                                      \
        float s0 = sum8(a[m]), s1 = sum8(b[m]);                                                                           \
        for (int j = k; j < K; j++) {                                                                                     \
          s0 += w1(w, bf16, n * K + j) * x[(size_t)m * K + j];                                                            \
          s1 += w1(w, bf16, second * K + j) * x[(size_t)m * K + j];                                                       \
        }                                                                                                                 \
        y[m * ldy + n] = s0;                                                                                              \
        if (pair) y[m * ldy + n + 1] = s1;                                                                                \
      }                                                                                                                   \
    }                                                                                                                     \
  }
AVX2_KERNEL(1)
AVX2_KERNEL(2)
AVX2_KERNEL(3)
AVX2_KERNEL(4)
static const rows_kernel avx2_kernels[5] = {NULL, avx2_rows_1, avx2_rows_2, avx2_rows_3, avx2_rows_4};
#endif

static isa_level hardware_isa(void) {
  isa_level best = ISA_GENERIC;
#ifdef FLOWRL_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = ISA_AVX2;
  if (best == ISA_AVX2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) best = ISA_AVX512;
#endif
  return best;
}

static const char *const ISA_NAMES[] = {"generic", "avx2", "avx512"};

// The level in use: the machine's, capped by FLOWRL_NATIVE_ISA or frozen_cap_isa (tests run each
// kernel on one machine that way).
static atomic_int isa_in_use = -1;

static isa_level isa(void) {
  int level = atomic_load(&isa_in_use);
  if (level < 0) {
    const char *cap = getenv("FLOWRL_NATIVE_ISA");
    frozen_cap_isa(cap ? cap : "avx512");
    level = atomic_load(&isa_in_use);
  }
  return (isa_level)level;
}

const char *frozen_cap_isa(const char *cap) {
  int level = (int)hardware_isa();
  for (int i = 0; i < 3; i++)
    if (strcmp(cap, ISA_NAMES[i]) == 0 && i < level) level = i;
  atomic_store(&isa_in_use, level);
  return ISA_NAMES[level];
}

const char *frozen_isa(void) {
  return ISA_NAMES[isa()];
}

// The most rows of X the small-row kernels take; beyond it the BLAS (or the loop) runs. At 32 rows
// the AVX-512 kernel still ran 241 GFLOP/s on 2 cores (the BLAS's sgemm peak here: 251).
static int small_rows_limit(isa_level level) {
  return level == ISA_AVX512 ? 64 : level == ISA_AVX2 ? 16 : 0;
}

#ifdef FLOWRL_X86
// Rows [n0, n1) of Y with the small-row kernels: X's rows in chunks, W's rows in blocks kept in
// cache while every chunk passes over them.
static void small_rows(isa_level level, int M, int K, const float *x, const void *w, int bf16, int64_t n0, int64_t n1, float *y, int64_t ldy) {
  const int chunk = level == ISA_AVX512 ? 8 : 4;
  const rows_kernel *kernels = level == ISA_AVX512 ? avx512_kernels : avx2_kernels;
  const int64_t block = M <= chunk ? n1 - n0 : ROW_BLOCK;
  for (int64_t b = n0; b < n1; b += block) {
    const int64_t e = b + block < n1 ? b + block : n1;
    for (int m = 0; m < M; m += chunk) kernels[M - m < chunk ? M - m : chunk](bf16, K, x + (size_t)m * K, w, b, e, y + (size_t)m * ldy, ldy);
  }
}
#endif

// Rows of W converted per BLAS call for M rows of X, at most `rows`.
static int64_t bf16_panel_rows(int M, int K, int64_t rows) {
  int64_t panel = (M >= BF16_WIDE_ROWS ? BF16_WIDE_PANEL_FLOATS : BF16_PANEL_FLOATS) / K;
  if (panel < 1) panel = 1;
  return panel < rows ? panel : rows;
}

static void bf16_rows_to_f32(const uint16_t *src, size_t count, float *dst) {
  uint32_t *out = (uint32_t *)dst;
  for (size_t i = 0; i < count; i++) out[i] = (uint32_t)src[i] << 16;
}

// float32 -> bfloat16 bits, to nearest even, a NaN kept a NaN (as toBfloat16 in frozen.ts).
static inline uint32_t bf16_bits(uint32_t u) {
  return (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

VECTOR_CLONES static void round_to_bf16_bits(const float *x, size_t count, uint16_t *out) {
  const uint32_t *in = (const uint32_t *)x;
  for (size_t i = 0; i < count; i++) out[i] = (uint16_t)bf16_bits(in[i]);
}

// The same values as floats, for the products that take float32 X.
VECTOR_CLONES static void round_to_bf16_floats(const float *x, size_t count, float *out) {
  const uint32_t *in = (const uint32_t *)x;
  uint32_t *o = (uint32_t *)out;
  for (size_t i = 0; i < count; i++) o[i] = bf16_bits(in[i]) << 16;
}

// Y = round(X) (W or W^T) on oneDNN where it runs bfloat16 instructions; -1 where it cannot (or
// fails), and the caller goes on with X rounded as floats.
static int onednn_product(int backward, int M, int64_t N, int K, const float *x, const void *w, float *y, int threads) {
  int ok;
  onednn_status(&ok);
  if (!ok) return -1;
  const size_t count = (size_t)M * (size_t)(backward ? N : K);
  uint16_t *bits = malloc(sizeof(uint16_t) * count);
  if (!bits) return -1;
  round_to_bf16_bits(x, count, bits);
  const int failed = onednn_bf16_product(backward, M, N, K, bits, w, y, threads);
  free(bits);
  return failed;
}

// C[m, n] = sum_k A[m, k] B[n, k] (lda, ldb, ldc), the compiled fallback of the forward.
static void loop_gemm_nt(int M, int N, int K, const float *A, int lda, const float *B, int ldb, float *C, int ldc) {
  for (int m = 0; m < M; m++) {
    const float *restrict a = A + (size_t)m * lda;
    for (int n = 0; n < N; n++) {
      const float *restrict b = B + (size_t)n * ldb;
      float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int k = 0;
      for (; k + 8 <= K; k += 8)
        for (int j = 0; j < 8; j++) part[j] += a[k + j] * b[k + j];
      float total = part[0] + part[1] + part[2] + part[3] + part[4] + part[5] + part[6] + part[7];
      for (; k < K; k++) total += a[k] * b[k];
      C[(size_t)m * ldc + n] = total;
    }
  }
}

// C[m, k] (+)= sum_n A[m, n] B[n, k] (lda, ldb = ldc = K), the compiled fallback of the backward.
static void loop_gemm_nn(int M, int K, int N, const float *A, int lda, const float *B, int accumulate, float *C) {
  for (int m = 0; m < M; m++) {
    float *restrict c = C + (size_t)m * K;
    if (!accumulate) memset(c, 0, sizeof(float) * (size_t)K);
    for (int n = 0; n < N; n++) {
      const float a = A[(size_t)m * lda + n];
      const float *restrict b = B + (size_t)n * K;
      for (int k = 0; k < K; k++) c[k] += a * b[k];
    }
  }
}

// LoRA's deltas inside a product: T = (X A) * scale once per adapter, then each task adds T B to
// its own columns of Y (decoding's adapters are too small to be worth a tensor op, or a thread, each).
// T[M, r] = (X[M, K] A[K, r]) * scale.
VECTOR_CLONES static void lora_down(int M, int K, int r, const float *x, const float *A, float scale, float *t, sgemm_fn blas) {
  if (blas) {
    blas(ROW_MAJOR, NO_TRANS, NO_TRANS, M, r, K, scale, x, K, A, r, 0.0f, t, r);
    return;
  }
  for (int m = 0; m < M; m++) {
    const float *restrict xm = x + (size_t)m * K;
    // t's columns 16 at a time in a fixed-size block the compiler keeps in registers.
    for (int j0 = 0; j0 < r; j0 += 16) {
      const int width = r - j0 < 16 ? r - j0 : 16;
      float block[16] = {0};
      for (int k = 0; k < K; k++)
        for (int j = 0; j < width; j++) block[j] += xm[k] * A[(size_t)k * r + j0 + j];
      for (int j = 0; j < width; j++) t[(size_t)m * r + j0 + j] = block[j] * scale;
    }
  }
}

// Y[M, cols] (rows ldy apart) += T[M, r] B[r, cols] (B's rows ldb apart).
VECTOR_CLONES static void lora_up(int M, int cols, int r, const float *t, const float *B, int64_t ldb, float *y, int64_t ldy, sgemm_fn blas) {
  if (blas) {
    blas(ROW_MAJOR, NO_TRANS, NO_TRANS, M, cols, r, 1.0f, t, r, B, (int)ldb, 1.0f, y, (int)ldy);
    return;
  }
  for (int m = 0; m < M; m++) {
    float *restrict ym = y + (size_t)m * ldy;
    for (int j = 0; j < r; j++) {
      const float tj = t[(size_t)m * r + j];
      const float *restrict b = B + (size_t)j * ldb;
      for (int n = 0; n < cols; n++) ym[n] += tj * b[n];
    }
  }
}

typedef struct {
  int M, K, bf16, small;
  int64_t N;
  const float *x;
  const void *w;
  float *y;
  sgemm_fn blas;
  const lora_term *lora;
  int lora_count;
  const float *lora_t; // each adapter's T = (X A) * scale, [M, rank], one after another
  atomic_int failed;
} forward_job;

// Each adapter's T B added to Y's columns [n0, n1).
static void add_lora(const forward_job *j, int64_t n0, int64_t n1) {
  const float *t = j->lora_t;
  for (int i = 0; i < j->lora_count; t += (size_t)j->M * j->lora[i].rank, i++) {
    const lora_term *a = &j->lora[i];
    const int64_t lo = n0 > a->column ? n0 : a->column, hi = n1 < a->column + a->width ? n1 : a->column + a->width;
    if (lo < hi) lora_up(j->M, (int)(hi - lo), a->rank, t, a->B + (lo - a->column), a->width, j->y + lo, j->N, j->blas);
  }
}

// Rows [n0, n1) of Y through the BLAS or the loop, bfloat16 converted a panel at a time.
static int forward_panels(const forward_job *j, int64_t n0, int64_t n1) {
  const int M = j->M, K = j->K;
  int64_t panel = n1 - n0;
  float *scratch = NULL;
  if (j->bf16) {
    panel = bf16_panel_rows(M, K, n1 - n0);
    scratch = malloc(sizeof(float) * (size_t)(panel * K));
    if (!scratch) return -1;
  }
  for (int64_t p = n0; p < n1; p += panel) {
    const int64_t rows = p + panel <= n1 ? panel : n1 - p;
    const float *w;
    if (j->bf16) {
      bf16_rows_to_f32((const uint16_t *)j->w + p * K, (size_t)(rows * K), scratch);
      w = scratch;
    } else {
      w = (const float *)j->w + p * K;
    }
    if (j->blas) j->blas(ROW_MAJOR, NO_TRANS, TRANS, M, (int)rows, K, 1.0f, j->x, K, w, K, 0.0f, j->y + p, (int)j->N);
    else loop_gemm_nt(M, (int)rows, K, j->x, K, w, K, j->y + p, (int)j->N);
  }
  free(scratch);
  return 0;
}

static void forward_task(void *arg, int task, int tasks) {
  forward_job *j = arg;
  // Even boundaries keep the kernels on whole pairs of rows.
  int64_t n0 = (j->N * task / tasks) & ~(int64_t)1, n1 = task + 1 == tasks ? j->N : (j->N * (task + 1) / tasks) & ~(int64_t)1;
  if (n1 <= n0) return;
#ifdef FLOWRL_X86
  if (j->small) small_rows(isa(), j->M, j->K, j->x, j->w, j->bf16, n0, n1, j->y, j->N);
  else
#endif
  if (forward_panels(j, n0, n1) != 0) {
    atomic_store(&j->failed, 1);
    return;
  }
  add_lora(j, n0, n1);
}

int frozen_forward(int M, int64_t N, int K, const float *x, const void *w, int bf16, int bf16_x, float *y, sgemm_fn blas, int blas_threads, int threads,
                   const lora_term *lora, int lora_count, float lora_scale) {
  forward_job job = {.M = M, .K = K, .bf16 = bf16, .N = N, .x = x, .w = w, .y = y, .blas = blas, .lora = lora, .lora_count = lora_count};
  bf16_x = bf16_x && bf16;
  float *t = NULL;
  if (lora_count) {
    size_t ranks = 0;
    for (int i = 0; i < lora_count; i++) ranks += (size_t)lora[i].rank;
    t = malloc(sizeof(float) * (size_t)M * (ranks ? ranks : 1));
    if (!t) return -1;
    float *ti = t;
    for (int i = 0; i < lora_count; ti += (size_t)M * lora[i].rank, i++) lora_down(M, K, lora[i].rank, x, lora[i].A, lora_scale, ti, blas);
    job.lora_t = t;
  }
  job.small = M <= small_rows_limit(isa());
  atomic_init(&job.failed, 0);
  float *rounded = NULL;
  if (bf16_x) {
    // Many rows: oneDNN where it can. Few (decoding a small batch), or without it: the same product on X rounded.
    if (M >= ONEDNN_MIN_ROWS && onednn_product(0, M, N, K, x, w, y, threads > blas_threads ? threads : blas_threads) == 0) {
      add_lora(&job, 0, N);
      free(t);
      return 0;
    }
    rounded = malloc(sizeof(float) * (size_t)M * (size_t)K);
    if (!rounded) {
      free(t);
      return -1;
    }
    round_to_bf16_floats(x, (size_t)M * (size_t)K, rounded);
    job.x = rounded;
  }
  // A BLAS with threads of its own is not split again.
  const int split = threads > 1 && N * K >= SPLIT_MIN_WORK && (job.small || !blas || blas_threads == 1);
  if (split) {
    int64_t tasks = N / TASK_MIN_ROWS;
    if (tasks > (int64_t)threads * TASKS_PER_THREAD) tasks = (int64_t)threads * TASKS_PER_THREAD;
    if (tasks < threads) tasks = threads;
    run_tasks(forward_task, &job, (int)tasks, threads);
  } else {
    forward_task(&job, 0, 1);
  }
  free(t);
  free(rounded);
  return atomic_load(&job.failed) ? -1 : 0;
}

int frozen_backward(int M, int64_t N, int K, const float *x, const void *w, int bf16, int bf16_x, float *y, sgemm_fn blas, int threads) {
  float *rounded = NULL;
  if (bf16_x && bf16) {
    if (onednn_product(1, M, N, K, x, w, y, threads) == 0) return 0;
    rounded = malloc(sizeof(float) * (size_t)M * (size_t)N);
    if (!rounded) return -1;
    round_to_bf16_floats(x, (size_t)M * (size_t)N, rounded);
    x = rounded;
  }
  int64_t panel = N;
  float *scratch = NULL;
  if (bf16) {
    panel = bf16_panel_rows(M, K, N);
    scratch = malloc(sizeof(float) * (size_t)(panel * K));
    if (!scratch) {
      free(rounded);
      return -1;
    }
  }
  for (int64_t n0 = 0; n0 < N; n0 += panel) {
    const int64_t rows = n0 + panel <= N ? panel : N - n0;
    const float *wp = (const float *)w + n0 * K;
    if (bf16) {
      bf16_rows_to_f32((const uint16_t *)w + n0 * K, (size_t)(rows * K), scratch);
      wp = scratch;
    }
    if (blas) blas(ROW_MAJOR, NO_TRANS, NO_TRANS, M, K, (int)rows, 1.0f, x + n0, (int)N, wp, K, n0 ? 1.0f : 0.0f, y, K);
    else loop_gemm_nn(M, K, (int)rows, x + n0, (int)N, wp, n0 != 0, y);
  }
  free(scratch);
  free(rounded);
  return 0;
}
