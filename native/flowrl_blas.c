// flowrl's optional native kernels for tfjs's wasm backend: single-precision GEMM (2-D, transposed,
// batched, broadcast batch) and a [outer, reduce, inner] sum, run in place on typed arrays (the
// wasm heap). An optimised BLAS is dlopen'ed at run time (OpenBLAS, MKL or BLIS); nothing is
// linked, so the addon loads anywhere and falls back to a compiled loop without one.
#define _GNU_SOURCE
#define NAPI_VERSION 8
#include <dlfcn.h>
#include <node_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include "flowrl_native.h"

// Below this many multiply-adds the compiled loop beats a BLAS call's fixed cost (decoding's
// attention: 128 products of 1x32x64, 74 us through OpenBLAS).
enum { TINY_GEMM = 32768 };
typedef void (*set_threads_fn)(int);
typedef int (*get_threads_fn)(void);

static sgemm_fn blas_sgemm = NULL;
static set_threads_fn blas_set_threads = NULL;
static get_threads_fn blas_get_threads = NULL;
static char blas_name[4200] = "";
static int load_tried = 0;

// A library qualifies only if it is a known optimised BLAS: the reference libblas also exports
// cblas_sgemm but runs slower than the wasm backend.
static int try_library(const char *path) {
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) return 0;
  sgemm_fn sgemm = (sgemm_fn)dlsym(handle, "cblas_sgemm");
  set_threads_fn set_threads = (set_threads_fn)dlsym(handle, "openblas_set_num_threads");
  get_threads_fn get_threads = (get_threads_fn)dlsym(handle, "openblas_get_num_threads");
  const char *family = set_threads ? "OpenBLAS" : NULL;
  if (!set_threads) {
    set_threads = (set_threads_fn)dlsym(handle, "MKL_Set_Num_Threads");
    get_threads = (get_threads_fn)dlsym(handle, "MKL_Get_Max_Threads");
    if (set_threads) family = "MKL";
  }
  if (!family && dlsym(handle, "bli_thread_set_num_threads")) {
    set_threads = (set_threads_fn)dlsym(handle, "bli_thread_set_num_threads");
    family = "BLIS";
  }
  if (!sgemm || !family) {
    dlclose(handle);
    return 0;
  }
  blas_sgemm = sgemm;
  blas_set_threads = set_threads;
  blas_get_threads = get_threads;
  snprintf(blas_name, sizeof blas_name, "%s (%s)", family, path);
  return 1;
}

// The compiled fallback (no BLAS found). A is read through strides that express its transpose.
// Without transB: C[m, :] += A[m, k] * B[k, :] (contiguous, vectorised). With transB: each C[m, n]
// is a dot product of rows, with eight partial sums so the compiler can vectorise the reduction.
__attribute__((noinline)) static void loop_sgemm(int transA, int transB, int M, int N, int K, const float *restrict A, const float *restrict B, float *restrict C) {
  const size_t am = transA ? 1 : (size_t)K, ak = transA ? (size_t)M : 1;
  if (!transB) {
    memset(C, 0, sizeof(float) * (size_t)M * N);
    for (int m = 0; m < M; m++) {
      float *restrict c = C + (size_t)m * N;
      for (int k = 0; k < K; k++) {
        const float a = A[m * am + k * ak];
        const float *restrict b = B + (size_t)k * N;
        for (int n = 0; n < N; n++) c[n] += a * b[n];
      }
    }
    return;
  }
  float *row = malloc(sizeof(float) * (size_t)(K > 0 ? K : 1));
  if (!row) return;
  for (int m = 0; m < M; m++) {
    for (int k = 0; k < K; k++) row[k] = A[m * am + k * ak];
    for (int n = 0; n < N; n++) {
      const float *restrict b = B + (size_t)n * K;
      float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int k = 0;
      for (; k + 8 <= K; k += 8)
        for (int j = 0; j < 8; j++) part[j] += row[k + j] * b[k + j];
      float total = part[0] + part[1] + part[2] + part[3] + part[4] + part[5] + part[6] + part[7];
      for (; k < K; k++) total += row[k] * b[k];
      C[(size_t)m * N + n] = total;
    }
  }
  free(row);
}

static napi_value throw_error(napi_env env, const char *message) {
  napi_throw_error(env, NULL, message);
  return NULL;
}

static int get_int(napi_env env, napi_value value, int64_t *out) {
  return napi_get_value_int64(env, value, out) == napi_ok;
}

// A typed array of the `wanted` type: its data and length; 0 for anything else.
static int get_typed(napi_env env, napi_value value, napi_typedarray_type wanted, void **data, size_t *length) {
  napi_typedarray_type type;
  napi_value buffer;
  size_t offset;
  return napi_get_typedarray_info(env, value, &type, length, data, &buffer, &offset) == napi_ok && type == wanted;
}

static int get_floats(napi_env env, napi_value value, float **data, size_t *length) {
  return get_typed(env, value, napi_float32_array, (void **)data, length);
}

static int get_int32s(napi_env env, napi_value value, int32_t **data, size_t *length) {
  return get_typed(env, value, napi_int32_array, (void **)data, length);
}

static int get_float64s(napi_env env, napi_value value, double **data, size_t *length) {
  return get_typed(env, value, napi_float64_array, (void **)data, length);
}

static int get_number(napi_env env, napi_value value, double *out) {
  return napi_get_value_double(env, value, out) == napi_ok;
}

