#!/usr/bin/env bash
# Builds hvdrun and runs a demo job on this machine: 4 local ranks of the allreduce
# example, rendezvousing through hvdrun and averaging a vector through shared memory. The
# build leaves the test suite out; scripts/test.sh configures the same build/ with it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHVDRUN_BUILD_TESTS=OFF
cmake --build build -j "$(nproc)"
exec build/cli/hvdrun -np 4 -H localhost:4 build/examples/allreduce_demo
