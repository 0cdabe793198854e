#!/usr/bin/env bash
# Installs what building and testing hvdrun needs, from Debian's packages. Idempotent.
#   scripts/install-deps.sh          everything scripts/test.sh needs (it runs this first)
#   scripts/install-deps.sh --demo   only what scripts/demo.sh builds with: a compiler,
#                                    CMake, Ninja and the libraries that the launcher and
#                                    libhvdrun link (no test tools, no Python, no TensorFlow)
# It prints one line saying what it installs, or that everything is present.
set -euo pipefail
demo=0
case ${1:-} in
  --demo) demo=1 ;;
  "") ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "install-deps: unknown argument '$1'; usage: scripts/install-deps.sh [--demo]" >&2; exit 2 ;;
esac

# What a build with -DHVDRUN_BUILD_TESTS=OFF needs (CMakeLists.txt's find_package calls:
# Boost with program_options, spdlog and its fmt, OpenSSL, libssh2 through pkg-config,
# Gloo, hwloc through pkg-config for the host topology). NCCL is optional: the NCCL path
# is compiled when nccl.h is found.
build_pkgs=(
  build-essential cmake ninja-build pkg-config
  libboost-dev libboost-program-options-dev libspdlog-dev libfmt-dev
  libssh2-1-dev libssl-dev libgloo-dev libhwloc-dev
)
# The rest of what scripts/test.sh builds and runs.
test_pkgs=(
  git ccache catch2
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
pkgs=("${build_pkgs[@]}")
((demo)) || pkgs+=("${test_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
what=$( ((demo)) && echo "the demo's build" || echo "the build and the tests")
if ((${#missing[@]})); then
  echo "install-deps: installing ${#missing[@]} packages for $what with apt-get: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: the ${#pkgs[@]} packages $what needs are installed"
fi
((demo)) && exit 0

# The TensorFlow tests' virtualenv (tensorflow-cpu from PyPI; Debian packages no TensorFlow).
# Without PyPI the rest still builds and tests; ctest then reports tests/tensorflow skipped.
"$(dirname "$0")/tf-venv.sh" ||
  echo "install-deps: WARNING: the TensorFlow virtualenv could not be made (PyPI unreachable?);" \
    "tests/tensorflow will be reported skipped until scripts/tf-venv.sh succeeds" >&2

# The virtualenv in which tests/manifests checks docs/kubernetes.md's manifests against the
# Kubernetes schemas (kubernetes-validate from PyPI). Without it those tests are skipped.
"$(dirname "$0")/k8s-venv.sh" ||
  echo "install-deps: WARNING: the manifests' virtualenv could not be made (PyPI unreachable?);" \
    "tests/manifests will be reported skipped until scripts/k8s-venv.sh succeeds" >&2
