#!/usr/bin/env bash
# Horovod's PyTorch synthetic benchmark on the CPU, side by side: hvdrun.torch under
# hvdrun, and Horovod 0.28.1 itself under `horovodrun --gloo`, both running the same
# program (bench/pytorch_synthetic.py, which imports one or the other per --api), at
# np 2 and np 4. Prints img/s for each and the ratio hvdrun/horovod.
#
# Horovod is built from PyPI once into its own virtualenv (Debian's torch, no cmake from
# pip) and the time that install took is printed beside the figures: `pip install` of
# hvdrun is meant to take at most a tenth of it.
#
# Usage: bench/horovod_synthetic.sh [--install-only] [build-dir=build] [-- extra benchmark flags]
#   HOROVOD_VENV   where Horovod's virtualenv lives (default .cache/horovod-0.28.1)
#   BENCH_NPS      rank counts to run (default "2 4")
#   BENCH_FLAGS    benchmark flags (default: resnet18, batch 8, 2 warm-up batches,
#                  3 batches per iteration, 3 iterations, CPU)
#   BENCH_ROUNDS   runs of each side per rank count, alternating hvdrun and Horovod so
#                  that load from other processes hits both alike (default 2); the
#                  figures are the mean over rounds and the best round (the least
#                  disturbed one on a shared machine)
#   BENCH_NO_BUILD set: use the build as it is (do not run cmake --build first)
#   HOROVOD_REINSTALL set: build Horovod's virtualenv again even if it exists (to time it
#                  under the same conditions as hvdrun's install)
#   --install-only time both installs and stop: Horovod's (as above) and `pip install`
#                  of this checkout into a fresh virtualenv (no pip cache, no ccache),
#                  and print the ratio
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
python=/usr/bin/python3
venv=${HOROVOD_VENV:-$repo/.cache/horovod-0.28.1}
install_only=0
build=build
extra=()
while (($#)); do
  case $1 in
    --install-only) install_only=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    -*) echo "bench/horovod_synthetic.sh: unknown option $1; see --help" >&2; exit 2 ;;
    *) build=$1 ;;
  esac
  shift
done

# Runs a command and prints "WALL CPU" seconds to fd 3: wall-clock time, and the CPU time
# (user + system) of the command and every process it waited for. On a shared machine the
# CPU time is the fairer figure: other load stretches wall time, hardly CPU time.
timed() {
  "$python" -c '
import resource, subprocess, sys, time
t = time.monotonic()
rc = subprocess.call(sys.argv[1:])
r = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(3, "w") as out:
    print(f"{time.monotonic() - t:.1f} {r.ru_utime + r.ru_stime:.1f}", file=out)
sys.exit(rc)' "$@"
}

# Builds Horovod 0.28.1 with PyTorch and Gloo (no MPI, TensorFlow or MXNet) against
# Debian's torch; records how long pip took ("WALL CPU" seconds) in $venv/install_seconds.
install_horovod() {
  if [[ -z ${HOROVOD_REINSTALL:-} && -f $venv/install_seconds ]] &&
    "$venv/bin/python" -c 'import horovod.torch' 2>/dev/null; then
    return
  fi
  local pkgs=(libtorch-dev pybind11-dev libeigen3-dev python3-venv python3-torchvision)
  local missing=()
  for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "installing ${missing[*]} with apt-get" >&2
    apt-get install -y "${missing[@]}" >&2
  fi
  rm -rf "$venv"
  "$python" -m venv --system-site-packages "$venv"
  echo "building horovod==0.28.1 into $venv (about 10 minutes; log in $venv/install.log)" >&2
  HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITHOUT_MPI=1 HOROVOD_WITH_GLOO=1 CMAKE_POLICY_VERSION_MINIMUM=3.5 \
    timed "$venv/bin/pip" install --no-cache-dir --no-build-isolation horovod==0.28.1 \
    >"$venv/install.log" 2>&1 3>"$venv/install_seconds.new" || {
      tail -30 "$venv/install.log" >&2
      echo "horovod install failed; full log in $venv/install.log" >&2
      exit 1
    }
  mv "$venv/install_seconds.new" "$venv/install_seconds"
}