// load(paths: string[]): the BLAS now in use ('' for the compiled loop).
static napi_value load(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  uint32_t count = 0;
  if (argc >= 1) napi_get_array_length(env, argv[0], &count);
  // Loaded once per process (worker threads share the library and its pointers).
  for (uint32_t i = 0; i < count && !blas_sgemm && !load_tried; i++) {
    napi_value item;
    char path[4096];
    size_t written;
    napi_get_element(env, argv[0], i, &item);
    if (napi_get_value_string_utf8(env, item, path, sizeof path, &written) == napi_ok) try_library(path);
  }
  load_tried = 1;
  napi_value result;
  napi_create_string_utf8(env, blas_name, NAPI_AUTO_LENGTH, &result);
  return result;
}

// setThreads(n): threads of the loaded BLAS (no-op without one); returns the count in effect.
static napi_value set_threads(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int64_t n = 1;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc >= 1) get_int(env, argv[0], &n);
  if (blas_set_threads && n > 0) blas_set_threads((int)n);
  napi_value result;
  napi_create_int32(env, blas_get_threads ? blas_get_threads() : 1, &result);
  return result;
}

// Time inside the products and their work, the heap's (sgemm) and the frozen base's, for a bench
// to split a phase into its products and the rest (productCounters).
enum { HEAP_PRODUCTS, FROZEN_PRODUCTS };
static atomic_llong product_nanos[2], product_flops[2];

static int64_t now_nanos(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void count_product(int kind, int64_t started, int64_t flops) {
  atomic_fetch_add(&product_nanos[kind], now_nanos() - started);
  atomic_fetch_add(&product_flops[kind], flops);
}

// On a shared machine (machine_shared) the BLAS's own split of a small product waits for its thread
// that shares a core with the other process, product after product (the update's attention and
// adapter products took 4x their idle time beside one busy process). There each product, or each
// of a batch, is cut into parts of rows or columns, one BLAS thread each, taken by the addon's pool
// (twice the BLAS's threads there) as they run.
enum { SGEMM_PART_MIN = 64, SGEMM_PARTS_MAX = 8 };
typedef struct {
  int ta, tb;
  int64_t M, N, K, aStride, bStride, parts;
  int by_rows;
  const float *A, *B;
  float *C;
} sgemm_job;

static void sgemm_part(void *ctx, int task, int tasks) {
  (void)tasks;
  const sgemm_job *j = ctx;
  const int64_t g = task / j->parts, part = task % j->parts;
  const int64_t along = j->by_rows ? j->M : j->N, from = along * part / j->parts, to = along * (part + 1) / j->parts;
  const float *a = j->A + j->aStride * g, *b = j->B + j->bStride * g;
  float *c = j->C + j->M * j->N * g;
  const int lda = j->ta ? (int)j->M : (int)j->K, ldb = j->tb ? (int)j->K : (int)j->N;
  if (j->by_rows) {
    // Rows of op(A): rows of A, or columns of A stored transposed.
    a += j->ta ? from : from * j->K;
    c += from * j->N;
    blas_sgemm(ROW_MAJOR, j->ta ? TRANS : NO_TRANS, j->tb ? TRANS : NO_TRANS, (int)(to - from), (int)j->N, (int)j->K, 1.0f, a, lda, b, ldb, 0.0f, c, (int)j->N);
  } else {
    b += j->tb ? from * j->K : from;
    c += from;
    blas_sgemm(ROW_MAJOR, j->ta ? TRANS : NO_TRANS, j->tb ? TRANS : NO_TRANS, (int)j->M, (int)(to - from), (int)j->K, 1.0f, a, lda, b, ldb, 0.0f, c, (int)j->N);
  }
}

// The BLAS's thread count while products run in parts: 1, the count before restored by the last
// caller to finish (data-parallel workers may be inside at once).
static pthread_mutex_t parts_lock = PTHREAD_MUTEX_INITIALIZER;
static int parts_running, blas_threads_before;

// 1 when it ran the products in parts; 0 when they should run as usual.
static int parted_sgemm(int64_t ta, int64_t tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t aStride, const float *B, int64_t bStride, float *C,
                        int64_t batch) {
  if (!blas_set_threads || !blas_get_threads) return 0;
  pthread_mutex_lock(&parts_lock);
  const int threads = parts_running ? blas_threads_before : blas_get_threads();
  // One BLAS thread (the default outside the bench) has no second thread to wait for.
  if (threads <= 1 || !machine_shared(NULL)) {
    pthread_mutex_unlock(&parts_lock);
    return 0;
  }
  if (parts_running++ == 0) {
    blas_threads_before = threads;
    blas_set_threads(1);
  }
  pthread_mutex_unlock(&parts_lock);
  sgemm_job job = {.ta = (int)ta, .tb = (int)tb, .M = M, .N = N, .K = K, .aStride = aStride, .bStride = bStride, .A = A, .B = B, .C = C};
  job.by_rows = M >= N;
  const int64_t along = job.by_rows ? M : N;
  // A batch of at least two tasks a thread runs whole products; fewer are cut.
  int64_t parts = batch >= 4 * threads ? 1 : along / SGEMM_PART_MIN;
  job.parts = parts < 1 ? 1 : parts > SGEMM_PARTS_MAX ? SGEMM_PARTS_MAX : parts;
  run_tasks(sgemm_part, &job, (int)(batch * job.parts), threads);
  count_parted_product();
  pthread_mutex_lock(&parts_lock);
  if (--parts_running == 0) blas_set_threads(blas_threads_before);
  pthread_mutex_unlock(&parts_lock);
  return 1;
}

// sgemm(transA, transB, M, N, K, A, aOffset, aStride, B, bOffset, bStride, C, cOffset, batch):
// for each of `batch` products, C_g = op(A_g) op(B_g), row-major and dense; offsets and strides
// count floats, and a stride of 0 reuses one matrix across the batch (broadcast). sgemmLoop is the
// same with the compiled loop only, so one process can run (and test) both paths.
static napi_value run_sgemm(napi_env env, napi_callback_info info, int allow_blas) {
  size_t argc = 14;
  napi_value argv[14];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc != 14) return throw_error(env, "sgemm: expected 14 arguments");
  int64_t ta, tb, M, N, K, aOff, aStride, bOff, bStride, cOff, batch;
  float *A, *B, *C;
  size_t aLen, bLen, cLen;
  if (!get_int(env, argv[0], &ta) || !get_int(env, argv[1], &tb) || !get_int(env, argv[2], &M) || !get_int(env, argv[3], &N) ||
      !get_int(env, argv[4], &K) || !get_floats(env, argv[5], &A, &aLen) || !get_int(env, argv[6], &aOff) ||
      !get_int(env, argv[7], &aStride) || !get_floats(env, argv[8], &B, &bLen) || !get_int(env, argv[9], &bOff) ||
      !get_int(env, argv[10], &bStride) || !get_floats(env, argv[11], &C, &cLen) || !get_int(env, argv[12], &cOff) ||
      !get_int(env, argv[13], &batch))
    return throw_error(env, "sgemm: bad argument types");
  if (M < 0 || N < 0 || K < 0 || batch < 0 || aOff < 0 || bOff < 0 || cOff < 0 || aStride < 0 || bStride < 0)
    return throw_error(env, "sgemm: negative size");
  if (batch > 0 && ((size_t)(aOff + aStride * (batch - 1) + M * K) > aLen || (size_t)(bOff + bStride * (batch - 1) + K * N) > bLen ||
                    (size_t)(cOff + M * N * batch) > cLen))
    return throw_error(env, "sgemm: out of bounds");
  const int64_t started = now_nanos();
  if (allow_blas && blas_sgemm && M * N * K >= TINY_GEMM && batch > 0 && parted_sgemm(ta, tb, M, N, K, A + aOff, aStride, B + bOff, bStride, C + cOff, batch)) {
    count_product(HEAP_PRODUCTS, started, 2 * M * N * K * batch);
    return NULL;
  }
  for (int64_t g = 0; g < batch; g++) {
    const float *a = A + aOff + aStride * g;
    const float *b = B + bOff + bStride * g;
    float *c = C + cOff + M * N * g;
    if (M == 0 || N == 0) continue;
    if (K == 0) {
      memset(c, 0, sizeof(float) * (size_t)M * N);
    } else if (allow_blas && blas_sgemm && M * N * K >= TINY_GEMM) {
      blas_sgemm(ROW_MAJOR, ta ? TRANS : NO_TRANS, tb ? TRANS : NO_TRANS, (int)M, (int)N, (int)K, 1.0f, a, ta ? (int)M : (int)K, b,
                 tb ? (int)K : (int)N, 0.0f, c, (int)N);
    } else {
      loop_sgemm((int)ta, (int)tb, (int)M, (int)N, (int)K, a, b, c);
    }
  }
  count_product(HEAP_PRODUCTS, started, 2 * M * N * K * batch);
  return NULL;
}

