#!/usr/bin/env bash
# What negotiation costs: the same allreduce sweep (bench/allreduce_sweep.c, in-place
# float32 sum through libhvdrun's C ABI) built from this tree and from a baseline commit
# without negotiation, run alternately under this tree's launcher on one host, at np 2
# and 4. Prints the median per size of ROUNDS rounds, the ratio this tree / baseline of
# those medians and the median of the rounds' own ratios (time: above 1 is slower; the
# targets are 8 B within 1.25x, 64 MiB within 5%).
#
# Usage: bench/negotiation.sh [base-ref=b39030e] [rounds=5] [nps="2 4"] [max-bytes=67108864]
# With BENCH_SIZES="8 4096 196608 ..." in the environment, each of those sizes is run on
# its own (the sweep from SIZE to SIZE) instead of the sweep's steps up to max-bytes.
# The baseline is built once in build-base/ from a worktree in .bench-base/ (ccache makes
# a rebuild of an unchanged tree cheap).
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-b39030e}
rounds=${2:-5}
nps=${3:-"2 4"}
max=${4:-67108864}
spans=("8 $max")
if [[ -n ${BENCH_SIZES:-} ]]; then
  spans=()
  for b in $BENCH_SIZES; do
    case $b in '' | *[!0-9]*) echo "bench/negotiation.sh: BENCH_SIZES must be byte counts" >&2; exit 2 ;; esac
    spans+=("$b $b")
  done
fi
case $rounds in '' | *[!0-9]*) echo "bench/negotiation.sh: rounds must be a number" >&2; exit 2 ;; esac

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake --build build --target hvdrun hvdrun_allreduce_sweep >/dev/null
if [[ ! -d .bench-base ]]; then
  git worktree add --detach .bench-base "$base" >/dev/null
fi
git -C .bench-base checkout -q --detach "$base"
cmake -S .bench-base -B build-base -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
cmake --build build-base --target hvdrun_allreduce_sweep >/dev/null

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); baseline $(git -C .bench-base rev-parse --short HEAD), this tree $(git rev-parse --short HEAD)"
for r in $(seq "$rounds"); do
  for np in $nps; do
    for span in "${spans[@]}"; do
      # shellcheck disable=SC2086 # a span is two words: MIN MAX
      build/cli/hvdrun -np "$np" build/tests/runtime/hvdrun_allreduce_sweep $span |
        sed -n 's/.*\(result .*\)/\1/p' >>"$out/now"
      # shellcheck disable=SC2086
      build/cli/hvdrun -np "$np" build-base/tests/runtime/hvdrun_allreduce_sweep $span |
        sed -n 's/.*\(result .*\)/\1/p' >>"$out/base"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$out" <<'PY'
import re, statistics, sys
out = sys.argv[1]
def rows(name):
    r = {}
    for line in open(f"{out}/{name}"):
        f = dict(re.findall(r"(\w+)=([\w.]+)", line))
        r.setdefault((int(f["np"]), int(f["bytes"])), []).append(float(f["us"]))
    return r
now, base = rows("now"), rows("base")
# "paired": the median of each round's own ratio (the two runs of a round are neighbours in
# time, so a drift of the machine's speed cancels), beside the ratio of the medians.
print(f"{'np':>3} {'bytes':>10} {'negotiated us':>14} {'baseline us':>12} {'time ratio':>10} {'paired':>7}")
for k in sorted(now):
    if k in base:
        a, b = statistics.median(now[k]), statistics.median(base[k])
        paired = statistics.median(x / y for x, y in zip(now[k], base[k]))
        print(f"{k[0]:>3} {k[1]:>10} {a:>14.2f} {b:>12.2f} {a / b:>10.2f} {paired:>7.2f}")
PY
