#!/usr/bin/env bash
# Checks that the C and C++ sources follow the repository's .clang-format (clang-format-14,
# 100 columns): prints each place clang-format would change as path:line:col, and fails
# when there is any. Fix with `clang-format-14 -i FILE`. scripts/test.sh's tidy stage runs it.
# Usage: scripts/format.sh [FILE...]             (default: every tracked .cc, .c and .h)
#        scripts/format.sh --changed [BASE]      (only what differs from BASE; default: the
#                                                 merge base with origin/main, else main,
#                                                 else HEAD~1)
set -uo pipefail
cd "$(dirname "$0")/.."
format=${CLANG_FORMAT:-clang-format-14}
command -v "$format" >/dev/null || { echo "format: $format not found (scripts/install-deps.sh)" >&2; exit 2; }
if [[ ${1:-} == --changed ]]; then
  base=$(scripts/changed_base.sh "${2:-}") || exit 2
  mapfile -t files < <(git diff --name-only --diff-filter=d "$base" -- '*.cc' '*.c' '*.h')
  echo "format: --changed against ${base:0:12}: ${#files[@]} sources"
elif (($#)); then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.cc' '*.c' '*.h')
fi
((${#files[@]})) || { echo "format: clean (nothing to check)"; exit 0; }

out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$format" --dry-run --Werror "${files[@]}" >"$out" 2>&1
status=$?
mapfile -t findings < <(grep -E '^[^:]+:[0-9]+:[0-9]+: (warning|error):' "$out" | cut -d: -f1-3)
if ((${#findings[@]})); then
  echo "format: ${#findings[@]} places differ from .clang-format (clang-format-14 -i FILE fixes them):"
  printf '  %s\n' "${findings[@]}"
  exit 1
fi
if ((status != 0)); then
  echo "format: $format failed (exit $status); its output:"
  cat "$out"
  exit 1
fi
echo "format: ${#files[@]} sources clean"
