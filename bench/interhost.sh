#!/usr/bin/env bash
# What authenticating frames between hosts costs: a 64 MiB float32 allreduce between two
# host leaders on loopback (127.0.0.1 and 127.0.0.2), over Gloo's ring with no MAC (the
# path before) and over FrameComm with a GMAC per frame (the path now), alternating rounds
# in one run so both see the same load. Also prints the MAC's own speed on one core
# (bench/gmac_bench.cc). The target is FrameComm within 10% of Gloo's bandwidth.
#
# With `latency`, the 8-byte and 4 KiB allreduce latency among HOSTS leaders instead
# (docs/runtime.md, "The host leaders' mesh").
#
# With `vs`, the frame mesh's allreduce of this tree against a baseline revision's: the
# same driver (this tree's bench/interhost_allreduce.cc, copied into the baseline's
# worktree .bench-base/ for its build in build-base/, so only the library differs) run
# from each build in turn, per host count, the order swapped every round. Prints the
# median per-call time of each (each run: the median of its calls on rank 0) and the
# ratio this tree / baseline (above 1 is slower).
#
# Usage: bench/interhost.sh [MiB=64] [calls per round=10] [rounds=5]
#        bench/interhost.sh latency [hosts=4] [calls per round=200] [rounds=5]
#        bench/interhost.sh vs [base-ref=6a41148] [rounds=7] [hosts="2 4"] [MiB=64] [calls=10]
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == vs ]]; then
  base=${2:-6a41148}
  rounds=${3:-7}
  hosts=${4:-"2 4"}
  mib=${5:-64}
  calls=${6:-10}
  for v in "$rounds" "$mib" "$calls" $hosts; do
    case $v in '' | *[!0-9]*) echo "bench/interhost.sh vs: rounds, hosts, MiB and calls must be numbers (got '$v')" >&2; exit 2 ;; esac
  done
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake --build build --target hvdrun_interhost_bench >/dev/null
  [[ -d .bench-base ]] || git worktree add --detach .bench-base "$base" >/dev/null
  git -C .bench-base checkout -q -f --detach "$base"
  cp bench/interhost_allreduce.cc .bench-base/bench/interhost_allreduce.cc
  cmake -S .bench-base -B build-base -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
  cmake --build build-base --target hvdrun_interhost_bench >/dev/null
  git -C .bench-base checkout -q -- bench/interhost_allreduce.cc
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  echo "# $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); baseline $(git -C .bench-base rev-parse --short HEAD), this tree $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' + changes')"
  for r in $(seq "$rounds"); do
    for h in $hosts; do
      order="now base"
      ((r % 2)) || order="base now"
      for which in $order; do
        dir=build
        [[ $which == base ]] && dir=build-base
        "$dir/tests/runtime/hvdrun_interhost_bench" frames "$mib" "$h" "$calls" >>"$out/$which"
      done
    done
  done
  echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 - "$out" "$rounds" "$calls" <<'PY'
import re, statistics, sys
out, rounds, calls = sys.argv[1:]
def rows(name):
    r = {}
    for line in open(f"{out}/{name}"):
        f = dict(re.findall(r"(\w+)=([\d.]+)", line))
        r.setdefault((int(f["hosts"]), int(f["mib"])), []).append((float(f["ms"]), float(f["cpu_ms"])))
    return r
now, base = rows("now"), rows("base")
print(f"frames allreduce, median of {rounds} runs x {calls} calls (ms per call on rank 0; CPU ms per call, all ranks)")
print(f"{'hosts':>5} {'MiB':>4} {'this tree ms':>12} {'baseline ms':>12} {'time ratio':>10} {'this CPU':>9} {'base CPU':>9}")
for k in sorted(now):
    n, b = now[k], base[k]
    med = lambda v, i: statistics.median(x[i] for x in v)
    ratios = sorted(x[0] / y[0] for x, y in zip(n, b))
    print(f"{k[0]:>5} {k[1]:>4} {med(n, 0):>12.2f} {med(b, 0):>12.2f} {med(n, 0) / med(b, 0):>10.3f} "
          f"{med(n, 1):>9.1f} {med(b, 1):>9.1f}   (run by run: {' '.join(f'{x:.3f}' for x in ratios)})")
PY
  exit 0
fi
if [[ ${1:-} == latency ]]; then
  shift
  for v in "$@"; do
    case $v in '' | *[!0-9]*) echo "bench/interhost.sh latency: arguments must be numbers (got '$v')" >&2; exit 2 ;; esac
  done
  cmake --build build --target hvdrun_interhost_bench >/dev/null
  echo "# $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
  exec build/tests/runtime/hvdrun_interhost_bench latency "$@"
fi
mib=${1:-64}
calls=${2:-10}
rounds=${3:-5}
for v in "$mib" "$calls" "$rounds"; do
  case $v in '' | *[!0-9]*) echo "bench/interhost.sh: arguments must be numbers (got '$v')" >&2; exit 2 ;; esac
done
cmake --build build --target hvdrun_interhost_bench hvdrun_gmac_bench >/dev/null
echo "# $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
build/tests/rendezvous/hvdrun_gmac_bench 256
build/tests/runtime/hvdrun_interhost_bench "$mib" "$calls" "$rounds"
