#!/usr/bin/env bash
# Horovod-protocol rendezvous benchmark: 16 ranks (threads, 4 per host name) rendezvous
# through hvdrun's Horovod HTTP server as Horovod's gloo ranks do, both as a replay of
# their request sequence and with real Gloo contexts; prints min/median/max wall time.
# Usage: bench/horovod_rendezvous.sh [build-dir] [ranks=16] [hosts=4] [rounds=3] [replay|gloo|both]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake --build "$build" --target hvdrun_horovod_rendezvous_bench >/dev/null
exec "$build/tests/compat/hvdrun_horovod_rendezvous_bench" "${2:-16}" "${3:-4}" "${4:-3}" "${5:-both}"