# Times `pip install` of this checkout, as a user would run it, into a fresh virtualenv.
time_hvdrun_install() {
  local dir
  dir=$(mktemp -d /tmp/hvdrun-pip.XXXXXX)
  "$python" -m venv --system-site-packages "$dir/venv"
  CCACHE_DISABLE=1 timed "$dir/venv/bin/pip" install --no-cache-dir --quiet "$repo" \
    >"$dir/install.log" 2>&1 3>"$dir/seconds" || {
    tail -30 "$dir/install.log" >&2
    echo "pip install of hvdrun failed; log in $dir/install.log" >&2
    exit 1
  }
  cat "$dir/seconds"
  rm -rf "$dir"
}

install_horovod
if ((install_only)); then
  read -r ours_wall ours_cpu <<<"$(time_hvdrun_install)"
  read -r theirs_wall theirs_cpu <<<"$(cat "$venv/install_seconds")"
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "horovod 0.28.1 pip install: wall $theirs_wall s, CPU $theirs_cpu s"
  echo "hvdrun pip install:         wall $ours_wall s, CPU $ours_cpu s"
  awk -v a="$ours_wall" -v b="$theirs_wall" -v c="$ours_cpu" -v d="$theirs_cpu" \
    'BEGIN { printf "ratio hvdrun/horovod: wall %.3f, CPU %.3f (target <= 0.1)\n", a / b, c / d }'
  exit 0
fi

flags=${BENCH_FLAGS:---model resnet18 --batch-size 8 --num-warmup-batches 2 --num-batches-per-iter 3 --num-iters 3 --no-cuda}
rounds=${BENCH_ROUNDS:-2}
nps=${BENCH_NPS:-2 4}
[[ -n ${BENCH_NO_BUILD:-} ]] || cmake --build "$build" --target hvdrun hvdrun_runtime >/dev/null
hvdrun_bin=$repo/$build/cli/hvdrun
[[ -x $hvdrun_bin ]] || hvdrun_bin=$build/cli/hvdrun
lib=$(dirname "$hvdrun_bin")/../runtime/libhvdrun.so
log=$(mktemp -d /tmp/hvdrun-synthetic.XXXXXX)

# Prints the "Total img/sec" figure of one run; the run's output is kept in $log.
run_one() {
  local api=$1 np=$2 out=$log/$1-np$2-$3.txt
  # shellcheck disable=SC2086 # $flags is a list of flags
  if [[ $api == hvdrun ]]; then
    HVDRUN_LIBRARY=$lib PYTHONPATH=$repo/python \
      "$hvdrun_bin" -np "$np" "$python" bench/pytorch_synthetic.py --api hvdrun $flags "${extra[@]}" >"$out" 2>&1
  else
    PATH=$venv/bin:$PATH "$venv/bin/horovodrun" --gloo -np "$np" -H "localhost:$np" \
      "$venv/bin/python" bench/pytorch_synthetic.py --api horovod $flags "${extra[@]}" >"$out" 2>&1
  fi || { echo "$api at np $np failed; output in $out" >&2; tail -20 "$out" >&2; exit 1; }
  sed -n 's/.*Total img\/sec on [0-9]* [A-Z]*(s): \([0-9.]*\).*/\1/p' "$out"
}

echo "load: $(cut -d' ' -f1-3 /proc/loadavg); flags: $flags; rounds: $rounds; logs: $log"
printf '%-4s %-14s %-14s %s\n' np "hvdrun img/s" "horovod img/s" "ratio hvdrun/horovod"
for np in $nps; do
  ours=() theirs=()
  for ((i = 0; i < rounds; i++)); do
    ours+=("$(run_one hvdrun "$np" "$i")")
    theirs+=("$(run_one horovod "$np" "$i")")
  done
  mean() { printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.2f", s / NR }'; }
  best() { printf '%s\n' "$@" | sort -g | tail -1; }
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
  a=$(mean "${ours[@]}") b=$(mean "${theirs[@]}")
  ba=$(best "${ours[@]}") bb=$(best "${theirs[@]}")
  printf '%-4s %-14s %-14s %-6s best: %s vs %s, ratio %s   (runs: hvdrun %s; horovod %s)\n' \
    "$np" "$a" "$b" "$(ratio "$a" "$b")" "$ba" "$bb" "$(ratio "$ba" "$bb")" "${ours[*]}" "${theirs[*]}"
done
echo "horovod 0.28.1 pip install (wall, CPU seconds): $(cat "$venv/install_seconds")"
