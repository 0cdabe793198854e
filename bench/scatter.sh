#!/usr/bin/env bash
# alltoall and reducescatter from Python: hvdrun.torch against torch.distributed (gloo),
# in one run on this host, ROUNDS rounds alternating, 1 KiB to 64 MiB; plus a process-set
# allreduce (a set of every rank) against the whole job's. Prints the median
# microseconds per call and the ratios hvdrun/torch (below 1: hvdrun faster).
# Usage: bench/scatter.sh [build-dir=build] [rounds=3] [nps="2 4"]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
nps=${3:-"2 4"}
py=${PYTHON:-/usr/bin/python3}
[[ -x "$build/cli/hvdrun" ]] || cmake --build "$build" --target hvdrun hvdrun_runtime >/dev/null
export HVDRUN_LIBRARY=${HVDRUN_LIBRARY:-$PWD/$build/runtime/libhvdrun.so} PYTHONPATH=$PWD/python
export HOROVOD_DYNAMIC_PROCESS_SETS=1 HVDRUN_NCCL=off
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
sizes="1024 65536 1048576 16777216 67108864"
run() { "$build/cli/hvdrun" -np "$1" -x HVDRUN_LIBRARY -x PYTHONPATH -x HOROVOD_DYNAMIC_PROCESS_SETS -x HVDRUN_NCCL "${@:2}"; }
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $("$py" -c 'import torch; print("torch", torch.__version__)')"
for _ in $(seq "$rounds"); do
  for np in $nps; do
    run "$np" "$py" bench/scatter.py hvdrun $sizes | sed -n 's/.*\(result .*\)/\1/p' >>"$out/r"
    run "$np" "$py" bench/scatter.py torch $sizes 2>&1 | sed -n 's/.*\(result .*\|skipped .*\)/\1/p' >>"$out/r"
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
print(f"{'op':>16} {'np':>3} {'bytes':>10} {'hvdrun us':>11} {'torch us':>11} {'ratio':>6}")
for op, np_, b in sorted({k[:3] for k in med}):
    h, t = med.get((op, np_, b, "hvdrun")), med.get((op, np_, b, "torch"))
    if op == "allreduce_in_set":
        w = med.get(("allreduce", np_, b, "hvdrun"))
        print(f"{op:>16} {np_:>3} {b:>10} {h:>11.2f} {'whole job':>11} {h / w:>6.2f}  ({w:.2f} us)")
    elif h is not None and op != "allreduce":
        torch_us = "n/a" if t is None else f"{t:.2f}"
        ratio = "" if t is None else f"{h / t:.2f}"
        print(f"{op:>16} {np_:>3} {b:>10} {h:>11.2f} {torch_us:>11} {ratio:>6}")
PY
