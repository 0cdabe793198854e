/* A rank that loads libhvdrun the way Python's ctypes does after `import tensorflow`:
 * first a library exporting OpenSSL's names into the global scope (RTLD_GLOBAL), then
 * libhvdrun (RTLD_LOCAL). It joins the job, sums rank+1 over the ranks and leaves.
 *   interposed_worker INTERPOSER_SO LIBHVDRUN_SO */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hvdrun/hvdrun_c.h"

static void* need(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (f == NULL) {
    fprintf(stderr, "interposed_worker: %s missing: %s\n", name, dlerror());
    exit(1);
  }
  return f;
}

/* dlsym's object pointer into a function pointer, as POSIX allows and ISO C does not say. */
#define BIND(fn, name)             \
  do {                             \
    void* p_ = need(lib, name);    \
    memcpy(&(fn), &p_, sizeof p_); \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: interposed_worker INTERPOSER_SO LIBHVDRUN_SO\n");
    return 2;
  }
  if (dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL) == NULL) {
    fprintf(stderr, "interposed_worker: %s\n", dlerror());
    return 1;
  }
  void* lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "interposed_worker: %s\n", dlerror());
    return 1;
  }
  int (*init)(void), (*rank)(void), (*size)(void), (*shutdown)(void);
  int (*allreduce)(const void*, void*, size_t, hvdrun_dtype, hvdrun_op);
  const char* (*last_error)(void);
  BIND(init, "hvdrun_init");
  BIND(rank, "hvdrun_rank");
  BIND(size, "hvdrun_size");
  BIND(shutdown, "hvdrun_shutdown");
  BIND(allreduce, "hvdrun_allreduce");
  BIND(last_error, "hvdrun_last_error");
  if (init() != 0) {
    fprintf(stderr, "hvdrun_init: %s\n", last_error());
    return 1;
  }
  const int me = rank();
  double v = me + 1.0;
  if (allreduce(&v, &v, 1, HVDRUN_FLOAT64, HVDRUN_SUM) != 0) {
    fprintf(stderr, "hvdrun_allreduce: %s\n", last_error());
    return 1;
  }
  const int n = size();
  if (v != n * (n + 1) / 2.0) {
    fprintf(stderr, "rank %d: sum %g, want %g\n", me, v, n * (n + 1) / 2.0);
    return 1;
  }
  if (shutdown() != 0) {
    fprintf(stderr, "hvdrun_shutdown: %s\n", last_error());
    return 1;
  }
  fprintf(stderr, "rank %d: interposed ok\n", me);
  return 0;
}
