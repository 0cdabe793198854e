#!/usr/bin/env bash
# CPU allreduce, hvdrun against OpenMPI's MPI_Allreduce in one run: the same program
# (bench/allreduce_sweep.c) built against libhvdrun and with mpicc, in-place float32 sum
# from 8 B to 256 MiB, at np 2 and 4 on this host. ROUNDS rounds alternate the two (hvdrun
# started by the hvdrun launcher, MPI by mpirun); the table has the median per size, the
# bus bandwidth ratio (above 1: hvdrun faster) and the time ratio (below 1: hvdrun faster).
#
# The bound: every rank must at least read its input from memory and write its result,
# the memory traffic of one memcpy of the buffer, and at most min(np, cores) ranks move
# data at a time, each at single-process memcpy speed B (measured here):
#   time >= np x bytes / (min(np, cores) x B)
#   busbw = 2(np-1)/np x bytes / time <= 2(np-1) x min(np, cores) x B / np^2
# (optimistic: it assumes memory bandwidth grows with the cores in use).
# Usage: bench/allreduce.sh [build-dir=build] [rounds=3] [nps="2 4"] [max-bytes=268435456]
# Needs mpicc and mpirun (apt-get install openmpi-bin libopenmpi-dev); MPI is never a
# build dependency of hvdrun.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
nps=${3:-"2 4"}
max=${4:-268435456}
cmake --build "$build" --target hvdrun hvdrun_allreduce_sweep >/dev/null
mkdir -p "$build/bench"
mpicc -O2 -DHVDRUN_BENCH_MPI -o "$build/bench/allreduce_sweep_mpi" bench/allreduce_sweep.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ours="$build/tests/runtime/hvdrun_allreduce_sweep"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

cores=$(nproc)
echo "host: $cores cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')," \
  "load $(cut -d' ' -f1-3 /proc/loadavg); $(mpirun --version | head -1)"
for r in $(seq "$rounds"); do
  "$ours" memcpy >>"$out/memcpy"
  for np in $nps; do
    "$build/cli/hvdrun" -np "$np" "$ours" 8 "$max" | sed -n 's/.*\(result .*\)/\1/p' >>"$out/hvdrun"
    mpirun --oversubscribe --bind-to none -np "$np" "$build/bench/allreduce_sweep_mpi" 8 "$max" |
      grep '^result' >>"$out/mpi"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$out" "$cores" "$nps" <<'PY'
import re, statistics, sys
out, cores, nps = sys.argv[1], int(sys.argv[2]), [int(n) for n in sys.argv[3].split()]
def rows(name):
    r = {}
    for line in open(f"{out}/{name}"):
        f = dict(re.findall(r"(\w+)=([\w.]+)", line))
        r.setdefault((int(f["np"]), int(f["bytes"])), []).append(float(f["us"]))
    return r
h, m = rows("hvdrun"), rows("mpi")
memcpy = statistics.median(float(re.search(r"GBps=([\d.]+)", l).group(1)) for l in open(f"{out}/memcpy"))
print(f"memcpy (one process, 64 MiB): {memcpy:.2f} GB/s (median of {len(open(f'{out}/memcpy').readlines())})")
def size(b):
    for unit, k in (("MiB", 20), ("KiB", 10)):
        if b >= 1 << k: return f"{b >> k} {unit}"
    return f"{b} B"
for np in nps:
    bound = 2 * (np - 1) * min(np, cores) * memcpy / np**2
    print(f"\nnp {np}: memcpy bound on bus bandwidth {bound:.2f} GB/s")
    print(f"{'size':>8} {'hvdrun us':>11} {'MPI us':>11} {'hvdrun GB/s':>12} {'MPI GB/s':>9} {'busbw ratio':>12} {'time ratio':>11}")
    for (n, b) in sorted(k for k in h if k[0] == np):
        if (n, b) not in m: continue
        th, tm = statistics.median(h[(n, b)]), statistics.median(m[(n, b)])
        bw = lambda t: 2 * (n - 1) / n * b / (t * 1e-6) / 1e9
        print(f"{size(b):>8} {th:11.2f} {tm:11.2f} {bw(th):12.3f} {bw(tm):9.3f} {tm / th:11.2f}x {th / tm:10.2f}x")
PY
