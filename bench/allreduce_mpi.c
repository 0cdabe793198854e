/* Reference for the allreduce benchmark: OpenMPI's MPI_Allreduce of the same float32
 * buffer (shared memory between ranks on one host). Same warm-up, repetitions and
 * bus-bandwidth formula as hvdrun_bench_rank allreduce.
 *   mpirun -np N allreduce_mpi [BYTES] [REPS] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : (64u << 20);
  int reps = argc > 2 ? atoi(argv[2]) : 5;
  size_t n = bytes / 4;
  float* buf = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; ++i) buf[i] = 1.0f;
  for (int i = 0; i < 2; ++i)
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < reps; ++i)
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  double per = (MPI_Wtime() - t0) / reps;
  if (rank == 0)
    printf("result mpi_allreduce_ms=%.2f busbw_GBps=%.3f bytes=%zu np=%d\n", per * 1e3,
           2.0 * (size - 1) / size * (double)bytes / per / 1e9, bytes, size);
  free(buf);
  MPI_Finalize();
  return 0;
}
