#!/usr/bin/env bash
# alltoall and reducescatter on CPU, hvdrun.torch against its peers in one run on this host,
# ROUNDS rounds alternating, 1 KiB to 64 MiB (each rank's whole tensor), np 2 and 4:
#   torch      torch.distributed (gloo): all_to_all_single, reduce_scatter where it has one
#   horovod    Horovod's hvd.alltoall / hvd.reducescatter under `horovodrun --gloo`, when
#              HOROVOD_PYTHON names a Python with horovod.torch (its horovodrun beside it)
#   mpi        OpenMPI's MPI_Alltoall / MPI_Reduce_scatter (bench/scatter_mpi.c, compiled
#              here with mpicc), when mpicc and mpirun are installed
# plus a process-set allreduce (a set of every rank) against the whole job's. A missing
# peer is skipped with a message. Prints the median microseconds per call and the ratios
# hvdrun/peer (below 1: hvdrun faster); "best" is the fastest peer.
# The ranks inherit the environment: HVDRUN_CMA=1 measures hvdrun's single-copy exchange
# inside the host (docs/runtime.md), HVDRUN_CMA=0 or unset the segment.
# Usage: [HOROVOD_PYTHON=.../bin/python] [HVDRUN_CMA=1] bench/scatter.sh [build-dir=build] [rounds=3]
#        [nps="2 4"] [sizes="1024 65536 1048576 16777216 67108864"]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
nps=${3:-"2 4"}
sizes=${4:-"1024 65536 1048576 16777216 67108864"}
py=${PYTHON:-/usr/bin/python3}
hvd_py=${HOROVOD_PYTHON:-}
[[ -x "$build/cli/hvdrun" ]] || cmake --build "$build" --target hvdrun hvdrun_runtime >/dev/null
export HVDRUN_LIBRARY=${HVDRUN_LIBRARY:-$PWD/$build/runtime/libhvdrun.so} PYTHONPATH=$PWD/python
export HOROVOD_DYNAMIC_PROCESS_SETS=1 HVDRUN_NCCL=off
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() { "$build/cli/hvdrun" -np "$1" -x HVDRUN_LIBRARY -x PYTHONPATH -x HOROVOD_DYNAMIC_PROCESS_SETS -x HVDRUN_NCCL "${@:2}"; }
peers="torch"
if [[ -n "$hvd_py" && -x "$(dirname "$hvd_py")/horovodrun" ]] &&
  "$hvd_py" -c 'import horovod.torch' 2>/dev/null; then
  peers+=" horovod"
else
  echo "skipped horovod: set HOROVOD_PYTHON to a Python with horovod.torch and horovodrun beside it"
fi
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  mkdir -p "$build/bench"
  mpicc -O2 -o "$build/bench/scatter_mpi" bench/scatter_mpi.c
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  peers+=" mpi"
else
  echo "skipped mpi: no mpicc/mpirun (apt-get install openmpi-bin libopenmpi-dev)"
fi
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $("$py" -c 'import torch; print("torch", torch.__version__)')"
[[ "$peers" == *horovod* ]] && echo "horovod $("$hvd_py" -c 'import horovod; print(horovod.__version__)')"
[[ "$peers" == *mpi* ]] && mpirun --version | head -1
for _ in $(seq "$rounds"); do
  for np in $nps; do
    run "$np" "$py" bench/scatter.py hvdrun $sizes | sed -n 's/.*\(result .*\)/\1/p' >>"$out/r"
    for peer in $peers; do
      case $peer in
        torch) run "$np" "$py" bench/scatter.py torch $sizes 2>&1 ;;
        # PYTHONPATH is cleared: Horovod's own Python, none of this tree.
        horovod) PYTHONPATH='' "$(dirname "$hvd_py")/horovodrun" --gloo -np "$np" -H "localhost:$np" \
          "$hvd_py" bench/scatter.py horovod $sizes 2>&1 ;;
        mpi) mpirun --oversubscribe --bind-to none -np "$np" "$build/bench/scatter_mpi" $sizes 2>&1 ;;
      esac | sed -n 's/.*\(result .*\|skipped .*\)/\1/p' >>"$out/r"
    done
  done
done
grep -h '^skipped' "$out/r" | sort -u || true
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" - "$out/r" <<'PY'
import re, statistics, sys
r = {}
for line in open(sys.argv[1]):
    if not line.startswith("result"):
        continue
    f = dict(re.findall(r"(\w+)=([\w.]+)", line))
    r.setdefault((f["op"], int(f["np"]), int(f["bytes"]), f["impl"]), []).append(float(f["us"]))
med = {k: statistics.median(v) for k, v in r.items()}
peers = [p for p in ("torch", "horovod", "mpi") if any(k[3] == p for k in med)]
print(f"{'op':>16} {'np':>3} {'bytes':>10} {'hvdrun us':>11}"
      + "".join(f" {p + ' us':>11}" for p in peers)
      + "".join(f" {'/' + p:>8}" for p in peers) + f" {'/best':>7}")
for op, np_, b in sorted({k[:3] for k in med}):
    h = med.get((op, np_, b, "hvdrun"))
    if h is None or op == "allreduce":
        continue
    if op == "allreduce_in_set":
        w = med.get(("allreduce", np_, b, "hvdrun"))
        print(f"{op:>16} {np_:>3} {b:>10} {h:>11.2f}  whole job {w:.2f} us, ratio {h / w:.2f}")
        continue
    ts = [med.get((op, np_, b, p)) for p in peers]
    known = [t for t in ts if t is not None]
    print(f"{op:>16} {np_:>3} {b:>10} {h:>11.2f}"
          + "".join(f" {'n/a' if t is None else f'{t:.2f}':>11}" for t in ts)
          + "".join(f" {'' if t is None else f'{h / t:.2f}':>8}" for t in ts)
          + f" {(f'{h / min(known):.2f}' if known else ''):>7}")
PY
