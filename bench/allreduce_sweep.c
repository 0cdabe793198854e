/* The CPU allreduce benchmark: one program, built once against libhvdrun's C ABI (the
 * build's hvdrun_allreduce_sweep) and once against MPI (bench/allreduce.sh compiles it
 * with mpicc -DHVDRUN_BENCH_MPI), so both sides time the same loop over the same
 * buffers. In-place float32 sum at each size from MIN to MAX bytes (x8 per step up to
 * 256 KiB, then x4, so 8 B ... 64 MiB, 256 MiB): two
 * warm-up calls, a barrier, REPS calls (fewer for large sizes), and the slowest rank's
 * time per call. With BENCH_OUT_OF_PLACE=1 in the environment the sum goes into a second
 * buffer instead (what a framework's new output tensor is), from malloc() (16 bytes past a
 * page for large sizes), or with BENCH_OUT_OF_PLACE=page from its own page-aligned mapping
 * (as hvdrun.torch's pooled outputs are); with BENCH_BATCHES=K (at most 15)
 * the REPS calls are timed K times, each after a barrier, and the median of the K slowest-rank
 * times is printed (bench/python_allreduce.py's method). Rank 0 prints one line per size:
 *   result bytes=8 us=1.23 busbw_GBps=0.006
 * busbw is 2(n-1)/n x bytes / time, the bytes each rank's link would carry in a ring.
 *   allreduce_sweep [MIN=8] [MAX=268435456] [REPS=2000]
 *   allreduce_sweep memcpy [BYTES=67108864]   single-process memcpy bandwidth */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#ifdef HVDRUN_BENCH_MPI
#include <mpi.h>
static int rank_of(void) {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
static int size_of(void) {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
static int sum_floats(float* buf, float* out, size_t n) {
  return MPI_Allreduce(out == buf ? MPI_IN_PLACE : buf, out, (int)n, MPI_FLOAT, MPI_SUM,
                       MPI_COMM_WORLD);
}
static int max_double(double* v) {
  return MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
}
static int barrier(void) { return MPI_Barrier(MPI_COMM_WORLD); }
static int start(int* argc, char*** argv) { return MPI_Init(argc, argv); }
static void finish(void) { MPI_Finalize(); }
#define IMPL "mpi"
#else
#include "hvdrun/hvdrun_c.h"
static int rank_of(void) { return hvdrun_rank(); }
static int size_of(void) { return hvdrun_size(); }
static int sum_floats(float* buf, float* out, size_t n) {
  return hvdrun_allreduce(buf, out, n, HVDRUN_FLOAT32, HVDRUN_SUM);
}
static int max_double(double* v) { return hvdrun_allreduce(v, v, 1, HVDRUN_FLOAT64, HVDRUN_MAX); }
static int barrier(void) { return hvdrun_barrier(); }
static int start(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  return hvdrun_init();
}
static void finish(void) { hvdrun_shutdown(); }
#define IMPL "hvdrun"
#endif

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

enum { kMaxBatches = 15 };

/* The median of the first n values of v (sorted in place). */
static double median(double* v, int n) {
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && v[j - 1] > v[j]; --j) {
      const double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int memcpy_mode(size_t bytes) {
  char* a = malloc(bytes);
  char* b = malloc(bytes);
  if (a == NULL || b == NULL) return 1;
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double best = 1e30;
  for (int i = 0; i < 10; ++i) {
    double t0 = now_s();
    memcpy(i % 2 ? a : b, i % 2 ? b : a, bytes);
    double t = now_s() - t0;
    if (t < best) best = t;
  }
  printf("result memcpy_bytes=%zu GBps=%.3f\n", bytes, (double)bytes / best / 1e9);
  free(a);
  free(b);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "memcpy") == 0)
    return memcpy_mode(argc > 2 ? strtoull(argv[2], NULL, 10) : (64u << 20));
  if (start(&argc, &argv) != 0) {
    fprintf(stderr, IMPL ": init failed\n");
    return 1;
  }
  size_t lo = argc > 1 ? strtoull(argv[1], NULL, 10) : 8;
  size_t hi = argc > 2 ? strtoull(argv[2], NULL, 10) : (256u << 20);
  long max_reps = argc > 3 ? strtol(argv[3], NULL, 10) : 2000;
  const int rank = rank_of(), size = size_of();
  float* buf = malloc(hi > 4 ? hi : 4);
  if (buf == NULL) return 1;
  const char* nb = getenv("BENCH_BATCHES");
  int batches = nb != NULL ? (int)strtol(nb, NULL, 10) : 1;
  if (batches < 1) batches = 1;
  if (batches > kMaxBatches) batches = kMaxBatches;
  const char* oop = getenv("BENCH_OUT_OF_PLACE");
  const int oop_malloc = oop != NULL && strcmp(oop, "1") == 0;
  const int oop_page = oop != NULL && strcmp(oop, "page") == 0;
  if (oop != NULL && *oop != '\0' && !oop_malloc && !oop_page) {
    fprintf(stderr, "allreduce_sweep: BENCH_OUT_OF_PLACE=%s: use 1 (malloc) or page\n", oop);
    return 1;
  }
  float* out = buf;
  if (oop_malloc) out = malloc(hi > 4 ? hi : 4);
  if (oop_page) {
    void* m =
        mmap(NULL, hi > 4 ? hi : 4, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    out = m == MAP_FAILED ? NULL : m;
  }
  if (out == NULL) return 1;
  /* Warm-up: the small sizes once, unreported, so the first reported size does not pay
   * for the start of the job (launcher, output relay, page faults). */
  for (size_t bytes = lo; bytes <= 4096 && bytes <= hi; bytes *= 8)
    for (int i = 0; i < 500; ++i)
      if (sum_floats(buf, out, bytes / 4 > 0 ? bytes / 4 : 1) != 0) return 2;
  for (size_t bytes = lo; bytes <= hi; bytes *= bytes < (256u << 10) ? 8 : 4) {
    size_t n = bytes / 4 > 0 ? bytes / 4 : 1;
    for (size_t i = 0; i < n; ++i) buf[i] = 1.0f;
    /* About 1 GiB per size, between 5 and max_reps calls. */
    long reps = (long)((1u << 30) / (n * 4));
    if (reps > max_reps) reps = max_reps;
    if (reps < 5) reps = 5;
    for (int i = 0; i < 2; ++i)
      if (sum_floats(buf, out, n) != 0) return 2;
    double pers[kMaxBatches];
    for (int b = 0; b < batches; ++b) {
      if (barrier() != 0) return 2;
      double t0 = now_s();
      for (long i = 0; i < reps; ++i)
        if (sum_floats(buf, out, n) != 0) return 2;
      pers[b] = (now_s() - t0) / (double)reps;
      if (max_double(&pers[b]) != 0) return 2;
    }
    const double per = median(pers, batches);
    if (rank == 0)
      printf("result impl=" IMPL " np=%d bytes=%zu us=%.2f busbw_GBps=%.3f\n", size, n * 4,
             per * 1e6, 2.0 * (size - 1) / size * (double)(n * 4) / per / 1e9);
    fflush(stdout);
  }
  if (oop_malloc) free(out);
  if (oop_page) munmap(out, hi > 4 ? hi : 4);
  free(buf);
  finish();
  return 0;
}
