// Each host's hardware before anything starts: this machine's read here, each SSH host's
// read there by `hvdrun agent --topology` in the preflight's own shell (one login per host).
// For `hvdrun check --topology -H ...`, `--dry-run` with a placement (the bindings each rank
// would get) and `-H host:auto` (one rank per GPU the host has).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/hosts/preflight.h"
#include "launcher/plan/launch_options.h"
#include "launcher/plan/launch_plan.h"
#include "launcher/topology/topology.h"
#include "ssh/session.h"

namespace hvdrun::launcher {

/// One host's hardware as it sees it.
struct ProbedHost {
  /// Its topology; nullopt when it could not be read (`why_not` says why).
  std::optional<HostTopology> topology;
  /// The GPUs its ranks would be given, as CUDA_VISIBLE_DEVICES values, in its own
  /// environment's view (host_gpu_ids: CUDA_VISIBLE_DEVICES, hwloc's GPUs, HVDRUN_FAKE_GPUS).
  std::vector<std::string> gpu_ids;
  /// Where those came from ("the GPUs hwloc found", "CUDA_VISIBLE_DEVICES").
  std::string gpus_from;
  /// Why there is no topology: the host's check failed, or it is reached by srun or an
  /// exec: command (read when the job starts).
  std::string why_not;
};

/// What `hvdrun agent --topology` prints: "gpus ID,ID" ("gpus -" for none), "from WHERE",
/// then the topology in the agent's wire form (topology_wire.h).
std::string topology_probe_text();

/// The host `text` (topology_probe_text's output) describes. Throws std::runtime_error
/// when it is not that form.
ProbedHost parse_topology_probe(std::string_view text);

/// This machine, read here (never throws: a failure to read is in why_not).
ProbedHost probe_this_machine();

/// Every host of `plan`, in its order, with the preflight that read the SSH hosts (every
/// host ok or not, each with its verdict).
struct ProbedHosts {
  PreflightReport report;
  std::vector<ProbedHost> hosts;
};

/// Reads every host of `plan`: this machine here, SSH hosts through `connector` (all at
/// once, under --start-timeout), the others not (why_not says they are read at the start).
ProbedHosts probe_hosts(const LaunchPlan& plan, const LaunchOptions& options,
                        ssh::Connector& connector);

/// `options` with every `host:auto` (and, with -np auto, every host given without a slot
/// count) given one slot per GPU it has: this machine counted here, SSH hosts by the probe
/// over `connector` (one more login each, before the launch's own). Unchanged when no host
/// is counted. Throws UsageError for a host with no GPU, one that srun or an exec: command
/// reaches (not read before the start), a slot count beside -np auto, or elastic mode;
/// LaunchError for an SSH host that fails its check.
LaunchOptions with_counted_slots(const LaunchOptions& options, ssh::Connector& connector);

}  // namespace hvdrun::launcher
