#!/usr/bin/env bash
# Many ranks on one host: `hvdrun -np N examples/allreduce_demo 1024` (start, rendezvous,
# one allreduce of 1,024 floats through the host's shared segment plus two small ones,
# shutdown) at 64, 256 and 512 ranks, each rank checking in on its own connection
# (HVDRUN_CHECKIN=rank) and through local rank 0 (host). Prints wall time from launch to
# exit and the peak RSS of the launcher.
# Usage: bench/local_ranks.sh [build-dir=build] [counts="64 256 512"]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
counts=${2:-64 256 512}
cmake --build "$build" --target hvdrun allreduce_demo >/dev/null
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for n in $counts; do
  for mode in rank host; do
    t0=$(date +%s.%N)
    rc=0
    /usr/bin/time -f "%M" -o "$log.rss" "$build/cli/hvdrun" -np "$n" -x HVDRUN_CHECKIN=$mode \
      "$build/examples/allreduce_demo" 1024 >"$log" 2>&1 || rc=$?
    t1=$(date +%s.%N)
    ok=$(grep -c ': ok$' "$log" || true)
    agree=$(grep -c 'all ranks agree' "$log" || true)
    printf 'local_ranks np=%d checkin=%s rc=%d ranks_ok=%d agree=%d wall_s=%.2f launcher_rss_mib=%.1f\n' \
      "$n" "$mode" "$rc" "$ok" "$agree" "$(echo "$t1 - $t0" | bc -l)" \
      "$(echo "$(cat "$log.rss") / 1024" | bc -l)"
    rm -f "$log.rss"
  done
done
