#!/usr/bin/env bash
# Installs what building and testing hvdrun needs, from Debian's packages. Idempotent.
set -euo pipefail
pkgs=(
  build-essential cmake ninja-build pkg-config git ccache
  libboost-dev libboost-program-options-dev libspdlog-dev libfmt-dev
  libssh2-1-dev libssl-dev libgloo-dev catch2
  openssh-server openssh-client groff-base python3 python3-torch
  # The Python package's tests: pytest, torchvision, a venv for `pip install`, and
  # cloudpickle for hvdrun.run.
  python3-torchvision python3-pytest python3-venv python3-pip python3-cloudpickle
  # scripts/test.sh's fuzz and tidy stages: clang-14 with libFuzzer and its sanitizer
  # runtimes, llvm-symbolizer for readable fuzzer stacks, clang-tidy-14 and clang-format-14.
  clang-14 libclang-rt-14-dev llvm-14 clang-tidy-14 clang-format-14
  # The loopback Slurm of the scheduler tests (tests/support/slurm_cluster.h).
  slurmctld slurmd slurm-client munge
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The TensorFlow tests' virtualenv (tensorflow-cpu from PyPI; Debian packages no TensorFlow).
# Without PyPI the rest still builds and tests; ctest then reports tests/tensorflow skipped.
"$(dirname "$0")/tf-venv.sh" ||
  echo "install-deps: WARNING: the TensorFlow virtualenv could not be made (PyPI unreachable?);" \
    "tests/tensorflow will be reported skipped until scripts/tf-venv.sh succeeds" >&2
