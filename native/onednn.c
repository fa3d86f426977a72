// bfloat16 products on the CPU's bfloat16 instructions (AVX512_BF16, AMX) through oneDNN's matmul,
// loaded at run time like the BLAS (Debian's libdnnl2): nothing links against it, and without it
// the products run as before. Both operands are bfloat16 (X rounded to nearest even, as llama.cpp
// computes with a bfloat16 model: docs/performance.md names the source), the sums float32. At Qwen2.5-0.5B's prefill
// shapes (512 rows, 2 threads) oneDNN 2.6's brgemm ran 2.5-4x OpenBLAS's sgemm on converted panels.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "flowrl_native.h"

// oneDNN 2.x's C API (dnnl.h, dnnl_types.h of v2.6), the entries used here. Its memory and matmul
// descriptors are structs the library fills (696 and 2,800 bytes in 2.6): opaque here, in larger buffers.
typedef void *dnnl_obj;
typedef struct {
  int major, minor, patch;
  const char *hash;
  unsigned cpu_runtime, gpu_runtime;
} dnnl_version_info;
typedef struct {
  int arg;
  dnnl_obj memory;
} dnnl_arg;
typedef struct {
  _Alignas(64) unsigned char bytes[4096];
} dnnl_md;
typedef struct {
  _Alignas(64) unsigned char bytes[16384];
} dnnl_op;
enum { DNNL_OK = 0, DNNL_BF16 = 2, DNNL_F32 = 3, DNNL_CPU = 1, DNNL_STREAM_DEFAULT = 1, DNNL_ARG_SRC = 1, DNNL_ARG_DST = 17, DNNL_ARG_WEIGHTS = 33, DNNL_QUERY_IMPL = 8 };

static struct {
  const dnnl_version_info *(*version)(void);
  int (*engine_create)(dnnl_obj *, int, size_t);
  int (*stream_create)(dnnl_obj *, dnnl_obj, unsigned);
  int (*md_init)(dnnl_md *, int, const int64_t *, int, const int64_t *);
  int (*matmul_init)(dnnl_op *, const dnnl_md *, const dnnl_md *, const dnnl_md *, const dnnl_md *);
  int (*pd_create)(dnnl_obj *, const dnnl_op *, const void *, dnnl_obj, const void *);
  int (*pd_query)(dnnl_obj, int, int, void *);
  int (*pd_destroy)(dnnl_obj);
  int (*primitive_create)(dnnl_obj *, dnnl_obj);
  int (*primitive_destroy)(dnnl_obj);
  int (*execute)(dnnl_obj, dnnl_obj, int, const dnnl_arg *);
  int (*memory_create)(dnnl_obj *, const dnnl_md *, dnnl_obj, void *);
  int (*memory_destroy)(dnnl_obj);
  int (*stream_wait)(dnnl_obj);
  int (*stream_destroy)(dnnl_obj);
  void (*omp_set_threads)(int);
  dnnl_obj engine;
} dnnl;

// Primitives by product shape, the most recently used kept (a model has a handful of shapes a
// batch size). A primitive has one scratchpad, so it runs on one thread at a time: threads that
// multiply the same shape at once (data-parallel workers) each get an entry of their own. Each
// thread has its own stream; an entry in use is neither shared nor evicted.
enum { CACHED_SHAPES = 128 };
typedef struct {
  int M, K, backward, threads;
  int64_t N;
  int64_t slice; // columns of Y this primitive writes (0: all), Y's rows still N (K backward) long
  dnnl_obj primitive;
  dnnl_md src, weights, dst;
  uint64_t used;
  int running;
} shape_entry;
static shape_entry shapes[CACHED_SHAPES];
static uint64_t uses;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t stream_key;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static char why[256] = "not loaded";
static int usable;
// Cleared by onednn_enable(0): the products then round X and run as the others (tests compare both).
static atomic_int enabled = 1;

static int make_primitive(shape_entry *e, char *impl, size_t impl_size);

