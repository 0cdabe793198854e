// The launch methods' start: one HostStarter per method (local, ssh, exec:, slurm, join) starts
// the plan's hosts of its method and leaves a link per host, or what failed, in one
// StartTable. The methods run in the order registered (host_start.cc); the first that
// fails ends the start, and nothing further is started.
//
// A new launch method is a LaunchMethod value, a file defining its HostStarter and its
// make_*_starter(), and a line in the registry (starters() in host_start.cc).
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/hosts/agent_link.h"
#include "launcher/hosts/preflight.h"
#include "launcher/job/job.h"
#include "launcher/job/job_context.h"
#include "launcher/plan/join_layout.h"
#include "launcher/plan/launch_options.h"
#include "launcher/plan/launch_plan.h"

namespace hvdrun::launcher {

class JoinPort;

/// What every method's start reads.
struct StartContext {
  const LaunchPlan& plan;
  const LaunchOptions& options;
  /// --start-timeout, counted from the start of the launch: every agent has answered by
  /// then.
  std::chrono::steady_clock::time_point deadline;
};

/// The outcome of the start of every host: a link per started host, or the failures.
struct StartTable {
  /// The agent link of each started host, by name, until the job takes it.
  std::map<std::string, std::unique_ptr<AgentLink>> links;
  /// The hosts that could not be reached (exec:, slurm), one message each.
  std::vector<std::string> unreachable;
  /// Hosts not tried after the first of those failures.
  std::size_t skipped = 0;
  /// The preflight's verdicts, when hosts were reached over SSH.
  std::optional<PreflightReport> preflight;
  /// Join mode's start: its failures are node 0's, not unreachable hosts.
  bool join = false;
  /// Join mode, once the nodes have joined: the nodes in node-rank order (node 0 first),
  /// each with the ranks its hello said it runs, laid out node by node (join_layout.h). In
  /// elastic join the node ranks may have gaps (a node up to MAX that did not come).
  std::vector<JoinNode> join_nodes;
  /// Elastic join: node 0's port, open while the job runs for the nodes that come later
  /// (follow_joins, join_port.h); null otherwise.
  std::shared_ptr<JoinPort> join_port;

  /// True when no host failed.
  bool ok() const;
  /// Moves the link of `host` out of the table. Throws LaunchError when there is none (the
  /// job asked for a host the start did not reach, or asked twice).
  std::unique_ptr<AgentLink> take(const std::string& host);
};

/// One launch method.
class HostStarter {
 public:
  virtual ~HostStarter() = default;
  HostStarter() = default;
  HostStarter(const HostStarter&) = delete;
  HostStarter& operator=(const HostStarter&) = delete;
  HostStarter(HostStarter&&) = delete;
  HostStarter& operator=(HostStarter&&) = delete;

  /// Starts `hosts` (the plan's hosts of this method, in plan order, never empty) and puts
  /// each one's link, or what failed, in `table`. Never throws for a host that fails.
  virtual void start(const StartContext& context, const std::vector<const PlannedHost*>& hosts,
                     StartTable& table) = 0;
};

/// The methods (each defined in its own file).
std::unique_ptr<HostStarter> make_local_starter();  ///< local_start.cc
std::unique_ptr<HostStarter> make_exec_starter();   ///< exec_start.cc
std::unique_ptr<HostStarter> make_slurm_starter();  ///< slurm_start.cc
std::unique_ptr<HostStarter> make_ssh_starter();    ///< ssh_start.cc
std::unique_ptr<HostStarter> make_join_starter();   ///< join_start.cc

/// Starts every host of `context.plan` with its method's starter, method after method in
/// the order registered, and stops after the first method with a failure.
StartTable start_hosts(const StartContext& context);

/// Agent links to `hosts` for a job that grows in process (elastic: JobHooks::open_hosts):
/// each host started with its launch method as at the launch (the same registry, under a
/// fresh --start-timeout), every method tried whatever another's hosts did. One entry per
/// host, in the order given: its link; or, for this machine, none and `local` (the job
/// starts its agent); or nullptr and why (the preflight's verdict, the exec: command's or
/// srun's failure).
std::vector<JobHooks::OpenedHost> open_hosts(const LaunchOptions& options,
                                             const std::vector<std::string>& hosts);

/// Prints the failures of `table` to stderr (the preflight's table for hosts reached over
/// SSH, a line per host otherwise), leaves a preflight failure in `outcome` when set, and
/// returns exit_status::kLaunchFailed.
int report_start_failures(const StartTable& table, std::optional<Failure>* outcome);

}  // namespace hvdrun::launcher
