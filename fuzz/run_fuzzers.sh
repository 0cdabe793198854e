#!/bin/sh
# Runs every fuzzer built in BUILD_DIR for SECONDS each (default 60) from its seed corpus
# in fuzz/corpus/<target>/, writing new inputs to a scratch directory so the checked-in
# corpus stays small. Exits non-zero on the first crash, leak or timeout; the reproducer
# is left in the current directory as crash-*, leak-* or timeout-*.
# Usage: fuzz/run_fuzzers.sh BUILD_DIR [SECONDS]
set -eu
build=${1:?usage: fuzz/run_fuzzers.sh BUILD_DIR [SECONDS]}
seconds=${2:-60}
src=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
found=0
for bin in "$build"/fuzz/fuzz_*; do
  [ -x "$bin" ] || continue
  name=${bin##*/fuzz_}
  found=1
  mkdir -p "$scratch/$name"
  dict=""
  [ -f "$src/$name.dict" ] && dict="-dict=$src/$name.dict"
  [ -z "$dict" ] && [ -f "$src/hosts.dict" ] && case $name in host*) dict="-dict=$src/hosts.dict";; esac
  echo "== fuzz_$name for ${seconds}s"
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    $dict "$scratch/$name" "$src/corpus/$name"
done
[ "$found" = 1 ] || { echo "no fuzzers in $build/fuzz; configure with -DHVDRUN_FUZZ=ON" >&2; exit 1; }