static napi_value sgemm(napi_env env, napi_callback_info info) { return run_sgemm(env, info, 1); }
static napi_value sgemm_loop(napi_env env, napi_callback_info info) { return run_sgemm(env, info, 0); }

// sum(X, xOffset, outer, reduce, inner, Y, yOffset): Y[o, i] = sum_r X[o, r, i].
static napi_value sum(napi_env env, napi_callback_info info) {
  size_t argc = 7;
  napi_value argv[7];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc != 7) return throw_error(env, "sum: expected 7 arguments");
  int64_t xOff, outer, reduce, inner, yOff;
  float *X, *Y;
  size_t xLen, yLen;
  if (!get_floats(env, argv[0], &X, &xLen) || !get_int(env, argv[1], &xOff) || !get_int(env, argv[2], &outer) ||
      !get_int(env, argv[3], &reduce) || !get_int(env, argv[4], &inner) || !get_floats(env, argv[5], &Y, &yLen) ||
      !get_int(env, argv[6], &yOff))
    return throw_error(env, "sum: bad argument types");
  if (xOff < 0 || yOff < 0 || outer < 0 || reduce < 0 || inner < 0 || (size_t)(xOff + outer * reduce * inner) > xLen ||
      (size_t)(yOff + outer * inner) > yLen)
    return throw_error(env, "sum: out of bounds");
  for (int64_t o = 0; o < outer; o++) {
    float *y = Y + yOff + o * inner;
    const float *x = X + xOff + o * reduce * inner;
    if (inner == 1) {
      double total = 0;
      for (int64_t r = 0; r < reduce; r++) total += x[r];
      y[0] = (float)total;
      continue;
    }
    memset(y, 0, sizeof(float) * (size_t)inner);
    for (int64_t r = 0; r < reduce; r++) {
      const float *row = x + r * inner;
      for (int64_t i = 0; i < inner; i++) y[i] += row[i];
    }
  }
  return NULL;
}

