// The launch plan: every decision about where a job runs, made once from the options
// before anything starts, and read by every later step (preflight, agents, rank
// environments, the job loop). The host source with its defaults, the rank placement, and
// for each host whether it is this machine and how its agent is started. Scheduler host
// sources (Slurm, PBS, ...) and launch methods (slurm, exec:COMMAND) plug in here.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hostfile/placement.h"
#include "hostfile/scheduler.h"
#include "launcher/plan/launch_options.h"

namespace hvdrun::launcher {

/// Where the host list came from.
enum class HostSource {
  command_line,  ///< -H or --hostfile
  scheduler,     ///< a scheduler's allocation (LaunchPlan::allocation says which)
  localhost,     ///< none of them: localhost with -np slots
};

/// How a host's agent is started.
enum class LaunchMethod {
  local,  ///< a child of the launcher over a pipe pair
  ssh,    ///< `hvdrun agent` in the SSH session the preflight opened
  slurm,  ///< one agent per node from a single `srun` step, back to the launcher over TCP
  exec,   ///< the --launcher exec: command with `{host}` replaced, over its stdin/stdout
  join,   ///< join mode: the node's own hvdrun connected to node 0 over TCP
};

/// "local", "ssh", "slurm", "exec" or "join".
std::string_view to_string(LaunchMethod method);

/// One host of the plan.
struct PlannedHost {
  /// The host as written in -H or the hostfile (HVDRUN_HOSTNAME of its ranks).
  std::string name;
  /// Slots used: the ranks placed here (for a check plan, the slots given).
  int slots = 0;
  /// This machine (is_local_host): no SSH.
  bool local = true;
  /// How its agent starts.
  LaunchMethod method = LaunchMethod::local;
  /// The ranks placed here, ascending (empty in a check plan).
  std::vector<int> ranks;
  /// Its GPUs as the hostfile (`gpus=`) or --include gave them; empty: the host's own.
  std::vector<std::string> gpus = {};
};

/// The whole plan.
struct LaunchPlan {
  /// Where the hosts came from.
  HostSource source = HostSource::command_line;
  /// With HostSource::scheduler: which scheduler and the variables read.
  hostfile::Allocation allocation;
  /// The launch method the plan resolved --launcher to (never automatic).
  LauncherChoice launcher;
  /// Every rank's coordinates; placement.hosts[i] and hosts[i] are the same host.
  hostfile::Placement placement;
  /// The hosts taking part, in the order given.
  std::vector<PlannedHost> hosts;
  /// --gpus-per-rank (0: GPUs are not given out).
  int gpus_per_rank = 0;

  /// Number of ranks.
  int size() const { return placement.size(); }
  /// True when no host needs SSH.
  bool all_local() const;
};

/// What a plan reads from the process it runs in (a seam for tests).
struct PlanEnvironment {
  /// Environment variables (scheduler allocations, SLURM_JOB_ID, PATH).
  hostfile::GetEnv getenv;
  /// Whether a program is found in PATH (srun, for --launcher auto).
  std::function<bool(const std::string& program)> on_path;

  /// The real environment of this process.
  static PlanEnvironment process();
};

/// The plan of `hvdrun run`: hosts from -H/--hostfile, else the scheduler allocation the
/// environment describes, else localhost with -np slots, kept by --include/--exclude; ranks
/// placed in order; hosts that
/// get no rank (-np below the slots) left out, so they take no part, not even a login. The
/// launch method: --launcher, with auto resolved to slurm when the hosts come from a Slurm
/// allocation and srun is on PATH, else to ssh. Throws UsageError for bad input (no -np and
/// no hosts, -np above the slots, a malformed allocation variable, --launcher slurm outside
/// a Slurm allocation).
LaunchPlan make_plan(const LaunchOptions& options,
                     const PlanEnvironment& env = PlanEnvironment::process());

/// The plan of `hvdrun check`: every host named (else the allocation's, else localhost),
/// each with its slots and method, and no ranks placed.
LaunchPlan make_check_plan(const LaunchOptions& options,
                           const PlanEnvironment& env = PlanEnvironment::process());

/// Why hvdrun must not run here: started by srun as one of several tasks of a step
/// (`srun hvdrun ...` in a batch script), each of which would launch the whole job.
struct SrunTaskRefusal {
  /// The one message, naming the step, the task count and what to do instead.
  std::string message;
  /// Whether this task says it: task 0 only, so the job's output holds it once; the
  /// others exit with the same code silently.
  bool print = true;
};

/// The refusal when the environment says this process is one of several tasks of an srun
/// step (SLURM_STEP_ID of a real step, and SLURM_STEP_NUM_TASKS, else SLURM_NTASKS, above
/// 1); nothing otherwise (a batch script, salloc's shell, a one-task step).
std::optional<SrunTaskRefusal> srun_task_refusal(const hostfile::GetEnv& getenv);

/// Whether `program` is an executable file in one of the directories of `path`.
bool find_in_path(const std::string& program, const char* path);

}  // namespace hvdrun::launcher
