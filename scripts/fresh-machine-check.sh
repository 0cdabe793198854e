#!/usr/bin/env bash
# Times scripts/demo.sh on a bare Debian 12 system, as a new user's first try would run it:
# debootstraps Debian bookworm (the default variant, with git, as a user who cloned this
# repository has it) into WORK/base once, copies that to WORK/root for each run, clones
# this checkout's HEAD into it and runs `time bash scripts/demo.sh` there with chroot, as
# root, with /proc and /dev mounted. Everything the demo needs is installed inside from the
# mirror, as on a fresh machine; nothing of this machine's packages or ccache is used.
#
# Not run by CI: it needs root, debootstrap (apt-get install debootstrap), the Debian
# mirror, about 1.5 GB under WORK, and minutes (debootstrap itself is not timed).
#
# Usage: sudo scripts/fresh-machine-check.sh [--base-only] [WORK]   (default /tmp/hvdrun-fresh)
#   --base-only   make WORK/base and stop (to time the demo later, on a quieter machine)
# Environment: MIRROR (default: the first Debian URI in /etc/apt/sources.list*, else
# http://deb.debian.org/debian); CPUS, a CPU list for taskset (e.g. 0,1) to run the demo
# on that many cores.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
base_only=0
[[ ${1:-} == --base-only ]] && { base_only=1; shift; }
work=${1:-/tmp/hvdrun-fresh}
[[ $(id -u) -eq 0 ]] || { echo "fresh-machine-check: needs root (debootstrap, chroot, mount)" >&2; exit 2; }
command -v debootstrap >/dev/null ||
  { echo "fresh-machine-check: debootstrap not found (apt-get install debootstrap)" >&2; exit 2; }
if [[ -z ${MIRROR:-} ]]; then
  MIRROR=$(grep -hoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/* \
    2>/dev/null | head -1 | tr -d ' ') || true
  MIRROR=${MIRROR:-http://deb.debian.org/debian}
fi
base=$work/base
root=$work/root

if [[ ! -f $base/.hvdrun-base-complete ]]; then
  echo "fresh-machine-check: debootstrap bookworm from $MIRROR into $base (not timed)"
  rm -rf "$base"
  debootstrap --include=git,ca-certificates bookworm "$base" "$MIRROR"
  cat >"$base/etc/apt/sources.list" <<SOURCES
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
SOURCES
  touch "$base/.hvdrun-base-complete"
fi
((base_only)) && { echo "fresh-machine-check: $base is ready"; exit 0; }

mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -R "${mounted[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
echo "fresh-machine-check: a fresh copy of the base system in $root"
rm -rf "$root"
cp -a "$base" "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc" && mounted+=("$root/proc")
mount --rbind /dev "$root/dev" && mounted+=("$root/dev")
git clone -q "$repo" "$root/root/hvdrun"

taskset=()
[[ -n ${CPUS:-} ]] && taskset=(taskset -c "$CPUS")
echo "fresh-machine-check: load before: $(uptime)"
"${taskset[@]}" chroot "$root" /bin/bash -c 'cd /root/hvdrun && echo "cores: $(nproc)" && time bash scripts/demo.sh'
echo "fresh-machine-check: load after: $(uptime)"
