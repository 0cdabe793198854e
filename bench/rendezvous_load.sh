#!/usr/bin/env bash
# Rendezvous load: simulated ranks' check-in and one barrier against the real server
# (bench/rendezvous_load.cc), every rank on its own connection at 1,024, 4,096 and 16,384
# ranks, then the same 16,384 ranks checking in through one leader per host (16 and 8
# ranks per host: 1,024 and 2,048 connections).
# Usage: bench/rendezvous_load.sh [build-dir=build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake --build "$build" --target hvdrun_rendezvous_load >/dev/null
load="$build/tests/rendezvous/hvdrun_rendezvous_load"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); nofile soft/hard: $(ulimit -Sn)/$(ulimit -Hn)"
for n in 1024 4096 16384; do "$load" "$n"; done
"$load" 16384 --per-host 16
"$load" 16384 --per-host 8
