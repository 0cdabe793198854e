#!/usr/bin/env bash
# Samples per second of one small Keras model (bench/keras_synthetic.py) trained data-
# parallel on this host, in one run, rounds alternating: under hvdrun (model.fit with
# DistributedOptimizer, and a DistributedGradientTape loop) against TensorFlow's own
# MultiWorkerMirroredStrategy (workers on localhost, TF_CONFIG, the same loop). Prints the
# median samples/s of each and the ratios to MultiWorkerMirroredStrategy.
# Needs the TensorFlow virtualenv (scripts/tf-venv.sh).
# Usage: bench/keras_synthetic.sh [build-dir=build] [rounds=3] [np=2] [steps=60] [batch=64]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
np=${3:-2}
steps=${4:-60}
batch=${5:-64}
tfpy=${HVDRUN_TF_PYTHON:-${HVDRUN_TF_VENV:-$HOME/.cache/hvdrun/tf-venv}/bin/python}
[[ -x $tfpy ]] || { echo "keras_synthetic.sh: no $tfpy; run scripts/tf-venv.sh" >&2; exit 2; }
cmake --build "$build" --target hvdrun hvdrun_runtime >/dev/null
export HVDRUN_LIBRARY=$PWD/$build/runtime/libhvdrun.so PYTHONPATH=$PWD/python TF_CPP_MIN_LOG_LEVEL=3
export HVDRUN_TF_OPS_CACHE=${HVDRUN_TF_OPS_CACHE:-$PWD/$build/tests/tensorflow/tf-ops}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

hvdrun_run() {
  "$build/cli/hvdrun" -np "$np" -x HVDRUN_LIBRARY -x PYTHONPATH -x TF_CPP_MIN_LOG_LEVEL \
    -x HVDRUN_TF_OPS_CACHE "$tfpy" bench/keras_synthetic.py "$1" "$steps" "$batch" 2>/dev/null |
    sed -n 's/.*\(result .*\)/\1/p'
}

mwms_run() {
  local ports workers pids=() i
  ports=$("$tfpy" -c "
import socket
s = [socket.socket() for _ in range($np)]
for x in s: x.bind(('127.0.0.1', 0))
print(' '.join(str(x.getsockname()[1]) for x in s))")
  workers=$(printf '"localhost:%s",' $ports)
  for ((i = 0; i < np; i++)); do
    TF_CONFIG="{\"cluster\": {\"worker\": [${workers%,}]}, \"task\": {\"type\": \"worker\", \"index\": $i}}" \
      "$tfpy" bench/keras_synthetic.py mwms "$steps" "$batch" >"$out/mwms$i" 2>/dev/null &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
  sed -n 's/.*\(result .*\)/\1/p' "$out/mwms0"
}

echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); np $np, batch $batch per worker;" \
  "$("$tfpy" -c 'import tensorflow as tf, keras; print("TensorFlow", tf.__version__, "Keras", keras.__version__)' 2>/dev/null)"
for _ in $(seq "$rounds"); do
  hvdrun_run hvdrun-fit >>"$out/r"
  hvdrun_run hvdrun-loop >>"$out/r"
  mwms_run >>"$out/r"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$tfpy" - "$out/r" <<'PY'
import re, statistics, sys
r = {}
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=([\w.-]+)", line))
    r.setdefault(f["impl"], []).append(float(f["samples_per_s"]))
med = {k: statistics.median(v) for k, v in r.items()}
base = med.get("mwms")
for impl in ("hvdrun-fit", "hvdrun-loop", "mwms"):
    if impl in med:
        ratio = f"{med[impl] / base:.2f}x" if base else "-"
        runs = ", ".join(f"{v:.0f}" for v in r[impl])
        print(f"{impl:>12}: {med[impl]:8.1f} samples/s  ({ratio} MultiWorkerMirroredStrategy; runs {runs})")
PY
