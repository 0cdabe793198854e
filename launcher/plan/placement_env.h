// Binding ranks on the hosts that run them: the policy travels in every rank's environment
// (HVDRUN_BIND_TO, HVDRUN_MAP_BY, HVDRUN_CPUS_PER_RANK), each agent plans its own host from
// its own topology (launcher/topology/placement.h) and binds the child before exec; the
// launcher plans this machine's ranks first, so that a refusal comes before anything
// starts, and prints them for --report-bindings.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/plan/launch_plan.h"
#include "launcher/topology/placement.h"
#include "launcher/topology/topology.h"

namespace hvdrun::launcher {

/// The variables that carry the policy to the agents.
inline constexpr const char kBindToVar[] = "HVDRUN_BIND_TO";
inline constexpr const char kMapByVar[] = "HVDRUN_MAP_BY";
inline constexpr const char kCpusPerRankVar[] = "HVDRUN_CPUS_PER_RANK";

/// NAME=VALUE for each of them; empty with --bind-to none (nothing to apply).
std::vector<std::string> placement_env(const PlacementPolicy& policy);

/// The policy a rank's environment carries; nullopt when it binds nothing. Throws
/// UsageError for a value that is not one of the words or numbers.
std::optional<PlacementPolicy> policy_from_env(const std::vector<std::string>& env);

/// Where the rank with this environment runs on `topology` (host `host`): its local rank of
/// its local size under the environment's policy; nullopt when it binds nothing. Throws
/// UsageError when the host cannot place it (plan_placement's refusals).
std::optional<RankPlacement> rank_placement(const HostTopology& topology, const std::string& host,
                                            const std::vector<std::string>& env);

/// The options a launch runs with: with a policy that binds, checks the hosts that are this
/// machine against its topology (UsageError before anything starts) and adds the policy's
/// variables to the ranks' (-x). With --report-bindings, writes the table of
/// render_bindings for this machine's ranks to `report` first. `topology` is read only when
/// needed.
LaunchOptions with_placement(const LaunchPlan& plan, const LaunchOptions& options,
                             std::string& report,
                             const std::function<HostTopology()>& topology = load_host_topology);

/// The table of --report-bindings: RANK, HOST, LOCAL, CORES, CPUS, NUMA, GPU, NIC, one row
/// per rank ("unbound" and "-" where nothing is bound or chosen).
std::string render_bindings(const std::string& host, const std::vector<RankPlacement>& ranks);

}  // namespace hvdrun::launcher