static void load(void) {
  if (getenv("FLOWRL_ONEDNN") && strcmp(getenv("FLOWRL_ONEDNN"), "off") == 0) {
    snprintf(why, sizeof why, "FLOWRL_ONEDNN=off");
    return;
  }
  // oneDNN's OpenMP threads would spin between products, taking the cores from the pool's and the
  // BLAS's threads; libgomp reads this once, when it loads, and the variable is taken back after
  // (the processes this one starts, a PyTorch peer among them, keep their own default).
  const int set_policy = getenv("OMP_WAIT_POLICY") == NULL;
  if (set_policy) setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  const char *path = getenv("FLOWRL_ONEDNN") ? getenv("FLOWRL_ONEDNN") : "libdnnl.so.2";
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (set_policy) unsetenv("OMP_WAIT_POLICY");
  if (!h) {
    snprintf(why, sizeof why, "%s not found (Debian: apt-get install libdnnl2)", path);
    return;
  }
  dnnl.version = (const dnnl_version_info *(*)(void))dlsym(h, "dnnl_version");
  const dnnl_version_info *v = dnnl.version ? dnnl.version() : NULL;
  if (!v || v->major != 2) {
    snprintf(why, sizeof why, "%s is oneDNN %d.x; its C API 2.x is the one used", path, v ? v->major : 0);
    return;
  }
#define SYM(field, name) *(void **)&dnnl.field = dlsym(h, name)
  SYM(engine_create, "dnnl_engine_create");
  SYM(stream_create, "dnnl_stream_create");
  SYM(md_init, "dnnl_memory_desc_init_by_strides");
  SYM(matmul_init, "dnnl_matmul_desc_init");
  SYM(pd_create, "dnnl_primitive_desc_create");
  SYM(pd_query, "dnnl_primitive_desc_query");
  SYM(pd_destroy, "dnnl_primitive_desc_destroy");
  SYM(primitive_create, "dnnl_primitive_create");
  SYM(primitive_destroy, "dnnl_primitive_destroy");
  SYM(execute, "dnnl_primitive_execute");
  SYM(memory_create, "dnnl_memory_create");
  SYM(memory_destroy, "dnnl_memory_destroy");
  SYM(stream_wait, "dnnl_stream_wait");
  SYM(stream_destroy, "dnnl_stream_destroy");
  // From the OpenMP runtime oneDNN loaded (2: OpenMP); absent under TBB or threadpool builds.
  SYM(omp_set_threads, "omp_set_num_threads");
#undef SYM
  if (!dnnl.engine_create || !dnnl.stream_create || !dnnl.md_init || !dnnl.matmul_init || !dnnl.pd_create || !dnnl.pd_query || !dnnl.pd_destroy ||
      !dnnl.primitive_create || !dnnl.primitive_destroy || !dnnl.execute || !dnnl.memory_create || !dnnl.memory_destroy || !dnnl.stream_wait || !dnnl.stream_destroy) {
    snprintf(why, sizeof why, "%s %d.%d lacks an entry of the C API used", path, v->major, v->minor);
    return;
  }
  if (dnnl.engine_create(&dnnl.engine, DNNL_CPU, 0) != DNNL_OK || pthread_key_create(&stream_key, (void (*)(void *))dnnl.stream_destroy) != 0) {
    snprintf(why, sizeof why, "oneDNN %d.%d could not start a CPU engine", v->major, v->minor);
    return;
  }
  // Used only where oneDNN has kernels on the hardware's bfloat16 instructions: elsewhere it
  // emulates them, unmeasured against the float32 products.
  shape_entry probe = {.M = 64, .N = 64, .K = 64};
  char impl[128] = "";
  if (make_primitive(&probe, impl, sizeof impl) != 0) {
    snprintf(why, sizeof why, "oneDNN %d.%d has no bfloat16 matmul here", v->major, v->minor);
    return;
  }
  dnnl.primitive_destroy(probe.primitive);
  if (!strstr(impl, "bf16") && !strstr(impl, "amx")) {
    snprintf(why, sizeof why, "oneDNN %d.%d's bfloat16 matmul here is '%s', not on bfloat16 instructions (AVX512_BF16 or AMX)", v->major, v->minor, impl);
    return;
  }
  snprintf(why, sizeof why, "oneDNN %d.%d.%d (%s)", v->major, v->minor, v->patch, impl);
  usable = 1;
}