// adamw(heap, param, grad, m, v, n, decayFactor, beta1, beta2, eps, stepSize, bc2Sqrt): one AdamW
// update of n floats in place, the same arithmetic as core-adapters/model/optim.ts:
//   p *= decayFactor; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//   p -= stepSize * m / (sqrt(v) / bc2Sqrt + eps)
static napi_value adamw(napi_env env, napi_callback_info info) {
  size_t argc = 12;
  napi_value argv[12];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc != 12) return throw_error(env, "adamw: expected 12 arguments");
  float *H;
  size_t len;
  int64_t pOff, gOff, mOff, vOff, n;
  double decay, b1, b2, eps, stepSize, bc2;
  if (!get_floats(env, argv[0], &H, &len) || !get_int(env, argv[1], &pOff) || !get_int(env, argv[2], &gOff) || !get_int(env, argv[3], &mOff) ||
      !get_int(env, argv[4], &vOff) || !get_int(env, argv[5], &n) || !get_number(env, argv[6], &decay) || !get_number(env, argv[7], &b1) ||
      !get_number(env, argv[8], &b2) || !get_number(env, argv[9], &eps) || !get_number(env, argv[10], &stepSize) || !get_number(env, argv[11], &bc2))
    return throw_error(env, "adamw: bad argument types");
  if (n < 0 || pOff < 0 || gOff < 0 || mOff < 0 || vOff < 0 || (size_t)(pOff + n) > len || (size_t)(gOff + n) > len || (size_t)(mOff + n) > len ||
      (size_t)(vOff + n) > len)
    return throw_error(env, "adamw: out of bounds");
  float *p = H + pOff, *m = H + mOff, *v = H + vOff;
  const float *g = H + gOff;
  const float fd = (float)decay, f1 = (float)b1, f2 = (float)b2, fe = (float)eps, fs = (float)stepSize, fb = (float)bc2;
  for (int64_t i = 0; i < n; i++) {
    const float gi = g[i];
    const float mi = m[i] * f1 + gi * (1.0f - f1);
    const float vi = v[i] * f2 + gi * gi * (1.0f - f2);
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * fd - (mi / (sqrtf(vi) / fb + fe)) * fs;
  }
  return NULL;
}

// frozenMatmul(backward, M, N, K, X, xOff, W, wOff, Y, yOff, flags[, splitThreads[, scale, adapters]]):
// see frozen.c; flags: 1 the BLAS (else the compiled loop), 2 X rounded to bfloat16 (a bfloat16 W's
// products on bfloat16 instructions where oneDNN runs them); splitThreads (default 1) lets a
// product use that many threads. X and Y are float32
// arrays (the wasm heap), W a Float32Array or a Uint16Array of bfloat16 bits; offsets count
// elements. adapters (a forward's LoRA deltas, times scale): a Float64Array of (A's offset, B's
// offset, rank, width, first column) per adapter, A and B in X's array.
static napi_value frozen_matmul(napi_env env, napi_callback_info info) {
  size_t argc = 14;
  napi_value argv[14];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc != 11 && argc != 12 && argc != 14) return throw_error(env, "frozenMatmul: expected 11, 12 or 14 arguments");
  int64_t splitThreads = 1;
  if (argc >= 12 && !get_int(env, argv[11], &splitThreads)) return throw_error(env, "frozenMatmul: bad argument types");
  double scale = 0;
  double *terms = NULL;
  size_t termValues = 0;
  if (argc == 14 && (!get_number(env, argv[12], &scale) || !get_float64s(env, argv[13], &terms, &termValues) || termValues % 5))
    return throw_error(env, "frozenMatmul: bad adapter arguments");
  int64_t backward, M, N, K, xOff, wOff, yOff, flags;
  float *X, *Y;
  size_t xLen, yLen, wLen;
  napi_typedarray_type wType;
  void *wRaw;
  napi_value wBuffer;
  size_t wByteOffset;
  if (!get_int(env, argv[0], &backward) || !get_int(env, argv[1], &M) || !get_int(env, argv[2], &N) || !get_int(env, argv[3], &K) ||
      !get_floats(env, argv[4], &X, &xLen) || !get_int(env, argv[5], &xOff) ||
      napi_get_typedarray_info(env, argv[6], &wType, &wLen, &wRaw, &wBuffer, &wByteOffset) != napi_ok || !get_int(env, argv[7], &wOff) ||
      !get_floats(env, argv[8], &Y, &yLen) || !get_int(env, argv[9], &yOff) || !get_int(env, argv[10], &flags))
    return throw_error(env, "frozenMatmul: bad argument types");
  if (wType != napi_float32_array && wType != napi_uint16_array) return throw_error(env, "frozenMatmul: W must be a Float32Array or a Uint16Array (bfloat16)");
  if (M < 0 || N < 0 || K < 0 || xOff < 0 || wOff < 0 || yOff < 0) return throw_error(env, "frozenMatmul: negative size");
  const int64_t xCount = M * (backward ? N : K), yCount = M * (backward ? K : N);
  if ((size_t)(xOff + xCount) > xLen || (size_t)(yOff + yCount) > yLen || (size_t)(wOff + N * K) > wLen)
    return throw_error(env, "frozenMatmul: out of bounds");
  if (M == 0 || N == 0 || K == 0) {
    memset(Y + yOff, 0, sizeof(float) * (size_t)yCount);
    return NULL;
  }
  const int count = (int)(termValues / 5);
  if (backward && count) return throw_error(env, "frozenMatmul: adapters are for a forward product");
  lora_term *lora = count ? malloc(sizeof(lora_term) * (size_t)count) : NULL;
  if (count && !lora) return throw_error(env, "frozenMatmul: out of memory");
  for (int i = 0; i < count; i++) {
    const double *t = terms + 5 * i;
    const int64_t aOff = (int64_t)t[0], bOff = (int64_t)t[1], rank = (int64_t)t[2], width = (int64_t)t[3], column = (int64_t)t[4];
    if (aOff < 0 || bOff < 0 || rank < 0 || width < 0 || column < 0 || column + width > N || (size_t)(aOff + K * rank) > xLen || (size_t)(bOff + rank * width) > xLen) {
      free(lora);
      return throw_error(env, "frozenMatmul: an adapter is out of bounds");
    }
    lora[i] = (lora_term){X + aOff, X + bOff, (int)rank, (int)width, (int)column};
  }
  const sgemm_fn blas = flags & 1 ? blas_sgemm : NULL;
  const int bf16 = wType == napi_uint16_array, bf16_x = (flags & 2) != 0;
  const void *w = (const char *)wRaw + wOff * (bf16 ? 2 : 4);
  const int64_t started = now_nanos();
  const int failed = backward ? frozen_backward((int)M, N, (int)K, X + xOff, w, bf16, bf16_x, Y + yOff, blas, (int)splitThreads)
                              : frozen_forward((int)M, N, (int)K, X + xOff, w, bf16, bf16_x, Y + yOff, blas, blas && blas_get_threads ? blas_get_threads() : 1, (int)splitThreads,
                                               lora, count, (float)scale);
  free(lora);
  if (failed) return throw_error(env, "frozenMatmul: out of memory");
  count_product(FROZEN_PRODUCTS, started, 2 * M * N * K);
  return NULL;
}

