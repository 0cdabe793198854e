// The launcher's input: everything the command line says about one job, already parsed
// and validated by cli/. A plain struct so tests can build one directly.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hostfile/hosts.h"
#include "launcher/topology/placement.h"

namespace hvdrun::launcher {

/// horovodrun's elastic flags. Elastic mode is on when a discovery script or --min-np is
/// given (launcher/elastic/elastic.h).
struct ElasticOptions {
  /// --host-discovery-script PATH: prints `host` or `host:slots` lines; empty: the hosts
  /// of -H/--hostfile (else localhost) are the only ones there are.
  std::string discovery_script;
  /// --slots-per-host N: slots of a host the script prints without a count.
  int slots_per_host = 1;
  /// --min-np / --max-np: bounds of the job's size.
  std::optional<int> min_np;
  std::optional<int> max_np;
  /// --reset-limit N or torchrun's --max-restarts N: resets the whole job may make;
  /// empty: no limit.
  std::optional<int> reset_limit;
  /// The flag the limit was given with ("--reset-limit" or "--max-restarts"): messages
  /// name the one the user wrote, and it says what the limit counts.
  std::string reset_limit_flag = "--reset-limit";
  /// Whether the limit counts the resets of growing and shrinking by discovery too, as
  /// horovodrun's --reset-limit does; torchrun's --max-restarts counts failures only.
  bool limit_counts_scaling() const { return reset_limit && reset_limit_flag == "--reset-limit"; }
  /// --blacklist-cooldown-range MIN MAX: seconds a failed host stays excluded, MIN the
  /// first time, doubling on each repeat up to MAX.
  int cooldown_min_s = 10;
  int cooldown_max_s = 300;
  /// --elastic-timeout SEC: how long a discovery script may take, and how long the job
  /// waits for a failing script to recover.
  int elastic_timeout_s = 600;
  /// False in elastic join (--nnodes MIN:MAX): a failure is recovered in process only, and
  /// a generation that ends ends the job, as the other nodes' hvdrun end with it (nothing
  /// could start them again).
  bool restarts = true;

  bool enabled() const { return !discovery_script.empty() || min_np.has_value(); }
};

/// --launcher: how agents reach their hosts.
struct LauncherChoice {
  enum Kind {
    automatic,  ///< auto: slurm for a Slurm allocation with srun on PATH, else ssh
    ssh,        ///< SSH (hosts that are this machine run locally)
    slurm,      ///< one `srun` step, one agent per node
    exec,       ///< a user's command per host (`exec:COMMAND`)
    join,       ///< join mode: the other nodes' hvdrun connect to this one (JoinOptions)
  };
  Kind kind = automatic;
  /// For exec: the command's words, `{host}` not yet replaced.
  std::vector<std::string> exec_argv;

  bool operator==(const LauncherChoice&) const = default;
};

/// Join mode (torchrun's way, docs/kubernetes.md): the same hvdrun command runs on every
/// node; node 0 runs the job and its own host's agent, every other node's hvdrun is that
/// host's agent and connects to node 0's endpoint.
struct JoinOptions {
  /// --nnodes N, or MAX of --nnodes MIN:MAX; 0: not join mode.
  int nnodes = 0;
  /// MIN of --nnodes MIN:MAX (elastic join); 0 without a range. Node 0 starts the job once
  /// MIN nodes (itself included) have joined and the last call has passed; the job goes on
  /// in process while at least MIN nodes are left.
  int min_nodes = 0;
  /// How long node 0 waits for more nodes once MIN have joined (HVDRUN_JOIN_LAST_CALL,
  /// seconds; torchrun's last_call_timeout, 30 s by default); it starts at once when every
  /// node up to MAX has joined.
  int last_call_s = 30;
  /// --node-rank I: 0 is the node at the endpoint.
  int node_rank = 0;
  /// --rdzv-endpoint HOST[:PORT] (or --master-addr and --master-port).
  std::string endpoint_host;
  int endpoint_port = 29400;
  /// --rdzv-id: the job's name on every node (TORCHELASTIC_RUN_ID); nodes of another id
  /// are refused.
  std::string run_id = "none";
  /// --rdzv-timeout SEC: how long node 0 waits for the others, and the others try to
  /// reach node 0.
  int timeout_s = 900;
  /// The job's secret (--secret-file or HVDRUN_JOB_SECRET): every node proves it.
  std::string secret;
  /// This node's --nproc-per-node, as a number of ranks; `ranks_per_node_from` says how a
  /// word (gpu, cpu, auto) was counted here, and is empty for a number. Node 0 checks each
  /// joining node's count against its own (count_refusal, join_layout.h): numbers must be
  /// equal; when every node gave a word the counts may differ, and node 0 lays the ranks out
  /// node by node from the counts the hellos carried before any rank starts.
  int ranks_per_node = 1;
  std::string ranks_per_node_from;