// forward: dst[M, N] = src[M, K] W[N, K]^T; backward: dst[M, K] = src[M, N] W[N, K]. W is read in
// place, as the weights of a matmul with swapped strides.
// `impl` (when given) receives the name of the implementation oneDNN chose.
static int make_primitive(shape_entry *e, char *impl, size_t impl_size) {
  const int64_t M = e->M, N = e->N, K = e->K;
  const int64_t inner = e->backward ? N : K, outer = e->backward ? K : N, columns = e->slice ? e->slice : outer;
  const int64_t srcDims[2] = {M, inner}, srcStrides[2] = {inner, 1};
  const int64_t wDims[2] = {inner, columns}, wStrides[2] = {e->backward ? K : 1, e->backward ? 1 : K};
  const int64_t dstDims[2] = {M, columns}, dstStrides[2] = {outer, 1};
  static dnnl_op op;
  if (dnnl.md_init(&e->src, 2, srcDims, DNNL_BF16, srcStrides) != DNNL_OK || dnnl.md_init(&e->weights, 2, wDims, DNNL_BF16, wStrides) != DNNL_OK ||
      dnnl.md_init(&e->dst, 2, dstDims, DNNL_F32, dstStrides) != DNNL_OK || dnnl.matmul_init(&op, &e->src, &e->weights, NULL, &e->dst) != DNNL_OK)
    return -1;
  dnnl_obj pd;
  if (dnnl.pd_create(&pd, &op, NULL, dnnl.engine, NULL) != DNNL_OK) return -1;
  const char *name = NULL;
  if (impl && dnnl.pd_query(pd, DNNL_QUERY_IMPL, 0, &name) == DNNL_OK && name) snprintf(impl, impl_size, "%s", name);
  const int failed = dnnl.primitive_create(&e->primitive, pd) != DNNL_OK;
  dnnl.pd_destroy(pd);
  return failed ? -1 : 0;
}

const char *onednn_status(int *ok) {
  pthread_once(&once, load);
  *ok = usable && atomic_load(&enabled);
  return usable && !atomic_load(&enabled) ? "turned off" : why;
}

void onednn_enable(int on) {
  atomic_store(&enabled, on != 0);
}

// This thread's stream (destroyed with the thread), or NULL.
static dnnl_obj thread_stream(void) {
  dnnl_obj stream = pthread_getspecific(stream_key);
  if (!stream && dnnl.stream_create(&stream, dnnl.engine, DNNL_STREAM_DEFAULT) == DNNL_OK && pthread_setspecific(stream_key, stream) != 0) {
    dnnl.stream_destroy(stream);
    stream = NULL;
  }
  return stream;
}

// The cached primitive for the shape, made if missing, marked running; NULL if it cannot be made.
static shape_entry *acquire(int backward, int M, int64_t N, int K, int threads, int64_t slice) {
  pthread_mutex_lock(&lock);
  shape_entry *e = NULL, *oldest = NULL;
  for (int i = 0; i < CACHED_SHAPES && !e; i++) {
    shape_entry *s = &shapes[i];
    if (s->running) continue;
    if (s->primitive && s->M == M && s->N == N && s->K == K && s->backward == backward && s->threads == threads && s->slice == slice) e = s;
    else if (!oldest || s->used < oldest->used) oldest = s;
  }
  if (!e && oldest) {
    if (oldest->primitive) dnnl.primitive_destroy(oldest->primitive);
    *oldest = (shape_entry){.M = M, .N = N, .K = K, .backward = backward, .threads = threads, .slice = slice};
    if (make_primitive(oldest, NULL, 0) == 0) e = oldest;
    else oldest->primitive = NULL;
  }
  if (e) {
    e->used = ++uses;
    e->running++;
  }
  pthread_mutex_unlock(&lock);
  return e;
}

