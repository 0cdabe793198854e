#!/usr/bin/env bash
# GPU allreduce benchmark: libhvdrun's NCCL path (runtime_gpu_worker bench) against
# torch.distributed's NCCL allreduce, both started by the same hvdrun on this host, at
# each -np. Prints the start-up time (hvdrun::init, which builds the NCCL communicator,
# against init_process_group plus the first allreduce) and, per size, algorithm
# bandwidth (bytes / time per op) and bus bandwidth, with ratios hvdrun/torch. Needs a CUDA GPU, libnccl.so.2 and libcudart on the library path,
# and python3 with torch for the peer.
# With fewer GPUs than ranks each rank claims a host of its own (NCCL_HOSTID), so NCCL
# joins ranks that share a GPU over sockets: a check of the path, not of GPU bandwidth.
# Usage: bench/nccl_allreduce.sh BUILD_DIR [NP_LIST="1 2"] [BYTES_LIST]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: bench/nccl_allreduce.sh BUILD_DIR [NP_LIST] [BYTES_LIST]}
nps=${2:-"1 2"}
sizes=${3:-"1048576 16777216 268435456"}
hvdrun=$build/cli/hvdrun
worker=$build/tests/runtime/runtime_gpu_worker
gpus=$(nvidia-smi -L | wc -l)
echo "gpus: $gpus; $(nvidia-smi -L | head -1)"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"

# run NP PROGRAM... : rank 0's standard output of one job; the whole job's output, and
# a failure, when the job fails.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run() {
  local np=$1
  shift
  local wrap='exec "$@"'
  ((np > gpus)) && wrap='NCCL_HOSTID=bench-$RANK exec "$@"'
  if ! "$hvdrun" -np "$np" -H "localhost:$np" -- sh -c "$wrap" sh "$@" >"$log" 2>&1; then
    echo "bench/nccl_allreduce.sh: np=$np $* failed:" >&2
    cat "$log" >&2
    return 1
  fi
  sed -n 's/^\[0\]<stdout>://p' "$log"
}

for np in $nps; do
  ours=$(run "$np" "$worker" bench $sizes) || ours=
  theirs=$(run "$np" env -u LD_LIBRARY_PATH python3 bench/torch_nccl_allreduce.py $sizes) || theirs=
  echo "np=$np hvdrun: $(tr '\n' ' ' <<<"$ours")"
  echo "np=$np torch:  $(tr '\n' ' ' <<<"$theirs")"
  paste <(grep -E '^ *(init|bench)' <<<"$ours") <(grep -E '^ *(init|bench)' <<<"$theirs") |
    awk -v n="$np" '
      $1 == "init" && $2 > 0 && $4 > 0 {
        printf "np=%d init: hvdrun %.3f s, torch %.3f s, ratio %.2f\n", n, $2, $4, $2 / $4 }
      $1 == "bench" && $4 > 0 && $9 > 0 {
        printf "np=%d %10d B: algbw hvdrun %8.2f GB/s, torch %8.2f GB/s (busbw %.2f / %.2f), ratio %.2f\n",
          n, $2, $4, $9, $5, $10, $4 / $9 }'
done
