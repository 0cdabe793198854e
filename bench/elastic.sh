#!/usr/bin/env bash
# Elastic recovery time: a job of one rank per host on the loopback SSH cluster (N sshd on
# 127.0.0.k, tests/support's hvdrun_test_cluster), one host's agent SIGKILLed, and the time
# from the kill until every rank of the next generation runs (each writes its own clock
# reading, so no polling enters the figure). Default intervals, --min-np 1. Prints one row
# per host count and round, then the median.
# Then the same for torchrun (one round per host count; TORCHRUN=0 skips it).
# Usage: bench/elastic.sh [build-dir=build] [hosts="4 16"] [rounds=3]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
host_counts=${2:-"4 16"}
rounds=${3:-3}
cmake --build "$build" --target hvdrun hvdrun_test_cluster >/dev/null
hvdrun=$PWD/$build/cli/hvdrun
bench="elastic bench"
# shellcheck source=bench/elastic_lib.sh
source "$PWD/bench/elastic_lib.sh"

echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for n in $host_counts; do
  # The cluster for this size: its ssh_config path is the helper's first line.
  coproc CLUSTER { "$build/tests/support/hvdrun_test_cluster" "$n"; }
  read -r config <&"${CLUSTER[0]}"
  for ((k = 1; k <= n; k++)); do echo "node$k:1"; done >"$work/hosts"
  printf '#!/bin/sh\nexec cat %s/hosts\n' "$work" >"$work/discover.sh"
  chmod +x "$work/discover.sh"
  figures=()
  for ((r = 1; r <= rounds; r++)); do
    rm -f "$work"/up.* "$work"/agent.*
    "$hvdrun" --ssh-config "$config" --host-discovery-script "$work/discover.sh" --min-np 1 \
      sh -c "g=\$HVDRUN_GENERATION; echo \$PPID > $work/agent.\$g.\$HVDRUN_RANK; date +%s%N > $work/up.\$g.\$HVDRUN_RANK; [ \$g = 1 ] && exit 0; exec sleep 600" \
      >/dev/null 2>"$work/err" &
    job=$!
    wait_files "$work/up.0.*" "$n"
    victim=$(cat "$work/agent.0.$((n - 1))")
    t0=$(now_ns)
    kill -KILL "$victim"
    wait_files "$work/up.1.*" "$((n - 1))"
    wait "$job" || { cat "$work/err" >&2; exit 1; }
    last=$(cat "$work"/up.1.* | sort -n | tail -1)
    ms=$(((last - t0) / 1000000))
    figures+=("$ms")
    echo "hosts=$n round=$r recovery_ms=$ms"
  done
  median=$(printf '%s\n' "${figures[@]}" | sort -n | sed -n "$(((rounds + 1) / 2))p")
  echo "result hosts=$n median_recovery_ms=$median"
  stop_cluster
done

# The peer: torchrun's elastic agent (torch.distributed.launcher's elastic_launch with the
# settings torchrun would pass: c10d rendezvous, 1:N nodes, one process per node,
# --max_restarts 3, defaults otherwise; the `torchrun` command itself of Debian's torch 1.13
# fails at start under Python 3.11 while reading --redirects). One agent per simulated host
# on this machine; SIGKILL to one agent and its worker stands for the lost host. Its workers notice in their next Gloo allreduce (every 50 ms); the
# survivors restart and rendezvous again.
torchrun_round() {
  local n=$1 port
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat >"$work/agent.py" <<'PY'
import sys
from torch.distributed.launcher.api import LaunchConfig, elastic_launch
from torch.distributed.elastic.multiprocessing import Std
n, endpoint, script = int(sys.argv[1]), sys.argv[2], sys.argv[3]
config = LaunchConfig(min_nodes=1, max_nodes=n, nproc_per_node=1, rdzv_backend="c10d",
                      rdzv_endpoint=endpoint, run_id="bench", max_restarts=3,
                      redirects=Std.NONE, tee=Std.NONE)
elastic_launch(config, entrypoint=sys.executable)(script)
PY
  cat >"$work/worker.py" <<PY
import os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
g = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
with open(f"$work/tup.{g}.{dist.get_rank()}", "w") as f:
    f.write(f"{time.time_ns()}\n")
if g >= 1:
    sys.exit(0)
while True:
    dist.all_reduce(torch.zeros(1))
    time.sleep(0.05)
PY
  local pids=() k
  for ((k = 0; k < n; k++)); do
    /usr/bin/python3 "$work/agent.py" "$n" "127.0.0.1:$port" "$work/worker.py" \
      >/dev/null 2>"$work/terr.$k" &
    pids+=($!)
  done
  wait_files "$work/tup.0.*" "$n" 120
  local t0
  t0=$(now_ns)
  local victim=${pids[$((n - 1))]}
  pkill -KILL -P "$victim" || true
  kill -KILL "$victim"
  wait_files "$work/tup.1.*" "$((n - 1))" 300
  for ((k = 0; k < n - 1; k++)); do wait "${pids[$k]}" || true; done
  local last
  last=$(cat "$work"/tup.1.* | sort -n | tail -1)
  torch_ms=$(((last - t0) / 1000000))
}

if [[ ${TORCHRUN:-1} == 1 ]] && /usr/bin/python3 -c 'import torch.distributed.launcher.api' 2>/dev/null; then
  for n in $host_counts; do
    rm -f "$work"/tup.*
    torchrun_round "$n"
    echo "torchrun-agent hosts=$n recovery_ms=$torch_ms"
  done
fi
