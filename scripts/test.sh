#!/usr/bin/env bash
# CI in stages, each in its own build directory (CI runs all five):
#   plain  warnings-as-errors build, whole test suite           (build dir: <prefix>)
#   asan   whole test suite under ASan + UBSan                  (<prefix>-asan)
#   tsan   whole test suite under TSan                          (<prefix>-tsan)
#   fuzz   clang-14 libFuzzer build; every fuzzer replays its corpus, then fuzzes for
#          FUZZ_SECONDS (default 5)                             (<prefix>-fuzz)
#   tidy   clang-tidy-14 (.clang-tidy) over every source and the project headers it
#          includes, with the plain build's compile_commands.json, and fuzz/ with the fuzz
#          build's; clang-format-14 (.clang-format) over every C/C++ source
#          (scripts/format.sh); no Python function over 100 lines
#          (scripts/py_function_size.py); TIDY_CHANGED=1 checks only what changed against
#          main (a fast run while developing; CI's clean clone has nothing "changed", so CI
#          checks all but tests/, which TIDY_TESTS=1 adds) (configures <prefix> and
#          <prefix>-fuzz if needed, builds nothing)
# Every stage runs even when an earlier one failed, so one run reports all of them; the
# script exits non-zero when any failed and ends with a table of results and times.
#
# Usage: scripts/test.sh [--only STAGE[,STAGE...]] [--no-deps] [--prefix DIR]
#   --only      run just these stages (default, and CI: plain, asan, tsan, fuzz, tidy)
#   --no-deps   skip scripts/install-deps.sh
#   --prefix    build directory prefix (default: build)
# Environment: FUZZ_SECONDS (default 5) and FUZZ_JOBS (default 2) for the fuzz stage;
# TIDY_CHANGED=1 for a tidy run over what changed only; TIDY_TESTS=1 for a full run that
# checks tests/ too; JOBS (default: nproc) for
# builds, ctest and clang-tidy. By hand, run the long fuzzing: FUZZ_SECONDS=600.
set -uo pipefail
cd "$(dirname "$0")/.."

all_stages=(plain asan tsan fuzz tidy)
# What CI runs: every stage.
stages=("${all_stages[@]}")
deps=1
prefix=build
while (($#)); do
  case $1 in
    --only)
      IFS=, read -r -a stages <<<"${2:?--only needs a stage list, e.g. --only asan,tidy}"
      shift 2
      ;;
    --only=*)
      IFS=, read -r -a stages <<<"${1#--only=}"
      shift
      ;;
    --no-deps) deps=0; shift ;;
    --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "scripts/test.sh: unknown argument '$1'; see scripts/test.sh --help" >&2; exit 2 ;;
  esac
done
for s in "${stages[@]}"; do
  [[ " ${all_stages[*]} " == *" $s "* ]] ||
    { echo "scripts/test.sh: unknown stage '$s'; stages: ${all_stages[*]}" >&2; exit 2; }
done

jobs=${JOBS:-$(nproc)}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

# Runs its arguments, echoing them first so the log shows every command.
run() {
  echo "+ $*"
  "$@"
}

configure() {  # configure DIR [cmake args...]
  local dir=$1
  shift
  # The suite explicitly: a cache keeps what it was last told, and a build/ configured by
  # hand without the suite would otherwise pass with nothing run.
  run cmake -S . -B "$dir" -G Ninja -DHVDRUN_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DHVDRUN_BUILD_TESTS=ON "${launcher[@]}" "$@"
}

# Runs the built suite in DIR; every test counts. A failing run's test names are kept
# in failures[STAGE], and its ctest log in failure_log[STAGE], for the end of the log.
declare -A failures failure_log
ctest_stage() {  # ctest_stage STAGE DIR TIMEOUT [command prefix...]
  local stage=$1 dir=$2 timeout=$3
  shift 3
  # A build without tests must fail the stage, not pass it with nothing run.
  run "$@" ctest --test-dir "$dir" --output-on-failure --no-tests=error --timeout "$timeout" \
    -j "$jobs" && return
  local status=$? list=$dir/Testing/Temporary/LastTestsFailed.log
  if [[ -s $list ]]; then
    failures[$stage]=$(cut -d: -f2- "$list")
    failure_log[$stage]=$dir/Testing/Temporary/LastTest.log
  fi
  return "$status"
}

# Prints, for a stage whose tests failed, each failed test's output from ctest's log
# (its last 40 lines), so the end of a long CI log says what failed and how.
failure_report() {  # failure_report STAGE
  local stage=$1 name
  [[ -n ${failures[$stage]:-} ]] || return 0
  echo
  echo "=================== stage $stage: failed tests ==================="
  while IFS= read -r name; do
    echo "--- $name"
    awk -v want="$name" '
      $0 ~ /^[0-9]+\/[0-9]+ Test: / { sub(/^[0-9]+\/[0-9]+ Test: /, ""); keep = ($0 == want); n = 0; next }
      keep && /^<end of output>/ { keep = 0 }
      keep { lines[n++ % 40] = $0; total = n }
      END { start = total > 40 ? total - 40 : 0; for (i = start; i < total; i++) print lines[i % 40] }
    ' "${failure_log[$stage]}" 2>/dev/null
  done <<<"${failures[$stage]}"
}

