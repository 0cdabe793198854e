#!/usr/bin/env bash
# Join mode's launch against the other two ways to start the same job: wall time of `true`
# on 8 nodes x 2 ranks,
#   - join:     8 independent `hvdrun --nnodes 8 --node-rank K --rdzv-endpoint
#               127.0.0.2:PORT --nproc-per-node 2 --no-python true`, started at once, as an
#               orchestrator starts one per pod (node 0 listens on 127.0.0.2);
#   - ssh:      one `hvdrun --ssh-config CFG -H node2:2,...,node9:2 true` on the loopback SSH
#               cluster of the integration tests (build/tests/support/hvdrun_test_cluster:
#               nodeK is 127.0.0.K), one login and one agent per host;
#   - torchrun: 8 independent `python3 -m torch.distributed.run --nnodes 8 --node_rank K
#               --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint 127.0.0.2:PORT
#               --no_python true`, started at once, with --monitor_interval 0.1 (its
#               agents look at their workers every 5 s by default, which would add up to
#               5 s to each run) and --redirects 1 --tee 1 (Debian's torch 1.13 on Python
#               3.11 fails on the default --redirects 0);
# alternated, each from the first start to the last exit, a fresh port per run; medians,
# ranges, and the ratios join / ssh and join / torchrun.
#
# Every node runs on this machine, so the 8 launchers and their 16 ranks share its CPUs:
# torchrun's figure is mostly 8 Python interpreters importing torch, the SSH one 8 logins
# (each through root's login shell and its start-up files) and 8 agents. The join nodes
# all connect from 127.0.0.1: hvdrun has no flag for a node's source address, and none is
# needed in a pod.
#
# Needs root (the SSH cluster), /usr/sbin/sshd, and Debian's python3-torch for torchrun.
# Usage: bench/join_launch.sh [build-dir=build] [reps=5]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
reps=${2:-5}
nodes=8
per_node=2

if (($(id -u) != 0)); then
  echo "join_launch.sh: needs root (the loopback SSH cluster starts sshd)" >&2
  exit 1
fi
/usr/bin/python3 -c 'import torch.distributed.run' 2>/dev/null ||
  { echo "join_launch.sh: /usr/bin/python3 has no torch (Debian's python3-torch)" >&2; exit 1; }
cmake --build "$build" --target hvdrun hvdrun_test_cluster >/dev/null
hvdrun=$(readlink -f "$build/cli/hvdrun")
cluster=$(readlink -f "$build/tests/support/hvdrun_test_cluster")
dir=$(mktemp -d /tmp/hvdrun-join-launch-XXXXXX)
echo "a-secret-of-thirty-two-characters" >"$dir/secret"

# The SSH cluster of node1..node9 runs while its stdin stays open (a fifo held here).
mkfifo "$dir/cluster.in"
"$cluster" $((nodes + 1)) <"$dir/cluster.in" >"$dir/cluster.out" 2>"$dir/cluster.err" &
cluster_pid=$!
exec 3>"$dir/cluster.in"
cleanup() {
  exec 3>&-
  wait "$cluster_pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
for ((i = 0; i < 300; ++i)); do
  [[ -s $dir/cluster.out ]] && break
  kill -0 "$cluster_pid" 2>/dev/null || { cat "$dir/cluster.err" >&2; exit 1; }
  sleep 0.1
done
cfg=$(head -1 "$dir/cluster.out")
[[ -f $cfg ]] || { echo "join_launch.sh: the SSH cluster did not start" >&2; cat "$dir/cluster.err" >&2; exit 1; }

free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("0.0.0.0", 0)); print(s.getsockname()[1])'; }

# Runs the command "$@" with NODE replaced by 0..nodes-1 and PORT by one free port, all at
# once; sets T to the wall seconds from the first start to the last exit. A failure ends
# the benchmark with that node's output.
nodes_at_once() {
  local port t0 t1 k pids=() w
  port=$(free_port)
  t0=$(date +%s.%N)
  for ((k = 0; k < nodes; ++k)); do
    w=("${@//NODE/$k}")
    timeout 120 "${w[@]//PORT/$port}" >"$dir/node$k.log" 2>&1 &
    pids+=($!)
  done
  for ((k = 0; k < nodes; ++k)); do
    wait "${pids[$k]}" || { echo "join_launch.sh: node $k failed: $*" >&2; cat "$dir/node$k.log" >&2; exit 1; }
  done
  t1=$(date +%s.%N)
  T=$(echo "$t1 - $t0" | bc -l)
}

hosts=""
for ((k = 2; k <= nodes + 1; ++k)); do hosts+="${hosts:+,}node$k:$per_node"; done
ssh_once() {
  local t0 t1
  t0=$(date +%s.%N)
  timeout 120 "$hvdrun" --ssh-config "$cfg" -H "$hosts" true >"$dir/ssh.log" 2>&1 ||
    { echo "join_launch.sh: hvdrun over SSH failed" >&2; cat "$dir/ssh.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  T=$(echo "$t1 - $t0" | bc -l)
}
join=("$hvdrun" --nnodes "$nodes" --node-rank NODE --rdzv-endpoint 127.0.0.2:PORT
  --nproc-per-node "$per_node" --rdzv-id bench --secret-file "$dir/secret" --no-python true)
torchrun=(/usr/bin/python3 -m torch.distributed.run --nnodes "$nodes" --node_rank NODE
  --nproc_per_node "$per_node" --rdzv_backend c10d --rdzv_endpoint 127.0.0.2:PORT
  --monitor_interval 0.1 --redirects 1 --tee 1 --no_python true)

median() { sort -g | awk '{ v[NR] = $1 } END { m = int((NR + 1) / 2); printf "%.3f", (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'; }
range() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.3f-%.3f", lo, hi }'; }

echo "host: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')"
# Warm up (page cache, sshd's first forks), and make sure all three work before timing.
nodes_at_once "${join[@]}"
ssh_once
nodes_at_once "${torchrun[@]}"
j=() s=() t=()
for ((i = 0; i < reps; ++i)); do
  nodes_at_once "${join[@]}"
  j+=("$T")
  ssh_once
  s+=("$T")
  nodes_at_once "${torchrun[@]}"
  t+=("$T")
done
jm=$(printf '%s\n' "${j[@]}" | median)
sm=$(printf '%s\n' "${s[@]}" | median)
tm=$(printf '%s\n' "${t[@]}" | median)
printf "\n%-48s %10s %14s\n" "launch of true, $nodes nodes x $per_node ranks, $reps runs" "median (s)" "range (s)"
printf "%-48s %10s %14s\n" "hvdrun join mode, $nodes processes" "$jm" "$(printf '%s\n' "${j[@]}" | range)"
printf "%-48s %10s %14s\n" "hvdrun over SSH, one process" "$sm" "$(printf '%s\n' "${s[@]}" | range)"
printf "%-48s %10s %14s\n" "torchrun c10d, $nodes processes" "$tm" "$(printf '%s\n' "${t[@]}" | range)"
printf "%-48s %10.3f\n" "ratio join / SSH" "$(echo "$jm / $sm" | bc -l)"
printf "%-48s %10.3f\n" "ratio join / torchrun" "$(echo "$jm / $tm" | bc -l)"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
