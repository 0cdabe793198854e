#!/usr/bin/env bash
# Runs clang-tidy-14 (checks in .clang-tidy) over every C++ source of the project that
# BUILD_DIR's compile_commands.json compiles, and over the project headers they include.
# Prints each finding once as path:line:col: check: message, and fails when there is any,
# or when clang-tidy itself fails (a file that does not parse).
# There is no list of files allowed to have findings: every file must stay clean.
# Tracked sources that BUILD_DIR does not compile are named as not checked (scripts/test.sh's
# tidy stage checks fuzz/ with the fuzz build's database).
# Usage: scripts/tidy.sh BUILD_DIR [FILE...]   (FILE: only these sources)
#        scripts/tidy.sh BUILD_DIR --changed [BASE]
#   --changed: only what differs from BASE (default: the merge base with origin/main,
#   else main, else HEAD~1), committed or not: each changed source, and for a changed
#   header every source that includes it; with TIDY_UNDER=DIR/ only the sources under
#   DIR/. CI runs this; the full run is for by hand.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/tidy.sh BUILD_DIR [FILE...] | BUILD_DIR --changed [BASE]}
shift
db=$build/compile_commands.json
[[ -f $db ]] || { echo "tidy: no $db; configure $build first" >&2; exit 2; }
if [[ ${1:-} == --changed ]]; then
  base=$(scripts/changed_base.sh "${2:-}") || exit 2
  mapfile -t changed < <(git diff --name-only --diff-filter=d "$base" -- '*.cc' '*.c' '*.h')
  selected=()
  for f in "${changed[@]}"; do
    case $f in
      *.h)
        # Every tracked source that includes the header checks it.
        mapfile -t users < <(git grep -l -F "#include \"$f\"" -- '*.cc' '*.c')
        selected+=("${users[@]}")
        ;;
      *) selected+=("$f") ;;
    esac
  done
  # Only sources this build compiles (the fuzzers are in the fuzz build's database only).
  mapfile -t files < <(printf '%s\n' "${selected[@]}" | sort -u | grep "^${TIDY_UNDER:-}" |
    python3 -c '
import json, os, sys
db = json.load(open(sys.argv[1]))
compiled = {os.path.normpath(os.path.join(e["directory"], e["file"])) for e in db}
for f in sys.stdin.read().split():
    if os.path.abspath(f) in compiled: print(f)
' "$db")
  echo "tidy: --changed against ${base:0:12}: ${#files[@]} of the changed sources are compiled by $build"
  ((${#files[@]})) || { echo "tidy: clean (nothing to check)"; exit 0; }
  set -- "${files[@]}"
fi
tidy=${CLANG_TIDY:-clang-tidy-14}
root=$PWD
folders='cli|common|compat|examples|fuzz|hostfile|launcher|rendezvous|runtime|ssh|tests|bench'

unchecked=()
if (($#)); then
  files=("$@")
else
  # The project's own translation units: tracked .cc files that the build compiles.
  # Tracked sources it does not compile (fuzzers outside a fuzz build, say) are named
  # below as not checked by this run, never skipped silently.
  mapfile -t listed < <(python3 - "$db" "$root" <<'PY'
import json, os, subprocess, sys
db, root = sys.argv[1], sys.argv[2]
compiled = {os.path.normpath(os.path.join(e["directory"], e["file"])) for e in json.load(open(db))}
tracked = subprocess.run(["git", "ls-files", "*.cc", "*.c"], capture_output=True, text=True, check=True).stdout.split()
for f in tracked:
    print(("" if os.path.join(root, f) in compiled else "-") + f)
PY
  )
  files=()
  for f in "${listed[@]}"; do
    if [[ $f == -* ]]; then unchecked+=("${f#-}"); else files+=("$f"); fi
  done
fi
echo "tidy: ${#files[@]} sources, ${JOBS:-$(nproc)} at a time"
if ((${#unchecked[@]})); then
  echo "tidy: not compiled by $build, so not checked by this run: ${unchecked[*]}"
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
# --quiet drops the "N warnings generated" chatter; the header filter keeps findings in
# system and third-party headers out.
printf '%s\n' "${files[@]}" |
  xargs -P "${JOBS:-$(nproc)}" -n 2 "$tidy" -p "$build" --quiet \
    --header-filter="^$root/($folders)/" >"$out" 2>&1 || status=$?

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
