#!/usr/bin/env bash
# Allreduce from Python against the C API, in one run on this host: hvdrun.torch's
# hvd.allreduce, torch.distributed's gloo all_reduce (both bench/python_allreduce.py),
# libhvdrun's C API (bench/allreduce_sweep.c) and, when HOROVOD_PYTHON names a Python with
# horovod.torch and horovodrun beside it, Horovod's hvd.allreduce under `horovodrun --gloo`
# (the same program), float32 Sum of 1 float, 1 MiB and 64 MiB, ROUNDS rounds alternating
# them; the table has the median microseconds per call and the ratios to the C API.
# With BENCH_OUT_OF_PLACE=1 the C API sums into a second buffer from malloc(), as
# hvd.allreduce sums into a new output (in place otherwise); =page into a page-aligned
# mapping of its own, as hvdrun.torch's pooled outputs are.
# Usage: [HOROVOD_PYTHON=.../bin/python] [BENCH_OUT_OF_PLACE=1] bench/python_allreduce.sh [build-dir=build] [rounds=3] [np=2]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
np=${3:-2}
py=${PYTHON:-/usr/bin/python3}
hvd_py=${HOROVOD_PYTHON:-}
cmake --build "$build" --target hvdrun hvdrun_runtime hvdrun_allreduce_sweep >/dev/null
export HVDRUN_LIBRARY=$PWD/$build/runtime/libhvdrun.so PYTHONPATH=$PWD/python
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() { "$build/cli/hvdrun" -np "$np" -x HVDRUN_LIBRARY -x PYTHONPATH "$@" | sed -n 's/.*\(result .*\)/\1/p'; }
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); np $np; $("$py" -c 'import torch; print("torch", torch.__version__)')"
horovod=
if [[ -n "$hvd_py" && -x "$(dirname "$hvd_py")/horovodrun" ]] &&
  "$hvd_py" -c 'import horovod.torch' 2>/dev/null; then
  horovod=1
  echo "horovod $("$hvd_py" -c 'import horovod; print(horovod.__version__)')"
else
  echo "skipped horovod: set HOROVOD_PYTHON to a Python with horovod.torch and horovodrun beside it"
fi
for _ in $(seq "$rounds"); do
  run "$py" bench/python_allreduce.py hvdrun 4 1048576 67108864 >>"$out/r"
  run "$py" bench/python_allreduce.py torch 4 1048576 67108864 >>"$out/r"
  if [[ -n $horovod ]]; then
    # PYTHONPATH is cleared: Horovod's own Python, none of this tree.
    PYTHONPATH='' "$(dirname "$hvd_py")/horovodrun" --gloo -np "$np" -H "localhost:$np" \
      "$hvd_py" bench/python_allreduce.py horovod 4 1048576 67108864 2>&1 |
      sed -n 's/.*\(result .*\)/\1/p' >>"$out/r"
  fi
  for b in 4 1048576 67108864; do
    # Timed as the Python side times itself: the median of 5 timed batches.
    BENCH_OUT_OF_PLACE=${BENCH_OUT_OF_PLACE:-} BENCH_BATCHES=5 run -x BENCH_OUT_OF_PLACE \
      -x BENCH_BATCHES "$build/tests/runtime/hvdrun_allreduce_sweep" "$b" "$b" |
      sed 's/impl=[^ ]*/impl=C/' >>"$out/r"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" - "$out/r" <<'PY'
import os, re, statistics, sys
r = {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=([\w.]+)", line))
    r.setdefault((f["impl"], int(f["bytes"])), []).append(float(f["us"]))
med = {k: statistics.median(v) for k, v in r.items()}
peers = [("torch", "torch gloo us")] + ([("horovod", "horovod us")] if any(k[0] == "horovod" for k in med) else [])
c_title = {"1": "C API oop us", "page": "C API page us"}.get(os.environ.get("BENCH_OUT_OF_PLACE"), "C API us")
head = f"{'bytes':>10} {c_title:>12} {'hvdrun.torch us':>16} {'ratio':>6}"
for _, title in peers:
    head += f" {title:>14} {'ratio':>6}"
print(head)
for b in sorted({k[1] for k in med}):
    c, h = med.get(("C", b)), med.get(("hvdrun", b))
    if c is None or h is None:
        continue
    line = f"{b:>10} {c:>12.2f} {h:>16.2f} {h / c:>6.2f}"
    for impl, _ in peers:
        p = med.get((impl, b))
        line += f" {p:>14.2f} {p / c:>6.2f}" if p is not None else f" {'-':>14} {'':>6}"
    print(line)
PY
