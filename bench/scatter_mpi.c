/* OpenMPI's side of bench/scatter.sh: MPI_Alltoall and MPI_Reduce_scatter (float32 sum)
 * timed the way bench/scatter.py times hvdrun.torch and torch.distributed, so the three
 * rows compare: BYTES is each rank's whole tensor (BYTES / np to every rank for alltoall;
 * a slice of BYTES / np for reducescatter), two warm-up calls, a repetition count that
 * fills about 0.2 s (the largest any rank wants), then the median of 5 timed batches.
 * Rank 0 prints one line per size and collective:
 *   result impl=mpi op=alltoall np=4 bytes=1024 us=12.34
 * Built by bench/scatter.sh with mpicc when it is installed; never part of the build.
 *   mpirun -np N scatter_mpi BYTES... */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kBatches = 5 };

static int compare(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* One call of collective `op` (0: alltoall, 1: reduce-scatter) on `count` floats. */
static void run(int op, const float* in, float* out, int count, int n, const int* counts) {
  if (op == 0)
    MPI_Alltoall(in, count / n, MPI_FLOAT, out, count / n, MPI_FLOAT, MPI_COMM_WORLD);
  else
    MPI_Reduce_scatter(in, out, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

/* Median microseconds per call. */
static double timed(int op, const float* in, float* out, int count, int n, const int* counts) {
  double times[kBatches];
  run(op, in, out, count, n, counts);
  run(op, in, out, count, n, counts);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  run(op, in, out, count, n, counts);
  double once = MPI_Wtime() - t0;
  double want = 0.2 / (once > 1e-7 ? once : 1e-7);
  want = want < 3 ? 3 : (want > 2000 ? 2000 : want);
  MPI_Allreduce(MPI_IN_PLACE, &want, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  const int reps = (int)want;
  for (int b = 0; b < kBatches; ++b) {
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (int r = 0; r < reps; ++r) run(op, in, out, count, n, counts);
    times[b] = (MPI_Wtime() - t0) / reps;
  }
  qsort(times, kBatches, sizeof times[0], compare);
  return times[kBatches / 2] * 1e6;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int* counts = malloc(sizeof(int) * (size_t)n);
  for (int a = 1; a < argc; ++a) {
    const long long bytes = strtoll(argv[a], NULL, 10);
    long long per = bytes / 4 / n;
    if (per < 1) per = 1;
    const int count = (int)(per * n);
    float* in = malloc(sizeof(float) * (size_t)count);
    float* out = malloc(sizeof(float) * (size_t)count);
    if (in == NULL || out == NULL || counts == NULL) {
      fprintf(stderr, "scatter_mpi: out of memory for %lld bytes\n", bytes);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int i = 0; i < count; ++i) in[i] = 1.0f;
    for (int i = 0; i < n; ++i) counts[i] = (int)per;
    static const char* const names[] = {"alltoall", "reducescatter"};
    for (int op = 0; op < 2; ++op) {
      const double us = timed(op, in, out, count, n, counts);
      if (op == 1 && out[0] != (float)n) {
        fprintf(stderr, "scatter_mpi: reduce-scatter gave %g, not %d\n", out[0], n);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      if (rank == 0)
        printf("result impl=mpi op=%s np=%d bytes=%d us=%.2f\n", names[op], n, count * 4, us);
      fflush(stdout);
    }
    free(in);
    free(out);
  }
  free(counts);
  MPI_Finalize();
  return 0;
}
