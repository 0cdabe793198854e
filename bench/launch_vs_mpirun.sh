#!/usr/bin/env bash
# Launch overhead: wall time of `hvdrun -np N true` against
# `mpirun --oversubscribe -np N true` (OpenMPI), side by side in one run, for N = 16 and
# 64: median of several repetitions each, interleaved, and the ratio (target <= 0.5).
# `sleep 0.2` rows too, because OpenMPI 4.1 may hang when many `true` ranks exit at once.
# Usage: bench/launch_vs_mpirun.sh [build-dir=build] [reps=7]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
reps=${2:-7}
cmake --build "$build" --target hvdrun >/dev/null
hvdrun="$build/cli/hvdrun"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Wall seconds of one run of "$@" (output discarded; a failure aborts the benchmark).
seconds() {
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}
median() { sort -g | awk '{ v[NR] = $1 } END { m = int((NR + 1) / 2); printf "%.4f", (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'; }

# Like seconds, but prints "hung" when the run does not finish within 30 s.
seconds_or_hung() {
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  timeout 30 "$@" >/dev/null 2>&1 || rc=$?
  t1=$(date +%s.%N)
  if ((rc == 124)); then echo hung; elif ((rc != 0)); then echo "failed: $*" >&2; exit 1; else echo "$t1 - $t0" | bc -l; fi
}

echo "host: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $reps repetitions, median"
printf "%-4s %-10s %12s %12s %8s\n" N command "hvdrun (s)" "mpirun (s)" ratio
for n in 16 64; do
  for cmd in true "sleep 0.2"; do
    seconds "$hvdrun" -np "$n" $cmd >/dev/null  # warm the page cache
    h=() m=()
    hung=0
    for ((i = 0; i < reps; i++)); do
      h+=("$(seconds "$hvdrun" -np "$n" $cmd)")
      # OpenMPI 4.1 can hang for good when many ranks exit at once (seen here from N=32
      # with `true`): such runs are counted, not timed.
      t=$(seconds_or_hung mpirun --oversubscribe -np "$n" $cmd)
      if [[ $t == hung ]]; then hung=$((hung + 1)); else m+=("$t"); fi
    done
    hm=$(printf '%s\n' "${h[@]}" | median)
    if ((${#m[@]} == 0)); then
      printf "%-4s %-10s %12s %12s %8s\n" "$n" "$cmd" "$hm" "hung" "n/a"
      continue
    fi
    mm=$(printf '%s\n' "${m[@]}" | median)
    note=""
    ((hung > 0)) && note="  (mpirun hung in $hung of $reps runs; median of the others)"
    printf "%-4s %-10s %12s %12s %8.3f%s\n" "$n" "$cmd" "$hm" "$mm" "$(echo "$hm / $mm" | bc -l)" "$note"
  done
done
