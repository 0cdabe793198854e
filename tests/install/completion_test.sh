#!/usr/bin/env bash
# Checks completions/hvdrun.bash: its option list matches `hvdrun --help` exactly, and
# a few completions (options, subcommands, hosts from --hostfile for -H, log levels,
# files for --hostfile) come out right. Usage: completion_test.sh HVDRUN SOURCE_DIR
set -uo pipefail
hvdrun=$1 src=$2
# shellcheck source=../../completions/hvdrun.bash
source "$src/completions/hvdrun.bash"
work=$(mktemp -d "${TMPDIR:-/tmp}/hvdrun-completion-XXXXXX")
trap 'rm -rf "$work"' EXIT
status=0
fail() { echo "completion_test: $*" >&2; status=1; }

# Options in --help: every -x / --long word in the option column of an option line (up to
# the two-space gap before its description, which may name other spellings).
help_opts=$("$hvdrun" --help | grep -E '^  +-' | sed -E 's/^ +//; s/  .*//' |
  grep -oE '(^|[ ,]+)--?[a-zA-Z][a-z-]*' | tr -d ' ,' | sort -u)
# shellcheck disable=SC2154,SC2086  # set by the sourced completion; split on purpose
comp_opts=$(printf '%s\n' $_hvdrun_value_opts $_hvdrun_flag_opts | sort -u)
if [[ $help_opts != "$comp_opts" ]]; then
  fail "options differ between hvdrun --help (<) and the completion (>):"
  diff <(echo "$help_opts") <(echo "$comp_opts") >&2
fi

# complete WORDS...: runs _hvdrun with the cursor on the last word; prints COMPREPLY.
complete_line() {
  COMP_WORDS=("$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMP_LINE="$*"
  COMP_POINT=${#COMP_LINE}
  COMPREPLY=()
  _hvdrun hvdrun "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}" 2>/dev/null
  printf '%s\n' "${COMPREPLY[@]}" | sort
}
expect() {  # expect "DESCRIPTION" "EXPECTED LINES" WORDS...
  local what=$1 want=$2
  shift 2
  local got
  got=$(complete_line "$@")
  [[ $got == "$want" ]] || fail "$what: got [$got], want [$want]"
}

cat >"$work/hosts" <<'HOSTS'
# the cluster
node1 slots=4
node2 slots=4   # spare
HOSTS
touch "$work/hostfile.b"

expect "long option prefix" $'--ssh-config\n--ssh-identity-file\n--ssh-port' hvdrun --ssh-
expect "-H hosts from --hostfile" $'node1\nnode2' hvdrun --hostfile "$work/hosts" -H node
expect "-H second host in a list" "node1:4,node2" hvdrun --hostfile "$work/hosts" -H node1:4,node2
expect "--hosts with --hostfile=" $'node1\nnode2' hvdrun --hostfile="$work/hosts" --hosts no
expect "log levels" $'trace' hvdrun --log-level tr
expect "hostfile is a file" "$work/hostfile.b" hvdrun --hostfile "$work/hostfile."
expect "-np takes a number or auto" "auto" hvdrun -np ""
sub=$(complete_line hvdrun ch | grep -x check)
[[ $sub == check ]] || fail "subcommand check not offered"
sub=$(complete_line hvdrun sta | grep -x stacks)
[[ $sub == stacks ]] || fail "subcommand stacks not offered"
[[ -z $(complete_line hvdrun stacks "") ]] || fail "hvdrun stacks offers completions (it takes a pid)"
# --launcher: the four methods; exec: waits for its command.
got=$(complete_line hvdrun --launcher "" | sort | tr '\n' ' ')
[[ $got == "auto exec: slurm ssh " ]] || fail "--launcher completes '$got'"
got=$(complete_line hvdrun --launcher s | sort | tr '\n' ' ')
[[ $got == "slurm ssh " ]] || fail "--launcher s completes '$got'"

exit $status
