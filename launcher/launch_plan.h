// The launch plan: every decision about where a job runs, made once from the options
// before anything starts, and read by every later step (preflight, agents, rank
// environments, the job loop). The host source with its defaults, the rank placement, and
// for each host whether it is this machine and how its agent is started. Scheduler host
// sources (Slurm, PBS, ...) and launch methods (slurm, exec:COMMAND) plug in here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "hostfile/placement.h"
#include "launcher/options.h"

namespace hvdrun::launcher {

/// Where the host list came from.
enum class HostSource {
  command_line,  ///< -H or --hostfile
  localhost,     ///< neither: localhost with -np slots
};

/// How a host's agent is started.
enum class LaunchMethod {
  local,  ///< a child of the launcher over a pipe pair
  ssh,    ///< `hvdrun agent` in the SSH session the preflight opened
};

/// "local" or "ssh".
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
};

/// The whole plan.
struct LaunchPlan {
  /// Where the hosts came from.
  HostSource source = HostSource::command_line;
  /// Every rank's coordinates; placement.hosts[i] and hosts[i] are the same host.
  hostfile::Placement placement;
  /// The hosts taking part, in the order given.
  std::vector<PlannedHost> hosts;

  /// Number of ranks.
  int size() const { return placement.size(); }
  /// True when no host needs SSH.
  bool all_local() const;
};

/// The plan of `hvdrun run`: hosts from -H/--hostfile, else localhost with -np slots;
/// ranks placed in order; hosts that get no rank (-np below the slots) left out, so they
/// take no part, not even a login. Throws UsageError for bad input (no -np and no hosts,
/// -np above the slots).
LaunchPlan make_plan(const LaunchOptions& options);

/// The plan of `hvdrun check`: every host named (else localhost), each with its slots and
/// method, and no ranks placed.
LaunchPlan make_check_plan(const LaunchOptions& options);

}  // namespace hvdrun::launcher
