#!/usr/bin/env bash
# The fault matrix of docs/reliability.md: runs the fault test cases (local jobs, the
# fault matrix proper, and the remote faults on the loopback SSH cluster) and prints one
# Markdown row per fault: what was done, what hvdrun did, the time to its verdict, what
# was left running, what was lost. Cases that print no "fault-matrix:" line of their own
# (the remote ones) get the whole test case's duration, job start included, as an upper
# bound of their detection time. The GPU cases (integration_gpu_fault_test) add their
# rows where a CUDA device is visible; the security cases (integration_security_test and
# integration_host_security_test, docs/reliability.md "Security") add theirs.
# Usage: bench/fault_matrix.sh [build-dir=build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake --build "$build" --target integration_local_test integration_fault_test \
  integration_remote_test integration_gpu_fault_test integration_host_security_test \
  integration_security_test integration_slurm_test >/dev/null
tests="$build/tests/integration"
out=$(mktemp)
trap 'rm -f "$out"' EXIT

{
  # Catch2 ORs the patterns of one comma-separated argument.
  "$tests/integration_local_test" -d yes \
    'a failing rank*,SIGINT and SIGTERM*,SIGKILL of hvdrun*,an agent killed*,hvdrun -np 2 yes*'
  "$tests/integration_fault_test" -d yes
  "$tests/integration_gpu_fault_test" -d yes
  "$tests/integration_host_security_test" -d yes
  "$tests/integration_security_test" -d yes
  "$tests/integration_remote_test" -d yes \
    'remote: a host whose connection dies*,remote: a stopped agent*,remote: SIGKILL of hvdrun*,remote: a SIGKILLed remote rank*'
  # The loopback Slurm (needs the slurm and munge packages).
  "$tests/integration_slurm_test" -d yes 'under srun*'
} >"$out" 2>&1 || { cat "$out" >&2; echo "fault_matrix: a fault test failed" >&2; exit 1; }

echo "| fault | what happened | detection (ms) | left running | lost |"
echo "| --- | --- | ---: | ---: | --- |"
grep '^fault-matrix: ' "$out" | sed 's/^fault-matrix: //' |
  awk -F' [|] ' '{ printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }'
# Remote cases without their own figures: "<seconds> s: remote: <name>".
grep -E '^[0-9.]+ s: remote: ' "$out" | grep -v -F -f <(grep '^fault-matrix: ' "$out" |
  sed 's/^fault-matrix: //; s/ |.*//') |
  awk '{ s = $1; sub(/^[0-9.]+ s: /, ""); printf "| %s | see remote_test.cc | <= %.0f (whole case) | - | - |\n", $0, s * 1000 }'
