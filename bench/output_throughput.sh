#!/usr/bin/env bash
# Output relay throughput: a rank writes 1 GiB of 100-byte lines (`yes` with a 99-character
# string, cut by `head -c 1G`) through hvdrun (tagged, relayed) into /dev/null, against the
# same producer piped through `cat` into /dev/null. Median of several interleaved runs,
# and hvdrun's throughput as a fraction of the pipe's (target >= 0.7).
# Usage: bench/output_throughput.sh [build-dir=build] [reps=5] [bytes=1G]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
reps=${2:-5}
bytes=${3:-1G}
cmake --build "$build" --target hvdrun >/dev/null
hvdrun="$build/cli/hvdrun"
line=$(printf 'x%.0s' $(seq 99))
producer="yes $line | head -c $bytes"

# "wall cpu" seconds of one run of "$@" (cpu = user + system of the whole process tree).
measure() {
  local out
  out=$({ /usr/bin/time -f "%e %U %S" "$@" 2>&3 >/dev/null; } 3>&1 1>/dev/null) || { echo "failed: $*" >&2; exit 1; }
  awk '{ printf "%s %.2f\n", $1, $2 + $3 }' <<<"$out"
}
median() { sort -g | awk '{ v[NR] = $1 } END { m = int((NR + 1) / 2); printf "%.3f", (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'; }
through_pipe=(sh -c "$producer | cat")
through_hvdrun=("$hvdrun" -np 1 sh -c "$producer")

# Correctness first: every line arrives, tagged.
lines=$("$hvdrun" -np 1 sh -c "yes $line | head -c 10M" | grep -c "^\[0\]<stdout>:$line\$")
[[ $lines == $((10 * 1024 * 1024 / 100)) ]] || { echo "lost lines: $lines" >&2; exit 1; }

echo "host: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $bytes of 100-byte lines, $reps repetitions, median"
pw=() pc=() hw=() hc=()
for ((i = 0; i < reps; i++)); do
  read -r w c < <(measure "${through_pipe[@]}"); pw+=("$w"); pc+=("$c")
  read -r w c < <(measure "${through_hvdrun[@]}"); hw+=("$w"); hc+=("$c")
done
med() { printf '%s\n' "$@" | median; }
gib=$(numfmt --from=iec "$bytes")
report() {
  printf "%-22s wall %7s s (%5.0f MiB/s)   cpu %7s s\n" "$1" "$2" "$(echo "$gib / 1048576 / $2" | bc -l)" "$3"
}
report "producer | cat" "$(med "${pw[@]}")" "$(med "${pc[@]}")"
report "hvdrun -np 1 producer" "$(med "${hw[@]}")" "$(med "${hc[@]}")"
printf "hvdrun / pipe throughput (wall): %.2f   cpu-time ratio pipe/hvdrun: %.2f\n" \
  "$(echo "$(med "${pw[@]}") / $(med "${hw[@]}")" | bc -l)" "$(echo "$(med "${pc[@]}") / $(med "${hc[@]}")" | bc -l)"
