// --dry-run: what a command line or an allocation would do, printed without starting
// anything: the launch method and the host source, then one line per rank. With a
// placement (--bind-to, --gpus-per-rank, --network-interfaces, --report-bindings) also
// where each rank would run, planned from each host's topology (read over SSH for the
// hosts that are not this machine: launcher/hosts/host_topologies.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/plan/launch_plan.h"
#include "launcher/plan/placement_env.h"

namespace hvdrun::launcher {

/// Where one host's ranks would run: its bindings, or why they are not known before the
/// start (the host's topology could not be read, or is read only when the job starts).
struct PlannedBindings {
  std::optional<HostBindings> bindings;
  std::string why_not;
};

/// The plan as text: `launcher: METHOD; hosts from SOURCE`, then `RANK HOST LOCAL_RANK`
/// per rank; with `bindings` (one per host of the plan), each host's --report-bindings
/// table after them, or the reason it has none.
std::string render_dry_run(const LaunchPlan& plan,
                           const std::vector<PlannedBindings>& bindings = {});

/// The same as one JSON object: {"launcher", "source", "hosts": [{"host", "slots",
/// "method", "gpus"}], "ranks": [{"rank", "host", "local_rank", "gpus"}]}; with `bindings`,
/// each host also has "not_placed" (null, or why) and each rank "binding": {"cores",
/// "cpus", "numa", "gpus", "nic"} (null where not placed; "cores" and "cpus" empty where
/// not bound, "gpus" the rank's CUDA_VISIBLE_DEVICES values, "nic" null where none).
std::string render_dry_run_json(const LaunchPlan& plan,
                                const std::vector<PlannedBindings>& bindings = {});

}  // namespace hvdrun::launcher
