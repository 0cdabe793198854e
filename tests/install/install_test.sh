#!/usr/bin/env bash
# Install checks, run by ctest: install the build into a temporary prefix, move that
# prefix elsewhere (the installed tree must be relocatable), then
#   cmake      build tests/install/consumer with find_package(hvdrun) and run it at -np 2
#   pkgconfig  build the same program with `pkg-config --cflags --libs hvdrun`, run it
#   deb        make the .deb with cpack and check its file list, Depends and Recommends
# Usage: install_test.sh MODE BUILD_DIR SOURCE_DIR CXX
# Exit 77 means skipped (a tool is missing).
set -euo pipefail
mode=$1 build=$2 src=$3 cxx=$4

work=$(mktemp -d "${TMPDIR:-/tmp}/hvdrun-install-XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "install_test ($mode): $*" >&2; exit 1; }

install_moved() {
  cmake --install "$build" --prefix "$work/staging" >"$work/install.log" ||
    { cat "$work/install.log"; fail "cmake --install failed"; }
  mv "$work/staging" "$work/prefix"
  prefix="$work/prefix"
  [[ -x $prefix/bin/hvdrun ]] || fail "bin/hvdrun missing"
  "$prefix/bin/hvdrun" --version | grep -q '^hvdrun [0-9]' || fail "bin/hvdrun --version prints no version"
  local lib
  lib=$(find "$prefix" -name 'libhvdrun.so.*.*.*' | head -1)
  [[ -n $lib ]] || fail "libhvdrun.so.X.Y.Z missing"
  if command -v readelf >/dev/null; then
    readelf -d "$lib" | grep -q 'SONAME.*\[libhvdrun\.so\.[0-9]*\]' || fail "$lib has no versioned SONAME"
  fi
}

# Runs the consumer at -np 2 under the installed launcher; both ranks must print ok.
run_consumer() {
  local exe=$1 out
  out=$(timeout 60 "$prefix/bin/hvdrun" -np 2 "$exe" 2>&1) || { echo "$out"; fail "hvdrun -np 2 failed"; }
  echo "$out"
  [[ $(grep -c 'sum 3 expected 3 ok' <<<"$out") == 2 ]] || fail "expected two ranks reporting sum 3"
}

case $mode in
  cmake)
    install_moved
    # The exported target must not name build-tree-only libraries.
    cmake_dir=$(dirname "$(find "$prefix" -name hvdrunConfig.cmake)")
    if grep -rqE 'hvdrun_(rendezvous|common|runtime_core)|BUILD_INTERFACE' "$cmake_dir" ||
       grep -rqF -e "$build" -e "$src" "$cmake_dir"; then
      fail "the installed CMake package in $cmake_dir refers to build-tree targets or paths"
    fi
    cmake -S "$src/tests/install/consumer" -B "$work/consumer" -DCMAKE_CXX_COMPILER="$cxx" \
      -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" ||
      { cat "$work/configure.log"; fail "consumer configure failed"; }
    grep -q "$prefix" "$work/consumer/CMakeCache.txt" || fail "hvdrun not found under the moved prefix"
    cmake --build "$work/consumer" || fail "consumer build failed"
    run_consumer "$work/consumer/consumer"
    ;;
  pkgconfig)
    command -v pkg-config >/dev/null || exit 77
    install_moved
    pc_dirs=$(find "$prefix" -path '*/pkgconfig' -type d | tr '\n' ':')
    export PKG_CONFIG_PATH="$pc_dirs"
    flags=$(pkg-config --cflags --libs hvdrun) || fail "pkg-config does not know hvdrun"
    libdir=$(pkg-config --variable=libdir hvdrun)
    [[ $(realpath "$libdir") == "$(realpath "$prefix")"/* ]] || fail "libdir $libdir is not under the moved prefix"
    # shellcheck disable=SC2086
    "$cxx" -std=c++17 -o "$work/consumer" "$src/tests/install/consumer/main.cc" $flags \
      -Wl,-rpath,"$libdir" || fail "consumer build with pkg-config flags failed"
    run_consumer "$work/consumer"
    ;;
  deb)
    command -v dpkg-deb >/dev/null && command -v dpkg-shlibdeps >/dev/null || exit 77
    cpack --config "$build/CPackConfig.cmake" -B "$work/deb" >"$work/cpack.log" ||
      { cat "$work/cpack.log"; fail "cpack failed"; }
    deb=$(ls "$work"/deb/hvdrun_*.deb) || fail "no .deb made"
    files=$(dpkg-deb -c "$deb" | awk '{print $6}')
    for f in ./usr/bin/hvdrun ./usr/include/hvdrun/hvdrun.h ./usr/include/hvdrun/hvdrun_c.h \
             ./usr/share/man/man1/hvdrun.1 ./usr/share/bash-completion/completions/hvdrun \
             ./usr/lib/pkgconfig/hvdrun.pc ./usr/lib/cmake/hvdrun/hvdrunConfig.cmake \
             ./usr/lib/cmake/hvdrun/hvdrunConfigVersion.cmake ./usr/lib/cmake/hvdrun/hvdrunTargets.cmake \
             ./usr/lib/libhvdrun.so ./usr/lib/libhvdrun.so.0; do
      grep -qxF "$f" <<<"$files" || fail "$f missing from $(basename "$deb")"
    done
    depends=$(dpkg-deb -f "$deb" Depends)
    echo "Depends: $depends"
    for d in openssh-client libc6 libstdc++6; do
      grep -q "$d" <<<"$depends" || fail "Depends lacks $d"
    done
    grep -q libhwloc15 <<<"$(dpkg-deb -f "$deb" Recommends)" || fail "Recommends lacks libhwloc15"
    [[ $(dpkg-deb -f "$deb" Package) == hvdrun ]] || fail "package name is not hvdrun"
    ;;
  *) fail "unknown mode (cmake|pkgconfig|deb)" ;;
esac
echo "install_test ($mode): ok"
