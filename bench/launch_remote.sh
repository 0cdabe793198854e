#!/usr/bin/env bash
# Launch over SSH on a loopback cluster that this script brings up itself: wall time of
# `true` on 8 hosts x 2 slots with hvdrun against
#   - the floor of any SSH launcher: 8 parallel `ssh -F CFG nodeK true` (OpenSSH), one
#     login and one remote shell per host, which is what hvdrun needs too (target <= 1x);
#   - OpenMPI's, when mpirun is installed (target <= 0.25x):
#     mpirun --allow-run-as-root --prefix /usr --mca plm_rsh_agent "ssh -F CFG" \
#            -H node1:2,...,node8:2 -np 16 true
#     (the agent is a wrapper of `ssh -F CFG` that gives each host's orted its own session
#     directory, which real hosts have anyway)
# (interleaved repetitions, median of each, ratios), then a 32-host x 4-slot hvdrun launch
# with hvdrun's peak RSS (/usr/bin/time).
#
# Where the time goes: `hvdrun check --ssh-config CFG -H ...` splits each host's latency
# into the login and the remote shell (a note when the shell takes over 250 ms), and
# `--log-level debug` logs both per host. With start-up files the remote shells dominate
# every launcher alike.
#
# The cluster is the one the integration tests use (tests/support/sshd_cluster.cc): a temp
# dir with an ed25519 host key and user key, one `sshd -D` per 15 loopback addresses
# (127.0.0.1..127.0.0.N, one free port; sshd listens on at most 16 sockets), UsePAM no,
# StrictModes no, MaxStartups/MaxSessions raised, and an ssh_config with aliases
# node1..nodeN that both hvdrun (--ssh-config) and OpenSSH (ssh -F) read. Every login
# happens on this machine, so the sshd side of each login shares its CPUs with everything
# else: read the figures as upper bounds, and compare within one run.
#
# Every SSH command runs through the remote user's login shell, which for bash sources
# ~/.bashrc (here root's, with `pyenv init`: about 0.4 s per host): both launchers pay it
# once per host. SKIP_SHELL_RC=1 has sshd set SHLVL=1 for its sessions (SetEnv), which makes
# bash skip ~/.bashrc, to show the figures for hosts with lean shell start-up.
#
# Needs root, /usr/sbin/sshd, ssh, ssh-keygen and /usr/bin/time; mpirun (OpenMPI) is
# optional (without it that comparison says "not installed").
# Usage: [SKIP_SHELL_RC=1] bench/launch_remote.sh [build-dir=build] [reps=7] [big-hosts=32] [big-reps=3]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
reps=${2:-7}
big_hosts=${3:-32}
big_reps=${4:-3}
small_hosts=8
small_slots=2
big_slots=4

if (($(id -u) != 0)); then
  echo "launch_remote.sh: needs root (it starts sshd on loopback addresses)" >&2
  exit 1
fi
for tool in /usr/sbin/sshd ssh ssh-keygen /usr/bin/time bc; do
  command -v "$tool" >/dev/null || { echo "launch_remote.sh: $tool not found" >&2; exit 1; }
done
have_mpirun=0
if command -v mpirun >/dev/null; then have_mpirun=1; fi
cmake --build "$build" --target hvdrun >/dev/null
hvdrun=$(readlink -f "$build/cli/hvdrun")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

