# Bash completion for hvdrun: options, the run/check/stacks subcommands, file and directory
# arguments, log levels, network interfaces, and host names for -H taken from the
# --hostfile already on the line (plus localhost and ~/.ssh/config aliases). Once the
# user's command has started, the command and its arguments complete as usual.
# Installed as share/bash-completion/completions/hvdrun; to try it from a checkout:
#   source completions/hvdrun.bash

# Options that take a value (the next word, or --opt=value).
_hvdrun_value_opts="-np --num-proc -H --hosts --hostfile -x --env --start-timeout --kill-grace
  --timeout --result-file --local-ranks-filter
  --network-interface -p --ssh-port -i --ssh-identity-file --ssh-config --remote-hvdrun
  --output-filename --ranks-filter --log-level --fusion-threshold-mb --cycle-time-ms --cache-capacity
  --autotune-log-file --autotune-warmup-samples --autotune-steps-per-sample
  --autotune-bayes-opt-max-samples --autotune-gaussian-process-noise --timeline-filename
  --stall-check-warning-time-seconds --stall-check-shutdown-time-seconds --num-nccl-streams
  --thread-affinity --gloo-timeout-seconds --launcher --min-np --max-np --host-discovery-script
  --slots-per-host --reset-limit --max-restarts --blacklist-cooldown-range --elastic-timeout
  --env-file --config-file --bind-to --map-by --cpus-per-rank --gpus-per-rank --include --exclude
  --network-interfaces --nnodes --node-rank --nproc-per-node --rdzv-endpoint --rdzv-id --rdzv-backend
  --rdzv-timeout --master-addr --master-port --secret-file"
_hvdrun_flag_opts="--prefix-output-with-timestamp --json --topology --dry-run --verbose --check-build
  --version -h --help --gloo --disable-cache --hierarchical-allreduce --no-hierarchical-allreduce
  --hierarchical-allgather --no-hierarchical-allgather --autotune --timeline-mark-cycles
  --no-stall-check --tcp --log-without-timestamp --report-bindings --standalone --no-python -m --module
  -v --torus-allreduce --no-torus-allreduce --no-autotune --no-timeline-mark-cycles --stall-check
  --log-with-timestamp --log-hide-timestamp --no-log-hide-timestamp"

