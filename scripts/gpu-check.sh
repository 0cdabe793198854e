#!/usr/bin/env bash
# Everything that needs a CUDA GPU, in one run, for a machine lent for a short time: builds
# what the checks need (not the whole suite), then runs each check with its own time limit
# and keeps going after a failure, so one run reports all of them. Each check's output is
# kept in OUT_DIR/NAME.log; the end is a table of results and times (also OUT_DIR/summary).
#
#   gpu-tests    ctest -L gpu (C++): device collectives, NCCL's scalable init, the faults
#   torch-cuda   hvdrun.torch on CUDA tensors, negotiation on CUDA tensors (test_gpu.py)
#   topology     hvdrun check --topology on the real host (GPUs, NICs, NUMA nodes)
#   bindings     --report-bindings of 2 ranks with --bind-to numa and one GPU each, and
#                each rank's CPU list, memory policy and CUDA_VISIBLE_DEVICES as it sees them
#
# Usage: scripts/gpu-check.sh [OUT_DIR]   (default: $OUT when set, else gpu-check/)
# Environment: BUILD (default build-gpu), JOBS (default nproc).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-gpu-check}}
build=${BUILD:-build-gpu}
jobs=${JOBS:-$(nproc)}
mkdir -p "$out"

declare -a names results seconds
check() {  # check NAME TIMEOUT COMMAND...
  local name=$1 limit=$2 start=$SECONDS status
  shift 2
  echo "=== $name"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  status=$?
  tail -n 25 "$out/$name.log"
  names+=("$name")
  results+=("$([[ $status == 0 ]] && echo ok || echo "FAILED($status)")")
  seconds+=($((SECONDS - start)))
}

{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  ls /usr/lib/x86_64-linux-gnu/libnccl.so* /usr/local/cuda*/lib64/libcudart.so* 2>/dev/null
  echo "cores: $(nproc)"
} | tee "$out/machine"

start=$SECONDS
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHVDRUN_BUILD_TESTS=ON \
  >"$out/configure.log" 2>&1 &&
  cmake --build "$build" -j "$jobs" --target hvdrun hvdrun_runtime runtime_gpu_test \
    runtime_gpu_worker integration_gpu_fault_test \
    >"$out/build.log" 2>&1 || { tail -n 40 "$out/build.log" "$out/configure.log"; exit 1; }
echo "built in $((SECONDS - start)) s"

check gpu-tests 300 ctest --test-dir "$build" -L gpu -E python --output-on-failure
check torch-cuda 300 ctest --test-dir "$build" -R "python: test_gpu" -V
check topology 60 "$build/cli/hvdrun" check --topology
probe='printf "rank %s cpus %s policy %s gpus %s\n" "$HVDRUN_RANK" \
  "$(grep Cpus_allowed_list /proc/self/status | cut -f2)" \
  "$(grep -c . /proc/self/numa_maps 2>/dev/null)" "${CUDA_VISIBLE_DEVICES:-unset}"'
check bindings 60 "$build/cli/hvdrun" -np 2 --bind-to numa --gpus-per-rank 1 \
  --report-bindings sh -c "$probe"

{
  echo
  printf '%-12s %-12s %8s\n' check result seconds
  for i in "${!names[@]}"; do printf '%-12s %-12s %8d\n' "${names[$i]}" "${results[$i]}" "${seconds[$i]}"; done
} | tee "$out/summary"
! grep -q FAILED "$out/summary"