// ---- Log-softmax over a vocabulary, fused with picking the target (the language-model head).
// One pass computes each row's log-sum-exp; the next the target's log-prob and the entropy; the
// backward writes dL/dz. exp is fast_expf (flowrl_native.h), which the compiler vectorises.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif

enum { LANES = 8, BLOCK = 1024 };


// Each pass over a row is its own small loop with LANES independent partial results, which the
// compiler vectorises without reassociating floating-point sums. These never look at floating-point
// exception flags, so they are compiled without trapping semantics (selects become vector min/max;
// fast_expf sits inside the same region, or it could not be inlined into them).
static float row_max(const float *restrict z, int64_t V) {
  float lanes[LANES];
  for (int k = 0; k < LANES; k++) lanes[k] = -INFINITY;
  int64_t j = 0;
  for (; j + LANES <= V; j += LANES)
    for (int k = 0; k < LANES; k++) lanes[k] = z[j + k] > lanes[k] ? z[j + k] : lanes[k];
  float peak = -INFINITY;
  for (; j < V; j++) peak = z[j] > peak ? z[j] : peak;
  for (int k = 0; k < LANES; k++) peak = lanes[k] > peak ? lanes[k] : peak;
  return peak;
}

// sum_j exp(z_j t - shift) over [j0, j1).
static float block_sum_exp(const float *restrict z, int64_t j0, int64_t j1, float t, float shift) {
  float lanes[LANES] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = j0;
  for (; j + LANES <= j1; j += LANES)
    for (int k = 0; k < LANES; k++) lanes[k] += fast_expf(z[j + k] * t - shift);
  float rest = 0;
  for (; j < j1; j++) rest += fast_expf(z[j] * t - shift);
  for (int k = 0; k < LANES; k++) rest += lanes[k];
  return rest;
}

// -sum_j p_j log p_j over [j0, j1), with log p_j = z_j t - lse.
static float block_entropy(const float *restrict z, int64_t j0, int64_t j1, float t, float lse) {
  float lanes[LANES] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = j0;
  for (; j + LANES <= j1; j += LANES)
    for (int k = 0; k < LANES; k++) {
      const float logp = z[j + k] * t - lse;
      lanes[k] -= fast_expf(logp) * logp;
    }
  float rest = 0;
  for (; j < j1; j++) {
    const float logp = z[j] * t - lse;
    rest -= fast_expf(logp) * logp;
  }
  for (int k = 0; k < LANES; k++) rest += lanes[k];
  return rest;
}