static void release(shape_entry *e) {
  pthread_mutex_lock(&lock);
  e->running--;
  pthread_mutex_unlock(&lock);
}

// Columns [column, column + slice) of Y (all of it when slice is 0) on `threads` OpenMP threads.
static int run_product(int backward, int M, int64_t N, int K, int64_t slice, int64_t column, const uint16_t *x, const uint16_t *w, float *y, int threads) {
  dnnl_obj stream = thread_stream();
  // A primitive is made under the thread count it runs with: set first, and part of the key.
  if (dnnl.omp_set_threads) dnnl.omp_set_threads(threads);
  // Every entry running a product elsewhere: this one goes the other way.
  shape_entry *e = stream ? acquire(backward, M, N, K, threads, slice) : NULL;
  if (!e) return -1;
  // Forward, Y's columns are W's rows; backward, W's columns.
  const uint16_t *w_part = w + (backward ? column : column * K);
  dnnl_obj src = NULL, weights = NULL, dst = NULL;
  int failed = dnnl.memory_create(&src, &e->src, dnnl.engine, (void *)x) != DNNL_OK || dnnl.memory_create(&weights, &e->weights, dnnl.engine, (void *)w_part) != DNNL_OK ||
               dnnl.memory_create(&dst, &e->dst, dnnl.engine, y + column) != DNNL_OK;
  if (!failed) {
    const dnnl_arg args[3] = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
    failed = dnnl.execute(e->primitive, stream, 3, args) != DNNL_OK || dnnl.stream_wait(stream) != DNNL_OK;
  }
  if (src) dnnl.memory_destroy(src);
  if (weights) dnnl.memory_destroy(weights);
  if (dst) dnnl.memory_destroy(dst);
  release(e);
  return failed ? -1 : 0;
}

// On a shared machine a product is cut into slices of Y's columns, each one oneDNN thread's, taken by
// the pool's threads (twice as many there) as they run: oneDNN's own even split waits for its
// thread that shares a core with the other process.
enum { SLICE_COLUMNS = 128 };
typedef struct {
  int backward, M, K;
  int64_t N;
  const uint16_t *x, *w;
  float *y;
  atomic_int failed;
} sliced_job;

static void slice_task(void *ctx, int task, int tasks) {
  (void)tasks;
  sliced_job *j = ctx;
  const int64_t outer = j->backward ? j->K : j->N, column = (int64_t)task * SLICE_COLUMNS;
  const int64_t slice = outer - column < SLICE_COLUMNS ? outer - column : SLICE_COLUMNS;
  if (!atomic_load(&j->failed) && run_product(j->backward, j->M, j->N, j->K, slice, column, j->x, j->w, j->y, 1) != 0) atomic_store(&j->failed, 1);
}

int onednn_bf16_product(int backward, int M, int64_t N, int K, const uint16_t *x, const uint16_t *w, float *y, int threads) {
  int ok;
  onednn_status(&ok);
  if (!ok) return -1;
  if (threads < 1) threads = 1;
  const int64_t outer = backward ? K : N;
  if (threads > 1 && outer >= 2 * SLICE_COLUMNS && machine_shared(NULL)) {
    sliced_job job = {.backward = backward, .M = M, .K = K, .N = N, .x = x, .w = w, .y = y};
    atomic_init(&job.failed, 0);
    run_tasks(slice_task, &job, (int)((outer + SLICE_COLUMNS - 1) / SLICE_COLUMNS), threads);
    count_parted_product();
    return atomic_load(&job.failed) ? -1 : 0;
  }
  return run_product(backward, M, N, K, 0, 0, x, w, y, threads);
}
