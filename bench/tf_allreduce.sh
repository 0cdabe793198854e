#!/usr/bin/env bash
# Allreduce from TensorFlow in one run on this host: hvdrun.tensorflow's op inside a
# tf.function ("graph") and eagerly, the alternative design (tf.numpy_function calling
# the C ABI through ctypes) and hvdrun.torch's hvd.allreduce (bench/python_allreduce.py),
# float32 Sum of 1 float, 1 MiB and 64 MiB, ROUNDS rounds alternating them; the table has
# the median microseconds per allreduce and each one's ratio to hvdrun.torch's.
# Needs the TensorFlow virtualenv (scripts/tf-venv.sh) and Debian's python3-torch.
# Usage: bench/tf_allreduce.sh [build-dir=build] [rounds=3] [np=2]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
np=${3:-2}
tfpy=${HVDRUN_TF_PYTHON:-${HVDRUN_TF_VENV:-$HOME/.cache/hvdrun/tf-venv}/bin/python}
[[ -x $tfpy ]] || { echo "tf_allreduce.sh: no $tfpy; run scripts/tf-venv.sh" >&2; exit 2; }
cmake --build "$build" --target hvdrun hvdrun_runtime >/dev/null
export HVDRUN_LIBRARY=$PWD/$build/runtime/libhvdrun.so PYTHONPATH=$PWD/python TF_CPP_MIN_LOG_LEVEL=3
export HVDRUN_TF_OPS_CACHE=${HVDRUN_TF_OPS_CACHE:-$PWD/$build/tests/tensorflow/tf-ops}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() {
  "$build/cli/hvdrun" -np "$np" -x HVDRUN_LIBRARY -x PYTHONPATH -x TF_CPP_MIN_LOG_LEVEL \
    -x HVDRUN_TF_OPS_CACHE "$@" 2>/dev/null | sed -n 's/.*\(result .*\)/\1/p'
}
sizes=(4 1048576 67108864)
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); np $np;" \
  "$("$tfpy" -c 'import tensorflow as tf; print("TensorFlow", tf.__version__)' 2>/dev/null)"
for _ in $(seq "$rounds"); do
  for impl in graph numpy_function eager; do
    run "$tfpy" bench/tf_allreduce.py "$impl" "${sizes[@]}" >>"$out/r"
  done
  run /usr/bin/python3 bench/python_allreduce.py hvdrun "${sizes[@]}" >>"$out/r"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$tfpy" - "$out/r" <<'PY'
import re, statistics, sys
r = {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=([\w.]+)", line))
    r.setdefault((f["impl"], int(f["bytes"])), []).append(float(f["us"]))
med = {k: statistics.median(v) for k, v in r.items()}
impls = ["graph", "numpy_function", "eager"]
print(f"{'bytes':>10} {'hvdrun.torch':>13} " + " ".join(f"{i:>22}" for i in impls))
for b in sorted({k[1] for k in med}):
    t = med.get(("hvdrun", b))
    cells = []
    for i in impls:
        v = med.get((i, b))
        cells.append(f"{v:>12.1f} ({v / t:>5.2f}x)" if v and t else f"{'-':>22}")
    print(f"{b:>10} {t if t else float('nan'):>13.1f} " + " ".join(f"{c:>22}" for c in cells))
PY
