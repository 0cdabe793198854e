#!/usr/bin/env bash
# A Horovod elastic PyTorch program (hvd.elastic.run, TorchState, commit every 10 steps)
# on the loopback SSH cluster, 3 hosts x 2 ranks; one host's agent SIGKILLed mid-training;
# the time from the kill until every rank has made its first training step at the new
# size (each rank writes its own clock reading at that step, so no polling enters the
# figure). Two modes of hvdrun, same program, default settings: in process (every rank
# declared the elastic API, so the survivors keep their processes and roll back to the
# last commit), and the restart mode (the same program with its declaration switched off,
# as a program that does not use the API: every process is replaced, so the figure
# includes Python's start, `import torch`, init() and the state sync). Then, when its
# virtualenv is there (bench/horovod_synthetic.sh --install-only builds it), Horovod
# 0.28.1's own elastic mode on the same program (`import horovod.torch as hvd`),
# `horovodrun --gloo` with the same discovery script, with its defaults and with
# `--gloo-timeout-seconds 2`; there the host's ranks and their SSH sessions are SIGKILLed.
# Prints one row per round (Horovod: one round per mode), then each mode's median.
# Usage: bench/elastic_api.sh [build-dir=build] [rounds=3]
#   (HVDRUN_LIBRARY, when set, is the libhvdrun the ranks load instead of the build's;
#   HOROVOD_VENV, Horovod's virtualenv, default .cache/horovod-0.28.1.)
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
with open("$work/agent.%d" % hvd.rank(), "w") as f:  # at size 6
    f.write("%d %d %s\n" % (os.getpid(), os.getppid(), os.environ.get("HOROVOD_HOSTNAME", "")))

@hvd.elastic.run
def train(state):
    size = hvd.size()
    first = True
    while True:
        optimizer.zero_grad()
        model(torch.ones(16, 64)).sum().backward()
        optimizer.step()
        state.steps += 1
        if first:
            first = False
            with open("$work/step.%d.%d" % (size, hvd.rank()), "w") as f:
                f.write("%d\n" % time.time_ns())
            if size < 6:
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
hvd_venv=${HOROVOD_VENV:-$PWD/.cache/horovod-0.28.1}
sed 's/^import hvdrun.torch as hvd$/import horovod.torch as hvd/' "$work/train.py" >"$work/hvd_train.py"
# Horovod reaches the same sshd by address, port and key.
awk '$1 == "HostName" { print $2 ":2" }' "$config" >"$work/hvd_hosts"
printf '#!/bin/sh\nexec cat %s/hvd_hosts\n' "$work" >"$work/hvd_discover.sh"
chmod +x "$work/hvd_discover.sh"
ssh_port=$(awk '$1 == "Port" { print $2; exit }' "$config")
ssh_key=$(awk '$1 == "IdentityFile" { print $2; exit }' "$config")

# One round of MODE: start the job, wait for six ranks' first steps, kill one host, wait
# for the four survivors' first steps at size 4; prints the round's row.
one_round() {
  local mode=$1 round=$2 job start first victims t0 last ms p pp h
  rm -f "$work"/step.* "$work"/agent.*
  start=$(now_ns)
  case $mode in
  in_process | restart)
    HVDRUN_LIBRARY=$lib PYTHONPATH=$PWD/python BENCH_MODE=$mode \
      "$hvdrun" --ssh-config "$config" --host-discovery-script "$work/discover.sh" \
      --min-np 2 -x HVDRUN_LIBRARY -x PYTHONPATH -x BENCH_MODE /usr/bin/python3 \
      "$work/train.py" >/dev/null 2>"$work/err" &
    ;;
  horovod*)
    local extra=()
    [[ $mode == horovod_gloo_timeout_2 ]] && extra=(--gloo-timeout-seconds 2)
    "$hvd_venv/bin/horovodrun" --gloo -np 6 --min-np 2 "${extra[@]}" \
      --host-discovery-script "$work/hvd_discover.sh" -p "$ssh_port" -i "$ssh_key" \
      "$hvd_venv/bin/python" "$work/hvd_train.py" >/dev/null 2>"$work/err" &
    ;;
  esac
  job=$!
  wait_files "$work/step.6.*" 6 90
  first=$(cat "$work"/step.6.* | sort -n | tail -1)
  wait_files "$work/agent.*" 6 10
  if [[ $mode == horovod* ]]; then
    # Horovod has no agent per host: the host's ranks and their SSH sessions go.
    victims=()
    read -r _ _ lost <"$work/agent.5"
    for f in "$work"/agent.*; do
      read -r p pp h <"$f"
      [[ $h == "$lost" ]] && victims+=("$p" "$pp")
    done
  else
    read -r _ pp _ <"$work/agent.5"
    victims=("$pp")
  fi
  t0=$(now_ns)
  kill -KILL "${victims[@]}"
  wait_files "$work/step.4.*" 4 120
  wait "$job" || [[ $mode == horovod* ]] || { cat "$work/err" >&2; exit 1; }
  last=$(cat "$work"/step.4.* | sort -n | tail -1)
  ms=$(((last - t0) / 1000000))
  figures+=("$ms")
  echo "mode=$mode round=$round start_to_first_step_ms=$(((first - start) / 1000000)) lost_host_to_first_step_at_4_ms=$ms"
}

modes=(in_process restart)
if [[ -x $hvd_venv/bin/horovodrun ]]; then
  modes+=(horovod horovod_gloo_timeout_2)
else
  echo "Horovod: skipped ($hvd_venv/bin/horovodrun is missing; set HOROVOD_VENV, or build it with bench/horovod_synthetic.sh --install-only)"
fi
for mode in "${modes[@]}"; do
  figures=()
  # Horovod: one round per mode (a round with its defaults takes over 40 s here).
  n=$rounds
  [[ $mode == horovod* ]] && n=1
  for ((r = 1; r <= n; r++)); do one_round "$mode" "$r"; done
  median=$(printf '%s\n' "${figures[@]}" | sort -n | sed -n "$(((n + 1) / 2))p")
  echo "result mode=$mode median_lost_host_to_first_step_ms=$median"
done
