#!/usr/bin/env bash
# Launch of `-np 6 true` inside a Slurm allocation (3 nodes x 2 CPUs, loopback Slurm of the
# tests): `srun -n6 true` against `hvdrun --launcher slurm` and `hvdrun --launcher ssh` (the
# loopback SSH cluster's aliases for the same node names), each inside its own
# `salloc -N3 -n6`, interleaved; medians, with the cost of the allocation alone subtracted.
# Needs root and the slurmctld, slurmd, slurm-client, munge and openssh-server packages.
# Usage: bench/slurm_launch.sh [build-dir=build] [reps=9]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
reps=${2:-9}
ninja -C "$build" hvdrun hvdrun_slurm_launch_bench >/dev/null
exec "$build/tests/integration/hvdrun_slurm_launch_bench" "$reps"