hosts=$((big_hosts > small_hosts ? big_hosts : small_hosts))
dir=$(mktemp -d /tmp/hvdrun-launch-remote-XXXXXX)
daemons=()
cleanup() {
  for pid in "${daemons[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${daemons[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

# --- the cluster --------------------------------------------------------------------
mkdir -p /run/sshd
ssh-keygen -q -t ed25519 -N '' -C hvdrun-bench-host -f "$dir/host_key"
ssh-keygen -q -t ed25519 -N '' -C hvdrun-bench-user -f "$dir/user_key"
cp "$dir/user_key.pub" "$dir/authorized_keys"
chmod 600 "$dir/authorized_keys"
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

per_daemon=15
for ((first = 1; first <= hosts; first += per_daemon)); do
  g=$(((first - 1) / per_daemon))
  {
    echo "Port $port"
    for ((k = first; k < first + per_daemon && k <= hosts; k++)); do echo "ListenAddress 127.0.0.$k"; done
    cat <<EOF
HostKey $dir/host_key
AuthorizedKeysFile $dir/authorized_keys
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
UseDNS no
PidFile none
LogLevel ERROR
MaxStartups 1000:100:1000
MaxSessions 1000
MaxAuthTries 20
LoginGraceTime 60
AcceptEnv OMPI_MCA_orte_tmpdir_base
EOF
    if [[ ${SKIP_SHELL_RC:-0} == 1 ]]; then echo "SetEnv SHLVL=1"; fi
  } >"$dir/sshd_config.$g"
  chmod 600 "$dir/sshd_config.$g"
  /usr/sbin/sshd -D -e -f "$dir/sshd_config.$g" </dev/null >"$dir/sshd.$g.log" 2>&1 &
  daemons+=($!)
done

# Every address known in advance (same host key everywhere), so that parallel logins
# never race on writing known_hosts.
hostkey=$(cut -d' ' -f1-2 "$dir/host_key.pub")
cfg=$dir/ssh_config
: >"$dir/known_hosts"
: >"$cfg"
for ((k = 1; k <= hosts; k++)); do
  echo "[127.0.0.$k]:$port $hostkey" >>"$dir/known_hosts"
  cat >>"$cfg" <<EOF
Host node$k
  HostName 127.0.0.$k
  Port $port
  User root
  IdentityFile $dir/user_key
  IdentitiesOnly yes
  UserKnownHostsFile $dir/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  LogLevel ERROR
EOF
done
chmod 600 "$cfg"

# sshd says nothing when it is ready: connect to every address until it answers (10 s).
deadline=$(($(date +%s) + 10))
for ((k = 1; k <= hosts; k++)); do
  until (exec 3<>"/dev/tcp/127.0.0.$k/$port") 2>/dev/null; do
    if (($(date +%s) > deadline)); then
      echo "launch_remote.sh: sshd did not accept on 127.0.0.$k:$port within 10 s" >&2
      cat "$dir"/sshd.*.log >&2
      exit 1
    fi
    sleep 0.02
  done
done

# mpirun's rsh agent: ssh -F CFG, giving each host's orted its own session directory.
# Loopback hosts share this machine's /tmp and name, so their orteds would all create
# /tmp/ompi.HOST.UID/jf.N at once, and OpenMPI 4.1 fails on the EEXIST of that race.
cat >"$dir/mpirun_ssh" <<EOF
#!/bin/sh
for a in "\$@"; do case "\$a" in -*) ;; *) host=\$a; break ;; esac; done
exec ssh -F "$cfg" -o "SetEnv=OMPI_MCA_orte_tmpdir_base=$dir/ompi-\$host" "\$@"
EOF
chmod 755 "$dir/mpirun_ssh"

host_list() {  # host_list N SLOTS -> node1:S,...,nodeN:S
  local out="" k
  for ((k = 1; k <= $1; k++)); do out+="${out:+,}node$k:$2"; done
  echo "$out"
}

# Sets T to the wall seconds of one run of "$@", or to "hung" past 60 s. The output goes
# to $dir/last.log and is shown when the command fails, which ends the benchmark.
timed() {
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  timeout 60 "$@" >"$dir/last.log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  if ((rc == 124)); then
    T=hung
  elif ((rc != 0)); then
    echo "launch_remote.sh: failed (exit $rc): $*" >&2
    cat "$dir/last.log" >&2
    exit 1
  else
    T=$(echo "$t1 - $t0" | bc -l)
  fi
}
median() { sort -g | awk '{ v[NR] = $1 } END { m = int((NR + 1) / 2); printf "%.3f", (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'; }
range() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.3f-%.3f", lo, hi }'; }

small=$(host_list "$small_hosts" "$small_slots")
np=$((small_hosts * small_slots))
hvdrun_small=("$hvdrun" --ssh-config "$cfg" -H "$small" -np "$np" true)
mpirun_small=(mpirun --allow-run-as-root --prefix /usr --mca plm_rsh_agent "$dir/mpirun_ssh"
  -H "$small" -np "$np" true)
# The floor: one OpenSSH login and remote shell per host, all at once.
cat >"$dir/parallel_ssh" <<EOF
#!/bin/sh
for k in \$(seq 1 $small_hosts); do ssh -F "$cfg" "node\$k" true & done
wait
EOF
chmod 755 "$dir/parallel_ssh"
ssh_small=("$dir/parallel_ssh")

