#!/usr/bin/env bash
# Runs clang-tidy-14 (checks in .clang-tidy) over every C++ source of the project that
# BUILD_DIR's compile_commands.json compiles, and over the project headers they include.
# Prints each finding once as path:line:col: check: message, and fails when there is any,
# or when clang-tidy itself fails (a file that does not parse).
# There is no list of files allowed to have findings: every file must stay clean.
# Tracked sources that BUILD_DIR does not compile are named as not checked (scripts/test.sh's
# tidy stage checks fuzz/ with the fuzz build's database).
# The TensorFlow op library (python/hvdrun/tensorflow/ops*.cc, the sources
# hvdrun._tf_build lists) is in no compile database: it is compiled against the installed
# TensorFlow. It is checked with the flags _tf_build compiles it with (TensorFlow's headers
# as system headers, hvdrun_c.h's directory), taken from the TensorFlow virtualenv that
# tests/tensorflow uses: HVDRUN_TF_PYTHON, else BUILD_DIR's CMake cache entry of that name,
# else $HVDRUN_TF_VENV or ~/.cache/hvdrun/tf-venv (scripts/tf-venv.sh). Without that
# virtualenv a line says the op library was not checked.
# Usage: scripts/tidy.sh BUILD_DIR [FILE...]   (FILE: only these sources)
#        scripts/tidy.sh BUILD_DIR --changed [BASE]
#   --changed: only what differs from BASE (default: the merge base with origin/main,
#   else main, else HEAD~1), committed or not: each changed source, and for a changed
#   header every source that includes it; with TIDY_UNDER=DIR/ only the sources under
#   DIR/ (in a full run too: TIDY_UNDER=python/ checks the op library alone).
#   In a full run, TIDY_SKIP=DIR/ leaves the sources under DIR/ out (named as a count):
#   scripts/test.sh's tidy stage leaves out tests/ (see there why).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/tidy.sh BUILD_DIR [FILE...] | BUILD_DIR --changed [BASE]}
shift
db=$build/compile_commands.json
[[ -f $db ]] || { echo "tidy: no $db; configure $build first" >&2; exit 2; }
tidy=${CLANG_TIDY:-clang-tidy-14}
root=$PWD
folders='cli|common|compat|examples|fuzz|hostfile|launcher|python|rendezvous|runtime|ssh|tests|bench'