# Prints the host names listed in a hostfile ('host slots=N' lines, '#' comments).
_hvdrun_hostfile_hosts() {
  local file=$1
  file=${file/#\~/$HOME}
  [[ -r $file ]] || return 0
  local line
  while IFS= read -r line || [[ -n $line ]]; do
    line=${line%%#*}
    read -r line _ <<<"$line"
    [[ -n $line ]] && printf '%s\n' "$line"
  done <"$file"
}

# Prints the Host aliases of an ssh config (no wildcard patterns).
_hvdrun_ssh_config_hosts() {
  local file=${1:-$HOME/.ssh/config}
  file=${file/#\~/$HOME}
  [[ -r $file ]] || return 0
  local key rest h
  while read -r key rest; do
    [[ ${key,,} == host ]] || continue
    for h in $rest; do
      [[ $h == *[*?!]* ]] || printf '%s\n' "$h"
    done
  done <"$file"
}

_hvdrun() {
  local cur prev words cword
  if declare -F _init_completion >/dev/null; then
    _init_completion -n =: || return
  else
    words=("${COMP_WORDS[@]}")
    cword=$COMP_CWORD
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
  fi

  # Scan the words before the cursor: find --hostfile/--ssh-config values, the
  # subcommand, and whether the user's command has already started.
  local i w hostfile="" ssh_config="" subcommand="" command_start=0
  for ((i = 1; i < cword; i++)); do
    w=${words[i]}
    case $w in
      --) command_start=$((i + 1)); break ;;
      --hostfile=*) hostfile=${w#*=} ;;
      --ssh-config=*) ssh_config=${w#*=} ;;
      --*=*) ;;
      -*)
        if [[ " ${_hvdrun_value_opts//$'\n'/ } " == *" $w "* ]]; then
          ((i + 1 < cword)) || continue
          case $w in
            --hostfile) hostfile=${words[i + 1]} ;;
            --ssh-config) ssh_config=${words[i + 1]} ;;
          esac
          ((i++))
          # Its MAX is a second word.
          [[ $w == --blacklist-cooldown-range && ${words[i + 1]} == [0-9]* ]] && ((i + 1 < cword)) &&
            ((i++))
        fi
        ;;
      run | check)
        if [[ -z $subcommand && $i -eq 1 ]]; then subcommand=$w; else command_start=$i; break; fi
        ;;
      stacks)
        # hvdrun stacks [PID]: nothing to complete (the pid of a running hvdrun).
        if ((i == 1)); then COMPREPLY=(); return 0; fi
        command_start=$i; break ;;
      *) command_start=$i; break ;;
    esac
  done

  # Inside the user's command: complete it like a fresh command line.
  if ((command_start > 0)); then
    if ((cword == command_start)); then
      COMPREPLY=($(compgen -c -- "$cur"))
    elif declare -F _command_offset >/dev/null; then
      _command_offset "$command_start"
    else
      mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    fi
    return 0
  fi

  # --opt=value on one word.
  local opt=$prev
  if [[ $cur == --*=* ]]; then
    opt=${cur%%=*}
    cur=${cur#*=}
  fi

  case $opt in
    --hostfile | --ssh-config | -i | --ssh-identity-file | --remote-hvdrun | --autotune-log-file | \
      --timeline-filename | --host-discovery-script | --result-file | --secret-file)
      compopt -o filenames 2>/dev/null
      mapfile -t COMPREPLY < <(compgen -f -- "$cur")
      return 0
      ;;
    --env-file | --config-file)
      compopt -o filenames 2>/dev/null
      mapfile -t COMPREPLY < <(compgen -f -- "$cur")
      return 0
      ;;
    --launcher)
      mapfile -t COMPREPLY < <(compgen -W "auto ssh slurm exec:" -- "$cur")
      [[ ${COMPREPLY[0]} == exec: ]] && compopt -o nospace 2>/dev/null
      return 0
      ;;
    --output-filename)
      compopt -o filenames 2>/dev/null
      mapfile -t COMPREPLY < <(compgen -d -- "$cur")
      return 0
      ;;
    -H | --hosts)
      # A comma-separated list: complete the last element, keep what precedes it.
      local before="" last=$cur
      if [[ $cur == *,* ]]; then
        before=${cur%,*},
        last=${cur##*,}
      fi
      local hosts
      hosts=$( {
        [[ -n $hostfile ]] && _hvdrun_hostfile_hosts "$hostfile"
        _hvdrun_ssh_config_hosts "$ssh_config"
        echo localhost
      } | sort -u)
      local h
      COMPREPLY=()
      for h in $(compgen -W "$hosts" -- "$last"); do
        COMPREPLY+=("$before$h")
      done
      # Readline splits words at ':' (host:slots): drop what it already has.
      declare -F __ltrim_colon_completions >/dev/null && __ltrim_colon_completions "$before$last"
      compopt -o nospace 2>/dev/null
      return 0
      ;;
    --log-level)
      COMPREPLY=($(compgen -W "trace debug info warning error critical off" -- "$cur"))
      return 0
      ;;
    --network-interface)
      COMPREPLY=($(compgen -W "$(ls /sys/class/net 2>/dev/null)" -- "$cur"))
      return 0
      ;;
    --network-interfaces)
      # A comma-separated list: complete the name after the last comma.
      local done_part=${cur%"${cur##*,}"}
      COMPREPLY=($(compgen -P "$done_part" -W "$(ls /sys/class/net 2>/dev/null)" -- "${cur##*,}"))
      compopt -o nospace 2>/dev/null
      return 0
      ;;
    -x | --env)
      compopt -o nospace 2>/dev/null
      COMPREPLY=($(compgen -v -- "$cur"))
      return 0
      ;;
    -np | --num-proc)
      COMPREPLY=($(compgen -W "auto" -- "$cur"))
      return 0
      ;;
    -p | --ssh-port | --start-timeout | --kill-grace | --timeout | --min-np | --max-np | --slots-per-host | \
      --reset-limit | --max-restarts | --blacklist-cooldown-range | --elastic-timeout | --gpus-per-rank | \
      --cpus-per-rank | --nnodes | --node-rank | --rdzv-endpoint | --rdzv-id | \
      --rdzv-timeout | --master-addr | --master-port)
      return 0
      ;;
    --rdzv-backend)
      COMPREPLY=($(compgen -W "c10d static" -- "$cur"))
      return 0
      ;;
    --nproc-per-node)
      COMPREPLY=($(compgen -W "gpu cpu auto" -- "$cur"))
      return 0
      ;;
  esac

  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$_hvdrun_value_opts $_hvdrun_flag_opts" -- "$cur"))
  elif [[ -z $subcommand ]] && ((cword == 1)); then
    COMPREPLY=($(compgen -W "run check stacks" -- "$cur") $(compgen -c -- "$cur"))
  else
    COMPREPLY=($(compgen -c -- "$cur"))
  fi
  return 0
}
complete -F _hvdrun hvdrun
