#!/bin/sh
# Runs every fuzzer built in BUILD_DIR: first it replays its seed corpus in
# fuzz/corpus/<target>/ once (every checked-in input, the fixed crash reproducers
# included, must still pass), then it fuzzes for SECONDS (default 60; 0: replay only),
# JOBS fuzzers at a time (default 1), writing new inputs to a scratch directory so the
# checked-in corpus stays small. CI runs a short fuzz after the replay (scripts/test.sh,
# FUZZ_SECONDS); run it longer by hand, e.g. fuzz/run_fuzzers.sh build-fuzz 600 2. Exits non-zero when any fuzzer
# finds a crash, leak or timeout (every fuzzer still runs its time, so one run reports
# them all); the reproducer is left in ARTIFACT_DIR (default: the current directory) as
# crash-*, leak-*, timeout-* or oom-*, and its fuzzer's log is printed.
# Usage: fuzz/run_fuzzers.sh BUILD_DIR [SECONDS] [JOBS]
set -eu
build=${1:?usage: fuzz/run_fuzzers.sh BUILD_DIR [SECONDS] [JOBS]}
seconds=${2:-60}
jobs=${3:-1}
src=$(cd "$(dirname "$0")" && pwd)
artifacts=${ARTIFACT_DIR:-$PWD}
mkdir -p "$artifacts"
artifacts=$(cd "$artifacts" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# Runs one fuzzer; its output goes to $scratch/<name>.log, its status to <name>.rc.
run_one() {
  bin=$1
  name=${bin##*/fuzz_}
  mkdir -p "$scratch/$name"
  dict=""
  [ -f "$src/$name.dict" ] && dict="-dict=$src/$name.dict"
  [ -z "$dict" ] && [ -f "$src/hosts.dict" ] && case $name in host*) dict="-dict=$src/hosts.dict" ;; esac
  seeds=""
  [ -d "$src/corpus/$name" ] && seeds="$src/corpus/$name"
  rc=0
  # -timeout: one input taking 10 s is a hang. -rss_limit_mb: an input that needs 2 GiB
  # is a bug too. Leak detection is on by default in ASan builds.
  # The replay: -runs=0 runs every input of the corpus once and stops.
  if [ -n "$seeds" ]; then
    "$bin" -runs=0 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$artifacts/" "$seeds" \
      >"$scratch/$name.log" 2>&1 || rc=$?
  fi
  if [ "$rc" = 0 ] && [ "$seconds" -gt 0 ]; then
    "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$artifacts/" $dict "$scratch/$name" $seeds \
      >>"$scratch/$name.log" 2>&1 || rc=$?
  fi
  echo "$rc" >"$scratch/$name.rc"
}

bins=""
for bin in "$build"/fuzz/fuzz_*; do
  [ -x "$bin" ] && [ -f "$bin" ] || continue
  bins="$bins $bin"
done
[ -n "$bins" ] || { echo "no fuzzers in $build/fuzz; configure with -DHVDRUN_FUZZ=ON" >&2; exit 1; }

# Start JOBS fuzzers, wait for that batch, start the next.
running=0
for bin in $bins; do
  echo "== fuzz_${bin##*/fuzz_}: corpus replay, then ${seconds}s"
  run_one "$bin" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait
    running=0
  fi
done
wait

failed=0
for bin in $bins; do
  name=${bin##*/fuzz_}
  rc=$(cat "$scratch/$name.rc" 2>/dev/null || echo 1)
  stats=$(grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$scratch/$name.log" |
    sed 's/^stat:://' | tr -s ' \n' ' ')
  if [ "$rc" = 0 ]; then
    echo "ok     fuzz_$name: $stats"
  else
    failed=1
    echo "FAILED fuzz_$name (exit $rc); its log:"
    tail -n 80 "$scratch/$name.log"
  fi
done
exit "$failed"
