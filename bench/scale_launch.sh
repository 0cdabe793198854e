#!/usr/bin/env bash
# Launch at scale: `true` on N simulated hosts (1 slot each) through
#   hvdrun --launcher 'exec:hvdrun_launch_probe login 300 {host}' --hostfile F true
# where the exec: command stands in for a remote login: it waits 0.3 s, as an SSH login
# does, then runs the agent command on this machine. The hosts are distinct loopback
# addresses (127.1.0.1, 127.1.0.2, ...): an exec: host is never taken for this machine,
# whatever its name, and an address needs no lookup. With NAMES=1 they are names that
# resolve nowhere instead (sim1, sim2, ..., as containers are named): the launcher looks
# them up side by side, 32 at a time, and waits at most 5 s for the lot (with
# --network-interface, given through HVDRUN_BENCH_ARGS, it looks up none).
#
# For each N (default 256 1024 4096) it reports the launcher process's own figures (its
# children excluded; bench/launch_probe.cc says how they are read):
#   wall        from the start of hvdrun to its exit
#   cpu/host    hvdrun's user+sys CPU divided by N
#   rss         hvdrun's peak RSS (VmHWM), and (rss - rss of a 1-host launch) / N
#   fds         the most descriptors hvdrun held at once, and per host
#   lines       tagged output lines relayed (each rank prints one), which must equal N
# Every host's agent and rank run on this machine too, so they compete with the launcher
# for its CPUs: on a 2-core machine the wall time is mostly theirs (about 3 process
# start-ups per host), not the launcher's. HVDRUN_LAUNCH_CONCURRENCY (exported here when
# set) bounds the logins in flight.
#
# Usage: [NAMES=1] [HVDRUN_BENCH_ARGS='--network-interface lo'] bench/scale_launch.sh
#        [build-dir=build] [hosts...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
sizes=("$@")
((${#sizes[@]})) || sizes=(256 1024 4096)

cmake --build "$build" --target hvdrun hvdrun_launch_probe >/dev/null
hvdrun=$(readlink -f "$build/cli/hvdrun")
probe=$(readlink -f "$build/tests/integration/hvdrun_launch_probe")
dir=$(mktemp -d /tmp/hvdrun-scale-launch-XXXXXX)
trap 'rm -rf "$dir"' EXIT

run() {  # run N: prints the probe's key=value line, then lines=K
  local n=$1
  : >"$dir/hosts"
  for ((i = 1; i <= n; ++i)); do
    if [[ ${NAMES:-0} == 1 ]]; then
      printf 'sim%d slots=1\n' "$i" >>"$dir/hosts"
    else
      printf '127.1.%d.%d slots=1\n' $((i / 250)) $((i % 250 + 1)) >>"$dir/hosts"
    fi
  done
  # shellcheck disable=SC2086 # HVDRUN_BENCH_ARGS is a list of words
  "$probe" measure "$dir/out" -- "$hvdrun" --launcher "exec:$probe login 300 {host}" \
    ${HVDRUN_BENCH_ARGS:-} --remote-hvdrun "$hvdrun" --start-timeout 900 --hostfile "$dir/hosts" \
    sh -c 'echo up' 2>"$dir/err" | tr -d '\n'
  echo " lines=$(grep -c '^\[[0-9]*\]<stdout>:up$' "$dir/out" || true)"
}

field() { sed -n "s/.*\b$1=\([-0-9]*\).*/\1/p" <<<"$2"; }

base=$(run 1)
base_rss=$(field hwm_kib "$base")
printf '%6s %9s %12s %10s %12s %6s %9s %7s %5s\n' hosts wall_s cpu_ms/host rss_MB \
  rss_KB/host fds fds/host lines code
for n in "${sizes[@]}"; do
  r=$(run "$n")
  wall=$(field wall_ms "$r")
  cpu=$(($(field user_ms "$r") + $(field sys_ms "$r")))
  rss=$(field hwm_kib "$r")
  fds=$(field fds "$r")
  printf '%6d %9.2f %12.3f %10.1f %12.1f %6d %9.2f %7d %5d\n' "$n" \
    "$(bc -l <<<"$wall / 1000")" "$(bc -l <<<"$cpu / $n")" "$(bc -l <<<"$rss / 1024")" \
    "$(bc -l <<<"($rss - $base_rss) / $n")" "$fds" "$(bc -l <<<"$fds / $n")" \
    "$(field lines "$r")" "$(field code "$r")"
  if [[ $(field code "$r") != 0 ]]; then
    echo "scale_launch.sh: hvdrun failed at $n hosts; its stderr ends:" >&2
    tail -5 "$dir/err" >&2
  fi
done
