#!/usr/bin/env bash
# Builds hvdrun and runs a demo job on this machine: 4 local ranks of the allreduce
# example, rendezvousing through hvdrun and averaging a vector through shared memory.
#
# It installs only what that build needs (scripts/install-deps.sh --demo) and builds only
# the two programs the job runs, the `hvdrun` and `allreduce_demo` targets (libhvdrun and
# the launcher's libraries with them), in build-demo/, the way `pip install` builds the
# package (pyproject.toml says why): each library one unity translation unit, no debug
# info, -O1 for the launcher and -O2 for libhvdrun. Through ccache when it is installed.
# scripts/test.sh's build directories are left alone; `cmake --install build-demo`
# installs what this built.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --demo
# The compilers a `pip install .` would build with: scikit-build-core takes CC and CXX from
# Python's sysconfig when they are unset (x86_64-linux-gnu-gcc for Debian's python3).
# With the same compilers and flags, pip builds in this directory (pyproject.toml's
# build-dir) and compiles nothing the demo compiled.
if [[ -z ${CC:-} && -z ${CXX:-} && -x /usr/bin/python3 ]]; then
  read -r CC CXX < <(/usr/bin/python3 -c 'import sysconfig as s
print(s.get_config_var("CC").split()[0], s.get_config_var("CXX").split()[0])')
  export CC CXX
fi
cmake -S . -B build-demo -G Ninja -DHVDRUN_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
  -DHVDRUN_QUICK_BUILD=ON -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=0 \
  -DCMAKE_OPTIMIZE_DEPENDENCIES=ON -DHVDRUN_WITH_NCCL=ON
cmake --build build-demo --target hvdrun allreduce_demo -j "$(nproc)"
exec build-demo/cli/hvdrun -np 4 -H localhost:4 build-demo/examples/allreduce_demo
