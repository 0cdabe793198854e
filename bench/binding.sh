#!/usr/bin/env bash
# Binding against no binding on this host, alternated in one run: the shared-memory
# allreduce (bench/allreduce_sweep.c: float32 Sum of 4 KiB, 256 KiB and 4 MiB) and a small
# CPU training step under hvdrun.torch (bench/binding_step.py: a 512-wide MLP, gradients
# averaged each step), at each NP, unbound (`--bind-to none`) and bound (`--bind-to core`);
# ROUNDS rounds alternate the two. The table has the median per figure and the ratio
# bound / unbound (below 1: binding faster). A bound run that this host cannot place
# (more ranks than cores) is reported as refused, not run.
# Usage: bench/binding.sh [build-dir=build] [rounds=3] [nps="2 4"]   (about a minute on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
nps=${3:-"2 4"}
py=${PYTHON:-/usr/bin/python3}
cmake --build "$build" --target hvdrun hvdrun_runtime hvdrun_allreduce_sweep >/dev/null
export HVDRUN_LIBRARY=$PWD/$build/runtime/libhvdrun.so PYTHONPATH=$PWD/python
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cores=$(nproc)
echo "host: $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load $(cut -d' ' -f1-3 /proc/loadavg); rounds $rounds"
hvdrun() { "$build/cli/hvdrun" -x HVDRUN_LIBRARY -x PYTHONPATH "$@" 2>"$out/err" | sed -n 's/.*\(result .*\)/\1/p'; }
# One round of one variant: "KEY VALUE" lines into $out/NP.VARIANT.
measure() {
  local np=$1 variant=$2 bind=none
  [[ $variant == bound ]] && bind=core
  hvdrun -np "$np" --bind-to "$bind" "$build/tests/runtime/hvdrun_allreduce_sweep" 4096 4194304 300 |
    awk '{for (i = 2; i <= NF; ++i) {split($i, kv, "="); f[kv[1]] = kv[2]}
          if (f["bytes"] == 4096 || f["bytes"] == 262144 || f["bytes"] == 4194304)
            print "allreduce_" f["bytes"] "B_us", f["us"]}' >>"$out/$np.$variant"
  hvdrun -np "$np" --bind-to "$bind" "$py" bench/binding_step.py 15 |
    awk '{split($2, s, "="); print "train_step_ms", s[2]}' >>"$out/$np.$variant"
}
for np in $nps; do
  for _ in $(seq "$rounds"); do
    measure "$np" unbound
    if ((np <= cores)); then measure "$np" bound; fi
  done
done
median() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
printf '%-4s %-22s %12s %12s %8s\n' np figure unbound bound ratio
for np in $nps; do
  for key in allreduce_4096B_us allreduce_262144B_us allreduce_4194304B_us train_step_ms; do
    u=$(awk -v k="$key" '$1 == k {print $2}' "$out/$np.unbound" | median)
    if [[ -f "$out/$np.bound" ]]; then
      b=$(awk -v k="$key" '$1 == k {print $2}' "$out/$np.bound" | median)
      r=$(awk -v b="$b" -v u="$u" 'BEGIN {printf "%.2f", b / u}')
    else
      b="refused"
      r="-"
    fi
    printf '%-4s %-22s %12s %12s %8s\n' "$np" "$key" "$u" "$b" "$r"
  done
done
