#!/usr/bin/env bash
# What diagnosis costs when nothing is wrong (docs/diagnosis.md, "What it costs"): this tree
# against a baseline commit from before the diagnosis work (--timeout, error files, output
# filters, signals, the stack report), each under its own launcher, alternately:
#   launch  `hvdrun -np NP true` from start to exit (the agent, the ranks' error-file
#           directory, the job loop and its teardown), ROUNDS runs each, median in ms;
#   8 B     the 8-byte allreduce of bench/allreduce_sweep.c (in-place float32 sum through
#           libhvdrun's C ABI) at NP ranks, median of its per-call time over ROUNDS runs.
# Prints the medians and the ratio this tree / baseline (above 1: slower).
#
# Three launch fixes came after the diagnosis work (ranks born in the job's cgroup instead of
# joining it through cgroup.procs, the launcher woken by its agent's pidfd instead of a
# backoff, and only the options given described to Boost.Program_options); they make every
# launch faster, so against the plain baseline this tree gains time. To weigh what the
# diagnosis work itself costs, the same fixes are applied to the baseline
# (bench/diagnosis_base_launch.patch, made for 7654a7b) and built as a second baseline,
# "base+fixes", timed in the same rotation.
#
# Usage: bench/diagnosis_cost.sh [base-ref=7654a7b] [rounds=15] [np=2]
# The baselines are built in build-diag-base/ and build-diag-fixed/ from worktrees in
# .bench-diag/ and .bench-diag-fixed/.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-7654a7b}
rounds=${2:-15}
np=${3:-2}
for n in "$rounds" "$np"; do
  case $n in '' | *[!0-9]*) echo "bench/diagnosis_cost.sh: rounds and np must be numbers" >&2; exit 2 ;; esac
done

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake --build build --target hvdrun hvdrun_allreduce_sweep >/dev/null
[[ -d .bench-diag ]] || git worktree add --detach .bench-diag "$base" >/dev/null
git -C .bench-diag checkout -q --detach "$base"
git -C .bench-diag reset -q --hard
cmake -S .bench-diag -B build-diag-base -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
cmake --build build-diag-base --target hvdrun hvdrun_allreduce_sweep >/dev/null
trees=(build build-diag-base)
[[ -d .bench-diag-fixed ]] || git worktree add --detach .bench-diag-fixed "$base" >/dev/null
git -C .bench-diag-fixed checkout -q --detach "$base"
git -C .bench-diag-fixed reset -q --hard
if git -C .bench-diag-fixed apply "$PWD/bench/diagnosis_base_launch.patch" 2>/dev/null; then
  cmake -S .bench-diag-fixed -B build-diag-fixed -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
  cmake --build build-diag-fixed --target hvdrun hvdrun_allreduce_sweep >/dev/null
  trees+=(build-diag-fixed)
else
  echo "bench/diagnosis_cost.sh: the launch fixes do not apply to $base; no base+fixes figures" >&2
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); baseline $(git -C .bench-diag rev-parse --short HEAD), this tree $(git rev-parse --short HEAD); np $np, $rounds rounds"

# One launch of `true` under TREE's launcher: its wall time in microseconds.
launch_us() {  # launch_us TREE
  local t0 t1
  t0=$(date +%s%N)
  "$1/cli/hvdrun" -np "$np" true
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000))
}
# The 8-byte line of one sweep under TREE's launcher and library.
small_us() {  # small_us TREE
  "$1/cli/hvdrun" -np "$np" "$1/tests/runtime/hvdrun_allreduce_sweep" 8 8 |
    sed -n 's/.*result .*bytes=8 .*us=\([0-9.]*\).*/\1/p' | head -n 1
}
for t in "${trees[@]}"; do launch_us "$t" >/dev/null; done  # warm the page cache of each
for _ in $(seq "$rounds"); do
  for t in "${trees[@]}"; do
    launch_us "$t" >>"$out/launch.$t"
    small_us "$t" >>"$out/small.$t"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$out" "${trees[@]}" <<'PY'
import os, statistics, sys
out, trees = sys.argv[1], sys.argv[2:]
names = {"build": "this tree", "build-diag-base": "baseline", "build-diag-fixed": "base+fixes"}
def median(name):
    values = [float(v) for v in open(f"{out}/{name}").read().split()]
    if not values:
        sys.exit(f"bench/diagnosis_cost.sh: no figures in {name}")
    return statistics.median(values)
header = f"{'figure':<22}" + "".join(f" {names[t]:>11}" for t in trees)
header += "".join(f" {'/' + names[t]:>12}" for t in trees[1:])
print(header)
for label, name, scale, unit in (("launch -np N true", "launch", 1000.0, "ms"),
                                 ("8-byte allreduce", "small", 1.0, "us")):
    m = [median(f"{name}.{t}") / scale for t in trees]
    row = f"{label + ' (' + unit + ')':<22}" + "".join(f" {v:>11.2f}" for v in m)
    row += "".join(f" {m[0] / v:>12.2f}" for v in m[1:])
    print(row)
PY