// out_j = t (-gLp p_j - gEnt p_j (log p_j + H)); the target's +t gLp is added by the caller.
static void row_grad(const float *restrict z, float *restrict out, int64_t V, float t, float lse, float gLp, float gEnt, float entropy) {
  for (int64_t j = 0; j < V; j++) {
    const float logp = z[j] * t - lse;
    const float p = fast_expf(logp);
    out[j] = t * (-gLp * p - gEnt * p * (logp + entropy));
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

// Returns log sum_j exp(z_j * invT) of one row: blocks summed in float, blocks added in double
// (a 150k-long float sum loses digits).
static double row_logsumexp(const float *restrict z, int64_t V, float invT) {
  const float shift = row_max(z, V) * invT;
  double total = 0;
  for (int64_t j0 = 0; j0 < V; j0 += BLOCK) total += block_sum_exp(z, j0, j0 + BLOCK < V ? j0 + BLOCK : V, invT, shift);
  return (double)shift + log(total);
}

// Threads for a pass beside this thread's products: what the caller asks, and at least the BLAS's
// (the cores those products use).
static int pass_threads(int64_t requested) {
  const int blas = blas_get_threads ? blas_get_threads() : 1;
  return requested > blas ? (int)requested : blas;
}

typedef struct {
  const float *Z;
  int64_t R, V;
  const int32_t *targets;
  float t;
  float *OUT;
  int with_entropy, backward;
  const float *G;
} token_job;

static void token_row(const token_job *job, int64_t r) {
  const int64_t R = job->R, V = job->V;
  const float t = job->t;
  const float *z = job->Z + r * V;
  const float lse = (float)row_logsumexp(z, V, t);
  float entropy = 0;
  if (job->with_entropy) {
    // H = -sum p log p, summed as the log-sum-exp is (blocks in float, totals in double).
    double sum = 0;
    for (int64_t j0 = 0; j0 < V; j0 += BLOCK) sum += block_entropy(z, j0, j0 + BLOCK < V ? j0 + BLOCK : V, t, lse);
    entropy = (float)sum;
  }
  if (!job->backward) {
    job->OUT[r] = z[job->targets[r]] * t - lse;
    job->OUT[R + r] = entropy;
    return;
  }
  const float gLp = job->G[r], gEnt = job->with_entropy ? job->G[R + r] : 0.0f;
  float *out = job->OUT + r * V;
  row_grad(z, out, V, t, lse, gLp, gEnt, entropy);
  out[job->targets[r]] += t * gLp;
}

static void token_rows(void *arg, int task, int tasks) {
  const token_job *job = arg;
  for (int64_t r = job->R * task / tasks; r < job->R * (task + 1) / tasks; r++) token_row(job, r);
}

// tokenLogProbs(Z, zOff, R, V, targets, invT, OUT, outOff, withEntropy, backward, G, gOff[, threads]):
//   forward: OUT[r] = log softmax(Z[r] invT)[target r]; OUT[R + r] = its entropy (when asked).
//   backward: OUT[r, j] = invT (gLp_r (1[j = t_r] - p_j) - gEnt_r p_j (log p_j + H_r)) with
//   G[r] = gLp_r and G[R + r] = gEnt_r; OUT must not overlap Z. Rows are shared over `threads`
//   (at least the BLAS's: the cores this thread's products use).
static napi_value token_logprobs(napi_env env, napi_callback_info info) {
  size_t argc = 13;
  napi_value argv[13];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc != 12 && argc != 13) return throw_error(env, "tokenLogProbs: expected 12 or 13 arguments");
  float *Z, *OUT, *G;
  int32_t *targets;
  size_t zLen, outLen, gLen, tLen;
  int64_t zOff, R, V, outOff, withEntropy, backward, gOff, threads = 1;
  double invT;
  if (!get_floats(env, argv[0], &Z, &zLen) || !get_int(env, argv[1], &zOff) || !get_int(env, argv[2], &R) || !get_int(env, argv[3], &V) ||
      !get_int32s(env, argv[4], &targets, &tLen) || !get_number(env, argv[5], &invT) || !get_floats(env, argv[6], &OUT, &outLen) ||
      !get_int(env, argv[7], &outOff) || !get_int(env, argv[8], &withEntropy) || !get_int(env, argv[9], &backward) ||
      !get_floats(env, argv[10], &G, &gLen) || !get_int(env, argv[11], &gOff) || (argc == 13 && !get_int(env, argv[12], &threads)))
    return throw_error(env, "tokenLogProbs: bad argument types");
  if (R < 0 || V <= 0 || zOff < 0 || outOff < 0 || gOff < 0 || (size_t)(zOff + R * V) > zLen || (size_t)R > tLen ||
      (size_t)(outOff + (backward ? R * V : 2 * R)) > outLen || (backward && (size_t)(gOff + 2 * R) > gLen))
    return throw_error(env, "tokenLogProbs: out of bounds");
  for (int64_t r = 0; r < R; r++) if (targets[r] < 0 || targets[r] >= V) return throw_error(env, "tokenLogProbs: target outside the vocabulary");
  const token_job job = {Z + zOff, R, V, targets, (float)invT, OUT + outOff, withEntropy != 0, backward != 0, G + gOff};
  const int use = pass_threads(threads);
  // A row of a real vocabulary is ~0.1 ms of work; rows of a small one are not worth a hand-off.
  run_tasks(token_rows, (void *)&job, R * V < (1 << 16) ? 1 : (int)(R < use * 4 ? R : use * 4), use);
  return NULL;
}

// sampleRows(Z, zOff, rows, V, invT, topP, uniforms, tokens, logProbs, keptLogMass, threads): see
// sampling.c; uniforms (Float64Array, NaN skips a row) are the rows' draws, the outputs one per row.
static napi_value sample_rows_napi(napi_env env, napi_callback_info info) {
  size_t argc = 11;
  napi_value argv[11];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc != 11) return throw_error(env, "sampleRows: expected 11 arguments");
  float *Z;
  double *uniforms, *logProbs, *kept;
  int32_t *tokens;
  size_t zLen, uLen, tLen, lLen, kLen;
  int64_t zOff, rows, V, threads;
  double invT, topP;
  if (!get_floats(env, argv[0], &Z, &zLen) || !get_int(env, argv[1], &zOff) || !get_int(env, argv[2], &rows) || !get_int(env, argv[3], &V) ||
      !get_number(env, argv[4], &invT) || !get_number(env, argv[5], &topP) || !get_float64s(env, argv[6], &uniforms, &uLen) ||
      !get_int32s(env, argv[7], &tokens, &tLen) || !get_float64s(env, argv[8], &logProbs, &lLen) || !get_float64s(env, argv[9], &kept, &kLen) ||
      !get_int(env, argv[10], &threads))
    return throw_error(env, "sampleRows: bad argument types");
  if (rows < 0 || V <= 0 || V > INT32_MAX || zOff < 0 || !(invT > 0) || isinf(invT) || !(topP > 0) || (size_t)(zOff + rows * V) > zLen || (size_t)rows > uLen ||
      (size_t)rows > tLen || (size_t)rows > lLen || (size_t)rows > kLen)
    return throw_error(env, "sampleRows: bad sizes");
  const sample_job job = {Z + zOff, V, (int)rows, invT, topP, uniforms, tokens, logProbs, kept};
  const int failed = sample_rows(&job, threads < 1 ? 1 : (int)threads);
  // generate.ts tells this message apart: a poisoned model, not a bug.
  if (failed == -2) return throw_error(env, "sampleRows: non-finite logits");
  if (failed != 0) return throw_error(env, "sampleRows: out of memory");
  return NULL;
}

