// flowrl's MPI addon: the collectives data-parallel ranks need (sum of gradient buffers, gather of
// each rank's bytes, a barrier), built only where mpicc and mpi.h are (scripts/build-native.mjs).
// Every collective is non-blocking under the hood and waited for with a deadline, so a rank that
// stops answering ends the wait with an error instead of a hang; the caller then aborts the job.
#define _POSIX_C_SOURCE 200809L
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <node_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int initialized = 0;

static napi_value throw_error(napi_env env, const char *message) {
  napi_throw_error(env, NULL, message);
  return NULL;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// Polls `request` until it completes or `timeout_ms` passes; sleeps grow from 20 us to 1 ms so a
// waiting rank leaves its core to the others. Returns 0 when done, 1 on time-out, 2 on an MPI error.
static int wait_for(MPI_Request *request, double timeout_ms) {
  double start = now_ms();
  long sleep_ns = 20000;
  for (;;) {
    int done = 0;
    if (MPI_Test(request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 2;
    if (done) return 0;
    if (now_ms() - start > timeout_ms) return 1;
    struct timespec pause = {0, sleep_ns};
    nanosleep(&pause, NULL);
    if (sleep_ns < 1000000) sleep_ns *= 2;
  }
}

static napi_value waited(napi_env env, int status, const char *what, double timeout_ms) {
  if (status == 0) return NULL;
  char message[200];
  if (status == 1) snprintf(message, sizeof message, "mpi: %s: another rank did not take part within %.0f s", what, timeout_ms / 1e3);
  else snprintf(message, sizeof message, "mpi: %s failed", what);
  return throw_error(env, message);
}

static int get_double(napi_env env, napi_value value, double *out) {
  return napi_get_value_double(env, value, out) == napi_ok;
}

// The (typed array, timeoutMs) every collective but the barrier takes: 1 when they are there.
static int array_and_timeout(napi_env env, napi_callback_info info, napi_typedarray_type *type, void **data, size_t *length, double *timeout_ms) {
  size_t argc = 2, offset;
  napi_value argv[2], buffer;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  return argc == 2 && napi_get_typedarray_info(env, argv[0], type, length, data, &buffer, &offset) == napi_ok && get_double(env, argv[1], timeout_ms);
}

// init(): MPI_Init_thread (the main thread alone calls MPI), then {rank, size}.
static napi_value init_mpi(napi_env env, napi_callback_info info) {
  (void)info;
  if (!initialized) {
    // Node opens addons with RTLD_LOCAL; Open MPI's components look libmpi's symbols up globally.
    Dl_info where;
    if (dladdr((void *)MPI_Init_thread, &where) && where.dli_fname) dlopen(where.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return throw_error(env, "mpi: MPI_Init_thread failed");
    // Errors come back as codes, so a failed collective throws in JavaScript rather than ending the process.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    initialized = 1;
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  napi_value result, r, s;
  napi_create_object(env, &result);
  napi_create_int32(env, rank, &r);
  napi_create_int32(env, size, &s);
  napi_set_named_property(env, result, "rank", r);
  napi_set_named_property(env, result, "size", s);
  return result;
}

// allreduceSum(Float32Array | Float64Array, timeoutMs): every rank's array summed, in place.
static napi_value allreduce_sum(napi_env env, napi_callback_info info) {
  napi_typedarray_type type;
  size_t length;
  void *data;
  double timeout_ms;
  if (!array_and_timeout(env, info, &type, &data, &length, &timeout_ms) || (type != napi_float32_array && type != napi_float64_array)) {
    return throw_error(env, "allreduceSum: expected (Float32Array | Float64Array, timeoutMs)");
  }
  if (length > INT32_MAX) return throw_error(env, "allreduceSum: more than 2^31 elements");
  MPI_Request request;
  if (MPI_Iallreduce(MPI_IN_PLACE, data, (int)length, type == napi_float32_array ? MPI_FLOAT : MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &request) != MPI_SUCCESS) return throw_error(env, "mpi: allreduce failed to start");
  return waited(env, wait_for(&request, timeout_ms), "allreduce", timeout_ms);
}

// allgather(Uint8Array, timeoutMs): every rank's bytes, as one array per rank in rank order.
static napi_value allgather(napi_env env, napi_callback_info info) {
  napi_typedarray_type type;
  size_t length;
  void *data;
  double timeout_ms;
  if (!array_and_timeout(env, info, &type, &data, &length, &timeout_ms) || type != napi_uint8_array) {
    return throw_error(env, "allgather: expected (Uint8Array, timeoutMs)");
  }
  if (length > INT32_MAX) return throw_error(env, "allgather: more than 2 GiB from one rank");
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int *lengths = calloc(size, sizeof(int)), *displacements = calloc(size, sizeof(int));
  if (!lengths || !displacements) {
    free(lengths);
    free(displacements);
    return throw_error(env, "allgather: out of memory");
  }
  int mine = (int)length;
  MPI_Request request;
  int status = MPI_Iallgather(&mine, 1, MPI_INT, lengths, 1, MPI_INT, MPI_COMM_WORLD, &request) == MPI_SUCCESS ? wait_for(&request, timeout_ms) : 2;
  int64_t total = 0;
  for (int r = 0; status == 0 && r < size; r++) {
    displacements[r] = (int)total;
    total += lengths[r];
  }
  if (status == 0 && total > INT32_MAX) status = 3;
  napi_value gathered = NULL;
  void *all = NULL;
  if (status == 0 && napi_create_arraybuffer(env, total ? (size_t)total : 1, &all, &gathered) != napi_ok) status = 2;
  if (status == 0) status = MPI_Iallgatherv(data, mine, MPI_BYTE, all, lengths, displacements, MPI_BYTE, MPI_COMM_WORLD, &request) == MPI_SUCCESS ? wait_for(&request, timeout_ms) : 2;
  napi_value result = NULL;
  if (status == 0) {
    napi_create_array_with_length(env, size, &result);
    for (int r = 0; r < size; r++) {
      napi_value part;
      napi_create_typedarray(env, napi_uint8_array, lengths[r], gathered, displacements[r], &part);
      napi_set_element(env, result, r, part);
    }
  }
  free(lengths);
  free(displacements);
  if (status == 3) return throw_error(env, "allgather: more than 2 GiB in all");
  return status == 0 ? result : waited(env, status, "allgather", timeout_ms);
}

// barrier(timeoutMs)
static napi_value barrier(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  double timeout_ms;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc != 1 || !get_double(env, argv[0], &timeout_ms)) return throw_error(env, "barrier: expected (timeoutMs)");
  MPI_Request request;
  if (MPI_Ibarrier(MPI_COMM_WORLD, &request) != MPI_SUCCESS) return throw_error(env, "mpi: barrier failed to start");
  return waited(env, wait_for(&request, timeout_ms), "barrier", timeout_ms);
}

// abort(code): ends every rank of the job (mpirun's launcher kills the others).
static napi_value abort_job(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t code = 1;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc == 1) napi_get_value_int32(env, argv[0], &code);
  fflush(stdout);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  return NULL;
}

static napi_value finalize(napi_env env, napi_callback_info info) {
  (void)env;
  (void)info;
  if (initialized) MPI_Finalize();
  initialized = 0;
  return NULL;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"init", NULL, init_mpi, NULL, NULL, NULL, napi_default, NULL},
      {"allreduceSum", NULL, allreduce_sum, NULL, NULL, NULL, napi_default, NULL},
      {"allgather", NULL, allgather, NULL, NULL, NULL, napi_default, NULL},
      {"barrier", NULL, barrier, NULL, NULL, NULL, napi_default, NULL},
      {"abort", NULL, abort_job, NULL, NULL, NULL, napi_default, NULL},
      {"finalize", NULL, finalize, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
