#!/usr/bin/env bash
# What authenticating frames between hosts costs: a 64 MiB float32 allreduce between two
# host leaders on loopback (127.0.0.1 and 127.0.0.2), over Gloo's ring with no MAC (the
# path before) and over FrameComm with a GMAC per frame (the path now), alternating rounds
# in one run so both see the same load. Also prints the MAC's own speed on one core
# (bench/gmac_bench.cc). The target is FrameComm within 10% of Gloo's bandwidth.
#
# With `latency`, the 8-byte and 4 KiB allreduce latency among HOSTS leaders instead
# (docs/runtime.md, "The host leaders' mesh").
#
# Usage: bench/interhost.sh [MiB=64] [calls per round=10] [rounds=5]
#        bench/interhost.sh latency [hosts=4] [calls per round=200] [rounds=5]
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == latency ]]; then
  shift
  for v in "$@"; do
    case $v in '' | *[!0-9]*) echo "bench/interhost.sh latency: arguments must be numbers (got '$v')" >&2; exit 2 ;; esac
  done
  cmake --build build --target hvdrun_interhost_bench >/dev/null
  echo "# $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
  exec build/tests/runtime/hvdrun_interhost_bench latency "$@"
fi
mib=${1:-64}
calls=${2:-10}
rounds=${3:-5}
for v in "$mib" "$calls" "$rounds"; do
  case $v in '' | *[!0-9]*) echo "bench/interhost.sh: arguments must be numbers (got '$v')" >&2; exit 2 ;; esac
done
cmake --build build --target hvdrun_interhost_bench hvdrun_gmac_bench >/dev/null
echo "# $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
build/tests/rendezvous/hvdrun_gmac_bench 256
build/tests/runtime/hvdrun_interhost_bench "$mib" "$calls" "$rounds"