// decodeAttention(H, batch, heads, kvHeads, headDim, capacity, past, qkv, cos, sin, bias, keys, values, out, threads):
// offsets into one float32 array (the wasm heap); see attention.c.
static napi_value decode_attention_napi(napi_env env, napi_callback_info info) {
  size_t argc = 15;
  napi_value argv[15];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc != 15) return throw_error(env, "decodeAttention: expected 15 arguments");
  float *H;
  size_t len;
  int64_t v[14];
  if (!get_floats(env, argv[0], &H, &len)) return throw_error(env, "decodeAttention: bad argument types");
  for (int i = 1; i < 15; i++)
    if (!get_int(env, argv[i], &v[i - 1]) || v[i - 1] < 0) return throw_error(env, "decodeAttention: bad argument types");
  const int64_t B = v[0], heads = v[1], kv = v[2], d = v[3], cap = v[4], past = v[5];
  if (kv < 1 || heads % kv || d % 2 || past >= cap) return throw_error(env, "decodeAttention: bad sizes");
  const int64_t width = B * (heads + 2 * kv) * d, cache = B * kv * cap * d;
  const int64_t sizes[7] = {width, width, width, B * (heads / kv) * cap, cache, cache, B * heads * d};
  for (int i = 0; i < 7; i++)
    if ((size_t)(v[6 + i] + sizes[i]) > len) return throw_error(env, "decodeAttention: out of bounds");
  const decode_attention_job job = {(int)B, (int)heads, (int)kv, (int)d, (int)cap, (int)past, H + v[6], H + v[7], H + v[8], H + v[9], H + v[10], H + v[11], H + v[12]};
  if (decode_attention(&job, v[13] < 1 ? 1 : (int)v[13]) != 0) return throw_error(env, "decodeAttention: out of memory");
  return NULL;
}

// swiglu(backward, n, heap, gateOff, upOff, dyOff, outOff, dUpOff, threads): see layer-passes.c; offsets
// into one float32 array (the wasm heap). Forward: out = silu(gate) up (dy and dUp unused);
// backward: out = d gate, dUp = d up. Threads: at least the BLAS's (the cores this thread's products use).
static napi_value swiglu_napi(napi_env env, napi_callback_info info) {
  size_t argc = 9;
  napi_value argv[9];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc != 9) return throw_error(env, "swiglu: expected 9 arguments");
  float *H;
  size_t len;
  int64_t backward, n, gate, up, dy, out, dUp, threads;
  if (!get_int(env, argv[0], &backward) || !get_int(env, argv[1], &n) || !get_floats(env, argv[2], &H, &len) || !get_int(env, argv[3], &gate) ||
      !get_int(env, argv[4], &up) || !get_int(env, argv[5], &dy) || !get_int(env, argv[6], &out) || !get_int(env, argv[7], &dUp) ||
      !get_int(env, argv[8], &threads))
    return throw_error(env, "swiglu: bad argument types");
  // Forward reads gate and up and writes out; backward also reads dy and writes dUp.
  const int64_t offsets[5] = {gate, up, out, dy, dUp};
  for (int i = 0; i < (backward ? 5 : 3); i++)
    if (n < 0 || offsets[i] < 0 || (size_t)(offsets[i] + n) > len) return throw_error(env, "swiglu: out of bounds");
  swiglu(backward != 0, n, H + gate, H + up, backward ? H + dy : NULL, H + out, backward ? H + dUp : NULL, pass_threads(threads));
  return NULL;
}

// rmsNorm(rows, width, heap, xOff, weightOff, outOff, eps, threads): see layer-passes.c; offsets into
// one float32 array (the wasm heap). Threads: at least the BLAS's.
static napi_value rms_norm_napi(napi_env env, napi_callback_info info) {
  size_t argc = 8;
  napi_value argv[8];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc != 8) return throw_error(env, "rmsNorm: expected 8 arguments");
  float *H;
  size_t len;
  int64_t rows, width, x, weight, out, threads;
  double eps;
  if (!get_int(env, argv[0], &rows) || !get_int(env, argv[1], &width) || !get_floats(env, argv[2], &H, &len) || !get_int(env, argv[3], &x) ||
      !get_int(env, argv[4], &weight) || !get_int(env, argv[5], &out) || !get_number(env, argv[6], &eps) || !get_int(env, argv[7], &threads))
    return throw_error(env, "rmsNorm: bad argument types");
  if (rows < 0 || width <= 0 || x < 0 || weight < 0 || out < 0 || (size_t)(x + rows * width) > len || (size_t)(weight + width) > len ||
      (size_t)(out + rows * width) > len)
    return throw_error(env, "rmsNorm: out of bounds");
  rms_norm(rows, width, H + x, H + weight, H + out, eps, pass_threads(threads));
  return NULL;
}

// adviseHugePages(array): asks the kernel to back the array's untouched memory with huge pages (a
// frozen base read once per token: fewer TLB misses, 5-10 % faster decoding here). Returns whether it could.
static napi_value advise_huge_pages(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  napi_typedarray_type type;
  size_t length, byteOffset;
  void *data;
  napi_value buffer;
  if (argc != 1 || napi_get_typedarray_info(env, argv[0], &type, &length, &data, &buffer, &byteOffset) != napi_ok)
    return throw_error(env, "adviseHugePages: expected a typed array");
  int advised = 0;
#ifdef MADV_HUGEPAGE
  const size_t huge = (size_t)2 << 20, bytes = length * (type == napi_float32_array ? 4 : type == napi_uint16_array ? 2 : 1);
  const uintptr_t first = ((uintptr_t)data + huge - 1) & ~(uintptr_t)(huge - 1), end = ((uintptr_t)data + bytes) & ~(uintptr_t)(huge - 1);
  if (end > first) advised = madvise((void *)first, end - first, MADV_HUGEPAGE) == 0;
#endif
  napi_value result;
  napi_get_boolean(env, advised, &result);
  return result;
}

