#!/usr/bin/env bash
# A Horovod elastic PyTorch program (hvd.elastic.run, TorchState, commit every 10 steps)
# on the loopback SSH cluster, 3 hosts x 2 ranks; one host's agent SIGKILLed mid-training;
# the time from the kill until every rank has made its first training step at the new
# size (each rank writes its own clock reading at that step, so no polling enters the
# figure). Two modes of hvdrun, same program, default settings: in process (every rank
# declared the elastic API, so the survivors keep their processes and roll back to the
# last commit), and the restart mode (the same program with its declaration switched off,
# as a program that does not use the API: every process is replaced, so the figure
# includes Python's start, `import torch`, init() and the state sync). Prints one row per
# round, then each mode's median.
# Usage: bench/elastic_api.sh [build-dir=build] [rounds=3]
#   (HVDRUN_LIBRARY, when set, is the libhvdrun the ranks load instead of the build's.)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
lib=${HVDRUN_LIBRARY:-$PWD/$build/runtime/libhvdrun.so}
targets=(hvdrun hvdrun_test_cluster)
[[ -n ${HVDRUN_LIBRARY:-} ]] || targets+=(hvdrun_runtime)
cmake --build "$build" --target "${targets[@]}" >/dev/null
hvdrun=$PWD/$build/cli/hvdrun
bench="elastic_api bench"
# shellcheck source=bench/elastic_lib.sh
source "$PWD/bench/elastic_lib.sh"

cat >"$work/train.py" <<PY
import os, sys, time
import torch
import hvdrun.torch as hvd

if os.environ.get("BENCH_MODE") == "restart":
    import hvdrun.torch.elastic
    hvdrun.torch.elastic.declare_elastic = lambda: None  # never tells the agent: restart mode
hvd.init()
model = torch.nn.Linear(64, 8)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, steps=0)
with open("$work/agent.%d.%d" % (hvd.generation(), hvd.rank()), "w") as f:
    f.write("%d\n" % os.getppid())

@hvd.elastic.run
def train(state):
    g = hvd.generation()
    first = True
    while True:
        optimizer.zero_grad()
        model(torch.ones(16, 64)).sum().backward()
        optimizer.step()
        state.steps += 1
        if first:
            first = False
            with open("$work/step.%d.%d.%d" % (g, hvd.size(), hvd.rank()), "w") as f:
                f.write("%d\n" % time.time_ns())
            if g > 0:
                return
        if state.steps % 10 == 0:
            state.commit()
        time.sleep(0.02)

train(state)
PY

echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
coproc CLUSTER { "$build/tests/support/hvdrun_test_cluster" 3; }
read -r config <&"${CLUSTER[0]}"
printf 'node1:2\nnode2:2\nnode3:2\n' >"$work/hosts"
printf '#!/bin/sh\nexec cat %s/hosts\n' "$work" >"$work/discover.sh"
chmod +x "$work/discover.sh"
for mode in in_process restart; do
figures=()
for ((r = 1; r <= rounds; r++)); do
  rm -f "$work"/step.* "$work"/agent.*
  start=$(now_ns)
  HVDRUN_LIBRARY=$lib PYTHONPATH=$PWD/python BENCH_MODE=$mode \
    "$hvdrun" --ssh-config "$config" --host-discovery-script "$work/discover.sh" --min-np 2 \
    -x HVDRUN_LIBRARY -x PYTHONPATH -x BENCH_MODE /usr/bin/python3 "$work/train.py" \
    >/dev/null 2>"$work/err" &
  job=$!
  wait_files "$work/step.0.6.*" 6 60
  first=$(cat "$work"/step.0.6.* | sort -n | tail -1)
  victim=$(cat "$work/agent.0.5")
  t0=$(now_ns)
  kill -KILL "$victim"
  wait_files "$work/step.1.4.*" 4 60
  wait "$job" || { cat "$work/err" >&2; exit 1; }
  last=$(cat "$work"/step.1.4.* | sort -n | tail -1)
  ms=$(((last - t0) / 1000000))
  figures+=("$ms")
  echo "mode=$mode round=$r start_to_first_step_ms=$(((first - start) / 1000000)) lost_host_to_first_step_at_4_ms=$ms"
done
median=$(printf '%s\n' "${figures[@]}" | sort -n | sed -n "$(((rounds + 1) / 2))p")
echo "result mode=$mode median_lost_host_to_first_step_ms=$median"
done
