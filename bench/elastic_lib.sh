# shellcheck shell=bash
# Shared by bench/elastic.sh and bench/elastic_api.sh (sourced, not run): a scratch
# directory removed on exit, the loopback SSH cluster's shutdown, a clock and a wait for
# files the ranks write. The sourcing script sets `bench` (its name, for messages) first,
# and starts the cluster with `coproc CLUSTER { hvdrun_test_cluster N; }`.
work=$(mktemp -d)
# The cluster helper stops when its stdin reaches EOF.
stop_cluster() {
  [[ -n ${CLUSTER_PID:-} ]] || return 0
  eval "exec ${CLUSTER[1]}>&-"
  wait "$CLUSTER_PID" 2>/dev/null || true
  unset CLUSTER_PID
}
cleanup() {
  stop_cluster
  rm -rf "$work"
}
trap cleanup EXIT

now_ns() { date +%s%N; }

# wait_files PATTERN N [SECONDS=10]: until N files match, else a message and failure.
wait_files() {
  local i
  for ((i = 0; i < ${3:-10} * 100; i++)); do
    # shellcheck disable=SC2086  # the pattern expands on purpose
    (($(ls $1 2>/dev/null | wc -l) >= $2)) && return 0
    sleep 0.01
  done
  echo "${bench:?}: timed out waiting for $2 of $1" >&2
  return 1
}