if ((have_mpirun)); then mpirun_version=$(mpirun --version | head -1); else mpirun_version="mpirun: not installed"; fi
echo "host: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $mpirun_version"
echo "cluster: $hosts loopback hosts, $(((hosts + per_daemon - 1) / per_daemon)) sshd, port $port;" \
  "remote shell start-up files: $([[ ${SKIP_SHELL_RC:-0} == 1 ]] && echo "skipped (SHLVL=1)" || echo "as the user has them")"

# Warm up (page cache, sshd's first forks), and make sure all work before timing.
timed "${hvdrun_small[@]}"
timed "${ssh_small[@]}"
if ((have_mpirun)); then
  timed "${mpirun_small[@]}"
  [[ $T != hung ]] || { echo "launch_remote.sh: mpirun hung on its first run" >&2; exit 1; }
fi

h=() s=() m=()
hung=0
for ((i = 0; i < reps; i++)); do
  timed "${hvdrun_small[@]}"
  [[ $T != hung ]] || { echo "launch_remote.sh: hvdrun hung" >&2; exit 1; }
  h+=("$T")
  timed "${ssh_small[@]}"
  [[ $T != hung ]] || { echo "launch_remote.sh: parallel ssh hung" >&2; exit 1; }
  s+=("$T")
  ((have_mpirun)) || continue
  timed "${mpirun_small[@]}"
  if [[ $T == hung ]]; then hung=$((hung + 1)); else m+=("$T"); fi
done
hm=$(printf '%s\n' "${h[@]}" | median)
hr=$(printf '%s\n' "${h[@]}" | range)
sm=$(printf '%s\n' "${s[@]}" | median)
sr=$(printf '%s\n' "${s[@]}" | range)
printf "\n%-44s %10s %14s\n" "launch of true, $reps repetitions" "median (s)" "range (s)"
printf "%-44s %10s %14s\n" "hvdrun, $small_hosts hosts x $small_slots slots" "$hm" "$hr"
printf "%-44s %10s %14s\n" "$small_hosts parallel ssh nodeK true" "$sm" "$sr"
printf "%-44s %10.3f   (target <= 1)\n" "ratio hvdrun / parallel ssh" "$(echo "$hm / $sm" | bc -l)"
if ((!have_mpirun)); then
  printf "%-44s %10s\n" "mpirun, same" "not installed"
elif ((${#m[@]} == 0)); then
  printf "%-44s %10s\n" "mpirun, same" "hung"
else
  mm=$(printf '%s\n' "${m[@]}" | median)
  mr=$(printf '%s\n' "${m[@]}" | range)
  printf "%-44s %10s %14s%s\n" "mpirun, same" "$mm" "$mr" \
    "$( ((hung > 0)) && echo "  (hung in $hung of $reps runs; median of the others)")"
  printf "%-44s %10.3f   (target <= 0.25)\n" "ratio hvdrun / mpirun" "$(echo "$hm / $mm" | bc -l)"
fi

# The big launch: wall time, hvdrun's peak RSS (GNU time's %M, KiB) and its own CPU time
# (user + system; the rest of the wall time is sshd and the remote shells).
big=$(host_list "$big_hosts" "$big_slots")
b=() rss=0 cpu=()
for ((i = 0; i < big_reps; i++)); do
  timed /usr/bin/time -f '%M %U %S' -o "$dir/rss" "$hvdrun" --ssh-config "$cfg" -H "$big" true
  [[ $T != hung ]] || { echo "launch_remote.sh: hvdrun hung on $big_hosts hosts" >&2; exit 1; }
  b+=("$T")
  read -r r u s <"$dir/rss"
  ((r > rss)) && rss=$r
  cpu+=("$(echo "$u + $s" | bc -l)")
done
printf "%-44s %10s %14s   peak RSS %d KiB (%.1f MiB), hvdrun CPU %s s (median)\n" \
  "hvdrun, $big_hosts hosts x $big_slots slots ($big_reps runs)" \
  "$(printf '%s\n' "${b[@]}" | median)" "$(printf '%s\n' "${b[@]}" | range)" "$rss" \
  "$(echo "$rss / 1024" | bc -l)" "$(printf '%s\n' "${cpu[@]}" | median)"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
