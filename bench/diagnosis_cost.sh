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
# Usage: bench/diagnosis_cost.sh [base-ref=7654a7b] [rounds=15] [np=2]
# The baseline is built once in build-diag-base/ from a worktree in .bench-diag/.
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
cmake -S .bench-diag -B build-diag-base -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
cmake --build build-diag-base --target hvdrun hvdrun_allreduce_sweep >/dev/null

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
launch_us build >/dev/null  # warm the page cache of both trees
launch_us build-diag-base >/dev/null
for _ in $(seq "$rounds"); do
  launch_us build >>"$out/launch.now"
  launch_us build-diag-base >>"$out/launch.base"
  small_us build >>"$out/small.now"
  small_us build-diag-base >>"$out/small.base"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$out" <<'PY'
import statistics, sys
out = sys.argv[1]
def median(name):
    values = [float(v) for v in open(f"{out}/{name}").read().split()]
    if not values:
        sys.exit(f"bench/diagnosis_cost.sh: no figures in {name}")
    return statistics.median(values)
print(f"{'figure':<22} {'this tree':>10} {'baseline':>10} {'ratio':>6}")
for label, name, scale, unit in (("launch -np N true", "launch", 1000.0, "ms"),
                                 ("8-byte allreduce", "small", 1.0, "us")):
    now, base = median(name + ".now") / scale, median(name + ".base") / scale
    print(f"{label + ' (' + unit + ')':<22} {now:>10.2f} {base:>10.2f} {now / base:>6.2f}")
PY
