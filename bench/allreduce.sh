#!/usr/bin/env bash
# CPU allreduce benchmark: 64 MiB float32 at np 2 and 4, hvdrun's Gloo path (ranks
# started without the launcher, pairs warmed up) against OpenMPI's MPI_Allreduce on the
# same host. Prints bus bandwidth (2(n-1)/n x bytes / time) and the ratio.
# Usage: bench/allreduce.sh [build-dir=build] [bytes=67108864] [reps=5]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bytes=${2:-67108864}
reps=${3:-5}
cmake --build "$build" --target hvdrun_rendezvous_bench hvdrun_bench_rank >/dev/null
mkdir -p "$build/bench"
mpicc -O2 -o "$build/bench/allreduce_mpi" bench/allreduce_mpi.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for np in 2 4; do
  ours=$("$build/tests/runtime/hvdrun_rendezvous_bench" allreduce "$np" "$bytes" "$reps")
  mpi=$(mpirun --oversubscribe -np "$np" "$build/bench/allreduce_mpi" "$bytes" "$reps" | grep result)
  b1=$(sed -n 's/.*busbw_GBps=\([0-9.]*\).*/\1/p' <<<"$ours")
  b2=$(sed -n 's/.*busbw_GBps=\([0-9.]*\).*/\1/p' <<<"$mpi")
  echo "np=$np hvdrun: $ours"
  echo "np=$np mpi:    $mpi"
  awk -v a="$b1" -v b="$b2" -v n="$np" 'BEGIN { printf "np=%d ratio hvdrun/mpi = %.2f\n", n, a / b }'
done
