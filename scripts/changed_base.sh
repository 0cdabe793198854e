#!/usr/bin/env bash
# Prints the commit that "changed" is measured against for scripts/tidy.sh --changed and
# scripts/format.sh --changed: BASE when given, else the merge base with origin/main, else
# with main, else HEAD~1. Fails (exit 2) when there is none.
# Usage: scripts/changed_base.sh [BASE]
set -uo pipefail
base=${1:-}
if [[ -z $base ]]; then
  for ref in origin/main main HEAD~1; do
    base=$(git merge-base HEAD "$ref" 2>/dev/null) && break
  done
fi
[[ -n $base ]] || { echo "--changed: no base to compare with" >&2; exit 2; }
echo "$base"