// isa([cap]): the instruction set of the small-row product kernels (avx512, avx2, generic), after
// capping it at `cap` when given (the machine's level is never exceeded).
static napi_value isa_napi(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  const char *level = frozen_isa();
  if (argc == 1) {
    char cap[16];
    size_t written;
    if (napi_get_value_string_utf8(env, argv[0], cap, sizeof cap, &written) != napi_ok) return throw_error(env, "isa: expected a string");
    level = frozen_cap_isa(cap);
  }
  napi_value result;
  napi_create_string_utf8(env, level, NAPI_AUTO_LENGTH, &result);
  return result;
}

// bfloat16Products([useOnednn]): { onednn, detail }: whether products with bfloat16 activations run
// on oneDNN (FLOWRL_ONEDNN=off or a library path changes it at load; useOnednn turns it off or back
// on), and what it is or why not.
static napi_value bfloat16_products(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc == 1) {
    bool on;
    if (napi_get_value_bool(env, argv[0], &on) != napi_ok) return throw_error(env, "bfloat16Products: expected a boolean");
    onednn_enable(on);
  }
  int ok;
  const char *detail = onednn_status(&ok);
  napi_value result, onednn, text;
  napi_create_object(env, &result);
  napi_get_boolean(env, ok, &onednn);
  napi_create_string_utf8(env, detail, NAPI_AUTO_LENGTH, &text);
  napi_set_named_property(env, result, "onednn", onednn);
  napi_set_named_property(env, result, "detail", text);
  return result;
}

// sharedMachine([mode]): { shared, othersCores, partedProducts }: whether other processes keep part
// of the machine busy (products then run in parts on more threads than cores), the cores they used
// over the last window, and the products run so; mode "on" or "off" fixes the answer, "auto"
// measures it again.
static napi_value shared_machine(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc == 1) {
    char mode[8];
    size_t written;
    if (napi_get_value_string_utf8(env, argv[0], mode, sizeof mode, &written) != napi_ok ||
        (strcmp(mode, "on") != 0 && strcmp(mode, "off") != 0 && strcmp(mode, "auto") != 0))
      return throw_error(env, "sharedMachine: expected \"on\", \"off\" or \"auto\"");
    machine_load_mode(strcmp(mode, "on") == 0 ? 1 : strcmp(mode, "off") == 0 ? 0 : -1);
  }
  double others = 0;
  const int shared = machine_shared(&others);
  napi_value result, flag, cores, parts;
  napi_create_object(env, &result);
  napi_get_boolean(env, shared, &flag);
  napi_create_double(env, others, &cores);
  napi_create_double(env, (double)parted_products(), &parts);
  napi_set_named_property(env, result, "shared", flag);
  napi_set_named_property(env, result, "othersCores", cores);
  napi_set_named_property(env, result, "partedProducts", parts);
  return result;
}

// productCounters(): { heap: { seconds, flops }, frozen: { seconds, flops } } since the process
// started, summed over its threads.
static napi_value product_counters(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
  napi_create_object(env, &result);
  const char *names[2] = {"heap", "frozen"};
  for (int kind = 0; kind < 2; kind++) {
    napi_value entry, seconds, flops;
    napi_create_object(env, &entry);
    napi_create_double(env, (double)atomic_load(&product_nanos[kind]) / 1e9, &seconds);
    napi_create_double(env, (double)atomic_load(&product_flops[kind]), &flops);
    napi_set_named_property(env, entry, "seconds", seconds);
    napi_set_named_property(env, entry, "flops", flops);
    napi_set_named_property(env, result, names[kind], entry);
  }
  return result;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"load", NULL, load, NULL, NULL, NULL, napi_default, NULL},
      {"setThreads", NULL, set_threads, NULL, NULL, NULL, napi_default, NULL},
      {"sgemm", NULL, sgemm, NULL, NULL, NULL, napi_default, NULL},
      {"sgemmLoop", NULL, sgemm_loop, NULL, NULL, NULL, napi_default, NULL},
      {"sum", NULL, sum, NULL, NULL, NULL, napi_default, NULL},
      {"adamw", NULL, adamw, NULL, NULL, NULL, napi_default, NULL},
      {"frozenMatmul", NULL, frozen_matmul, NULL, NULL, NULL, napi_default, NULL},
      // The same function; its name tells JavaScript that this addon takes adapters.
      {"frozenLinear", NULL, frozen_matmul, NULL, NULL, NULL, napi_default, NULL},
      {"tokenLogProbs", NULL, token_logprobs, NULL, NULL, NULL, napi_default, NULL},
      {"sampleRows", NULL, sample_rows_napi, NULL, NULL, NULL, napi_default, NULL},
      {"isa", NULL, isa_napi, NULL, NULL, NULL, napi_default, NULL},
      {"adviseHugePages", NULL, advise_huge_pages, NULL, NULL, NULL, napi_default, NULL},
      {"decodeAttention", NULL, decode_attention_napi, NULL, NULL, NULL, napi_default, NULL},
      {"bfloat16Products", NULL, bfloat16_products, NULL, NULL, NULL, napi_default, NULL},
      {"productCounters", NULL, product_counters, NULL, NULL, NULL, napi_default, NULL},
      {"sharedMachine", NULL, shared_machine, NULL, NULL, NULL, napi_default, NULL},
      {"swiglu", NULL, swiglu_napi, NULL, NULL, NULL, napi_default, NULL},
      {"rmsNorm", NULL, rms_norm_napi, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
