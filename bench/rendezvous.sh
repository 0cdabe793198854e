#!/usr/bin/env bash
# Start-up benchmarks of the runtime (ranks started without the launcher, against an
# in-process rendezvous server): (1) start + rendezvous + first barrier at 64 and 256
# ranks; (2) full-mesh Gloo connect at 16 ranks through our store (only the addresses
# meant for each rank) against Gloo's own connectFullMesh over the same store; (3) store
# set+get throughput against a bare TCP loop and torch.distributed.TCPStore.
# Usage: bench/rendezvous.sh [build-dir=build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake --build "$build" --target hvdrun_rendezvous_bench hvdrun_bench_rank hvdrun_store_bench >/dev/null
b="$build/tests/runtime"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$b/hvdrun_rendezvous_bench" barrier 64
"$b/hvdrun_rendezvous_bench" barrier 256
"$b/hvdrun_rendezvous_bench" mesh 16
"$b/hvdrun_rendezvous_bench" gloo-mesh 16
"$b/hvdrun_store_bench" 8 5000
if /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
  /usr/bin/python3 bench/store_torch.py 8 5000
else
  echo "torch_tcpstore: python3-torch not installed (apt-get install python3-torch)"
fi