# Builds and runs the whole suite. Sanitizer stages give ctest a longer per-test limit:
# instrumented processes run several times slower.
suite() {  # suite STAGE DIR TIMEOUT [cmake args...]
  local stage=$1 dir=$2 timeout=$3
  shift 3
  configure "$dir" "$@" && run cmake --build "$dir" -j "$jobs" &&
    ctest_stage "$stage" "$dir" "$timeout"
}

stage_plain() { suite plain "$prefix" 300; }

stage_asan() {
  # ASan's defaults: the first report ends the process non-zero, leaks are reported at
  # exit. UBSan exits non-zero too (the build uses -fno-sanitize-recover); ask for stacks.
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
    suite asan "$prefix-asan" 600 -DHVDRUN_SANITIZE=address
}

stage_tsan() {
  # TSan of GCC 12 needs the 47-bit user address layout it was built for; kernels with
  # more ASLR entropy (vm.mmap_rnd_bits > 28) map libraries where it cannot shadow them,
  # so the tests run with ASLR off there (children inherit it).
  local wrap=()
  local bits
  bits=$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28)
  if ((bits > 28)); then
    echo "vm.mmap_rnd_bits=$bits: running the TSan suite under setarch -R"
    wrap=(setarch "$(uname -m)" -R)
  fi
  configure "$prefix-tsan" -DHVDRUN_SANITIZE=thread && run cmake --build "$prefix-tsan" -j "$jobs" &&
    TSAN_OPTIONS="${TSAN_OPTIONS:-second_deadlock_stack=1} suppressions=$PWD/scripts/tsan.supp" \
      ctest_stage tsan "$prefix-tsan" 600 "${wrap[@]}"
}

configure_fuzz() {  # configure_fuzz DIR
  run cmake -S . -B "$1" -G Ninja -DHVDRUN_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DHVDRUN_FUZZ=ON -DHVDRUN_BUILD_TESTS=OFF "${launcher[@]}"
}

stage_fuzz() {
  local dir=$prefix-fuzz
  configure_fuzz "$dir" &&
    run cmake --build "$dir" -j "$jobs" --target fuzz_all &&
    ARTIFACT_DIR=$dir/artifacts run fuzz/run_fuzzers.sh "$dir" "${FUZZ_SECONDS:-5}" "${FUZZ_JOBS:-2}"
}

stage_tidy() {
  # Needs only compile_commands.json and the headers CMake generates, not a build. The
  # plain build compiles every source but the fuzzers (and two that need MPI or an
  # installed hvdrun, which tidy.sh names); the fuzz build compiles the fuzzers.
  [[ -f $prefix/compile_commands.json ]] || configure "$prefix" || return
  [[ -f $prefix-fuzz/compile_commands.json ]] || configure_fuzz "$prefix-fuzz" || return
  local failed=0
  if [[ ${TIDY_CHANGED:-0} == 1 ]]; then
    JOBS=$jobs run scripts/tidy.sh "$prefix" --changed || failed=1
    JOBS=$jobs TIDY_UNDER=fuzz/ run scripts/tidy.sh "$prefix-fuzz" --changed || failed=1
    run scripts/format.sh --changed || failed=1
  else
    # tests/ (about 40% of the sources, and of the stage's time) is left out of the full
    # run to keep CI within its time: the suite is still built with warnings as errors and
    # run under both sanitizers, and a developer's `scripts/tidy.sh BUILD --changed` (or
    # TIDY_TESTS=1 here) checks the tests too.
    local skip=tests/
    [[ ${TIDY_TESTS:-0} == 1 ]] && skip=
    JOBS=$jobs TIDY_SKIP=$skip run scripts/tidy.sh "$prefix" || failed=1
    JOBS=$jobs run scripts/tidy.sh "$prefix-fuzz" fuzz/*.cc || failed=1
    run scripts/format.sh || failed=1
  fi
  run python3 scripts/py_function_size.py || failed=1
  return "$failed"
}

[[ $deps == 1 ]] && { scripts/install-deps.sh || exit 1; }

declare -A result seconds
failed=0
for s in "${stages[@]}"; do
  echo
  echo "=================== stage $s: $(date -u +%H:%M:%S) ==================="
  start=$SECONDS
  if "stage_$s"; then result[$s]=ok; else result[$s]=FAILED; failed=1; fi
  seconds[$s]=$((SECONDS - start))
  echo "=================== stage $s: ${result[$s]} in ${seconds[$s]} s ==================="
done

for s in "${stages[@]}"; do failure_report "$s"; done

echo
echo "stage   result   seconds"
for s in "${stages[@]}"; do
  printf '%-7s %-8s %7d\n' "$s" "${result[$s]}" "${seconds[$s]}"
  [[ -n ${failures[$s]:-} ]] && sed 's/^/          failed: /' <<<"${failures[$s]}"
done
exit "$failed"