  bool enabled() const { return nnodes > 0; }
  /// Elastic join: a range of nodes.
  bool elastic() const { return min_nodes > 0 && min_nodes < nnodes; }
};

/// Options of `hvdrun [run]` and `hvdrun check`.
struct LaunchOptions {
  /// -np; empty means "all slots".
  std::optional<int> np;
  /// -np auto: one rank per GPU on every host (each host counted as `host:auto`).
  bool np_auto = false;
  /// Hosts from -H or --hostfile; empty means localhost with np slots.
  std::vector<hostfile::HostSlots> hosts;
  /// -p/--ssh-port: overrides the port from ssh_config for every host.
  std::optional<int> ssh_port;
  /// -i/--ssh-identity-file: tried before the IdentityFiles of ssh_config.
  std::string ssh_identity_file;
  /// --ssh-config FILE; empty means ~/.ssh/config when present.
  std::string ssh_config;
  /// --start-timeout SEC: deadline for SSH preflight, agent start and rendezvous.
  int start_timeout_s = 30;
  /// --network-interface IF: address ranks use to reach the rendezvous, and theirs.
  std::string network_interface;
  /// --network-interfaces A,B: the first of them present on a host is its ranks'
  /// NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME and HOROVOD_GLOO_IFACE.
  std::vector<std::string> network_interfaces;
  /// --include / --exclude: DeepSpeed's filter of the host list (hostfile/resource_filter.h).
  std::string include;
  std::string exclude;
  /// --output-filename DIR: also write DIR/rank.N/stdout and stderr.
  std::string output_filename;
  /// -x/--env NAME or NAME=VALUE, in order given.
  std::vector<std::string> env;
  /// --verbose.
  bool verbose = false;
  /// --log-level: trace, debug, info, warning, error, critical, off.
  std::string log_level = "warning";
  /// --prefix-output-with-timestamp.
  bool prefix_timestamp = false;
  /// --kill-grace SEC: between SIGTERM and SIGKILL when ranks are stopped; unset:
  /// HVDRUN_KILL_GRACE, else 3 s.
  std::optional<int> kill_grace_s;
  /// --ranks-filter LIST: the ranks whose output reaches the console (every rank's still
  /// goes to --output-filename's files and into failure messages). Empty: every rank.
  std::vector<int> console_ranks;
  /// --local-ranks-filter LIST: the local ranks (on every host) whose output reaches the
  /// console; with --ranks-filter too, a rank's output shows when both lists name it.
  /// Empty: no such filter.
  std::vector<int> console_local_ranks;
  /// --timeout SEC: the job is torn down once it has run this long (counted from the
  /// launch, preflight included) and hvdrun exits with exit_status::kTimedOut. Unset: none.
  std::optional<int> timeout_s;
  /// --result-file FILE: the job's verdict and every rank's end, as JSON, written when the
  /// job ends (docs/result-file.schema.json). Empty: none.
  std::string result_file;
  /// --remote-hvdrun PATH: hvdrun on remote hosts; empty means this binary's own path.
  std::string remote_hvdrun;
  /// --json: machine-readable preflight report (check) or plan (--dry-run).
  bool json = false;
  /// --topology (hvdrun check): print this machine's topology (launcher/topology/) instead
  /// of checking the hosts.
  bool topology = false;
  /// --bind-to, --map-by, --cpus-per-rank, --gpus-per-rank: where each rank runs
  /// (docs/placement.md).
  PlacementPolicy placement;
  /// --bind-to was given (none too): the default binding next to a rank's GPUs
  /// (docs/placement.md) applies only without it.
  bool bind_to_given = false;
  /// --report-bindings: print every rank's cores, NUMA node, GPU and NIC before the start.
  bool report_bindings = false;
  /// --launcher.
  LauncherChoice launcher;
  /// --dry-run: print the launch method and the rank placement, start nothing.
  bool dry_run = false;
  /// The user's command and its arguments (run only).
  std::vector<std::string> command;
  /// Elastic mode's settings.
  ElasticOptions elastic;
  /// Join mode's settings.
  JoinOptions join;
  /// The generation this launch is (HVDRUN_GENERATION of its ranks): 0, or the number of
  /// restarts so far in elastic mode.
  int generation = 0;
};

}  // namespace hvdrun::launcher