# The op library's sources and its folder, as hvdrun._tf_build compiles them.
tf_dir=python/hvdrun/tensorflow
mapfile -t tf_all < <(PYTHONPATH=python python3 -c '
import os
from hvdrun import _tf_build
for f in _tf_build.SOURCES:
    print(os.path.relpath(f))')
((${#tf_all[@]})) || { echo "tidy: cannot list the op library's sources (hvdrun._tf_build)" >&2; exit 2; }
tf_python=${HVDRUN_TF_PYTHON:-$(sed -n 's/^HVDRUN_TF_PYTHON:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)}
tf_python=${tf_python:-${HVDRUN_TF_VENV:-$HOME/.cache/hvdrun/tf-venv}/bin/python}

# Splits sources into files (BUILD_DIR's) and tf_files (the op library's).
files=()
tf_files=()
split_sources() {
  local f g
  for f in "$@"; do
    for g in "${tf_all[@]}"; do
      [[ $f == "$g" ]] && { tf_files+=("$f"); continue 2; }
    done
    files+=("$f")
  done
}

unchecked=()
if [[ ${1:-} == --changed ]]; then
  base=$(scripts/changed_base.sh "${2:-}") || exit 2
  mapfile -t changed < <(git diff --name-only --diff-filter=d "$base" -- '*.cc' '*.c' '*.h')
  selected=()
  for f in "${changed[@]}"; do
    case $f in
      $tf_dir/*.h)
        # The op library's sources include their header by its bare name.
        mapfile -t users < <(grep -l -F "#include \"${f##*/}\"" "${tf_all[@]}")
        selected+=("${users[@]}")
        ;;
      *.h)
        # Every tracked source that includes the header checks it.
        mapfile -t users < <(git grep -l -F "#include \"$f\"" -- '*.cc' '*.c')
        selected+=("${users[@]}")
        ;;
      *) selected+=("$f") ;;
    esac
  done
  mapfile -t selected < <(printf '%s\n' "${selected[@]}" | sort -u | grep -v '^$' |
    grep "^${TIDY_UNDER:-}")
  split_sources "${selected[@]}"
  # Only sources this build compiles (the fuzzers are in the fuzz build's database only).
  mapfile -t files < <(printf '%s\n' "${files[@]}" | grep -v '^$' | python3 -c '
import json, os, sys
db = json.load(open(sys.argv[1]))
compiled = {os.path.normpath(os.path.join(e["directory"], e["file"])) for e in db}
for f in sys.stdin.read().split():
    if os.path.abspath(f) in compiled: print(f)
' "$db")
  echo "tidy: --changed against ${base:0:12}: ${#files[@]} of the changed sources are compiled by $build, ${#tf_files[@]} are the op library's"
  ((${#files[@]} + ${#tf_files[@]})) || { echo "tidy: clean (nothing to check)"; exit 0; }
elif (($#)); then
  split_sources "$@"
else
  # The project's own translation units: tracked .cc files that the build compiles.
  # Tracked sources it does not compile (fuzzers outside a fuzz build, say) are named
  # below as not checked by this run, never skipped silently.
  mapfile -t listed < <(python3 - "$db" "$root" "${tf_all[@]}" <<'PY'
import json, os, subprocess, sys
db, root, op_library = sys.argv[1], sys.argv[2], set(sys.argv[3:])
compiled = {os.path.normpath(os.path.join(e["directory"], e["file"])) for e in json.load(open(db))}
tracked = subprocess.run(["git", "ls-files", "*.cc", "*.c"], capture_output=True, text=True, check=True).stdout.split()
for f in tracked:
    if f not in op_library:
        print(("" if os.path.join(root, f) in compiled else "-") + f)
PY
  )
  for f in "${listed[@]}"; do
    if [[ $f == -* ]]; then unchecked+=("${f#-}"); else files+=("$f"); fi
  done
  tf_files=("${tf_all[@]}")
  if [[ -n ${TIDY_SKIP:-} ]]; then
    mapfile -t skipped < <(printf '%s\n' "${files[@]}" | grep "^$TIDY_SKIP")
    mapfile -t files < <(printf '%s\n' "${files[@]}" | grep -v "^$TIDY_SKIP")
    echo "tidy: TIDY_SKIP=$TIDY_SKIP: ${#skipped[@]} sources under it are not checked by this run"
  fi
  if [[ -n ${TIDY_UNDER:-} ]]; then
    mapfile -t files < <(printf '%s\n' "${files[@]}" | grep "^$TIDY_UNDER")
    mapfile -t unchecked < <(printf '%s\n' "${unchecked[@]}" | grep "^$TIDY_UNDER")
    mapfile -t tf_files < <(printf '%s\n' "${tf_files[@]}" | grep "^$TIDY_UNDER")
  fi
fi

out=$(mktemp)
tf_db=$(mktemp -d)
trap 'rm -rf "$out" "$tf_db"' EXIT
# The op library's compile database: its sources with _tf_build's flags.
if ((${#tf_files[@]})) && [[ ! -x $tf_python ]]; then
  echo "tidy: no TensorFlow virtualenv ($tf_python; scripts/tf-venv.sh makes it), so the op library is not checked: ${tf_files[*]}"
  tf_files=()
elif ((${#tf_files[@]})); then
  if ! PYTHONPATH=python TF_CPP_MIN_LOG_LEVEL=3 "$tf_python" - "$tf_db" "${tf_files[@]}" \
      >"$tf_db/log" 2>&1 <<'PY'; then
import json, os, sys
from hvdrun import _tf_build
flags = _tf_build.compile_flags()
entries = [{"directory": os.getcwd(), "file": os.path.abspath(f),
            "arguments": ["c++"] + flags + ["-c", os.path.abspath(f)]} for f in sys.argv[2:]]
with open(os.path.join(sys.argv[1], "compile_commands.json"), "w") as db:
    json.dump(entries, db, indent=1)
PY
    echo "tidy: cannot take TensorFlow's compile flags from $tf_python:"
    tail -n 20 "$tf_db/log"
    exit 1
  fi
fi

echo "tidy: ${#files[@]} sources and ${#tf_files[@]} of the op library, ${JOBS:-$(nproc)} at a time"
if ((${#unchecked[@]})); then
  echo "tidy: not compiled by $build, so not checked by this run: ${unchecked[*]}"
fi

status=0
# clang-tidy over the sources after $1 with the compile database in directory $1. --quiet
# drops the "N warnings generated" chatter; the header filter keeps findings in system and
# third-party headers out.
run_tidy() {
  local dir=$1
  shift
  (($#)) || return 0
  printf '%s\n' "$@" |
    xargs -P "${JOBS:-$(nproc)}" -n 2 "$tidy" -p "$dir" --quiet \
      --header-filter="^$root/($folders)/" >>"$out" 2>&1
}
run_tidy "$build" "${files[@]}" || status=$?
run_tidy "$tf_db" "${tf_files[@]}" || status=$?

# One line per finding, paths relative to the repository, each reported once.
mapfile -t findings < <(grep -E '^/[^:]+:[0-9]+:[0-9]+: (warning|error):' "$out" |
  sed -E "s|^$root/||; s|: (warning\|error): (.*) \[([^]]+)\]$|: \3: \2|" | sort -u)
if ((${#findings[@]})); then
  echo "tidy: ${#findings[@]} findings:"
  printf '  %s\n' "${findings[@]}"
  exit 1
fi
# clang-tidy exits non-zero when a file does not compile; those errors are findings
# above (clang-diagnostic-error). Any other failure (a crash, a bad flag) fails here.
if ((status != 0)) && ! grep -qE '^/[^:]+:[0-9]+:[0-9]+: error:' "$out"; then
  echo "tidy: clang-tidy failed (exit $status); its output:"
  cat "$out"
  exit 1
fi
echo "tidy: clean"
