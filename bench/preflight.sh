#!/usr/bin/env bash
# Preflight benchmark: hvdrun's parallel SSH preflight of N loopback hosts against one
# host, N parallel `ssh -F cfg -o BatchMode=yes nodeK true` and N sequential ones.
# Needs root and openssh-server (the loopback sshd cluster).
# Usage: bench/preflight.sh [build-dir] [hosts=16] [rounds=3]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake --build "$build" --target hvdrun_preflight_bench >/dev/null
exec "$build/tests/ssh/hvdrun_preflight_bench" "${2:-16}" "${3:-3}"
